package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// EndpointType says how the gateway reaches a managed cluster's API server.
// +enum
type EndpointType string

const (
	// EndpointDirect dials spec.endpoint.address, optionally through spec.endpoint.proxyURL.
	EndpointDirect EndpointType = "Direct"
	// EndpointKonnectivity dials spec.endpoint.address through the konnectivity
	// proxy-server configured on the gateway; the cluster's agent makes the last hop.
	EndpointKonnectivity EndpointType = "Konnectivity"
)

// CredentialType says how the gateway authenticates to a managed cluster.
// +enum
type CredentialType string

const (
	// CredentialX509Certificate authenticates with a client certificate and key.
	CredentialX509Certificate CredentialType = "X509Certificate"
	// CredentialBearerToken authenticates with a bearer token.
	CredentialBearerToken CredentialType = "BearerToken"
	// CredentialSecretRef takes the credential from a hub Secret that
	// something else keeps and rotates (Cluster API, OCM, cert-manager).
	CredentialSecretRef CredentialType = "SecretRef"
	// CredentialProvider takes the credential from a credential provider
	// (an exec plugin) that the gateway's operator configured.
	CredentialProvider CredentialType = "Provider"
)

// SecretFormat is how a credential Secret holds its credential.
// +enum
type SecretFormat string

const (
	// SecretFormatKubeconfig is a kubeconfig under data key "value" (Cluster
	// API) or "kubeconfig"; its current context gives the server, CA, TLS
	// server name and a token or client certificate.
	SecretFormatKubeconfig SecretFormat = "Kubeconfig"
	// SecretFormatToken is a bearer token under "token", with an optional
	// "ca.crt" (OCM managed-serviceaccount, ServiceAccount token Secrets).
	SecretFormatToken SecretFormat = "Token"
	// SecretFormatTLS is a client certificate and key under "tls.crt" and
	// "tls.key", with an optional "ca.crt" (cert-manager, kubernetes.io/tls).
	SecretFormatTLS SecretFormat = "TLS"
)

// The data keys of a credential Secret, by format (Cluster API, OCM
// managed-serviceaccount, cert-manager and ServiceAccount token Secrets).
const (
	SecretKeyKubeconfigCAPI = "value"      // Kubeconfig, as Cluster API writes it
	SecretKeyKubeconfig     = "kubeconfig" // Kubeconfig, elsewhere
	SecretKeyToken          = "token"      // Token
	SecretKeyCA             = "ca.crt"     // Token and TLS: the server's CA (optional)
	SecretKeyCert           = "tls.crt"    // TLS
	SecretKeyKey            = "tls.key"    // TLS
)

// ImpersonationMode says whose identity the managed cluster sees.
// +enum
type ImpersonationMode string

const (
	// ImpersonationNone sends requests as the gateway's own credential.
	ImpersonationNone ImpersonationMode = "None"
	// ImpersonationCaller impersonates the hub caller (user, groups, UID, extras)
	// using the gateway's credential, which then needs the impersonate permission.
	ImpersonationCaller ImpersonationMode = "Caller"
)

// +genclient
// +genclient:nonNamespaced
// +genclient:noStatus
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ClusterGateway makes one managed cluster's API server reachable through the
// hub at clustergateways/{name}/proxy/{path}. It is stored as a labelled Secret
// in the gateway's secret namespace; credential material is write-only.
type ClusterGateway struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata. The name is the managed cluster's name on the
	// hub; labels and annotations are kept in the gateway's own Secret data.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec says where the managed cluster's API server is, how the gateway
	// authenticates to it, and whose identity the cluster sees.
	Spec ClusterGatewaySpec `json:"spec"`
	// Status is computed on every read and cannot be written: whether the
	// stored gateway is usable (Ready) and whether the cluster answers
	// (Reachable).
	// +optional
	Status ClusterGatewayStatus `json:"status,omitempty"`
}

// ClusterGatewaySpec is validated as a whole on every write (docs/api.md has
// the rules).
type ClusterGatewaySpec struct {
	// Endpoint is where the managed cluster's API server is and how to reach it.
	Endpoint Endpoint `json:"endpoint"`
	// Credential is how the gateway authenticates to the managed cluster.
	Credential Credential `json:"credential"`
	// Impersonation says whose identity the managed cluster sees.
	// +optional
	Impersonation Impersonation `json:"impersonation,omitempty"`
}

// Endpoint decides where the stored credential is sent: an update that
// changes any of its fields must send the credential again.
type Endpoint struct {
	// Type is Direct (dial the address, optionally through proxyURL) or
	// Konnectivity (dial the address through the gateway's konnectivity proxy-server).
	// Defaults to Direct.
	// +optional
	Type EndpointType `json:"type,omitempty"`
	// Address is the https URL of the cluster's API server as reached directly,
	// or as dialed by the konnectivity agent, e.g. https://10.0.0.1:6443.
	Address string `json:"address"`
	// AdditionalAddresses are more https URLs of the same API (the same CA,
	// serving certificate names and credential), e.g. the other control-plane
	// nodes of a highly available cluster. Requests are spread over address
	// and these, leaving out one that failed its last probe or a recent dial.
	// Each is validated like address, the endpoint policy included; at most
	// MaxAdditionalAddresses, none repeating another.
	// +optional
	// +listType=atomic
	AdditionalAddresses []string `json:"additionalAddresses,omitempty"`
	// CABundle is the PEM bundle that signs the API server's serving certificate.
	// Empty means the system roots.
	// +optional
	CABundle []byte `json:"caBundle,omitempty"`
	// ServerName overrides the name the serving certificate is verified against.
	// +optional
	ServerName string `json:"serverName,omitempty"`
	// InsecureSkipTLSVerify disables verification of the API server's certificate.
	// Only for tests; never combine with caBundle.
	// +optional
	InsecureSkipTLSVerify bool `json:"insecureSkipTLSVerify,omitempty"`
	// ProxyURL is an http, https or socks5 proxy to dial the address through.
	// Only for type Direct.
	// +optional
	ProxyURL string `json:"proxyURL,omitempty"`
}

// The material of a Credential (certificate, key, token) is write-only:
// accepted on create and update, never returned by the API. An update that
// omits it keeps the stored material, as long as the endpoint and the
// impersonation mode stay the same. A credential from a source (SecretRef,
// Provider) holds no material: the gateway reads it where it is kept and
// follows its rotation.
type Credential struct {
	// Type is X509Certificate, BearerToken, SecretRef or Provider.
	Type CredentialType `json:"type"`
	// X509 is the client certificate and key, for type X509Certificate.
	// +optional
	X509 *X509Credential `json:"x509,omitempty"`
	// BearerToken is the token, for type BearerToken.
	// +optional
	BearerToken string `json:"bearerToken,omitempty"`
	// SecretRef names the hub Secret that holds the credential, for type
	// SecretRef. Writing it needs permission to get that Secret.
	// +optional
	SecretRef *SecretReference `json:"secretRef,omitempty"`
	// Provider names the credential provider, for type Provider.
	// +optional
	Provider *ProviderReference `json:"provider,omitempty"`
}

// SecretReference names a hub Secret in a namespace the gateway may read
// (its --credential-source-namespaces).
type SecretReference struct {
	// Namespace of the Secret.
	Namespace string `json:"namespace"`
	// Name of the Secret.
	Name string `json:"name"`
	// Format is Kubeconfig, Token or TLS; empty means detected from the
	// Secret's data (a kubeconfig under "value" or "kubeconfig", else
	// "tls.crt" and "tls.key", else "token").
	// +optional
	Format SecretFormat `json:"format,omitempty"`
}

// ProviderReference names a credential provider of the gateway's
// --credential-providers-file. A ClusterGateway never names a command.
type ProviderReference struct {
	// Name of the provider in the gateway's configuration.
	Name string `json:"name"`
	// Config is passed to the provider as the ExecCredential's
	// spec.cluster.config (for example the EKS cluster name and region).
	// +optional
	Config *runtime.RawExtension `json:"config,omitempty"`
	// AdditionalArgs are appended to the provider's args when the provider
	// file's profileSourcedCLIArgsPolicy is Append, and ignored otherwise
	// (KEP-5339's clusterprofiles.multicluster.x-k8s.io/exec/additional-args,
	// which the inventory sync copies from a ClusterProfile). At most 32,
	// each at most 4 KiB, no NUL.
	// +optional
	// +listType=atomic
	AdditionalArgs []string `json:"additionalArgs,omitempty"`
	// AdditionalEnv is added to the provider's environment when the
	// provider file's profileSourcedEnvVarsPolicy is AppendIfNotExists (a
	// variable the file sets keeps the file's value), and ignored otherwise
	// (KEP-5339's clusterprofiles.multicluster.x-k8s.io/exec/additional-envs).
	// At most 32 variables; names are letters, digits and underscores, not
	// starting with a digit, and never PATH, LD_*, DYLD_*,
	// KUBERNETES_EXEC_INFO or another variable that changes what a loader or
	// interpreter runs; values at most 4 KiB, no NUL.
	// +optional
	// +listType=map
	// +listMapKey=name
	AdditionalEnv []ProviderEnvVar `json:"additionalEnv,omitempty"`
}

// ProviderEnvVar is one variable of a provider's environment.
type ProviderEnvVar struct {
	// Name of the variable.
	Name string `json:"name"`
	// Value of the variable.
	Value string `json:"value"`
}

// X509Credential's certificate and private key are PEM, must belong
// together, and the certificate must allow client authentication and be
// valid when written.
type X509Credential struct {
	// Certificate is the PEM client certificate (chain).
	Certificate []byte `json:"certificate,omitempty"`
	// PrivateKey is the PEM private key matching the certificate.
	PrivateKey []byte `json:"privateKey,omitempty"`
}

// Impersonation of the caller needs the stored credential to hold the
// impersonate permission on the managed cluster.
type Impersonation struct {
	// Mode is None (the gateway's own credential) or Caller (impersonate the hub
	// caller). Defaults to None.
	// +optional
	Mode ImpersonationMode `json:"mode,omitempty"`
}

// Each gateway replica computes ClusterGatewayStatus itself: Ready from the
// stored object, Reachable from its own probes, so replicas may briefly
// disagree on Reachable.
type ClusterGatewayStatus struct {
	// Conditions of the gateway. Ready is True when the stored endpoint and
	// credential are usable, False with a reason and message when not.
	// Reachable is True when the cluster answered the gateway's last probes
	// of its /readyz, False when it did not (reason DialFailed, TLSFailed,
	// HTTPError or NoAnswer; proxied requests then fail at once with 503),
	// Unknown before the first probe or when the gateway is not Ready. Each
	// gateway replica probes on its own.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Credential describes the stored credential without revealing it.
	// +optional
	Credential *CredentialStatus `json:"credential,omitempty"`
	// Reachability has the details of the last probe of the cluster.
	// +optional
	Reachability *ReachabilityStatus `json:"reachability,omitempty"`
}

// CredentialStatus shows where the credential comes from, a client
// certificate's subject and when the credential expires; never material.
type CredentialStatus struct {
	// Subject is the client certificate's subject, when the credential is one.
	// +optional
	Subject string `json:"subject,omitempty"`
	// NotAfter is when the client certificate expires, when the credential is one.
	// +optional
	NotAfter *metav1.Time `json:"notAfter,omitempty"`
	// Source is where the credential is read from: "Secret <namespace>/<name>
	// (<format>)" or "Provider <name>"; empty when it is stored in the gateway.
	// +optional
	Source string `json:"source,omitempty"`
	// LastRotationTime is when the source last changed the credential, as
	// far as this gateway replica saw.
	// +optional
	LastRotationTime *metav1.Time `json:"lastRotationTime,omitempty"`
	// ExpirationTime is when the credential expires, where that is known: a
	// certificate's notAfter, an ExecCredential's expirationTimestamp, a
	// JWT's exp.
	// +optional
	ExpirationTime *metav1.Time `json:"expirationTime,omitempty"`
}

// ReachabilityStatus: probes ask /readyz and /version every --probe-interval,
// through the gateway's own transport and with the stored credential.
type ReachabilityStatus struct {
	// LastProbeTime is when the cluster was last probed.
	// +optional
	LastProbeTime *metav1.Time `json:"lastProbeTime,omitempty"`
	// Latency is how long the last successful probe took, through the
	// gateway's transport to the cluster's /readyz.
	// +optional
	Latency *metav1.Duration `json:"latency,omitempty"`
	// ServerVersion is the cluster's Kubernetes version, from its /version.
	// +optional
	ServerVersion string `json:"serverVersion,omitempty"`
	// Addresses has the last probe of each address, for a gateway with
	// additionalAddresses (address first). The cluster is Reachable while
	// any address is.
	// +optional
	// +listType=atomic
	Addresses []AddressReachability `json:"addresses,omitempty"`
}

// AddressReachability is the last probe of one of a cluster's addresses.
type AddressReachability struct {
	// Address is spec.endpoint.address or one of spec.endpoint.additionalAddresses.
	Address string `json:"address"`
	// Reachable is true when the address answered /readyz with 200.
	Reachable bool `json:"reachable"`
	// Reason is Reachable, DialFailed, TLSFailed, HTTPError or NoAnswer.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message says why the address is not reachable.
	// +optional
	Message string `json:"message,omitempty"`
	// LastProbeTime is when the address was last probed.
	// +optional
	LastProbeTime *metav1.Time `json:"lastProbeTime,omitempty"`
}

// Condition types and reasons.
const (
	ConditionReady = "Ready"

	ReasonValid           = "Valid"
	ReasonInvalidSecret   = "InvalidSecret"
	ReasonCertExpired     = "CredentialExpired"
	ReasonCertNotYetValid = "CredentialNotYetValid"
	ReasonSourceNotFound  = "SourceNotFound"   // the credential Secret does not exist (yet)
	ReasonSourceNotRead   = "SourceNotAllowed" // the credential Secret is in a namespace the gateway may not read
	ReasonSourceMalformed = "SourceMalformed"  // the credential Secret holds no usable credential
	ReasonProviderFailed  = "ProviderFailed"   // the credential provider failed, timed out or is not configured

	ConditionReachable = "Reachable"

	ReasonReachable       = "Reachable"       // /readyz answered 200
	ReasonDialFailed      = "DialFailed"      // no connection: refused, unroutable, tunnel down, denied, timed out
	ReasonTLSFailed       = "TLSFailed"       // connected, but the TLS handshake failed (e.g. untrusted certificate)
	ReasonHTTPError       = "HTTPError"       // /readyz answered, but not 200 (e.g. 401, 500)
	ReasonNoAnswer        = "NoAnswer"        // connected, but no answer within the probe timeout
	ReasonNotProbed       = "NotProbedYet"    // not probed since the gateway was created or changed
	ReasonGatewayNotReady = "GatewayNotReady" // the stored gateway is not Ready: nothing to probe
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ClusterGatewayList is a list of ClusterGateways.
type ClusterGatewayList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	// Items are the ClusterGateways, without their credential material.
	Items []ClusterGateway `json:"items"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ClusterGatewayProxyOptions is the query of the proxy subresource: the path
// on the managed cluster that the request is forwarded to.
type ClusterGatewayProxyOptions struct {
	metav1.TypeMeta `json:",inline"`

	// Path is the path on the managed cluster's API server.
	// +optional
	Path string `json:"path,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ClusterGatewayHealth is what clustergateways/{name}/health reports: whether
// the managed cluster's API server answers /readyz through the gateway, with
// the gateway's own transport and credential, right now.
type ClusterGatewayHealth struct {
	metav1.TypeMeta `json:",inline"`
	// The gateway's name, uid and resourceVersion at the time of the probe.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Healthy is true when /readyz answered 200 ok.
	Healthy bool `json:"healthy"`
	// Code is the HTTP status /readyz answered with; 0 when it could not be reached.
	// +optional
	Code int32 `json:"code,omitempty"`
	// Message is /readyz's answer when not healthy, or why the cluster could not be reached.
	// +optional
	Message string `json:"message,omitempty"`
	// ProbeTime is when the probe ran.
	ProbeTime metav1.Time `json:"probeTime"`
	// Addresses has what the probe found at each address, for a gateway
	// with additionalAddresses (address first): each is probed at once, and
	// the cluster is healthy when any address is (code and message are then
	// that address's).
	// +optional
	// +listType=atomic
	Addresses []AddressHealth `json:"addresses,omitempty"`
}

// AddressHealth is what the health subresource's probe found at one of a
// cluster's addresses.
type AddressHealth struct {
	// Address is spec.endpoint.address or one of spec.endpoint.additionalAddresses.
	Address string `json:"address"`
	// Reachable is true when the address answered /readyz with 200.
	Reachable bool `json:"reachable"`
	// Reason is Reachable, DialFailed, TLSFailed, HTTPError or NoAnswer.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Code is the HTTP status the address answered /readyz with; 0 when it
	// could not be reached.
	// +optional
	Code int32 `json:"code,omitempty"`
	// Message says why the address is not reachable.
	// +optional
	Message string `json:"message,omitempty"`
	// Latency is how long the address took to answer /readyz, when it answered.
	// +optional
	Latency *metav1.Duration `json:"latency,omitempty"`
}
