package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
)

// The audit event of a proxied request carries the cluster, the inner
// request and the identity it was sent with; never the credential. A
// request refused before the wire carries what it asked for, and no
// identity.
func TestAuditAnnotations(t *testing.T) {
	const token, callerToken = "none-secret-token", "caller-secret-token"
	up := newCapture(t)
	px := newFixtureProxy(t,
		tokenSecret("none", up.srv.URL, upstreamCA(up.srv), token, "None"),
		tokenSecret("caller", up.srv.URL, upstreamCA(up.srv), callerToken, "Caller"))

	cases := []struct {
		name, gateway, method, target, subpath string
		upgrade                                bool
		sent                                   bool
		want                                   map[string]string
	}{
		{
			name: "get", gateway: "none", method: http.MethodGet, subpath: "/api/v1/namespaces/default/configmaps/cm1", sent: true,
			want: map[string]string{
				AuditCluster: "none", AuditInnerVerb: "get", AuditInnerVersion: "v1", AuditInnerResource: "configmaps",
				AuditInnerNamespace: "default", AuditInnerName: "cm1",
				AuditImpersonation: "None", AuditIdentity: "bearer-token", AuditAuthenticatedAs: "bearer-token",
			},
		},
		{
			name: "delete as the caller", gateway: "caller", method: http.MethodDelete, subpath: "/apis/apps/v1/namespaces/prod/deployments/web", sent: true,
			want: map[string]string{
				AuditCluster: "caller", AuditInnerVerb: "delete", AuditInnerGroup: "apps", AuditInnerVersion: "v1", AuditInnerResource: "deployments",
				AuditInnerNamespace: "prod", AuditInnerName: "web",
				AuditImpersonation: "Caller", AuditIdentity: "alice", AuditAuthenticatedAs: "bearer-token",
			},
		},
		{
			name: "list", gateway: "none", method: http.MethodGet, subpath: "/api/v1/pods", sent: true,
			want: map[string]string{
				AuditCluster: "none", AuditInnerVerb: "list", AuditInnerVersion: "v1", AuditInnerResource: "pods",
				AuditImpersonation: "None", AuditIdentity: "bearer-token", AuditAuthenticatedAs: "bearer-token",
			},
		},
		{
			name: "exec over SPDY", gateway: "none", method: http.MethodPost, subpath: "/api/v1/namespaces/default/pods/demo/exec", target: "/x?command=ls", upgrade: true, sent: true,
			want: map[string]string{
				AuditCluster: "none", AuditInnerVerb: "create", AuditInnerVersion: "v1", AuditInnerResource: "pods", AuditInnerSubres: "exec",
				AuditInnerNamespace: "default", AuditInnerName: "demo",
				AuditImpersonation: "None", AuditIdentity: "bearer-token", AuditAuthenticatedAs: "bearer-token",
			},
		},
		{
			name: "non-resource", gateway: "caller", method: http.MethodGet, subpath: "/version", sent: true,
			want: map[string]string{
				AuditCluster: "caller", AuditInnerVerb: "get", AuditInnerPath: "/version",
				AuditImpersonation: "Caller", AuditIdentity: "alice", AuditAuthenticatedAs: "bearer-token",
			},
		},
		{
			name: "refused path", gateway: "none", method: http.MethodGet, subpath: "/api/v1/namespaces/default/../kube-system/secrets",
			want: map[string]string{AuditCluster: "none", AuditInnerPath: "/api/v1/namespaces/default/../kube-system/secrets"},
		},
		{
			name: "unknown gateway", gateway: "nope", method: http.MethodGet, subpath: "/api/v1/namespaces",
			want: map[string]string{
				AuditCluster: "nope", AuditInnerVerb: "list", AuditInnerVersion: "v1", AuditInnerResource: "namespaces",
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			target := c.target
			if target == "" {
				target = "/x"
			}
			ctx := auditedContext(t, auditinternal.LevelMetadata)
			req := httptest.NewRequest(c.method, target, nil).WithContext(ctx)
			if c.upgrade {
				req.Header.Set("Connection", "Upgrade")
				req.Header.Set("Upgrade", "SPDY/3.1")
			}
			before := len(up.requests())
			serveAs(px, c.gateway, c.subpath, alice, req)
			if sent := len(up.requests()) > before; sent != c.sent {
				t.Fatalf("reached the cluster: %v, want %v", sent, c.sent)
			}
			got := audit.AuditContextFrom(ctx).GetEventAnnotations()
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("audit annotations\n got %v\nwant %v", got, c.want)
			}
			for k, v := range got {
				if !strings.HasPrefix(k, AuditPrefix) || strings.Contains(v, "secret-token") {
					t.Errorf("annotation %s=%q: not under %s, or carries the token", k, v, AuditPrefix)
				}
			}
		})
	}
}

// An X.509 credential is named by its certificate's subject, as
// status.credential.subject shows it; without audit nothing is recorded.
func TestAuditIdentityX509(t *testing.T) {
	ca := testpki.MustCA(t, "audit-ca")
	client := ca.MustIssue(t, testpki.Spec{CommonName: "gateway", Organization: []string{"system:masters"}, Client: true})
	gw := gateways.Parse(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: fixtureNamespace, ResourceVersion: "1", Labels: map[string]string{gateways.LabelGateway: "true"}},
		Data: map[string][]byte{
			gateways.KeyEndpoint: []byte("https://127.0.0.1:1"), gateways.KeyCABundle: ca.CertPEM,
			gateways.KeyCredentialType: []byte("X509Certificate"), gateways.KeyCertificate: client.CertPEM, gateways.KeyPrivateKey: client.KeyPEM,
		},
	})
	if !gw.Ready || gw.Object.Status.Credential == nil {
		t.Fatalf("fixture gateway not usable: %s", gw.Problem)
	}
	ctx := auditedContext(t, auditinternal.LevelMetadata)
	auditIdentity(ctx, gw, alice)
	got := audit.AuditContextFrom(ctx).GetEventAnnotations()
	want := map[string]string{
		AuditImpersonation:   "None",
		AuditIdentity:        "x509:CN=gateway,O=system:masters",
		AuditAuthenticatedAs: "x509:CN=gateway,O=system:masters",
	}
	if !reflect.DeepEqual(got, want) || got[AuditIdentity] != "x509:"+gw.Object.Status.Credential.Subject {
		t.Errorf("audit annotations %v, want %v (subject %q)", got, want, gw.Object.Status.Credential.Subject)
	}
	for _, v := range got {
		if strings.Contains(v, "PRIVATE KEY") || strings.Contains(v, "CERTIFICATE") {
			t.Errorf("an annotation carries material: %q", v)
		}
	}
	// No audit context, no policy evaluated (no audit flags), or level None:
	// nothing is recorded.
	for what, ctx := range map[string]context.Context{
		"no audit context": context.Background(),
		"no policy":        audit.WithAuditContext(context.Background()),
		"level None":       auditedContext(t, auditinternal.LevelNone),
	} {
		auditIdentity(ctx, gw, alice)
		auditInner(ctx, "x", "/api", nil)
		if ac := audit.AuditContextFrom(ctx); ac != nil && len(ac.GetEventAnnotations()) > 0 {
			t.Errorf("%s: annotations %v", what, ac.GetEventAnnotations())
		}
	}
}

// auditedContext is a request context whose audit policy was evaluated to level.
func auditedContext(t *testing.T, level auditinternal.Level) context.Context {
	t.Helper()
	ctx := audit.WithAuditContext(context.Background())
	if err := audit.AuditContextFrom(ctx).Init(audit.RequestAuditConfig{Level: level}, nil); err != nil {
		t.Fatal(err)
	}
	return ctx
}
