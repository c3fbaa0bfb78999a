package clusters

// Kubeconfigs read from credential Secrets are untrusted input: moved here
// from pkg/gateways with the resolution that reads them.

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/clustergateway/cluster-gateway/internal/testgateways"
	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// A kubeconfig whose user impersonates is refused: the gateway does not
// apply it, and ignoring it would act as the kubeconfig's own, more
// powerful identity.
func TestKubeconfigImpersonationRefused(t *testing.T) {
	cases := map[string]string{
		"as":            "    as: limited-user\n",
		"as-uid":        "    as-uid: \"1234\"\n",
		"as-groups":     "    as-groups: [limited]\n",
		"as-user-extra": "    as-user-extra: {scopes: [view]}\n",
	}
	var secrets []*corev1.Secret
	refs := map[string]string{"plain": "plain-kubeconfig"}
	secrets = append(secrets, testgateways.CAPISecret("plain-kubeconfig", "1", testgateways.KubeconfigWith("")))
	for field, line := range cases {
		secrets = append(secrets, testgateways.CAPISecret(field+"-kubeconfig", "1", testgateways.KubeconfigWith(line)))
		refs[field] = field + "-kubeconfig"
	}
	store, owner, _ := sourceStore(t, secrets, refs)
	startStore(t, store, owner)
	if g, err := store.Get("plain"); err != nil || !g.Ready {
		t.Fatalf("the same kubeconfig without impersonation: %+v, %v; want Ready", g, err)
	}
	for field := range cases {
		g, err := store.Get(field)
		if err != nil {
			t.Fatal(err)
		}
		if g.Ready || readyReason(g) != v1alpha1.ReasonSourceMalformed || !strings.Contains(g.Problem, "impersonates (as, as-uid, as-groups or as-user-extra)") ||
			!strings.Contains(g.Problem, "spec.impersonation.mode Caller") {
			t.Errorf("a kubeconfig with %s: Ready %v, reason %s, problem %q; want SourceMalformed naming the impersonation and what to do", field, g.Ready, readyReason(g), g.Problem)
		}
	}
}

// The kubeconfig fields the gateway ignores change neither whom the
// credential acts for nor where it goes; each is ignored on purpose
// (docs/security.md), and a kubeconfig with all of them is usable.
func TestKubeconfigIgnoredFields(t *testing.T) {
	raw := []byte(`apiVersion: v1
kind: Config
preferences: {colors: true}
extensions: [{name: top, extension: {a: b}}]
clusters:
- name: c
  cluster:
    server: "https://10.0.0.7:6443"
    disable-compression: true
    extensions: [{name: client.authentication.k8s.io/exec, extension: {region: eu}}]
contexts:
- name: x
  context: {cluster: c, user: u, namespace: team-a, extensions: [{name: ctx, extension: {}}]}
current-context: x
users:
- name: u
  user:
    token: kubeconfig-token
    extensions: [{name: user, extension: {}}]
`)
	store, owner, _ := sourceStore(t, []*corev1.Secret{testgateways.CAPISecret("k-kubeconfig", "1", raw)}, map[string]string{"k": "k-kubeconfig"})
	startStore(t, store, owner)
	g, err := store.Get("k")
	if err != nil || !g.Ready || g.Conn.Token != "kubeconfig-token" || g.Conn.Endpoint.Address != "https://10.0.0.7:6443" {
		t.Fatalf("a kubeconfig with only ignored extras: %+v, %v; want Ready with its server and token", g, err)
	}
}

// No problem a kubeconfig has quotes it: a credential is in it. client-go's
// own decoding quoted every user of a kubeconfig that names one twice,
// tokens and keys included, in its error.
func TestKubeconfigProblemsNeverQuoteIt(t *testing.T) {
	const tok1, tok2 = "first-s3cr3t-token", "second-s3cr3t-token"
	cases := map[string]struct{ raw, want string }{
		"user twice": {`apiVersion: v1
kind: Config
users: [{name: u, user: {token: ` + tok1 + `}}, {name: u, user: {token: ` + tok2 + `, client-key-data: c2VjcmV0LWtleQ==}}]
`, `names user "u" twice`},
		"cluster twice": {"clusters: [{name: c, cluster: {server: " + tok1 + "}}, {name: c, cluster: {server: " + tok2 + "}}]\n", `names cluster "c" twice`},
		"context twice": {"contexts: [{name: x, context: {user: " + tok1 + "}}, {name: x, context: {user: " + tok2 + "}}]\n", `names context "x" twice`},
		"key twice":     {"users: [{name: u, user: {token: " + tok1 + ", token: " + tok2 + "}}]\n", "appears twice"},
		"wrong type":    {"users: [{name: u, user: {token: [" + tok1 + "]}}]\n", "is not a kubeconfig"},
		"not base64":    {"users: [{name: u, user: {client-key-data: " + tok1 + "}}]\n", "is not a kubeconfig"},
		"tag":           {"users: [{name: u, user: {token: !!int " + tok1 + "}}]\n", "not the !!int"},
		"not yaml":      {"users: [{name: u, user: {token: \"" + tok1 + "}}]\n", "is not YAML"},
		"other kind":    {"apiVersion: v1\nkind: Secret\nstringData: {token: " + tok1 + "}\n", "is not a kubeconfig (apiVersion v1, kind Config)"},
	}
	var secrets []*corev1.Secret
	refs := map[string]string{}
	i := 0
	for name, tc := range cases {
		secrets = append(secrets, testgateways.CAPISecret(fmt.Sprintf("k%d", i), "1", []byte(tc.raw)))
		refs[strings.ReplaceAll(name, " ", "-")] = fmt.Sprintf("k%d", i)
		i++
	}
	store, owner, _ := sourceStore(t, secrets, refs)
	startStore(t, store, owner)
	for name, tc := range cases {
		g, err := store.Get(strings.ReplaceAll(name, " ", "-"))
		if err != nil {
			t.Fatal(err)
		}
		if g.Ready || readyReason(g) != v1alpha1.ReasonSourceMalformed || !strings.Contains(g.Problem, tc.want) {
			t.Errorf("%s: Ready %v, reason %s, problem %q; want SourceMalformed saying %q", name, g.Ready, readyReason(g), g.Problem, tc.want)
		}
		if strings.Contains(g.Problem, "s3cr3t") || strings.Contains(g.Problem, "c2VjcmV0") || strings.Contains(g.Problem, "[115 101") {
			t.Errorf("%s: the problem quotes the kubeconfig: %q", name, g.Problem)
		}
	}
}
