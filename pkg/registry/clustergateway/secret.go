package clustergateway

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// The Secret layout of a ClusterGateway (docs/api.md documents it for people and
// GitOps tools that write the Secret directly). The Secret is named after the
// gateway, lives in the gateway's secret namespace and carries LabelGateway.
const (
	LabelGateway = "gateway.clustergateway.io/cluster-gateway"

	KeyEndpointType   = "endpoint-type"            // Direct | Konnectivity (default Direct)
	KeyEndpoint       = "endpoint"                 // https URL of the API server
	KeyCABundle       = "ca.crt"                   // PEM
	KeyServerName     = "server-name"              // TLS name override
	KeyInsecure       = "insecure-skip-tls-verify" // "true" to skip verification
	KeyProxyURL       = "proxy-url"                // http, https or socks5
	KeyCredentialType = "credential-type"          // X509Certificate | BearerToken
	KeyCertificate    = "tls.crt"                  // PEM client certificate
	KeyPrivateKey     = "tls.key"                  // PEM private key
	KeyToken          = "token"                    // bearer token
	KeyImpersonation  = "impersonation"            // None | Caller (default None)

	// annotationManagedFields keeps the gateway's server-side-apply field
	// ownership; the hub owns the Secret's own managedFields.
	annotationManagedFields = "gateway.clustergateway.io/managed-fields"
	// annotationLastApplied keeps kubectl's last-applied configuration of the
	// gateway, with credential material removed, apart from the Secret's own.
	annotationLastApplied = "gateway.clustergateway.io/last-applied-configuration"
	kubectlLastApplied    = corev1.LastAppliedConfigAnnotation
)

var materialKeys = []string{KeyCertificate, KeyPrivateKey, KeyToken}

// fromSecret reads a gateway from its Secret. It never fails: a Secret that
// cannot be used still becomes a gateway, with Ready=False saying why. The
// result holds the credential material; redact it before returning it to a client.
func fromSecret(s *corev1.Secret) *v1alpha1.ClusterGateway {
	d := s.Data
	gw := &v1alpha1.ClusterGateway{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "ClusterGateway"},
		ObjectMeta: metav1.ObjectMeta{
			Name:              s.Name,
			UID:               s.UID,
			ResourceVersion:   s.ResourceVersion,
			Generation:        s.Generation,
			CreationTimestamp: s.CreationTimestamp,
			DeletionTimestamp: s.DeletionTimestamp,
			Finalizers:        s.Finalizers,
			Labels:            publicLabels(s.Labels),
			Annotations:       publicAnnotations(s.Annotations),
		},
		Spec: v1alpha1.ClusterGatewaySpec{
			Endpoint: v1alpha1.Endpoint{
				Type:       v1alpha1.EndpointType(d[KeyEndpointType]),
				Address:    strings.TrimSpace(string(d[KeyEndpoint])),
				CABundle:   d[KeyCABundle],
				ServerName: string(d[KeyServerName]),
				ProxyURL:   strings.TrimSpace(string(d[KeyProxyURL])),
			},
			Credential: v1alpha1.Credential{
				Type:        v1alpha1.CredentialType(d[KeyCredentialType]),
				BearerToken: strings.TrimSpace(string(d[KeyToken])),
			},
			Impersonation: v1alpha1.Impersonation{Mode: v1alpha1.ImpersonationMode(d[KeyImpersonation])},
		},
	}
	if raw, ok := s.Annotations[annotationManagedFields]; ok {
		var mf []metav1.ManagedFieldsEntry
		if json.Unmarshal([]byte(raw), &mf) == nil {
			gw.ManagedFields = mf
		}
	}
	if len(d[KeyCertificate]) > 0 || len(d[KeyPrivateKey]) > 0 {
		gw.Spec.Credential.X509 = &v1alpha1.X509Credential{Certificate: d[KeyCertificate], PrivateKey: d[KeyPrivateKey]}
	}
	insecure := strings.TrimSpace(string(d[KeyInsecure]))
	var insecureErr string
	if insecure != "" {
		b, err := strconv.ParseBool(insecure)
		if err != nil {
			insecureErr = fmt.Sprintf("data[%s]: must be true or false, not %q", KeyInsecure, insecure)
		}
		gw.Spec.Endpoint.InsecureSkipTLSVerify = b
	}
	v1alpha1.SetDefaults_ClusterGateway(gw)
	gw.Status = computeStatus(gw, insecureErr, lastWrite(s), time.Now())
	return gw
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

// computeStatus says whether the stored data can be used to reach the cluster.
func computeStatus(gw *v1alpha1.ClusterGateway, extraProblem string, changed metav1.Time, now time.Time) v1alpha1.ClusterGatewayStatus {
	var st v1alpha1.ClusterGatewayStatus
	var problems []string
	if extraProblem != "" {
		problems = append(problems, extraProblem)
	}
	for _, e := range v1alpha1.ValidateClusterGateway(gw) {
		problems = append(problems, e.Error())
	}
	reason, message := v1alpha1.ReasonValid, "the stored endpoint and credential are usable"
	if c := gw.Spec.Credential; c.Type == v1alpha1.CredentialX509Certificate && c.X509 != nil {
		if pair, err := v1alpha1.ParseKeyPair(c.X509.Certificate, c.X509.PrivateKey); err == nil {
			notAfter := metav1.NewTime(pair.Leaf.NotAfter)
			st.Credential = &v1alpha1.CredentialStatus{Subject: pair.Leaf.Subject.String(), NotAfter: &notAfter}
			if now.After(pair.Leaf.NotAfter) && len(problems) == 0 {
				changed = notAfter // it became unusable then, not when it was written
				reason = v1alpha1.ReasonCertExpired
				message = fmt.Sprintf("the client certificate expired at %s: store a renewed one", pair.Leaf.NotAfter.UTC().Format(time.RFC3339))
			}
		}
	}
	status := metav1.ConditionTrue
	if len(problems) > 0 {
		reason = v1alpha1.ReasonInvalidSecret
		message = "the stored gateway is unusable: " + strings.Join(problems, "; ")
	}
	if reason != v1alpha1.ReasonValid {
		status = metav1.ConditionFalse
	}
	st.Conditions = []metav1.Condition{{
		Type:               v1alpha1.ConditionReady,
		Status:             status,
		Reason:             reason,
		Message:            message,
		LastTransitionTime: changed,
	}}
	return st
}

// redact removes credential material: it is write-only.
func redact(gw *v1alpha1.ClusterGateway) *v1alpha1.ClusterGateway {
	out := gw.DeepCopy()
	out.Spec.Credential.X509 = nil
	out.Spec.Credential.BearerToken = ""
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

	s.Labels = map[string]string{}
	for k, v := range gw.Labels {
		s.Labels[k] = v
	}
	s.Labels[LabelGateway] = "true"

	old := s.Annotations
	s.Annotations = map[string]string{}
	for k, v := range gw.Annotations {
		s.Annotations[k] = v
	}
	if v, ok := old[kubectlLastApplied]; ok { // the Secret's own, if it was ever applied directly
		s.Annotations[kubectlLastApplied] = v
	} else {
		delete(s.Annotations, kubectlLastApplied)
	}
	if v, ok := gw.Annotations[kubectlLastApplied]; ok {
		s.Annotations[annotationLastApplied] = redactLastApplied(v)
	}
	if len(gw.ManagedFields) > 0 {
		raw, err := json.Marshal(gw.ManagedFields)
		if err != nil {
			return nil, err
		}
		s.Annotations[annotationManagedFields] = string(raw)
	}
	if len(s.Annotations) == 0 {
		s.Annotations = nil
	}

	if s.Data == nil {
		s.Data = map[string][]byte{}
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
	set(KeyImpersonation, []byte(gw.Spec.Impersonation.Mode))
	delete(s.StringData, KeyToken)
	return s, nil
}

func publicLabels(in map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range in {
		if k != LabelGateway {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func publicAnnotations(in map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range in {
		switch k {
		case annotationManagedFields, kubectlLastApplied:
		case annotationLastApplied:
			out[kubectlLastApplied] = v
		default:
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// redactLastApplied drops credential material from kubectl's last-applied
// annotation, which would otherwise hand the credential back on every GET.
func redactLastApplied(raw string) string {
	var obj map[string]interface{}
	if err := json.Unmarshal([]byte(raw), &obj); err != nil {
		return ""
	}
	if spec, ok := obj["spec"].(map[string]interface{}); ok {
		if cred, ok := spec["credential"].(map[string]interface{}); ok {
			delete(cred, "x509")
			delete(cred, "bearerToken")
		}
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return ""
	}
	return string(out) + "\n"
}
