package gateways

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	sigsjson "sigs.k8s.io/json"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/boundedyaml"
)

// The keys the gateway reads of a credential Secret.
var sourceKeys = []string{v1alpha1.SecretKeyKubeconfigCAPI, v1alpha1.SecretKeyKubeconfig, v1alpha1.SecretKeyToken, v1alpha1.SecretKeyCA, v1alpha1.SecretKeyCert, v1alpha1.SecretKeyKey}

// Source is a credential Secret as the gateway keeps it: only the keys it
// reads, parsed once per format and version of its material. It is
// immutable.
type Source struct {
	Namespace, Name string
	uid             types.UID
	resourceVersion string
	data            map[string][]byte
	// rotated is when its material last changed (the hub's time of the
	// write that changed it); digest tells a change of material from a write
	// that changed only metadata.
	rotated metav1.Time
	digest  [sha256.Size]byte
	// parsed is shared by the versions of the Secret with the same material:
	// a write that changes only metadata parses nothing again.
	parsed *parsedMaterial
}

// parsedMaterial holds a Source's material once per format: every gateway
// and every subscriber that resolves against it at once waits for the one
// parse instead of running its own.
type parsedMaterial struct {
	byFormat sync.Map // v1alpha1.SecretFormat -> func() *Material (sync.OnceValue)
}

// sourceParses counts the Sources parsed (one per format and version of
// the material), for the tests that hold the gateway to parsing each once.
var sourceParses atomic.Int64

// SourceParses is how many times a Source's material was parsed in this
// process (each format of each version once): for tests.
func SourceParses() int64 { return sourceParses.Load() }

// Rotated is when the Source's material last changed.
func (s *Source) Rotated() metav1.Time { return s.rotated }

// newSource keeps what the gateway reads of s. prev is the same Secret as
// read before (nil: first seen): the same version of it is prev itself (an
// informer's relist hands every Secret over again), and its rotation time
// and parsed material stay if the material did not change.
func newSource(s *corev1.Secret, prev *Source) *Source {
	if prev != nil && prev.uid == s.UID && prev.resourceVersion == s.ResourceVersion && s.ResourceVersion != "" {
		return prev
	}
	src := &Source{Namespace: s.Namespace, Name: s.Name, uid: s.UID, resourceVersion: s.ResourceVersion, data: map[string][]byte{}}
	h := sha256.New()
	for _, k := range sourceKeys {
		if v, ok := s.Data[k]; ok {
			src.data[k] = v
			fmt.Fprintf(h, "%s=%d:", k, len(v))
			h.Write(v)
		}
	}
	h.Sum(src.digest[:0])
	src.rotated = lastWrite(s)
	if prev != nil && prev.digest == src.digest {
		src.rotated, src.parsed = prev.rotated, prev.parsed
	} else {
		src.parsed = &parsedMaterial{}
	}
	return src
}

// Material is a credential read from a Source in one format: what to send
// and, for a kubeconfig, where. Problem is set when it cannot be used.
type Material struct {
	Format v1alpha1.SecretFormat
	// From a kubeconfig: its current context's cluster.
	Server     string
	ServerName string
	Insecure   bool
	CABundle   []byte // a kubeconfig's certificate-authority-data, or ca.crt
	Token      string
	Cert, Key  []byte
	// When the token expires, if it is a JWT with exp (a certificate's
	// validity is read from the certificate).
	TokenExpiry time.Time
	Problem     string
}

// Material is the source read as format (empty: detected), parsed on the
// first call for that format, once.
func (s *Source) Material(format v1alpha1.SecretFormat) *Material {
	if format == "" {
		format = s.detect()
	}
	parse, ok := s.parsed.byFormat.Load(format)
	if !ok {
		parse, _ = s.parsed.byFormat.LoadOrStore(format, sync.OnceValue(func() *Material {
			sourceParses.Add(1)
			return s.parse(format)
		}))
	}
	return parse.(func() *Material)()
}

// detect names the format the data looks like; empty when none.
func (s *Source) detect() v1alpha1.SecretFormat {
	d := s.data
	switch {
	case len(d[v1alpha1.SecretKeyKubeconfigCAPI]) > 0 || len(d[v1alpha1.SecretKeyKubeconfig]) > 0:
		return v1alpha1.SecretFormatKubeconfig
	case len(d[v1alpha1.SecretKeyCert]) > 0 || len(d[v1alpha1.SecretKeyKey]) > 0:
		return v1alpha1.SecretFormatTLS
	case len(d[v1alpha1.SecretKeyToken]) > 0:
		return v1alpha1.SecretFormatToken
	}
	return ""
}

func (s *Source) parse(format v1alpha1.SecretFormat) *Material {
	d := s.data
	m := &Material{Format: format, CABundle: d[v1alpha1.SecretKeyCA]}
	switch format {
	case v1alpha1.SecretFormatKubeconfig:
		raw := d[v1alpha1.SecretKeyKubeconfigCAPI]
		if len(raw) == 0 {
			raw = d[v1alpha1.SecretKeyKubeconfig]
		}
		if len(raw) == 0 {
			m.Problem = fmt.Sprintf("has no kubeconfig under data[%s] or data[%s]", v1alpha1.SecretKeyKubeconfigCAPI, v1alpha1.SecretKeyKubeconfig)
		} else {
			m.Problem = fromKubeconfig(m, raw)
		}
	case v1alpha1.SecretFormatToken:
		m.Token = strings.TrimSpace(string(d[v1alpha1.SecretKeyToken]))
		if m.Token == "" {
			m.Problem = fmt.Sprintf("has no data[%s]", v1alpha1.SecretKeyToken)
		}
	case v1alpha1.SecretFormatTLS:
		m.Cert, m.Key = d[v1alpha1.SecretKeyCert], d[v1alpha1.SecretKeyKey]
		if len(m.Cert) == 0 || len(m.Key) == 0 {
			m.Problem = fmt.Sprintf("needs both data[%s] and data[%s]", v1alpha1.SecretKeyCert, v1alpha1.SecretKeyKey)
		}
	default:
		m.Problem = fmt.Sprintf("holds none of a kubeconfig (data[%s] or data[%s]), a client certificate (data[%s] and data[%s]) or a token (data[%s])",
			v1alpha1.SecretKeyKubeconfigCAPI, v1alpha1.SecretKeyKubeconfig, v1alpha1.SecretKeyCert, v1alpha1.SecretKeyKey, v1alpha1.SecretKeyToken)
	}
	if m.Problem == "" && m.Token != "" {
		m.TokenExpiry = JWTExpiry(m.Token)
	}
	return m
}

// kubeconfigLimits bound a kubeconfig that the gateway reads from a
// Secret, which whoever may write Secrets in a source namespace wrote.
// Kubeconfigs written by tools (Cluster API's hold one cluster, user and
// context) are a few KiB and never use YAML anchors or aliases.
var kubeconfigLimits = boundedyaml.Limits{MaxBytes: KubeconfigMaxBytes, MaxNodes: 10000}

// KubeconfigMaxBytes is the size of the largest kubeconfig the gateway
// reads from a credential Secret.
const KubeconfigMaxBytes = 256 << 10

// fromKubeconfig fills m from the current context of a kubeconfig; it
// returns what makes the kubeconfig unusable. The gateway reads only inline
// data: a kubeconfig that names files or runs a plugin is refused, never
// followed. Whatever it holds that would change whom the credential acts
// for or where it goes is applied or refused, never dropped; what it
// ignores changes neither (docs/security.md). No problem quotes the
// kubeconfig: it holds the credential.
func fromKubeconfig(m *Material, raw []byte) string {
	js, err := boundedyaml.ToJSON(raw, kubeconfigLimits)
	switch {
	case errors.Is(err, boundedyaml.ErrTooLarge):
		return fmt.Sprintf("holds a kubeconfig of %d KiB, more than the %d KiB the gateway reads: keep only the context it uses (kubectl config view --minify --flatten)", len(raw)>>10, kubeconfigLimits.MaxBytes>>10)
	case errors.Is(err, boundedyaml.ErrTooManyNodes):
		return fmt.Sprintf("holds a kubeconfig of more than %d YAML nodes: keep only the context it uses (kubectl config view --minify --flatten)", kubeconfigLimits.MaxNodes)
	case err != nil:
		return "holds a kubeconfig that " + err.Error()
	}
	var cfg clientcmdv1.Config
	// As client-go decodes a kubeconfig: field names are case-sensitive.
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(js, &cfg); err != nil {
		// encoding/json's messages name a field and a type, never a value.
		return "is not a kubeconfig: " + err.Error()
	}
	if (cfg.Kind != "" && cfg.Kind != "Config") || (cfg.APIVersion != "" && cfg.APIVersion != "v1") {
		return "is not a kubeconfig (apiVersion v1, kind Config)"
	}
	clusters, users, contexts := map[string]*clientcmdv1.Cluster{}, map[string]*clientcmdv1.AuthInfo{}, map[string]*clientcmdv1.Context{}
	for _, c := range cfg.Clusters {
		if _, dup := clusters[c.Name]; dup {
			return fmt.Sprintf("names cluster %q twice: keep one", c.Name)
		}
		clusters[c.Name] = &c.Cluster
	}
	for _, u := range cfg.AuthInfos {
		if _, dup := users[u.Name]; dup {
			return fmt.Sprintf("names user %q twice: keep one", u.Name)
		}
		users[u.Name] = &u.AuthInfo
	}
	for _, c := range cfg.Contexts {
		if _, dup := contexts[c.Name]; dup {
			return fmt.Sprintf("names context %q twice: keep one", c.Name)
		}
		contexts[c.Name] = &c.Context
	}
	ctx, ok := contexts[cfg.CurrentContext]
	if !ok {
		return fmt.Sprintf("has no current context (current-context %q)", cfg.CurrentContext)
	}
	cluster, ok := clusters[ctx.Cluster]
	if !ok {
		return fmt.Sprintf("names cluster %q in its current context, but has no such cluster", ctx.Cluster)
	}
	auth, ok := users[ctx.AuthInfo]
	if !ok {
		return fmt.Sprintf("names user %q in its current context, but has no such user", ctx.AuthInfo)
	}
	switch {
	case cluster.CertificateAuthority != "", auth.ClientCertificate != "", auth.ClientKey != "", auth.TokenFile != "":
		return "names files (certificate-authority, client-certificate, client-key or tokenFile): the gateway reads only inline data (the *-data fields and token)"
	case auth.Exec != nil, auth.AuthProvider != nil:
		return "authenticates with an exec or auth-provider plugin: configure it as a credential provider on the gateway and use credential type Provider"
	case auth.Username != "" || auth.Password != "":
		return "authenticates with a user name and password, which the gateway does not send: use a token or a client certificate"
	case auth.Impersonate != "" || auth.ImpersonateUID != "" || len(auth.ImpersonateGroups) > 0 || len(auth.ImpersonateUserExtra) > 0:
		// Applying it would meet spec.impersonation (mode Caller impersonates
		// the hub caller); dropping it would act as the kubeconfig's own,
		// more powerful identity.
		return "impersonates (as, as-uid, as-groups or as-user-extra), which the gateway does not apply: give it a kubeconfig whose user is the identity to act as, or set spec.impersonation.mode Caller to act as each hub caller"
	case cluster.ProxyURL != "":
		return "sets a proxy-url: set spec.endpoint.proxyURL instead"
	}
	m.Server, m.ServerName, m.Insecure = cluster.Server, cluster.TLSServerName, cluster.InsecureSkipTLSVerify
	if len(cluster.CertificateAuthorityData) > 0 {
		m.CABundle = cluster.CertificateAuthorityData
	}
	m.Token, m.Cert, m.Key = strings.TrimSpace(auth.Token), auth.ClientCertificateData, auth.ClientKeyData
	switch {
	case m.Server == "":
		return "has no server in its current context's cluster"
	case m.Token == "" && len(m.Cert) == 0:
		return "has neither a token nor client-certificate-data in its current context's user"
	case m.Token != "" && len(m.Cert) > 0:
		return "has both a token and a client certificate in its current context's user: keep one"
	case len(m.Cert) > 0 && len(m.Key) == 0:
		return "has client-certificate-data without client-key-data"
	}
	return ""
}

// JWTExpiry is a JWT's exp claim, or zero when the token is not a JWT with
// one. The signature is not checked: the managed cluster does that; this is
// only to show when the token expires.
func JWTExpiry(token string) time.Time {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}
	}
	var claims struct {
		Exp json.Number `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp == "" {
		return time.Time{}
	}
	exp, err := claims.Exp.Float64()
	if err != nil || exp <= 0 {
		return time.Time{}
	}
	return time.Unix(int64(exp), 0)
}
