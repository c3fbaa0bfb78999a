package clustergateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	sigsjson "sigs.k8s.io/json"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/endpointpolicy"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
)

// REST is the clustergateways resource: the API's semantics (validation,
// write-only material, paging, tables) over the gateway store, which reads
// from its informer and writes the gateways' Secrets to the hub.
type REST struct {
	store  *gateways.Store
	policy *endpointpolicy.Policy
	health Reachability // nil: no Reachable condition
	authz  authorizer.Authorizer
	rest.TableConvertor
}

// NewREST returns the storage of the clustergateways resource; writes that
// point at an IP literal the endpoint policy denies are refused, writes that
// name a credential Secret need the writer to be allowed to get it (authz
// asks the hub), and reads show what health (if not nil) knows of each
// cluster.
func NewREST(store *gateways.Store, policy *endpointpolicy.Policy, health Reachability, authz authorizer.Authorizer) *REST {
	return &REST{store: store, policy: policy, health: health, authz: authz, TableConvertor: tableConvertor{}}
}

var (
	_ rest.Getter               = &REST{}
	_ rest.Lister               = &REST{}
	_ rest.Watcher              = &REST{}
	_ rest.Creater              = &REST{}
	_ rest.Updater              = &REST{}
	_ rest.GracefulDeleter      = &REST{}
	_ rest.Scoper               = &REST{}
	_ rest.ShortNamesProvider   = &REST{}
	_ rest.CategoriesProvider   = &REST{}
	_ rest.SingularNameProvider = &REST{}
	_ rest.TableConvertor       = &REST{}
	_ rest.Storage              = &REST{}
)

var resource = gateways.Resource

func (r *REST) New() runtime.Object     { return &v1alpha1.ClusterGateway{} }
func (r *REST) NewList() runtime.Object { return &v1alpha1.ClusterGatewayList{} }
func (r *REST) Destroy()                {}
func (r *REST) NamespaceScoped() bool   { return false }
func (r *REST) ShortNames() []string    { return []string{"cgw"} }
func (r *REST) Categories() []string    { return []string{"all-clusters"} }
func (r *REST) GetSingularName() string { return "clustergateway" }

// Get reads the gateway: without a resourceVersion from the hub (the most
// recent, as on any Kubernetes API: a write through another replica is never
// missed), with one ("0" included) from this replica's cache.
func (r *REST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	var g *gateways.Gateway
	var err error
	if options == nil || options.ResourceVersion == "" {
		g, err = r.store.GetFresh(ctx, name)
	} else {
		g, err = r.store.Get(name)
	}
	if err != nil {
		return nil, err
	}
	return r.withReachability(g.Public()), nil
}

// List lists the gateways; labels and metadata.name select. The first page
// of a list without a resourceVersion is read from the hub (the most recent,
// see Get); any other from this replica's cache (continue tokens page the
// cache in name order: they are not snapshots).
func (r *REST) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	labelSel, fieldSel := selectors(options)
	if err := checkSelector(labelSel); err != nil {
		return nil, err
	}
	var gws []*gateways.Gateway
	var rv string
	var err error
	if options == nil || (options.ResourceVersion == "" && options.Continue == "") {
		gws, rv, err = r.store.ListFresh(ctx, labelSel)
	} else {
		gws, rv, err = r.store.List(labelSel)
	}
	if err != nil {
		return nil, err
	}
	matched := gws[:0]
	for _, g := range gws {
		if fieldSel.Matches(fields.Set{"metadata.name": g.Name()}) {
			matched = append(matched, g)
		}
	}
	var limit int64
	var cont string
	if options != nil {
		limit, cont = options.Limit, options.Continue
	}
	pageItems, next, remaining, err := page(matched, (*gateways.Gateway).Name, limit, cont)
	if err != nil {
		return nil, err
	}
	list := &v1alpha1.ClusterGatewayList{ListMeta: metav1.ListMeta{ResourceVersion: rv, Continue: next, RemainingItemCount: remaining}}
	list.Items = make([]v1alpha1.ClusterGateway, 0, len(pageItems))
	for _, g := range pageItems {
		list.Items = append(list.Items, *r.withReachability(g.Public()))
	}
	return list, nil
}

func selectors(options *metainternalversion.ListOptions) (labels.Selector, fields.Selector) {
	labelSel, fieldSel := labels.Everything(), fields.Everything()
	if options != nil {
		if options.LabelSelector != nil {
			labelSel = options.LabelSelector
		}
		if options.FieldSelector != nil {
			fieldSel = options.FieldSelector
		}
	}
	return labelSel, fieldSel
}

// checkSelector refuses selectors on the internal label: every gateway has
// it and none shows it, so list and watch could not agree on what it means.
func checkSelector(sel labels.Selector) error {
	reqs, _ := sel.Requirements()
	for _, r := range reqs {
		if r.Key() == gateways.LabelGateway {
			return apierrors.NewBadRequest(fmt.Sprintf("the label %s is internal to the gateway's Secrets and cannot be selected on", gateways.LabelGateway))
		}
	}
	return nil
}

// Watch follows the hub's watch of the gateway Secrets, so resourceVersion,
// bookmarks and "too old" errors behave as they do for any hub resource.
func (r *REST) Watch(ctx context.Context, options *metainternalversion.ListOptions) (watch.Interface, error) {
	labelSel, fieldSel := selectors(options)
	if err := checkSelector(labelSel); err != nil {
		return nil, err
	}
	// The options were validated (and, for a watch from "now", defaulted to
	// sendInitialEvents=true with resourceVersionMatch=NotOlderThan) by this
	// server's handler exactly as the hub will: they are passed on unchanged.
	w, err := r.store.Watch(ctx, gateways.WatchOptions{
		Labels:               labelSel,
		Fields:               fieldSel,
		ResourceVersion:      options.ResourceVersion,
		ResourceVersionMatch: options.ResourceVersionMatch,
		AllowWatchBookmarks:  options.AllowWatchBookmarks,
		SendInitialEvents:    options.SendInitialEvents,
		TimeoutSeconds:       options.TimeoutSeconds,
	})
	if err != nil {
		return nil, err
	}
	// A watch from a resourceVersion gets no initial events: the gateways
	// the client already has (from its list) are the ones whose
	// reachability changes it must hear of.
	var seed []*v1alpha1.ClusterGateway
	if rv := options.ResourceVersion; rv != "" && rv != "0" && (options.SendInitialEvents == nil || !*options.SendInitialEvents) {
		gws, _, _ := r.store.List(labelSel)
		for _, g := range gws {
			if fieldSel.Matches(fields.Set{"metadata.name": g.Name()}) {
				seed = append(seed, g.Public())
			}
		}
	}
	return r.watchReachability(w, seed), nil
}

// Create validates the gateway and writes its Secret.
func (r *REST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	gw, ok := obj.(*v1alpha1.ClusterGateway)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a ClusterGateway: %T", obj))
	}
	gw = gw.DeepCopy()
	prepareForCreate(gw)
	errs := syncedKeyChanges(gw, nil)
	if errs = append(errs, r.validateWrite(gw, gw.Spec.Credential)...); len(errs) > 0 {
		return nil, apierrors.NewInvalid(kind, gw.Name, errs)
	}
	if err := r.mayNameSource(ctx, gw); err != nil {
		return nil, err
	}
	if createValidation != nil {
		if err := createValidation(ctx, gw); err != nil {
			return nil, err
		}
	}
	created, err := r.store.Create(ctx, gw, options.DryRun)
	if err != nil {
		return nil, err
	}
	return created.Public(), nil
}

func prepareForCreate(gw *v1alpha1.ClusterGateway) {
	v1alpha1.SetDefaults_ClusterGateway(gw)
	trimToken(gw)
	gw.Status = v1alpha1.ClusterGatewayStatus{}
	gw.ResourceVersion = ""
	gw.UID = ""
	gw.Generation = 0
	gw.DeletionTimestamp = nil
}

// Update applies an update or patch. Credential material that the update
// omits (it is never returned, so a read-modify-write cannot carry it) is
// kept when the credential type is unchanged.
func (r *REST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc,
	updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	existing, err := r.store.GetCurrent(ctx, name) // writes start from the most recent version, whichever replica wrote it
	if err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, false, err // a Status already (the hub's, or why it could not be asked)
		}
		if !forceAllowCreate {
			return nil, false, apierrors.NewNotFound(resource, name)
		}
		obj, err := objInfo.UpdatedObject(ctx, nil)
		if err != nil {
			return nil, false, err
		}
		created, err := r.Create(ctx, obj, createValidation, &metav1.CreateOptions{DryRun: options.DryRun, FieldManager: options.FieldManager})
		return created, err == nil, err
	}
	full := existing.Object // holds the material: read, never changed
	oldObj := existing.Public()
	obj, err := objInfo.UpdatedObject(ctx, oldObj)
	if err != nil {
		return nil, false, err
	}
	gw, ok := obj.(*v1alpha1.ClusterGateway)
	if !ok {
		return nil, false, apierrors.NewBadRequest(fmt.Sprintf("not a ClusterGateway: %T", obj))
	}
	gw = gw.DeepCopy()
	v1alpha1.SetDefaults_ClusterGateway(gw)
	if gw.ResourceVersion == "" {
		gw.ResourceVersion = full.ResourceVersion
	} else if gw.ResourceVersion != full.ResourceVersion {
		return nil, false, apierrors.NewConflict(resource, name, fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
	}
	if gw.UID != "" && gw.UID != full.UID {
		return nil, false, apierrors.NewConflict(resource, name, fmt.Errorf("the UID in the object (%s) does not match the stored one (%s)", gw.UID, full.UID))
	}
	trimToken(gw)
	sent := *gw.Spec.Credential.DeepCopy() // the material this write carries, before any is kept
	kept := keepMaterial(gw, full)
	gw.UID, gw.CreationTimestamp, gw.Status = full.UID, full.CreationTimestamp, v1alpha1.ClusterGatewayStatus{}
	errs := apivalidation.ValidateObjectMetaUpdate(&gw.ObjectMeta, &full.ObjectMeta, field.NewPath("metadata"))
	errs = append(errs, syncedKeyChanges(gw, full)...)
	errs = append(errs, r.validateWrite(gw, sent)...)
	if len(kept) > 0 {
		// Report every problem at once; "required" for material that
		// could not be kept is said once, with the reason.
		errs = append(kept, errs.Filter(func(e error) bool {
			fe, ok := e.(*field.Error)
			return ok && fe.Type == field.ErrorTypeRequired && slices.ContainsFunc(kept, func(k *field.Error) bool {
				return strings.HasPrefix(fe.Field, k.Field)
			})
		})...)
	}
	if len(errs) > 0 {
		return nil, false, apierrors.NewInvalid(kind, name, errs)
	}
	if movesSource(gw, full) {
		if err := r.mayNameSource(ctx, gw); err != nil {
			return nil, false, err
		}
	}
	if updateValidation != nil {
		if err := updateValidation(ctx, gw, oldObj); err != nil {
			return nil, false, err
		}
	}
	updated, err := r.store.Update(ctx, gw, existing, options.DryRun)
	if err != nil {
		return nil, false, err
	}
	return updated.Public(), false, nil
}

var kind = v1alpha1.SchemeGroupVersion.WithKind("ClusterGateway").GroupKind()

// validateWrite checks a gateway about to be written: the stored form, the
// material the write carries (sent), and IP literals against the endpoint policy.
func (r *REST) validateWrite(gw *v1alpha1.ClusterGateway, sent v1alpha1.Credential) field.ErrorList {
	errs := v1alpha1.ValidateClusterGateway(gw)
	errs = append(errs, v1alpha1.ValidateNewMaterial(&sent, time.Now())...)
	ep := field.NewPath("spec", "endpoint")
	if u, err := v1alpha1.ParseAddress(gw.Spec.Endpoint.Address); err == nil {
		if err := r.policy.CheckHost(u.Hostname()); err != nil {
			errs = append(errs, field.Forbidden(ep.Child("address"), err.Error()))
		}
	}
	for i, a := range gw.Spec.Endpoint.AdditionalAddresses {
		if u, err := v1alpha1.ParseAddress(a); err == nil {
			if err := r.policy.CheckHost(u.Hostname()); err != nil {
				errs = append(errs, field.Forbidden(ep.Child("additionalAddresses").Index(i), err.Error()))
			}
		}
	}
	if gw.Spec.Endpoint.ProxyURL != "" {
		if u, err := v1alpha1.ParseProxyURL(gw.Spec.Endpoint.ProxyURL); err == nil {
			if err := r.policy.CheckHost(u.Hostname()); err != nil {
				errs = append(errs, field.Forbidden(ep.Child("proxyURL"), err.Error()))
			}
		}
	}
	return errs
}

// syncedKeyChanges refuses a write that adds, changes or removes a label or
// annotation of the inventory sync's (gateways.SyncedKeyPrefix; old is nil
// on create). They show which inventory object a gateway is synced from;
// only the sync, which does not write through the API, sets them, so they
// never say what its owner record does not.
func syncedKeyChanges(gw, old *v1alpha1.ClusterGateway) field.ErrorList {
	var oldLabels, oldAnnotations map[string]string
	if old != nil {
		oldLabels, oldAnnotations = old.Labels, old.Annotations
	}
	meta := field.NewPath("metadata")
	errs := syncedKeysChanged(meta.Child("labels"), gw.Labels, oldLabels)
	return append(errs, syncedKeysChanged(meta.Child("annotations"), gw.Annotations, oldAnnotations)...)
}

func syncedKeysChanged(p *field.Path, m, old map[string]string) field.ErrorList {
	var errs field.ErrorList
	keys := slices.Sorted(maps.Keys(m))
	for k := range old {
		if _, ok := m[k]; !ok {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		v, in := m[k]
		ov, inOld := old[k]
		if !gateways.IsSyncedKey(k) || (in == inOld && v == ov) {
			continue
		}
		errs = append(errs, field.Forbidden(p.Key(k), fmt.Sprintf(
			"is set only by the inventory sync, to show which inventory object the gateway is synced from: keys starting with %s cannot be added, changed or removed through the API", gateways.SyncedKeyPrefix)))
	}
	return errs
}

// movesSource tells whether an update names a credential source and changes
// which one, which credential it mints or gives, where that credential is
// sent, or whom it acts for: what needs the writer to be allowed to name
// that source (mayNameSource). A label edit does not.
func movesSource(gw, old *v1alpha1.ClusterGateway) bool {
	c, oc := gw.Spec.Credential, old.Spec.Credential
	switch {
	case c.Type == v1alpha1.CredentialSecretRef && c.SecretRef != nil:
		// Namespace, name and format: the format decides which keys of
		// the Secret are read.
		if oc.Type != c.Type || oc.SecretRef == nil || *oc.SecretRef != *c.SecretRef {
			return true
		}
	case c.Type == v1alpha1.CredentialProvider && c.Provider != nil:
		// The config decides what the provider mints, as its name does;
		// the additional args and environment too, where the providers
		// file lets them through (the policy may change: always checked).
		if oc.Type != c.Type || oc.Provider == nil || oc.Provider.Name != c.Provider.Name || !sameProviderConfig(c.Provider.Config, oc.Provider.Config) ||
			!slices.Equal(c.Provider.AdditionalArgs, oc.Provider.AdditionalArgs) || !slices.Equal(c.Provider.AdditionalEnv, oc.Provider.AdditionalEnv) {
			return true
		}
	default:
		return false
	}
	// The proxy's user info too: for a source's credential it is not
	// material the writer must carry (keepMaterial), but it decides how the
	// credential travels and is passed to a provider.
	return len(routeChanges(gw, old)) > 0 || gw.Spec.Endpoint.ProxyURL != old.Spec.Endpoint.ProxyURL
}

// sameProviderConfig tells whether a provider would be given the same
// config. Byte for byte after compaction, or the same JSON value: a patch
// or an apply re-encodes the stored config (its keys sorted), which must not
// count as a change. Numbers are compared as written (1 and 1.0 differ, and
// no two large integers are rounded to one), and a config with a key twice
// never equals another: providers differ in which of the two they read.
func sameProviderConfig(a, b *runtime.RawExtension) bool {
	ar, br := rawConfig(a), rawConfig(b)
	if len(ar) == 0 || len(br) == 0 {
		return len(ar) == len(br)
	}
	var ac, bc bytes.Buffer
	if json.Compact(&ac, ar) == nil && json.Compact(&bc, br) == nil && bytes.Equal(ac.Bytes(), bc.Bytes()) {
		return true
	}
	av, aok := configValue(ar)
	bv, bok := configValue(br)
	return aok && bok && reflect.DeepEqual(av, bv)
}

func rawConfig(c *runtime.RawExtension) []byte {
	if c == nil || bytes.Equal(bytes.TrimSpace(c.Raw), []byte("null")) {
		return nil
	}
	return bytes.TrimSpace(c.Raw)
}

// configValue is the JSON value of raw with its numbers as written; false
// when raw is not JSON or has a key twice in one object.
func configValue(raw []byte) (interface{}, bool) {
	var strict interface{}
	if strictErrs, err := sigsjson.UnmarshalStrict(raw, &strict, sigsjson.DisallowDuplicateFields); err != nil || len(strictErrs) > 0 {
		return nil, false
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v interface{}
	if err := d.Decode(&v); err != nil {
		return nil, false
	}
	return v, true
}

// ProviderResource is what a writer must be allowed to "use" to name a
// credential provider: verb use on credentialproviders/<name> in the API group.
const ProviderResource = "credentialproviders"

// mayNameSource refuses a write that names a credential source its writer
// may not use, asked of the hub as the writer: a credential Secret needs
// get on it (and a namespace the gateway reads), a credential provider needs
// use on credentialproviders/<name>. A writer who cannot read a credential
// cannot make the gateway send it anywhere.
func (r *REST) mayNameSource(ctx context.Context, gw *v1alpha1.ClusterGateway) error {
	c := gw.Spec.Credential
	var attrs authorizer.AttributesRecord
	var what, why string
	switch {
	case c.Type == v1alpha1.CredentialSecretRef && c.SecretRef != nil:
		ref := c.SecretRef
		if !r.store.ReadsSourcesIn(ref.Namespace) {
			return apierrors.NewInvalid(kind, gw.Name, field.ErrorList{field.Invalid(field.NewPath("spec", "credential", "secretRef", "namespace"), ref.Namespace,
				"is not a namespace this gateway reads credential Secrets from: its operator lists those in --credential-source-namespaces")})
		}
		attrs = authorizer.AttributesRecord{Verb: "get", Namespace: ref.Namespace, Resource: "secrets", Name: ref.Name, ResourceRequest: true}
		what = fmt.Sprintf("naming Secret %s/%s as the credential needs permission to get it", ref.Namespace, ref.Name)
		why = "a ClusterGateway may only send credentials its writer could read"
	case c.Type == v1alpha1.CredentialProvider && c.Provider != nil:
		attrs = authorizer.AttributesRecord{Verb: "use", APIGroup: v1alpha1.GroupName, Resource: ProviderResource, Name: c.Provider.Name, ResourceRequest: true}
		what = fmt.Sprintf("naming credential provider %q needs permission to use it (verb use on %s.%s %s)", c.Provider.Name, ProviderResource, v1alpha1.GroupName, c.Provider.Name)
		why = "a ClusterGateway may only send a provider's credential where someone allowed to use it says"
	default:
		return nil
	}
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok || r.authz == nil {
		return apierrors.NewInternalError(fmt.Errorf("cannot check who may name the credential source of %s: no user or authorizer", gw.Name))
	}
	attrs.User = u
	decision, reason, err := r.authz.Authorize(ctx, attrs)
	if decision == authorizer.DecisionAllow {
		return nil
	}
	detail := ""
	if reason != "" {
		detail = " (" + reason + ")"
	}
	if err != nil {
		detail += ": " + err.Error()
	}
	return apierrors.NewForbidden(resource, gw.Name, fmt.Errorf("%s, which user %q does not have%s: %s", what, u.GetName(), detail, why))
}

// trimToken drops the whitespace around a token (a file's final newline);
// whitespace inside is refused by validation.
func trimToken(gw *v1alpha1.ClusterGateway) {
	gw.Spec.Credential.BearerToken = strings.TrimSpace(gw.Spec.Credential.BearerToken)
}

// routeChanges names the fields an update changes that decide where the
// stored credential is sent, how the server at the other end is verified,
// or whom the credential acts for.
func routeChanges(gw, old *v1alpha1.ClusterGateway) []string {
	var changed []string
	e, o := gw.Spec.Endpoint, old.Spec.Endpoint
	add := func(differs bool, path string) {
		if differs {
			changed = append(changed, path)
		}
	}
	add(e.Type != o.Type, "spec.endpoint.type")
	add(e.Address != o.Address, "spec.endpoint.address")
	add(!slices.Equal(e.AdditionalAddresses, o.AdditionalAddresses), "spec.endpoint.additionalAddresses")
	add(!bytes.Equal(e.CABundle, o.CABundle), "spec.endpoint.caBundle")
	add(e.ServerName != o.ServerName, "spec.endpoint.serverName")
	add(e.InsecureSkipTLSVerify != o.InsecureSkipTLSVerify, "spec.endpoint.insecureSkipTLSVerify")
	add(v1alpha1.WithoutUserInfo(e.ProxyURL) != v1alpha1.WithoutUserInfo(o.ProxyURL), "spec.endpoint.proxyURL")
	add(gw.Spec.Impersonation.Mode != old.Spec.Impersonation.Mode, "spec.impersonation.mode")
	return changed
}

// keepMaterial fills in the write-only material an update omits (reads
// never return it, so a read-modify-write cannot carry it): the credential
// of an unchanged type, and the proxy's user info. It is kept only while
// everything that decides where it goes and whom it acts for stays the same;
// otherwise the update must carry it again, so a writer who does not hold the
// credential can neither move it nor widen its use.
func keepMaterial(gw, old *v1alpha1.ClusterGateway) field.ErrorList {
	changed := routeChanges(gw, old)
	var errs field.ErrorList
	why := func(what string) string {
		return fmt.Sprintf("this update changes %s, so it must carry %s again: stored credentials are kept only while the endpoint and impersonation stay as they are",
			strings.Join(changed, ", "), what)
	}
	c, oc := &gw.Spec.Credential, old.Spec.Credential
	if c.Type == oc.Type {
		switch c.Type {
		case v1alpha1.CredentialX509Certificate:
			if c.X509 == nil && oc.X509 != nil {
				if len(changed) > 0 {
					errs = append(errs, field.Required(field.NewPath("spec", "credential", "x509"), why("the client certificate and key")))
				} else {
					c.X509 = oc.X509.DeepCopy()
				}
			}
		case v1alpha1.CredentialBearerToken:
			if c.BearerToken == "" && oc.BearerToken != "" {
				if len(changed) > 0 {
					errs = append(errs, field.Required(field.NewPath("spec", "credential", "bearerToken"), why("the bearer token")))
				} else {
					c.BearerToken = oc.BearerToken
				}
			}
		}
	}
	if gw.Spec.Endpoint.ProxyURL != "" && v1alpha1.ProxyUserInfo(gw.Spec.Endpoint.ProxyURL) == nil {
		if ui := v1alpha1.ProxyUserInfo(old.Spec.Endpoint.ProxyURL); ui != nil {
			if len(changed) > 0 {
				errs = append(errs, field.Required(field.NewPath("spec", "endpoint", "proxyURL"), why("the proxy's user name and password in proxyURL")))
			} else if u, err := url.Parse(gw.Spec.Endpoint.ProxyURL); err == nil {
				u.User = ui
				gw.Spec.Endpoint.ProxyURL = u.String()
			}
		}
	}
	return errs
}

// Delete removes the gateway's Secret.
func (r *REST) Delete(ctx context.Context, name string, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions) (runtime.Object, bool, error) {
	existing, err := r.store.GetFresh(ctx, name) // writes start from the most recent version, whichever replica wrote it
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, false, apierrors.NewNotFound(resource, name)
		}
		return nil, false, err
	}
	obj := existing.Public()
	if deleteValidation != nil {
		if err := deleteValidation(ctx, obj); err != nil {
			return nil, false, err
		}
	}
	opts := metav1.DeleteOptions{DryRun: options.DryRun, PropagationPolicy: options.PropagationPolicy, GracePeriodSeconds: options.GracePeriodSeconds}
	if p := options.Preconditions; p != nil {
		opts.Preconditions = &metav1.Preconditions{UID: p.UID, ResourceVersion: p.ResourceVersion}
	}
	if err := r.store.Delete(ctx, existing, opts); err != nil {
		return nil, false, err
	}
	return obj, true, nil
}
