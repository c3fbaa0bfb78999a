package clustergateway

import (
	"strings"
	"testing"

	"github.com/clustergateway/cluster-gateway/internal/testgateways"
	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// An update that omits the write-only material keeps it only while nothing
// that decides where it is sent, how the server is verified, or whom it acts
// for changes: a writer who does not hold the credential can neither move it
// nor widen its use.
func TestKeepMaterial(t *testing.T) {
	c := testgateways.ValidCredential(t)
	stored := func() *v1alpha1.ClusterGateway {
		gw := testgateways.X509Gateway(c)
		gw.Spec.Endpoint.ProxyURL = "http://proxyuser:proxypass@127.0.0.1:3128"
		return gw
	}
	omit := func(mutate func(*v1alpha1.ClusterGateway)) *v1alpha1.ClusterGateway {
		gw := redact(stored())
		if mutate != nil {
			mutate(gw)
		}
		return gw
	}
	for _, tc := range []struct {
		name    string
		update  *v1alpha1.ClusterGateway
		refused []string // field paths in the errors; none: material kept
	}{
		{name: "labels only", update: omit(func(g *v1alpha1.ClusterGateway) { g.Labels = map[string]string{"x": "y"} })},
		{name: "address", update: omit(func(g *v1alpha1.ClusterGateway) { g.Spec.Endpoint.Address = "https://attacker.example:443" }), refused: []string{"spec.credential.x509", "spec.endpoint.proxyURL"}},
		{name: "additional address", update: omit(func(g *v1alpha1.ClusterGateway) {
			g.Spec.Endpoint.AdditionalAddresses = []string{"https://attacker.example:443"}
		}), refused: []string{"spec.credential.x509", "spec.endpoint.proxyURL", "spec.endpoint.additionalAddresses"}},
		{name: "caBundle", update: omit(func(g *v1alpha1.ClusterGateway) { g.Spec.Endpoint.CABundle = nil }), refused: []string{"spec.credential.x509"}},
		{name: "serverName", update: omit(func(g *v1alpha1.ClusterGateway) { g.Spec.Endpoint.ServerName = "evil" }), refused: []string{"spec.credential.x509"}},
		{name: "insecure", update: omit(func(g *v1alpha1.ClusterGateway) {
			g.Spec.Endpoint.CABundle, g.Spec.Endpoint.InsecureSkipTLSVerify = nil, true
		}), refused: []string{"spec.credential.x509"}},
		{name: "proxy host", update: omit(func(g *v1alpha1.ClusterGateway) { g.Spec.Endpoint.ProxyURL = "http://127.0.0.9:3128" }), refused: []string{"spec.credential.x509", "spec.endpoint.proxyURL"}},
		{name: "endpoint type", update: omit(func(g *v1alpha1.ClusterGateway) { g.Spec.Endpoint.Type = v1alpha1.EndpointKonnectivity }), refused: []string{"spec.credential.x509"}},
		{name: "impersonation", update: omit(func(g *v1alpha1.ClusterGateway) { g.Spec.Impersonation.Mode = v1alpha1.ImpersonationNone }), refused: []string{"spec.credential.x509"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gw := tc.update.DeepCopy()
			errs := keepMaterial(gw, stored())
			if len(tc.refused) == 0 {
				if len(errs) > 0 {
					t.Fatalf("refused: %v", errs)
				}
				if gw.Spec.Credential.X509 == nil || gw.Spec.Endpoint.ProxyURL != stored().Spec.Endpoint.ProxyURL {
					t.Fatalf("material not kept: x509 %v proxy %q", gw.Spec.Credential.X509 != nil, gw.Spec.Endpoint.ProxyURL)
				}
				return
			}
			got := errs.ToAggregate()
			if got == nil {
				t.Fatalf("kept the material although %s changed", tc.name)
			}
			for _, f := range tc.refused {
				if !strings.Contains(got.Error(), f) {
					t.Errorf("error %q does not name %s", got, f)
				}
			}
			if gw.Spec.Credential.X509 != nil || v1alpha1.ProxyUserInfo(gw.Spec.Endpoint.ProxyURL) != nil {
				t.Errorf("material was carried into the refused update")
			}
		})
	}

	// Sending the material again is always allowed: the writer holds it.
	gw := redact(stored())
	gw.Spec.Endpoint.Address = "https://elsewhere.example:443"
	gw.Spec.Credential.X509 = stored().Spec.Credential.X509
	gw.Spec.Endpoint.ProxyURL = "http://u:p@127.0.0.1:3128"
	if errs := keepMaterial(gw, stored()); len(errs) > 0 {
		t.Fatalf("an update that carries its material was refused: %v", errs)
	}

	// A token gateway switched from Caller to None would act as the stored token.
	tok := testgateways.TokenGateway("stored-token")
	tok.Spec.Impersonation.Mode = v1alpha1.ImpersonationCaller
	upd := redact(tok)
	upd.Spec.Impersonation.Mode = v1alpha1.ImpersonationNone
	if errs := keepMaterial(upd, tok); len(errs) == 0 || upd.Spec.Credential.BearerToken != "" {
		t.Fatalf("Caller -> None kept the token (errors %v)", errs)
	}
}
