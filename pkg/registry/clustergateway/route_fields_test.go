package clustergateway

import (
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/clustergateway/cluster-gateway/internal/testgateways"
	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// Every field that decides where a credential goes, or which credential
// is minted or read, needs what naming the credential needs: an update that
// changes any one of them, and nothing else, is refused to a writer who may
// not get the Secret (SecretRef) or use the provider (Provider), and allowed
// to one who may; for a credential stored in the gateway (write-only), the
// update must carry the material again. Each row changes one field, so a
// comparison that forgets any one of them fails its row.
func TestEveryRouteFieldNeedsTheNamingPermission(t *testing.T) {
	ca := testgateways.ValidCredential(t).CAPEM
	const token = "stored-token-0123456789abcdef"
	const proxy = "http://puser:ppass@127.0.0.1:3128"
	config := func(s string) *runtime.RawExtension { return &runtime.RawExtension{Raw: []byte(s)} }
	base := map[v1alpha1.CredentialType]func(name string) *v1alpha1.ClusterGateway{
		v1alpha1.CredentialSecretRef: func(name string) *v1alpha1.ClusterGateway {
			gw := secretRefGateway(name, "creds", "https://10.0.0.1:6443")
			gw.Spec.Credential.SecretRef.Format = v1alpha1.SecretFormatKubeconfig
			return gw
		},
		v1alpha1.CredentialProvider: func(name string) *v1alpha1.ClusterGateway {
			gw := secretRefGateway(name, "", "https://10.0.0.1:6443")
			gw.Spec.Credential = v1alpha1.Credential{Type: v1alpha1.CredentialProvider,
				Provider: &v1alpha1.ProviderReference{Name: "eks", Config: config(`{"clusterName":"prod","region":"eu-west-1"}`)}}
			return gw
		},
		v1alpha1.CredentialBearerToken: func(name string) *v1alpha1.ClusterGateway {
			gw := secretRefGateway(name, "", "https://10.0.0.1:6443")
			gw.Spec.Credential = v1alpha1.Credential{Type: v1alpha1.CredentialBearerToken, BearerToken: token}
			return gw
		},
	}
	withBase := func(mk func(string) *v1alpha1.ClusterGateway) func(string) *v1alpha1.ClusterGateway {
		return func(name string) *v1alpha1.ClusterGateway {
			gw := mk(name)
			gw.Spec.Endpoint.ServerName = "kubernetes"
			gw.Spec.Endpoint.ProxyURL = proxy
			return gw
		}
	}
	all := []v1alpha1.CredentialType{v1alpha1.CredentialSecretRef, v1alpha1.CredentialProvider, v1alpha1.CredentialBearerToken}
	sources := all[:2]
	for _, tc := range []struct {
		field  string
		kinds  []v1alpha1.CredentialType
		before func(*v1alpha1.ClusterGateway) // the stored gateway, when the base does not do
		change func(*v1alpha1.ClusterGateway)
	}{
		{"spec.endpoint.type", all, func(g *v1alpha1.ClusterGateway) { g.Spec.Endpoint.ProxyURL = "" },
			func(g *v1alpha1.ClusterGateway) { g.Spec.Endpoint.Type = v1alpha1.EndpointKonnectivity }},
		{"spec.endpoint.address", all, nil, func(g *v1alpha1.ClusterGateway) { g.Spec.Endpoint.Address = "https://10.0.0.9:6443" }},
		{"spec.endpoint.additionalAddresses", all, nil, func(g *v1alpha1.ClusterGateway) {
			g.Spec.Endpoint.AdditionalAddresses = []string{"https://10.0.0.2:6443"}
		}},
		{"spec.endpoint.additionalAddresses (one replaced)", all, func(g *v1alpha1.ClusterGateway) {
			g.Spec.Endpoint.AdditionalAddresses = []string{"https://10.0.0.2:6443", "https://10.0.0.3:6443"}
		}, func(g *v1alpha1.ClusterGateway) { g.Spec.Endpoint.AdditionalAddresses[1] = "https://10.0.0.9:6443" }},
		{"spec.endpoint.caBundle (added)", all, nil, func(g *v1alpha1.ClusterGateway) { g.Spec.Endpoint.CABundle = ca }},
		{"spec.endpoint.caBundle (removed)", all, func(g *v1alpha1.ClusterGateway) { g.Spec.Endpoint.CABundle = ca },
			func(g *v1alpha1.ClusterGateway) { g.Spec.Endpoint.CABundle = nil }},
		{"spec.endpoint.serverName", all, nil, func(g *v1alpha1.ClusterGateway) { g.Spec.Endpoint.ServerName = "evil.example" }},
		{"spec.endpoint.insecureSkipTLSVerify", all, nil, func(g *v1alpha1.ClusterGateway) { g.Spec.Endpoint.InsecureSkipTLSVerify = true }},
		{"spec.endpoint.proxyURL (host)", all, nil, func(g *v1alpha1.ClusterGateway) { g.Spec.Endpoint.ProxyURL = "http://puser:ppass@127.0.0.9:3128" }},
		{"spec.endpoint.proxyURL (removed)", all, nil, func(g *v1alpha1.ClusterGateway) { g.Spec.Endpoint.ProxyURL = "" }},
		// For a credential of its own, the proxy's user info is the writer's material.
		{"spec.endpoint.proxyURL (user info)", sources, nil, func(g *v1alpha1.ClusterGateway) {
			g.Spec.Endpoint.ProxyURL = "http://other:secret@127.0.0.1:3128"
		}},
		{"spec.impersonation.mode", all, nil, func(g *v1alpha1.ClusterGateway) { g.Spec.Impersonation.Mode = v1alpha1.ImpersonationCaller }},
		{"spec.credential.secretRef.namespace", sources[:1], nil, func(g *v1alpha1.ClusterGateway) {
			g.Spec.Credential.SecretRef.Namespace = otherSourceNamespace
		}},
		{"spec.credential.secretRef.name", sources[:1], nil, func(g *v1alpha1.ClusterGateway) { g.Spec.Credential.SecretRef.Name = "other" }},
		{"spec.credential.secretRef.format", sources[:1], nil, func(g *v1alpha1.ClusterGateway) {
			g.Spec.Credential.SecretRef.Format = v1alpha1.SecretFormatToken
		}},
		{"spec.credential.provider.name", sources[1:], nil, func(g *v1alpha1.ClusterGateway) { g.Spec.Credential.Provider.Name = "gke" }},
		{"spec.credential.provider.config (a value)", sources[1:], nil, func(g *v1alpha1.ClusterGateway) {
			g.Spec.Credential.Provider.Config = config(`{"clusterName":"prod","region":"us-east-1"}`)
		}},
		{"spec.credential.provider.config (a key added)", sources[1:], nil, func(g *v1alpha1.ClusterGateway) {
			g.Spec.Credential.Provider.Config = config(`{"clusterName":"prod","region":"eu-west-1","roleARN":"arn:aws:iam::1:role/admin"}`)
		}},
		{"spec.credential.provider.config (removed)", sources[1:], nil, func(g *v1alpha1.ClusterGateway) { g.Spec.Credential.Provider.Config = nil }},
		{"spec.credential.provider.config (added)", sources[1:], func(g *v1alpha1.ClusterGateway) { g.Spec.Credential.Provider.Config = nil },
			func(g *v1alpha1.ClusterGateway) {
				g.Spec.Credential.Provider.Config = config(`{"clusterName":"admin"}`)
			}},
		// KEP-5339's additional args and environment: what the provider runs with.
		{"spec.credential.provider.additionalArgs (added)", sources[1:], nil, func(g *v1alpha1.ClusterGateway) {
			g.Spec.Credential.Provider.AdditionalArgs = []string{"--role", "admin"}
		}},
		{"spec.credential.provider.additionalArgs (one changed)", sources[1:], func(g *v1alpha1.ClusterGateway) {
			g.Spec.Credential.Provider.AdditionalArgs = []string{"--role", "viewer"}
		}, func(g *v1alpha1.ClusterGateway) { g.Spec.Credential.Provider.AdditionalArgs[1] = "admin" }},
		{"spec.credential.provider.additionalArgs (removed)", sources[1:], func(g *v1alpha1.ClusterGateway) {
			g.Spec.Credential.Provider.AdditionalArgs = []string{"--role", "viewer"}
		}, func(g *v1alpha1.ClusterGateway) { g.Spec.Credential.Provider.AdditionalArgs = nil }},
		{"spec.credential.provider.additionalEnv (added)", sources[1:], nil, func(g *v1alpha1.ClusterGateway) {
			g.Spec.Credential.Provider.AdditionalEnv = []v1alpha1.ProviderEnvVar{{Name: "AWS_PROFILE", Value: "admin"}}
		}},
		{"spec.credential.provider.additionalEnv (a value)", sources[1:], func(g *v1alpha1.ClusterGateway) {
			g.Spec.Credential.Provider.AdditionalEnv = []v1alpha1.ProviderEnvVar{{Name: "AWS_PROFILE", Value: "viewer"}}
		}, func(g *v1alpha1.ClusterGateway) { g.Spec.Credential.Provider.AdditionalEnv[0].Value = "admin" }},
		{"spec.credential.provider.additionalEnv (removed)", sources[1:], func(g *v1alpha1.ClusterGateway) {
			g.Spec.Credential.Provider.AdditionalEnv = []v1alpha1.ProviderEnvVar{{Name: "AWS_PROFILE", Value: "viewer"}}
		}, func(g *v1alpha1.ClusterGateway) { g.Spec.Credential.Provider.AdditionalEnv = nil }},
		{"spec.credential.type (to SecretRef)", all[1:], nil, func(g *v1alpha1.ClusterGateway) {
			g.Spec.Credential = v1alpha1.Credential{Type: v1alpha1.CredentialSecretRef, SecretRef: &v1alpha1.SecretReference{Namespace: writerTestNamespace, Name: "creds"}}
		}},
		{"spec.credential.type (to Provider)", []v1alpha1.CredentialType{v1alpha1.CredentialSecretRef, v1alpha1.CredentialBearerToken}, nil, func(g *v1alpha1.ClusterGateway) {
			g.Spec.Credential = v1alpha1.Credential{Type: v1alpha1.CredentialProvider, Provider: &v1alpha1.ProviderReference{Name: "eks"}}
		}},
	} {
		for _, kind := range tc.kinds {
			t.Run(fmt.Sprintf("%s/%s", kind, tc.field), func(t *testing.T) {
				client := fake.NewClientset()
				r := restReadingSources(t, client)
				stored := withBase(base[kind])("gw")
				if tc.before != nil {
					tc.before(stored)
				}
				storeAs(t, r, client, stored)
				before := storedSpec(t, client, "gw")
				// The proxy's user name and password are the writer's to send
				// (keepMaterial); here only the credential's permission decides.
				withProxyAuth := func(g *v1alpha1.ClusterGateway) {
					tc.change(g)
					if u, err := url.Parse(g.Spec.Endpoint.ProxyURL); err == nil && g.Spec.Endpoint.ProxyURL != "" && u.User == nil {
						u.User = url.UserPassword("puser", "ppass")
						g.Spec.Endpoint.ProxyURL = u.String()
					}
				}
				// A writer who does not hold the credential nor may name it.
				_, _, err := r.Update(as("mallory"), "gw", mutated(withProxyAuth), nil, nil, false, &metav1.UpdateOptions{})
				switch {
				case kind == v1alpha1.CredentialBearerToken && strings.HasPrefix(tc.field, "spec.credential.type"):
					// Naming a source: the permission decides.
					if !apierrors.IsForbidden(err) {
						t.Fatalf("mallory names a source she may not: %v; want 403", err)
					}
				case kind == v1alpha1.CredentialBearerToken:
					if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "must carry") || strings.Contains(err.Error(), token) {
						t.Fatalf("mallory changed %s without the stored token: %v; want 422 asking for it (and not echoing it)", tc.field, err)
					}
				default:
					if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "needs permission to") {
						t.Fatalf("mallory changed %s without the permission to name the credential: %v; want 403", tc.field, err)
					}
				}
				if after := storedSpec(t, client, "gw"); !reflect.DeepEqual(after, before) {
					t.Fatalf("the refused update was written: %+v", after)
				}

				// A writer with the permission, or with the material, may.
				writer, change := "alice", withProxyAuth
				if kind == v1alpha1.CredentialBearerToken && !strings.HasPrefix(tc.field, "spec.credential.type") {
					writer, change = "mallory", func(g *v1alpha1.ClusterGateway) {
						withProxyAuth(g)
						g.Spec.Credential.BearerToken = token
					}
				}
				if _, _, err := r.Update(as(writer), "gw", mutated(change), nil, nil, false, &metav1.UpdateOptions{}); err != nil {
					t.Fatalf("%s changed %s: %v; want it allowed", writer, tc.field, err)
				}
				if after := storedSpec(t, client, "gw"); reflect.DeepEqual(after, before) {
					t.Fatalf("the allowed update of %s was not written", tc.field)
				}
			})
		}
	}
}

// A provider is given its config's bytes: a config is unchanged only when
// every provider would read the same. A patch or an apply re-encodes the
// stored config, which is no change; a number written otherwise, an integer
// past float64's precision, or a key written twice (providers differ in
// which of the two they read) is one.
func TestProviderConfigComparedAsProvidersReadIt(t *testing.T) {
	raw := func(s string) *runtime.RawExtension { return &runtime.RawExtension{Raw: []byte(s)} }
	for _, tc := range []struct {
		a, b *runtime.RawExtension
		same bool
	}{
		{nil, nil, true},
		{nil, raw(`null`), true},
		{raw(`{"a":1}`), nil, false},
		{raw(`{"a":1,"b":"x"}`), raw(` { "b" : "x", "a" : 1 } `), true},
		{raw(`{"a":{"c":[1,2],"b":true}}`), raw(`{"a":{"b":true,"c":[1,2]}}`), true},
		{raw(`{"a":[1,2]}`), raw(`{"a":[2,1]}`), false},
		{raw(`{"a":1}`), raw(`{"a":1.0}`), false},
		{raw(`{"a":12345678901234567890}`), raw(`{"a":12345678901234567891}`), false},
		{raw(`{"a":"x"}`), raw(`{"a":"y","a":"x"}`), false},
		{raw(`{"a":"y","a":"x"}`), raw(`{"a":"x"}`), false},
		{raw(`{"a":{"b":1,"b":1}}`), raw(`{"a":{"b":1}}`), false},
		{raw(`{"a":"<&>"}`), raw(`{"a":"\u003c\u0026\u003e"}`), true},
		{raw(`{"a":1}`), raw(`{"a":1`), false},
	} {
		if got := sameProviderConfig(tc.a, tc.b); got != tc.same {
			t.Errorf("sameProviderConfig(%s, %s) = %v, want %v", rawConfig(tc.a), rawConfig(tc.b), got, tc.same)
		}
	}
}

// What moves no credential needs no permission: labels, annotations, and
// the provider's config as a patch re-encodes it (keys sorted). The
// duplicate key whose last value is the stored one is a change.
func TestChangesThatMoveNoCredentialNeedNoPermission(t *testing.T) {
	client := fake.NewClientset()
	r := restReadingSources(t, client)
	gw := secretRefGateway("gw", "", "https://10.0.0.1:6443")
	gw.Spec.Credential = v1alpha1.Credential{Type: v1alpha1.CredentialProvider,
		Provider: &v1alpha1.ProviderReference{Name: "eks", Config: &runtime.RawExtension{Raw: []byte(`{"region":"eu-west-1", "clusterName":"prod"}`)}}}
	storeAs(t, r, client, gw)
	for _, p := range []string{
		`{"metadata":{"labels":{"team":"blue"}}}`,
		`{"metadata":{"annotations":{"note":"hi"}}}`,
		`{"spec":{"credential":{"provider":{"config":{"clusterName":"prod","region":"eu-west-1"}}}}}`,
	} {
		if _, _, err := r.Update(as("mallory"), "gw", patched{p}, nil, nil, false, &metav1.UpdateOptions{}); err != nil {
			t.Errorf("mallory's %s: %v; want it allowed", p, err)
		}
	}
	dup := mutated(func(g *v1alpha1.ClusterGateway) {
		g.Spec.Credential.Provider.Config = &runtime.RawExtension{Raw: []byte(`{"clusterName":"admin","clusterName":"prod","region":"eu-west-1"}`)}
	})
	if _, _, err := r.Update(as("mallory"), "gw", dup, nil, nil, false, &metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("mallory writes a config with a key twice: %v; want 403", err)
	}
}
