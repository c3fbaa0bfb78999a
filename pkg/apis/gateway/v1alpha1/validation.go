package v1alpha1

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/clustergateway/cluster-gateway/pkg/cabundle"
	"github.com/clustergateway/cluster-gateway/pkg/endpointpolicy"
)

// ValidateClusterGateway checks a gateway as it will be stored: after
// defaulting and, on update, after omitted credential material was carried over.
func ValidateClusterGateway(gw *ClusterGateway) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&gw.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	spec := field.NewPath("spec")
	allErrs = append(allErrs, validateEndpoint(&gw.Spec.Endpoint, gw.Spec.Credential.Type == CredentialSecretRef, spec.Child("endpoint"))...)
	allErrs = append(allErrs, validateCredential(&gw.Spec.Credential, spec.Child("credential"))...)
	switch gw.Spec.Impersonation.Mode {
	case ImpersonationNone, ImpersonationCaller:
	default:
		allErrs = append(allErrs, field.NotSupported(spec.Child("impersonation", "mode"), gw.Spec.Impersonation.Mode,
			[]ImpersonationMode{ImpersonationNone, ImpersonationCaller}))
	}
	return allErrs
}

// ValidateClusterGatewayUpdate checks an update; the name is immutable.
func ValidateClusterGatewayUpdate(gw, old *ClusterGateway) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMetaUpdate(&gw.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	return append(allErrs, ValidateClusterGateway(gw)...)
}

// validateEndpoint checks the endpoint as written. The address may be left
// out when the credential comes from a Secret (a kubeconfig names its server).
func validateEndpoint(ep *Endpoint, fromSecret bool, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	switch ep.Type {
	case EndpointDirect, EndpointKonnectivity:
	default:
		allErrs = append(allErrs, field.NotSupported(p.Child("type"), ep.Type, []EndpointType{EndpointDirect, EndpointKonnectivity}))
	}
	if ep.Address == "" && fromSecret {
		// the kubeconfig in the Secret names the server (checked when it is read)
	} else if _, err := ParseAddress(ep.Address); err != nil {
		allErrs = append(allErrs, field.Invalid(p.Child("address"), WithoutUserInfo(ep.Address), err.Error()))
	}
	allErrs = append(allErrs, validateAdditionalAddresses(ep, p.Child("additionalAddresses"))...)
	if len(ep.CABundle) > 0 {
		if _, err := ParseCABundle(ep.CABundle); err != nil {
			allErrs = append(allErrs, field.Invalid(p.Child("caBundle"), "<PEM>", err.Error()))
		}
		if ep.InsecureSkipTLSVerify {
			allErrs = append(allErrs, field.Forbidden(p.Child("insecureSkipTLSVerify"), "may not be true when caBundle is set: either verify with the bundle or opt out of verification"))
		}
	}
	if ep.ProxyURL != "" {
		if ep.Type == EndpointKonnectivity {
			allErrs = append(allErrs, field.Forbidden(p.Child("proxyURL"), "is only supported for type Direct; Konnectivity endpoints are dialed through the gateway's proxy-server"))
		} else if _, err := ParseProxyURL(ep.ProxyURL); err != nil {
			allErrs = append(allErrs, field.Invalid(p.Child("proxyURL"), WithoutUserInfo(ep.ProxyURL), err.Error()))
		}
	}
	return allErrs
}

// MaxAdditionalAddresses bounds spec.endpoint.additionalAddresses: a
// control plane has a handful of API servers.
const MaxAdditionalAddresses = 8

// validateAdditionalAddresses checks each additional address like address,
// and that no address repeats another (as dialed: host and port).
func validateAdditionalAddresses(ep *Endpoint, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if len(ep.AdditionalAddresses) > MaxAdditionalAddresses {
		allErrs = append(allErrs, field.TooMany(p, len(ep.AdditionalAddresses), MaxAdditionalAddresses))
	}
	seen := map[string]bool{}
	if u, err := ParseAddress(ep.Address); err == nil {
		seen[HostPort(u)] = true
	}
	for i, a := range ep.AdditionalAddresses {
		u, err := ParseAddress(a)
		if err != nil {
			allErrs = append(allErrs, field.Invalid(p.Index(i), WithoutUserInfo(a), err.Error()))
			continue
		}
		if seen[HostPort(u)] {
			allErrs = append(allErrs, field.Duplicate(p.Index(i), a))
		}
		seen[HostPort(u)] = true
	}
	return allErrs
}

// HostPort is an address's host and port as dialed (443 when it names none),
// lower case.
func HostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "443"
	}
	return strings.ToLower(net.JoinHostPort(u.Hostname(), port))
}

func validateCredential(c *Credential, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	switch c.Type {
	case CredentialX509Certificate:
		if c.BearerToken != "" {
			allErrs = append(allErrs, field.Forbidden(p.Child("bearerToken"), "must be empty for type X509Certificate"))
		}
		switch {
		case c.X509 == nil || len(c.X509.Certificate) == 0:
			allErrs = append(allErrs, field.Required(p.Child("x509", "certificate"), "a PEM client certificate is required for type X509Certificate"))
		case len(c.X509.PrivateKey) == 0:
			allErrs = append(allErrs, field.Required(p.Child("x509", "privateKey"), "a PEM private key is required for type X509Certificate"))
		default:
			if pair, err := ParseKeyPair(c.X509.Certificate, c.X509.PrivateKey); err != nil {
				allErrs = append(allErrs, field.Invalid(p.Child("x509"), "<PEM>", err.Error()))
			} else if !ClientAuthUsable(pair.Leaf) {
				allErrs = append(allErrs, field.Invalid(p.Child("x509", "certificate"), "<PEM>",
					"is not valid for client authentication: its extended key usage lacks clientAuth, so every API server would refuse it"))
			}
		}
	case CredentialBearerToken:
		if c.X509 != nil && (len(c.X509.Certificate) > 0 || len(c.X509.PrivateKey) > 0) {
			allErrs = append(allErrs, field.Forbidden(p.Child("x509"), "must be empty for type BearerToken"))
		}
		if c.BearerToken == "" {
			allErrs = append(allErrs, field.Required(p.Child("bearerToken"), "a token is required for type BearerToken"))
		} else if err := CheckToken(c.BearerToken); err != nil {
			allErrs = append(allErrs, field.Invalid(p.Child("bearerToken"), "<token>", err.Error()))
		}
	case CredentialSecretRef:
		allErrs = append(allErrs, noMaterial(c, p)...)
		allErrs = append(allErrs, validateSecretRef(c.SecretRef, p.Child("secretRef"))...)
	case CredentialProvider:
		allErrs = append(allErrs, noMaterial(c, p)...)
		allErrs = append(allErrs, validateProviderRef(c.Provider, p.Child("provider"))...)
	default:
		allErrs = append(allErrs, field.NotSupported(p.Child("type"), c.Type, CredentialTypes))
	}
	if c.Type != CredentialSecretRef && c.SecretRef != nil {
		allErrs = append(allErrs, field.Forbidden(p.Child("secretRef"), "must be empty unless type is SecretRef"))
	}
	if c.Type != CredentialProvider && c.Provider != nil {
		allErrs = append(allErrs, field.Forbidden(p.Child("provider"), "must be empty unless type is Provider"))
	}
	return allErrs
}

// CredentialTypes are the supported credential types.
var CredentialTypes = []CredentialType{CredentialX509Certificate, CredentialBearerToken, CredentialSecretRef, CredentialProvider}

// SecretFormats are the supported credential Secret formats.
var SecretFormats = []SecretFormat{SecretFormatKubeconfig, SecretFormatToken, SecretFormatTLS}

// noMaterial refuses material beside a credential that comes from a source.
func noMaterial(c *Credential, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if c.X509 != nil && (len(c.X509.Certificate) > 0 || len(c.X509.PrivateKey) > 0) {
		allErrs = append(allErrs, field.Forbidden(p.Child("x509"), fmt.Sprintf("must be empty for type %s: the credential is read from its source", c.Type)))
	}
	if c.BearerToken != "" {
		allErrs = append(allErrs, field.Forbidden(p.Child("bearerToken"), fmt.Sprintf("must be empty for type %s: the credential is read from its source", c.Type)))
	}
	return allErrs
}

func validateSecretRef(ref *SecretReference, p *field.Path) field.ErrorList {
	if ref == nil {
		return field.ErrorList{field.Required(p, "the namespace and name of the Secret that holds the credential are required for type SecretRef")}
	}
	var allErrs field.ErrorList
	for _, msg := range apivalidation.ValidateNamespaceName(ref.Namespace, false) {
		allErrs = append(allErrs, field.Invalid(p.Child("namespace"), ref.Namespace, msg))
	}
	for _, msg := range apivalidation.NameIsDNSSubdomain(ref.Name, false) {
		allErrs = append(allErrs, field.Invalid(p.Child("name"), ref.Name, msg))
	}
	if ref.Format != "" && !slices.Contains(SecretFormats, ref.Format) {
		allErrs = append(allErrs, field.NotSupported(p.Child("format"), ref.Format, SecretFormats))
	}
	return allErrs
}

// MaxProviderConfigBytes bounds spec.credential.provider.config, JSON as
// stored: the whole ExecCredential, this config included, must fit in the one
// environment variable a provider reads it from.
const MaxProviderConfigBytes = 64 << 10

func validateProviderRef(ref *ProviderReference, p *field.Path) field.ErrorList {
	if ref == nil {
		return field.ErrorList{field.Required(p, "the name of a credential provider configured on the gateway is required for type Provider")}
	}
	var allErrs field.ErrorList
	for _, msg := range apivalidation.NameIsDNSSubdomain(ref.Name, false) {
		allErrs = append(allErrs, field.Invalid(p.Child("name"), ref.Name, msg))
	}
	if ref.Config != nil && len(ref.Config.Raw) > MaxProviderConfigBytes {
		// Checked before parsing: the provider gets it in an environment
		// variable (KUBERNETES_EXEC_INFO), which Linux caps at 128 KiB, so a
		// larger config could only fail every run.
		allErrs = append(allErrs, field.TooLong(p.Child("config"), "<config>", MaxProviderConfigBytes))
	} else if ref.Config != nil && len(ref.Config.Raw) > 0 {
		var obj map[string]interface{}
		if err := json.Unmarshal(ref.Config.Raw, &obj); err != nil {
			allErrs = append(allErrs, field.Invalid(p.Child("config"), "<config>", "must be a JSON object: "+err.Error()))
		}
	}
	allErrs = append(allErrs, ValidateAdditionalArgs(ref.AdditionalArgs, p.Child("additionalArgs"))...)
	allErrs = append(allErrs, ValidateAdditionalEnv(ref.AdditionalEnv, p.Child("additionalEnv"))...)
	return allErrs
}

// Bounds of spec.credential.provider.additionalArgs and additionalEnv:
// what a cluster's provider needs (a cluster name, a region, a role) fits
// many times over, and a provider's command line and environment stay far
// below the kernel's limits.
const (
	MaxAdditionalArgs     = 32
	MaxAdditionalEnv      = 32
	MaxAdditionalArgBytes = 4 << 10 // one argument, or one variable's value
)

// ValidateAdditionalArgs checks a provider's additional args (KEP-5339's
// additional-args extension).
func ValidateAdditionalArgs(args []string, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if len(args) > MaxAdditionalArgs {
		return field.ErrorList{field.TooMany(p, len(args), MaxAdditionalArgs)}
	}
	for i, a := range args {
		switch {
		case len(a) > MaxAdditionalArgBytes:
			allErrs = append(allErrs, field.TooLong(p.Index(i), "<arg>", MaxAdditionalArgBytes))
		case strings.IndexByte(a, 0) >= 0:
			// An argument ends at a NUL: the provider would run with another.
			allErrs = append(allErrs, field.Invalid(p.Index(i), a, "must not contain a NUL byte"))
		}
	}
	return allErrs
}

// ValidateAdditionalEnv checks a provider's additional environment
// (KEP-5339's additional-envs extension).
func ValidateAdditionalEnv(env []ProviderEnvVar, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if len(env) > MaxAdditionalEnv {
		return field.ErrorList{field.TooMany(p, len(env), MaxAdditionalEnv)}
	}
	seen := map[string]bool{}
	for i, e := range env {
		at := p.Index(i)
		switch {
		case !envName(e.Name):
			allErrs = append(allErrs, field.Invalid(at.Child("name"), e.Name, "must be letters, digits and underscores, not starting with a digit"))
		case ReservedEnv(e.Name):
			allErrs = append(allErrs, field.Forbidden(at.Child("name"), fmt.Sprintf("%s decides what the provider's process loads or runs, or is set by the gateway: only the provider file may set it", e.Name)))
		case seen[e.Name]:
			allErrs = append(allErrs, field.Duplicate(at.Child("name"), e.Name))
		}
		seen[e.Name] = true
		switch {
		case len(e.Value) > MaxAdditionalArgBytes:
			allErrs = append(allErrs, field.TooLong(at.Child("value"), "<value>", MaxAdditionalArgBytes))
		case strings.IndexByte(e.Value, 0) >= 0:
			allErrs = append(allErrs, field.Invalid(at.Child("value"), "<value>", "must not contain a NUL byte"))
		}
	}
	return allErrs
}

func envName(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for _, c := range []byte(s) {
		if !(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
			return false
		}
	}
	return true
}

// reservedEnv are variables that only the provider file may set: the one
// the gateway passes the ExecCredential in, and those that make a dynamic
// loader, a shell or an interpreter load or run code other than the
// provider's (a ClusterProfile writer never names a command). reservedEnvPrefixes
// the same for families of them.
var (
	reservedEnv = []string{"KUBERNETES_EXEC_INFO", "PATH", "GCONV_PATH", "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "IFS",
		"NODE_OPTIONS", "NODE_PATH", "RUBYOPT", "RUBYLIB", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH", "GODEBUG"}
	reservedEnvPrefixes = []string{"LD_", "DYLD_", "PYTHON", "PERL5", "PERLLIB", "BASH_FUNC_"}
)

// ReservedEnv tells whether name is a variable a ClusterGateway or a
// ClusterProfile may not add to a provider's environment (case-insensitive,
// as some systems read them).
func ReservedEnv(name string) bool {
	u := strings.ToUpper(name)
	if slices.Contains(reservedEnv, u) {
		return true
	}
	for _, pre := range reservedEnvPrefixes {
		if strings.HasPrefix(u, pre) {
			return true
		}
	}
	return false
}

// ValidateNewMaterial checks credential material that a write carries (not
// material kept from before): a certificate that is expired, or not valid
// yet beyond clock skew, is refused rather than stored as a gateway that
// would fail every request.
func ValidateNewMaterial(c *Credential, now time.Time) field.ErrorList {
	if c.Type != CredentialX509Certificate || c.X509 == nil {
		return nil
	}
	pair, err := ParseKeyPair(c.X509.Certificate, c.X509.PrivateKey)
	if err != nil {
		return nil // ValidateClusterGateway says why
	}
	p := field.NewPath("spec", "credential", "x509", "certificate")
	switch leaf := pair.Leaf; {
	case now.After(leaf.NotAfter):
		return field.ErrorList{field.Invalid(p, "<PEM>", fmt.Sprintf("expired at %s: issue a new client certificate", leaf.NotAfter.UTC().Format(time.RFC3339)))}
	case now.Add(MaxClockSkew).Before(leaf.NotBefore):
		return field.ErrorList{field.Invalid(p, "<PEM>", fmt.Sprintf("is not valid before %s: check the issuer's clock, or store it once it is valid", leaf.NotBefore.UTC().Format(time.RFC3339)))}
	}
	return nil
}

// MaxClockSkew is how far in the future a new certificate's notBefore may be
// (issuers and the hub rarely agree on the time to the second).
const MaxClockSkew = 5 * time.Minute

// CheckToken refuses what cannot be a bearer token: control characters,
// spaces, non-ASCII. Such a token would be refused by every API server (or
// could not even be sent as a header).
func CheckToken(t string) error {
	for i := 0; i < len(t); i++ {
		if c := t[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("must be printable ASCII without spaces or control characters (found byte 0x%02x at offset %d); trim the newline a file may end with", c, i)
		}
	}
	return nil
}

// ClientAuthUsable tells whether an API server can accept cert for client
// authentication: no extended key usage, or one that includes clientAuth.
func ClientAuthUsable(cert *x509.Certificate) bool {
	if len(cert.ExtKeyUsage) == 0 && len(cert.UnknownExtKeyUsage) == 0 {
		return true
	}
	for _, u := range cert.ExtKeyUsage {
		if u == x509.ExtKeyUsageClientAuth || u == x509.ExtKeyUsageAny {
			return true
		}
	}
	return false
}

// WithoutUserInfo is a URL as shown to readers and in errors: the user name
// and password of a proxy URL are write-only material.
func WithoutUserInfo(proxyURL string) string {
	if proxyURL == "" {
		return ""
	}
	u, err := url.Parse(proxyURL)
	if err != nil {
		return "<unparsable URL>"
	}
	if u.User == nil && strings.Contains(proxyURL, "@") {
		// An '@' the parser did not take as the end of user info: a
		// password with an unescaped '/', '?' or '#' ended the authority
		// early, and what follows it may be the password.
		return "<URL with user info that is not percent-encoded>"
	}
	u.User = nil
	return u.String()
}

// ProxyUserInfo returns the user info of a proxy URL, or nil.
func ProxyUserInfo(proxyURL string) *url.Userinfo {
	u, err := url.Parse(proxyURL)
	if err != nil {
		return nil
	}
	return u.User
}

// ParseAddress parses an API server address: an https URL with a host.
func ParseAddress(address string) (*url.URL, error) {
	if address == "" {
		return nil, fmt.Errorf("is required: the https URL of the cluster's API server, e.g. https://10.0.0.1:6443")
	}
	u, err := url.Parse(address)
	if err != nil {
		return nil, notAURL(address, err)
	}
	if u.Scheme != "https" {
		return nil, fmt.Errorf("must be an https URL, e.g. https://10.0.0.1:6443")
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, fmt.Errorf("must name a host, e.g. https://10.0.0.1:6443")
	}
	// Any '@': user info whose password holds a '/', '?' or '#' parses as
	// no user info, its password in the host, path or query.
	if u.User != nil || strings.Contains(address, "@") || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("must not carry user info, a query or a fragment")
	}
	// The endpoint policy judges an IP address as written and a name where
	// it is resolved; a host a proxy or resolver reads otherwise is refused.
	if _, err := endpointpolicy.ParseHost(u.Hostname()); err != nil {
		return nil, err
	}
	return u, nil
}

// ParseProxyURL parses an http, https or socks5 proxy URL.
func ParseProxyURL(proxyURL string) (*url.URL, error) {
	u, err := url.Parse(proxyURL)
	if err != nil {
		return nil, notAURL(proxyURL, err)
	}
	if u.User == nil && strings.Contains(proxyURL, "@") || u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "" {
		// A password with an unescaped '/', '?' or '#' ends the authority
		// early: url.Parse finds no user info, and the password would be
		// taken for the host, path or query (and shown to readers).
		return nil, fmt.Errorf("must be scheme://[user:password@]host[:port] without a path, query or fragment (percent-encode reserved characters such as '/', '?', '#' and '@' in the user name and password)")
	}
	switch u.Scheme {
	case "http", "https", "socks5":
	default:
		return nil, fmt.Errorf("must be an http, https or socks5 URL, e.g. socks5://proxy:1080")
	}
	if u.Host == "" {
		return nil, fmt.Errorf("must name a host, e.g. http://proxy:3128")
	}
	if _, err := endpointpolicy.ParseHost(u.Hostname()); err != nil {
		return nil, err
	}
	return u, nil
}

// notAURL is url.Parse's error without the URL, which url.Error repeats
// whole; and where the URL has an '@' (user info), without the cause either:
// "invalid port \":pw\" after host" is part of a password with a '/'.
func notAURL(raw string, err error) error {
	if strings.Contains(raw, "@") {
		return fmt.Errorf("is not a URL (percent-encode reserved characters such as '/', '?', '#' and '@' in the user name and password)")
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	return fmt.Errorf("is not a URL: %v", err)
}

// ParseCABundle parses a PEM bundle of one or more certificates, as strictly
// as the gateway's transports will (an empty bundle would trust nothing).
func ParseCABundle(data []byte) (*x509.CertPool, error) {
	pool, err := cabundle.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("must be a PEM bundle of CA certificates: %v", err)
	}
	return pool, nil
}

// ParseKeyPair parses a PEM client certificate and key and checks that they match.
func ParseKeyPair(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("certificate and private key are not a usable pair: %v", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("certificate does not parse: %v", err)
	}
	pair.Leaf = leaf
	return &pair, nil
}
