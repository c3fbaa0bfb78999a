package gateways

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// The Secret layout of a ClusterGateway (docs/api.md documents it for people and
// GitOps tools that write the Secret directly). The Secret is named after the
// gateway, lives in the gateway's secret namespace and carries LabelGateway.
const (
	LabelGateway = v1alpha1.GroupName + "/cluster-gateway"

	KeyEndpointType   = "endpoint-type"            // Direct | Konnectivity (default Direct)
	KeyEndpoint       = "endpoint"                 // https URL of the API server
	KeyMoreEndpoints  = "additional-endpoints"     // more https URLs of the same API, one a line
	KeyCABundle       = "ca.crt"                   // PEM
	KeyServerName     = "server-name"              // TLS name override
	KeyInsecure       = "insecure-skip-tls-verify" // "true" to skip verification
	KeyProxyURL       = "proxy-url"                // http, https or socks5
	KeyCredentialType = "credential-type"          // X509Certificate | BearerToken | SecretRef | Provider
	KeyCertificate    = "tls.crt"                  // PEM client certificate
	KeyPrivateKey     = "tls.key"                  // PEM private key
	KeyToken          = "token"                    // bearer token
	KeyImpersonation  = "impersonation"            // None | Caller (default None)

	// A credential read from where it is kept (type SecretRef or Provider).
	KeySourceNamespace = "credential-secret-namespace"
	KeySourceName      = "credential-secret-name"
	KeySourceFormat    = "credential-secret-format"   // Kubeconfig | Token | TLS (default: detected)
	KeyProvider        = "credential-provider"        // a provider of --credential-providers-file
	KeyProviderConfig  = "credential-provider-config" // JSON: the ExecCredential's spec.cluster.config
	KeyProviderArgs    = "credential-provider-args"   // JSON list of strings: the provider's additional args
	KeyProviderEnv     = "credential-provider-env"    // JSON list of {name, value}: its additional environment

	// The gateway's own metadata lives in the Secret's data, never in the
	// Secret's labels and annotations: controllers act on Secret metadata
	// (replicators, Argo CD's cluster-secret label), so a writer of a
	// ClusterGateway must not be able to steer them towards its credential.
	KeyLabels        = "labels"         // JSON object: the gateway's labels
	KeyAnnotations   = "annotations"    // JSON object: the gateway's annotations
	KeyManagedFields = "managed-fields" // JSON: the gateway's server-side-apply field ownership

	kubectlLastApplied = corev1.LastAppliedConfigAnnotation
)

// Annotations that earlier versions kept on the Secret; a write removes them.
var legacyAnnotations = []string{v1alpha1.GroupName + "/managed-fields", v1alpha1.GroupName + "/last-applied-configuration"}

var materialKeys = []string{KeyCertificate, KeyPrivateKey, KeyToken}

// apiVersion is every gateway's: one string, not one per stored gateway.
var apiVersion = v1alpha1.SchemeGroupVersion.String()

// fromSecret reads a gateway from its Secret, without its status, and what
// makes the Secret unusable that only the Secret shows (the status adds what
// validation finds: computeStatus). It never fails. The result holds the
// credential material; redact it before returning it to a client. It shares
// the Secret's data (the material) but keeps nothing else of it: the cache
// holds gateways, not also their Secrets.
func fromSecret(s *corev1.Secret) (gw *v1alpha1.ClusterGateway, problems []string) {
	d := s.Data
	gw = &v1alpha1.ClusterGateway{
		TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: "ClusterGateway"},
		ObjectMeta: metav1.ObjectMeta{
			Name:              s.Name,
			UID:               s.UID,
			ResourceVersion:   s.ResourceVersion,
			Generation:        s.Generation,
			CreationTimestamp: s.CreationTimestamp,
			DeletionTimestamp: s.DeletionTimestamp,
			Finalizers:        s.Finalizers,
		},
		Spec: v1alpha1.ClusterGatewaySpec{
			Endpoint: v1alpha1.Endpoint{
				Type:                v1alpha1.EndpointType(d[KeyEndpointType]),
				Address:             strings.TrimSpace(string(d[KeyEndpoint])),
				AdditionalAddresses: splitLines(d[KeyMoreEndpoints]),
				CABundle:            d[KeyCABundle],
				ServerName:          string(d[KeyServerName]),
				ProxyURL:            strings.TrimSpace(string(d[KeyProxyURL])),
			},
			Credential: v1alpha1.Credential{
				Type:        v1alpha1.CredentialType(d[KeyCredentialType]),
				BearerToken: strings.TrimSpace(string(d[KeyToken])),
			},
			Impersonation: v1alpha1.Impersonation{Mode: v1alpha1.ImpersonationMode(d[KeyImpersonation])},
		},
	}
	if err := decodeJSONKey(d, KeyLabels, &gw.Labels); err != nil {
		problems = append(problems, err.Error())
	}
	if err := decodeJSONKey(d, KeyAnnotations, &gw.Annotations); err != nil {
		problems = append(problems, err.Error())
	}
	if raw, ok := d[KeyManagedFields]; ok {
		var mf []metav1.ManagedFieldsEntry
		if json.Unmarshal(raw, &mf) == nil { // field ownership only: never a reason to refuse the gateway
			gw.ManagedFields = mf
		}
	}
	switch gw.Spec.Credential.Type {
	case v1alpha1.CredentialSecretRef:
		gw.Spec.Credential.SecretRef = &v1alpha1.SecretReference{
			Namespace: string(d[KeySourceNamespace]), Name: string(d[KeySourceName]), Format: v1alpha1.SecretFormat(d[KeySourceFormat])}
	case v1alpha1.CredentialProvider:
		gw.Spec.Credential.Provider = &v1alpha1.ProviderReference{Name: string(d[KeyProvider])}
		if raw := d[KeyProviderConfig]; len(raw) > 0 {
			gw.Spec.Credential.Provider.Config = &runtime.RawExtension{Raw: raw}
		}
		if raw := d[KeyProviderArgs]; len(raw) > 0 {
			if err := json.Unmarshal(raw, &gw.Spec.Credential.Provider.AdditionalArgs); err != nil {
				problems = append(problems, fmt.Sprintf("data[%s]: must be a JSON list of strings: %v", KeyProviderArgs, err))
			}
		}
		if raw := d[KeyProviderEnv]; len(raw) > 0 {
			if err := json.Unmarshal(raw, &gw.Spec.Credential.Provider.AdditionalEnv); err != nil {
				problems = append(problems, fmt.Sprintf("data[%s]: must be a JSON list of {\"name\", \"value\"}: %v", KeyProviderEnv, err))
			}
		}
	}
	if len(d[KeyCertificate]) > 0 || len(d[KeyPrivateKey]) > 0 {
		gw.Spec.Credential.X509 = &v1alpha1.X509Credential{Certificate: d[KeyCertificate], PrivateKey: d[KeyPrivateKey]}
	}
	insecure := strings.TrimSpace(string(d[KeyInsecure]))
	if insecure != "" {
		b, err := strconv.ParseBool(insecure)
		if err != nil {
			problems = append(problems, fmt.Sprintf("data[%s]: must be true or false, not %q", KeyInsecure, insecure))
		}
		gw.Spec.Endpoint.InsecureSkipTLSVerify = b
	}
	v1alpha1.SetDefaults_ClusterGateway(gw)
	// Clipped: computeStatus appends to its own copy, never to these, which
	// every phase of the gateway (Gateway.at) shares.
	return gw, slices.Clip(problems)
}

// splitLines is the non-empty lines of raw, trimmed (nil when none).
func splitLines(raw []byte) []string {
	var out []string
	for _, l := range strings.Split(string(raw), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// decodeJSONKey reads a JSON object of strings from data[key] (absent: nil).
func decodeJSONKey(d map[string][]byte, key string, into *map[string]string) error {
	raw, ok := d[key]
	if !ok || len(strings.TrimSpace(string(raw))) == 0 {
		return nil
	}
	var m map[string]string
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("data[%s]: must be a JSON object of strings, e.g. {\"env\":\"prod\"}: %v", key, err)
	}
	if len(m) > 0 {
		*into = m
	}
	return nil
}

// lastWrite is when the Secret last changed, from the hub's field-ownership
// records (the cache keeps only the newest); status is computed from the
// stored data alone, so that is when Ready last could have changed.
func lastWrite(s *corev1.Secret) metav1.Time {
	t := s.CreationTimestamp
	for _, mf := range s.ManagedFields {
		if mf.Time != nil && mf.Time.After(t.Time) {
			t = *mf.Time
		}
	}
	return t
}

// computeStatus says whether the gateway can be used to reach the cluster:
// the stored data, and the credential as resolved from its source.
func computeStatus(gw *v1alpha1.ClusterGateway, problems []string, changed metav1.Time, res Resolution, now time.Time) (v1alpha1.ClusterGatewayStatus, validity) {
	var st v1alpha1.ClusterGatewayStatus
	var v validity
	for _, e := range v1alpha1.ValidateClusterGateway(gw) {
		problems = append(problems, e.Error())
	}
	cred := &v1alpha1.CredentialStatus{Source: res.Source}
	if !res.Rotated.IsZero() {
		cred.LastRotationTime = res.Rotated.DeepCopy()
	}
	what := "client certificate"
	if len(res.Conn.Cert) > 0 {
		if pair, err := v1alpha1.ParseKeyPair(res.Conn.Cert, res.Conn.Key); err == nil {
			notAfter := metav1.NewTime(pair.Leaf.NotAfter)
			cred.Subject, cred.NotAfter, cred.ExpirationTime = pair.Leaf.Subject.String(), &notAfter, notAfter.DeepCopy()
			v = validity{notBefore: pair.Leaf.NotBefore, notAfter: pair.Leaf.NotAfter}
		}
	} else if !res.TokenExpiry.IsZero() {
		exp := metav1.NewTime(res.TokenExpiry)
		cred.ExpirationTime = &exp
		v, what = validity{notAfter: res.TokenExpiry}, "token"
	}
	// What the credential's provider said comes first: an opaque token's
	// only expiry, and a certificate's or JWT's may be earlier.
	if !res.Expires.IsZero() {
		exp := metav1.NewTime(res.Expires)
		cred.ExpirationTime = &exp
		if v.notAfter.IsZero() || res.Expires.Before(v.notAfter) {
			v.notAfter, what = res.Expires, "credential"
		}
	}
	if *cred != (v1alpha1.CredentialStatus{}) {
		st.Credential = cred
	}
	reason, message := v1alpha1.ReasonValid, "the stored endpoint and credential are usable"
	renew := "store a renewed one"
	if res.Source != "" {
		message = "the endpoint and the credential from " + res.Source + " are usable"
		renew = "its source has not renewed it"
	}
	switch {
	case len(problems) > 0:
		reason = v1alpha1.ReasonInvalidSecret
		message = "the stored gateway is unusable: " + strings.Join(problems, "; ")
	case res.Reason != "":
		reason, message = res.Reason, res.Message
	case v.phase(now) == 2:
		changed = metav1.NewTime(v.notAfter) // it became unusable then, not when it was written
		reason = v1alpha1.ReasonCertExpired
		message = fmt.Sprintf("the %s expired at %s: %s", what, v.notAfter.UTC().Format(time.RFC3339), renew)
	case v.phase(now) == 0:
		reason = v1alpha1.ReasonCertNotYetValid
		message = fmt.Sprintf("the %s is not valid before %s: check the clock of its issuer, or store one valid now", what, v.notBefore.UTC().Format(time.RFC3339))
	}
	status := metav1.ConditionTrue
	if reason != v1alpha1.ReasonValid {
		status = metav1.ConditionFalse
	}
	if res.Source != "" && res.Rotated.After(changed.Time) {
		changed = res.Rotated // the credential changed since the gateway was written
	}
	st.Conditions = []metav1.Condition{{
		Type:               v1alpha1.ConditionReady,
		Status:             status,
		Reason:             reason,
		Message:            message,
		LastTransitionTime: changed,
	}}
	return st, v
}

// redact removes credential material, the proxy's user info included: it is
// write-only.
func redact(gw *v1alpha1.ClusterGateway) *v1alpha1.ClusterGateway {
	out := gw.DeepCopy()
	out.Spec.Credential.X509 = nil
	out.Spec.Credential.BearerToken = ""
	out.Spec.Endpoint.ProxyURL = v1alpha1.WithoutUserInfo(out.Spec.Endpoint.ProxyURL)
	if strings.Contains(out.Spec.Endpoint.Address, "@") { // refused when written; a hand-written Secret may hold it
		out.Spec.Endpoint.Address = v1alpha1.WithoutUserInfo(out.Spec.Endpoint.Address)
	}
	for i, a := range out.Spec.Endpoint.AdditionalAddresses {
		if strings.Contains(a, "@") {
			out.Spec.Endpoint.AdditionalAddresses[i] = v1alpha1.WithoutUserInfo(a)
		}
	}
	// Stored redacted, but a hand-written Secret may hold anything.
	if v, ok := out.Annotations[kubectlLastApplied]; ok {
		out.Annotations[kubectlLastApplied] = redactLastApplied(v)
	}
	return out
}

// toSecret writes a gateway into a Secret, starting from the existing one (nil
// on create) so keys and metadata that the gateway does not model survive.
func toSecret(gw *v1alpha1.ClusterGateway, existing *corev1.Secret, namespace string) (*corev1.Secret, error) {
	var s *corev1.Secret
	if existing != nil {
		s = existing.DeepCopy()
	} else {
		s = &corev1.Secret{Type: corev1.SecretTypeOpaque}
	}
	s.Namespace = namespace
	s.Name = gw.Name
	s.ResourceVersion = gw.ResourceVersion
	s.Finalizers = gw.Finalizers
	s.ManagedFields = nil // the hub keeps its own

	// The Secret's own labels and annotations belong to whoever manages the
	// Secret (an admin, a GitOps tool); the gateway adds only its label and
	// drops what earlier versions wrote.
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	s.Labels[LabelGateway] = "true"
	for _, k := range legacyAnnotations {
		delete(s.Annotations, k)
	}
	if len(s.Annotations) == 0 {
		s.Annotations = nil
	}

	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	annotations := gw.Annotations
	if v, ok := annotations[kubectlLastApplied]; ok {
		annotations = maps.Clone(annotations)
		annotations[kubectlLastApplied] = redactLastApplied(v)
	}
	for key, m := range map[string]map[string]string{KeyLabels: gw.Labels, KeyAnnotations: annotations} {
		delete(s.Data, key)
		if len(m) > 0 {
			raw, err := json.Marshal(m)
			if err != nil {
				return nil, err
			}
			s.Data[key] = raw
		}
	}
	delete(s.Data, KeyManagedFields)
	if len(gw.ManagedFields) > 0 {
		raw, err := json.Marshal(gw.ManagedFields)
		if err != nil {
			return nil, err
		}
		s.Data[KeyManagedFields] = raw
	}
	ep, cred := gw.Spec.Endpoint, gw.Spec.Credential
	set := func(key string, value []byte) {
		if len(value) == 0 {
			delete(s.Data, key)
		} else {
			s.Data[key] = value
		}
	}
	set(KeyEndpointType, []byte(ep.Type))
	set(KeyEndpoint, []byte(ep.Address))
	set(KeyMoreEndpoints, []byte(strings.Join(ep.AdditionalAddresses, "\n")))
	set(KeyCABundle, ep.CABundle)
	set(KeyServerName, []byte(ep.ServerName))
	set(KeyInsecure, nil)
	if ep.InsecureSkipTLSVerify {
		set(KeyInsecure, []byte("true"))
	}
	set(KeyProxyURL, []byte(ep.ProxyURL))
	set(KeyCredentialType, []byte(cred.Type))
	for _, k := range materialKeys {
		delete(s.Data, k)
	}
	if cred.X509 != nil {
		set(KeyCertificate, cred.X509.Certificate)
		set(KeyPrivateKey, cred.X509.PrivateKey)
	}
	set(KeyToken, []byte(cred.BearerToken))
	for _, k := range []string{KeySourceNamespace, KeySourceName, KeySourceFormat, KeyProvider, KeyProviderConfig, KeyProviderArgs, KeyProviderEnv} {
		delete(s.Data, k)
	}
	if ref := cred.SecretRef; ref != nil {
		set(KeySourceNamespace, []byte(ref.Namespace))
		set(KeySourceName, []byte(ref.Name))
		set(KeySourceFormat, []byte(ref.Format))
	}
	if ref := cred.Provider; ref != nil {
		set(KeyProvider, []byte(ref.Name))
		if ref.Config != nil {
			set(KeyProviderConfig, ref.Config.Raw)
		}
		if len(ref.AdditionalArgs) > 0 {
			raw, err := json.Marshal(ref.AdditionalArgs)
			if err != nil {
				return nil, err
			}
			set(KeyProviderArgs, raw)
		}
		if len(ref.AdditionalEnv) > 0 {
			raw, err := json.Marshal(ref.AdditionalEnv)
			if err != nil {
				return nil, err
			}
			set(KeyProviderEnv, raw)
		}
	}
	set(KeyImpersonation, []byte(gw.Spec.Impersonation.Mode))
	delete(s.StringData, KeyToken)
	return s, nil
}

// redactLastApplied drops credential material from kubectl's last-applied
// annotation, which would otherwise hand the credential back on every GET.
// Keys match case-insensitively, as encoding/json matches them: a Go client
// decoding the annotation finds no material under "Spec" or "bearertoken".
func redactLastApplied(raw string) string {
	var obj map[string]interface{}
	if err := json.Unmarshal([]byte(raw), &obj); err != nil {
		return ""
	}
	for _, spec := range objectsAt(obj, "spec") {
		for _, cred := range objectsAt(spec, "credential") {
			for k := range cred {
				if strings.EqualFold(k, "x509") || strings.EqualFold(k, "bearerToken") {
					delete(cred, k)
				}
			}
		}
		for _, ep := range objectsAt(spec, "endpoint") {
			for k, v := range ep {
				if p, ok := v.(string); ok && strings.EqualFold(k, "proxyURL") {
					ep[k] = v1alpha1.WithoutUserInfo(p)
				}
			}
		}
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return ""
	}
	return string(out) + "\n"
}

// objectsAt returns the JSON objects under the keys of m that equal name
// case-insensitively.
func objectsAt(m map[string]interface{}, name string) []map[string]interface{} {
	var out []map[string]interface{}
	for k, v := range m {
		if o, ok := v.(map[string]interface{}); ok && strings.EqualFold(k, name) {
			out = append(out, o)
		}
	}
	return out
}

// NewSecret is the Secret that stores gw in namespace, as Create writes it
// (without the inventory sync's owner record): for tools and tests that
// seed a hub.
func NewSecret(gw *v1alpha1.ClusterGateway, namespace string) (*corev1.Secret, error) {
	return toSecret(gw, nil, namespace)
}
