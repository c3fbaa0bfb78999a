package e2e

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// Validation tests: the gateway refuses unusable objects with 422 Invalid,
// naming each offending field in the Status causes, and writes nothing.

type invalidCase struct {
	name   string
	mutate func(gw *gatewayv1alpha1.ClusterGateway)
	// fields are the field paths the causes must name (all of them).
	fields []string
}

func invalidCases(t *testing.T) []invalidCase {
	other := newTestCreds(t, "other")
	return []invalidCase{
		{"address not https", func(gw *gatewayv1alpha1.ClusterGateway) { gw.Spec.Endpoint.Address = "http://127.0.0.1:6443" },
			[]string{"spec.endpoint.address"}},
		{"address missing", func(gw *gatewayv1alpha1.ClusterGateway) { gw.Spec.Endpoint.Address = "" },
			[]string{"spec.endpoint.address"}},
		{"caBundle not PEM", func(gw *gatewayv1alpha1.ClusterGateway) { gw.Spec.Endpoint.CABundle = []byte("not a certificate") },
			[]string{"spec.endpoint.caBundle"}},
		{"caBundle with insecureSkipTLSVerify", func(gw *gatewayv1alpha1.ClusterGateway) { gw.Spec.Endpoint.InsecureSkipTLSVerify = true },
			[]string{"spec.endpoint.insecureSkipTLSVerify"}},
		{"certificate and key do not match", func(gw *gatewayv1alpha1.ClusterGateway) { gw.Spec.Credential.X509.PrivateKey = other.KeyPEM },
			[]string{"spec.credential.x509"}},
		{"token with type X509Certificate", func(gw *gatewayv1alpha1.ClusterGateway) { gw.Spec.Credential.BearerToken = "a-token" },
			[]string{"spec.credential.bearerToken"}},
		{"certificate with type BearerToken", func(gw *gatewayv1alpha1.ClusterGateway) {
			gw.Spec.Credential.Type = gatewayv1alpha1.CredentialBearerToken
			gw.Spec.Credential.BearerToken = "a-token"
		}, []string{"spec.credential.x509"}},
		{"missing certificate", func(gw *gatewayv1alpha1.ClusterGateway) { gw.Spec.Credential.X509 = nil },
			[]string{"spec.credential.x509.certificate"}},
		{"missing private key", func(gw *gatewayv1alpha1.ClusterGateway) { gw.Spec.Credential.X509.PrivateKey = nil },
			[]string{"spec.credential.x509.privateKey"}},
		{"missing token", func(gw *gatewayv1alpha1.ClusterGateway) {
			gw.Spec.Credential = gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialBearerToken}
		}, []string{"spec.credential.bearerToken"}},
		{"proxyURL with Konnectivity", func(gw *gatewayv1alpha1.ClusterGateway) {
			gw.Spec.Endpoint.Type = gatewayv1alpha1.EndpointKonnectivity
			gw.Spec.Endpoint.ProxyURL = "http://proxy.example:3128"
		}, []string{"spec.endpoint.proxyURL"}},
		{"proxyURL scheme", func(gw *gatewayv1alpha1.ClusterGateway) { gw.Spec.Endpoint.ProxyURL = "ftp://proxy.example:21" },
			[]string{"spec.endpoint.proxyURL"}},
		{"bad endpoint type", func(gw *gatewayv1alpha1.ClusterGateway) { gw.Spec.Endpoint.Type = "Tunnel" },
			[]string{"spec.endpoint.type"}},
		{"bad credential type", func(gw *gatewayv1alpha1.ClusterGateway) { gw.Spec.Credential.Type = "Password" },
			[]string{"spec.credential.type"}},
		{"bad impersonation mode", func(gw *gatewayv1alpha1.ClusterGateway) { gw.Spec.Impersonation.Mode = "Everyone" },
			[]string{"spec.impersonation.mode"}},
		{"several problems at once", func(gw *gatewayv1alpha1.ClusterGateway) {
			gw.Spec.Endpoint.Address = "ftp://x"
			gw.Spec.Impersonation.Mode = "Everyone"
			gw.Spec.Credential.X509 = nil
		}, []string{"spec.endpoint.address", "spec.impersonation.mode", "spec.credential.x509.certificate"}},
	}
}

// requireInvalid fails unless err is a 422 Invalid whose causes name exactly fields.
func requireInvalid(t *testing.T, what string, err error, fields []string) {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Errorf("%s: err = %v, want 422 Invalid", what, err)
		return
	}
	status := err.(apierrors.APIStatus).Status()
	if status.Code != http.StatusUnprocessableEntity || status.Details == nil ||
		status.Details.Group != gatewayv1alpha1.GroupName || status.Details.Kind != "ClusterGateway" {
		t.Errorf("%s: status code %d, details %+v; want 422 for gateway.clustergateway.io ClusterGateway", what, status.Code, status.Details)
		return
	}
	var got []string
	for _, c := range status.Details.Causes {
		got = append(got, c.Field)
		if c.Message == "" {
			t.Errorf("%s: cause of %s has no message", what, c.Field)
		}
	}
	slices.Sort(got)
	want := slices.Clone(fields)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s: cause fields %v, want %v (%s)", what, got, want, status.Message)
	}
	for _, c := range status.Details.Causes {
		if strings.Contains(c.Message, "PRIVATE KEY") || strings.Contains(c.Message, "a-token") {
			t.Errorf("%s: cause echoes credential material: %s", what, c.Message)
		}
	}
}

// TestValidationCreate: each invalid object is refused on create; no Secret
// is written.
func TestValidationCreate(t *testing.T) {
	requireGateway(t)
	t.Parallel()
	client := gatewayClient(t, env.Hub.Kubeconfig).GatewayV1alpha1().ClusterGateways()
	creds := newTestCreds(t, "validation")
	for _, c := range invalidCases(t) {
		name := uniqueName(t, "e2e-invalid")
		cleanupGateway(t, name)
		gw := x509Gateway(name, "https://127.0.0.9:6443", creds)
		c.mutate(gw)
		_, err := client.Create(context.Background(), gw, metav1.CreateOptions{})
		requireInvalid(t, "create with "+c.name, err, c.fields)
		requireNoSecret(t, name)
	}
}

// TestValidationUpdate: the same checks apply on update, after material
// carried over from the stored object; a type change must bring new material.
func TestValidationUpdate(t *testing.T) {
	requireGateway(t)
	t.Parallel()
	client := gatewayClient(t, env.Hub.Kubeconfig).GatewayV1alpha1().ClusterGateways()
	creds := newTestCreds(t, "validation-update")
	name := uniqueName(t, "e2e-invalid-update")
	cleanupGateway(t, name)
	stored, err := client.Create(context.Background(), x509Gateway(name, "https://127.0.0.9:6443", creds), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := mustSecret(t, name)

	for _, c := range invalidCases(t) {
		gw := x509Gateway(name, "https://127.0.0.9:6443", creds)
		gw.ResourceVersion = stored.ResourceVersion
		c.mutate(gw)
		_, err := client.Update(context.Background(), gw, metav1.UpdateOptions{})
		if c.name == "missing certificate" {
			// Omitted material is carried over: not an error on update.
			if err != nil {
				t.Errorf("update omitting the x509 material: %v, want it kept", err)
			} else if s := mustSecret(t, name); string(s.Data["tls.key"]) != string(creds.KeyPEM) {
				t.Errorf("update omitting the x509 material lost it")
			}
			stored, err = client.Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			continue
		}
		if c.name == "several problems at once" {
			// The stored certificate is not kept: the update changes where it
			// would go and whom it acts for.
			c.fields = []string{"spec.credential.x509", "spec.endpoint.address", "spec.impersonation.mode"}
		}
		requireInvalid(t, "update with "+c.name, err, c.fields)
	}

	// Switching to BearerToken without a token: nothing is carried across types.
	gw := stored.DeepCopy()
	gw.Spec.Credential = gatewayv1alpha1.Credential{Type: gatewayv1alpha1.CredentialBearerToken}
	_, err = client.Update(context.Background(), gw, metav1.UpdateOptions{})
	requireInvalid(t, "type change without a token", err, []string{"spec.credential.bearerToken"})

	// A merge patch is validated the same way.
	_, err = client.Patch(context.Background(), name, "application/merge-patch+json",
		[]byte(`{"spec":{"endpoint":{"address":"https://"}}}`), metav1.PatchOptions{})
	requireInvalid(t, "merge patch with an address without host", err, []string{"spec.credential.x509", "spec.endpoint.address"})

	after := mustSecret(t, name)
	for _, k := range []string{"endpoint", "ca.crt", "credential-type", "tls.crt", "tls.key", "impersonation", "endpoint-type"} {
		if string(after.Data[k]) != string(before.Data[k]) {
			t.Errorf("refused updates changed the Secret's %s: %q -> %q", k, before.Data[k], after.Data[k])
		}
	}
	for _, k := range []string{"token", "proxy-url", "insecure-skip-tls-verify"} {
		if _, ok := after.Data[k]; ok {
			t.Errorf("refused updates wrote the Secret's %s", k)
		}
	}
}

// TestValidationKubectl: kubectl shows the refusal with the field path.
func TestValidationKubectl(t *testing.T) {
	requireGateway(t)
	t.Parallel()
	name := uniqueName(t, "e2e-invalid-kubectl")
	cleanupGateway(t, name)
	r := kubectl(t, env.Hub.Kubeconfig, nil, tokenGatewayYAML(name, "http://127.0.0.1:6443", nil, randomToken(t)), "apply", "-f", "-")
	if r.Err == nil || !strings.Contains(r.Stderr, `The ClusterGateway "`+name+`" is invalid`) ||
		!strings.Contains(r.Stderr, "spec.endpoint.address: Invalid value") || !strings.Contains(r.Stderr, "must be an https URL") {
		t.Errorf("kubectl apply with an http address: err %v, stderr %s", r.Err, r.Stderr)
	}
	requireNoSecret(t, name)
}

// TestValidationOtherIPv4Forms: a host that inet_aton (a forward proxy, a
// konnectivity agent, a cgo resolver) reads as 127.0.0.1, which the suite's
// gateway denies, while the endpoint policy would take it for a DNS name, is
// refused with 422 on the field, saying to write the address in
// dotted-decimal form; nothing is stored.
func TestValidationOtherIPv4Forms(t *testing.T) {
	requireGateway(t)
	t.Parallel()
	client := gatewayClient(t, env.Hub.Kubeconfig).GatewayV1alpha1().ClusterGateways()
	for _, tc := range []struct {
		host, field string
		set         func(gw *gatewayv1alpha1.ClusterGateway, host string)
	}{
		{"2130706433", "spec.endpoint.address", setAddress},
		{"127.1", "spec.endpoint.address", setAddress},
		{"0177.0.0.1", "spec.endpoint.address", func(gw *gatewayv1alpha1.ClusterGateway, host string) {
			gw.Spec.Endpoint.Type = gatewayv1alpha1.EndpointKonnectivity
			setAddress(gw, host)
		}},
		{"127.0.0.1.", "spec.endpoint.address", setAddress},
		{"0x7f000001", "spec.endpoint.proxyURL", func(gw *gatewayv1alpha1.ClusterGateway, host string) {
			gw.Spec.Endpoint.ProxyURL = "http://" + host + ":3128"
		}},
		{"017700000001", "spec.endpoint.proxyURL", func(gw *gatewayv1alpha1.ClusterGateway, host string) {
			gw.Spec.Endpoint.ProxyURL = "socks5://" + host + ":1080"
		}},
		{"0x7f.1", "spec.endpoint.proxyURL", func(gw *gatewayv1alpha1.ClusterGateway, host string) {
			gw.Spec.Endpoint.ProxyURL = "https://user:pass@" + host + ":3128"
		}},
	} {
		name := uniqueName(t, "e2e-ipv4-form")
		cleanupGateway(t, name)
		gw := tokenGateway(name, "https://"+testIP+":6443", "a-token")
		tc.set(gw, tc.host)
		_, err := client.Create(context.Background(), gw, metav1.CreateOptions{})
		what := tc.field + " host " + tc.host
		requireInvalid(t, what, err, []string{tc.field})
		if err != nil && !strings.Contains(err.Error(), "write it in dotted-decimal form, 127.0.0.1") {
			t.Errorf("%s: %v, want it to say: write it in dotted-decimal form, 127.0.0.1", what, err)
		}
		if err != nil && strings.Contains(err.Error(), ":pass@") {
			t.Errorf("%s: the error shows the proxy password: %v", what, err)
		}
		requireNoSecret(t, name)
	}
}

func setAddress(gw *gatewayv1alpha1.ClusterGateway, host string) {
	gw.Spec.Endpoint.Address = "https://" + host + ":6443"
}
