package proxy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
	"github.com/clustergateway/cluster-gateway/pkg/credentials"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
	"github.com/clustergateway/cluster-gateway/pkg/pool"
	"github.com/clustergateway/cluster-gateway/pkg/tracing"
)

// tracedProxy is the fixture's request path (store, pool, proxy) with a
// tracer that records every span, for the gateways of secrets and, when
// providers is set, of its providers.
func tracedProxy(t *testing.T, rec *tracetest.SpanRecorder, providers string, secrets ...*corev1.Secret) *Proxy {
	t.Helper()
	tr := tracing.New(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	store := gateways.NewStore(fake.NewClientset(secretObjects(secrets)...), fixtureNamespace)
	var provs *credentials.Providers
	if providers != "" {
		provs = startProviders(t, providers)
		provs.Trace(tr)
	}
	runGatewayStore(t, store)
	o := pool.DefaultConfig()
	o.Capacity, o.DialTimeout, o.Tracer = 8, 5*time.Second, tr
	pl, err := pool.New(*o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pl.Close)
	px, err := newWiredProviders(t, store, provs, Config{Pool: pl, Authorizer: authorizerfactory.NewAlwaysAllowAuthorizer(), Tracer: tr})
	if err != nil {
		t.Fatal(err)
	}
	return px
}

func secretObjects(secrets []*corev1.Secret) []runtime.Object {
	out := make([]runtime.Object, len(secrets))
	for i, s := range secrets {
		out[i] = s
	}
	return out
}

// spansNamed are the ended spans called name whose cluster attribute is cluster.
func spansNamed(rec *tracetest.SpanRecorder, name, cluster string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name && attr(s, string(tracing.Cluster)) == cluster {
			out = append(out, s)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, a := range s.Attributes() {
		if string(a.Key) == key {
			return a.Value.Emit()
		}
	}
	return ""
}

// clientSpanOf is the client span (the pool's round trip) whose context the
// cluster got in traceparent.
func clientSpanOf(t *testing.T, rec *tracetest.SpanRecorder, traceparent string) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range rec.Ended() {
		sc := s.SpanContext()
		if s.SpanKind() == trace.SpanKindClient && traceparent == fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID()) {
			return s
		}
	}
	t.Fatalf("no client span of the gateway is the parent the cluster was given (traceparent %q)", traceparent)
	return nil
}

// With tracing on, a proxied request to a cluster of each credential type
// (a token, a client certificate, a provider's token and certificate) has
// the gateway's spans under the server span it arrived in: the fairness
// wait, the pool lease, the dial (route direct) and the round trip's client
// span, whose context the cluster gets in traceparent; the provider's run
// is a span too. They name the cluster, the inner verb and resource, and
// no attribute of any span holds a credential (token, certificate, key).
func TestTracingSpansOfAProxiedRequest(t *testing.T) {
	up := newCaptureAsking(t, 0)
	ca := upstreamCA(up.srv)
	client := testpki.MustCA(t, "client-ca").MustIssue(t, testpki.Spec{CommonName: "gw-client", Client: true})
	provClient := testpki.MustCA(t, "provider-ca").MustIssue(t, testpki.Spec{CommonName: "prov-client", Client: true})
	const token, provToken = "tok-SECRET-abc123", "prov-SECRET-xyz789"

	dir := t.TempDir()
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	providers := write("providers.yaml", []byte(fmt.Sprintf(`apiVersion: gateway.clustergateway.io/v1alpha1
kind: CredentialProviderConfig
providers:
- name: prov
  exec:
    apiVersion: client.authentication.k8s.io/v1
    command: %s
    env:
    - {name: PROVIDER_CERT_FILE, value: %s}
    - {name: PROVIDER_KEY_FILE, value: %s}
    - {name: PROVIDER_TOKEN_FILE, value: %s}
`, buildTestProvider(t), write("p.crt", provClient.CertPEM), write("p.key", provClient.KeyPEM), write("p.token", []byte(provToken)))))
	x509 := tokenSecret("x509", up.srv.URL, ca, "", "None")
	x509.Data[gateways.KeyCredentialType] = []byte("X509Certificate")
	x509.Data[gateways.KeyCertificate], x509.Data[gateways.KeyPrivateKey] = client.CertPEM, client.KeyPEM
	prov := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "prov", Namespace: fixtureNamespace, ResourceVersion: "1", UID: types.UID("uid-prov"),
			Labels: map[string]string{gateways.LabelGateway: "true"}},
		Data: map[string][]byte{
			gateways.KeyEndpoint: []byte(up.srv.URL), gateways.KeyCABundle: ca,
			gateways.KeyCredentialType: []byte("Provider"), gateways.KeyProvider: []byte("prov"),
		},
	}
	rec := tracetest.NewSpanRecorder()
	px := tracedProxy(t, rec, providers, tokenSecret("tok", up.srv.URL, ca, token, "Caller"), x509, prov)
	hub := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("hub")

	for _, name := range []string{"tok", "x509", "prov"} {
		t.Run(name, func(t *testing.T) {
			// The server span the request arrived in (the generic server's
			// tracing filter makes it from the hub's traceparent).
			ctx, server := hub.Start(context.Background(), "server:"+name, trace.WithSpanKind(trace.SpanKindServer))
			req := httptest.NewRequest(http.MethodGet, "/x", nil).WithContext(ctx)
			n := len(up.requests())
			w := serveAs(px, name, "/api/v1/namespaces/default/pods/p1", alice, req)
			server.End()
			if w.Code != http.StatusOK || len(up.requests()) != n+1 {
				t.Fatalf("status %d (%s), %d requests at the cluster; want 200 and 1", w.Code, w.Body, len(up.requests())-n)
			}
			got := up.last(t).Header.Get("traceparent")
			cs := clientSpanOf(t, rec, got)
			if cs.Parent().SpanID() != server.SpanContext().SpanID() {
				t.Errorf("the client span's parent is %s, want the server span %s", cs.Parent().SpanID(), server.SpanContext().SpanID())
			}
			for _, want := range []string{"cluster-gateway.fairness.wait", "cluster-gateway.pool.lease"} {
				ss := spansNamed(rec, want, name)
				if len(ss) != 1 {
					t.Fatalf("%d spans %s of cluster %s, want 1", len(ss), want, name)
				}
				s := ss[0]
				if s.Parent().SpanID() != server.SpanContext().SpanID() || attr(s, string(tracing.Verb)) != "get" || attr(s, string(tracing.Resource)) != "pods" {
					t.Errorf("span %s: parent %s, verb %q, resource %q; want the server span, get, pods", want, s.Parent().SpanID(), attr(s, string(tracing.Verb)), attr(s, string(tracing.Resource)))
				}
			}
			var ro sdktrace.ReadOnlySpan
			for _, s := range rec.Ended() {
				if s.SpanContext().SpanID() == server.SpanContext().SpanID() {
					ro = s
				}
			}
			if ro == nil || attr(ro, string(tracing.Cluster)) != name || attr(ro, string(tracing.Verb)) != "get" || attr(ro, string(tracing.Resource)) != "pods" {
				t.Errorf("the server span does not name cluster %s, verb get and resource pods", name)
			}
			dials := spansNamed(rec, "cluster-gateway.dial", name)
			if len(dials) == 0 || attr(dials[0], string(tracing.Route)) != tracing.RouteDirect || dials[0].SpanContext().TraceID() != server.SpanContext().TraceID() {
				t.Errorf("no dial span of route direct in the request's trace for %s (%d dial spans)", name, len(dials))
			}
		})
	}
	if runs := spansNamed(rec, "cluster-gateway.credential-provider.run", "prov"); len(runs) == 0 || attr(runs[0], string(tracing.Provider)) != "prov" || attr(runs[0], string(tracing.Outcome)) != "ok" {
		t.Errorf("no span of the provider's run with provider prov and outcome ok (%d)", len(runs))
	}

	// No attribute value holds a credential: the tokens, any line of a
	// certificate or key, an Authorization header.
	secrets := []string{token, provToken, "Bearer", "PRIVATE KEY", "CERTIFICATE"}
	for _, pem := range [][]byte{client.CertPEM, client.KeyPEM, provClient.CertPEM, provClient.KeyPEM} {
		for _, line := range strings.Split(string(pem), "\n") {
			if len(line) >= 16 && !strings.HasPrefix(line, "-----") {
				secrets = append(secrets, line)
			}
		}
	}
	if len(rec.Ended()) < 12 {
		t.Fatalf("only %d spans ended", len(rec.Ended()))
	}
	for _, s := range rec.Ended() {
		values := []string{s.Name(), s.Status().Description}
		for _, a := range s.Attributes() {
			values = append(values, a.Value.Emit())
		}
		for _, e := range s.Events() {
			for _, a := range e.Attributes {
				values = append(values, a.Value.Emit())
			}
		}
		for _, v := range values {
			for _, sec := range secrets {
				if strings.Contains(v, sec) {
					t.Errorf("span %s holds a credential (%.20q...) in %q", s.Name(), sec, v)
				}
			}
		}
	}
}

// An exec's request to the cluster carries the context of the gateway's
// upgrade span in traceparent, and that span ends once the upgrade is set
// up (the stream after it is not traced).
func TestTracingUpgradeUpToTheUpgrade(t *testing.T) {
	up := newCapture(t)
	rec := tracetest.NewSpanRecorder()
	px := tracedProxy(t, rec, "", tokenSecret("c", up.srv.URL, upstreamCA(up.srv), "gw-token", "None"))
	srv := proxyServer(t, px, alice, false)
	status := rawUpgrade(t, srv, "/c/proxy/api/v1/namespaces/default/pods/p/exec?command=id", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}})
	if !strings.HasPrefix(status, "HTTP/1.1 101") {
		t.Fatalf("upgrade answered %q", status)
	}
	got := up.last(t).Header.Get("traceparent")
	s := clientSpanOf(t, rec, got)
	if s.Name() != "cluster-gateway.upgrade" || attr(s, string(tracing.Cluster)) != "c" || attr(s, string(tracing.Resource)) != "pods/exec" {
		t.Errorf("the cluster's parent span is %s (cluster %q, resource %q), want cluster-gateway.upgrade of c, pods/exec", s.Name(), attr(s, string(tracing.Cluster)), attr(s, string(tracing.Resource)))
	}
}

// The prober's probe is a span of its own, the parent of its round trips'.
func TestTracingProbe(t *testing.T) {
	up := newCapture(t)
	rec := tracetest.NewSpanRecorder()
	px := tracedProxy(t, rec, "", tokenSecret("c", up.srv.URL, upstreamCA(up.srv), "gw-token", "None"))
	if out := px.ProbeCluster(context.Background(), "c"); out.Reason != "Reachable" {
		t.Fatalf("probe: %+v", out)
	}
	probes := spansNamed(rec, "cluster-gateway.probe", "c")
	if len(probes) != 1 || attr(probes[0], string(tracing.Outcome)) != "Reachable" {
		t.Fatalf("%d probe spans of c (want 1, outcome Reachable)", len(probes))
	}
	cs := clientSpanOf(t, rec, up.last(t).Header.Get("traceparent"))
	if cs.Parent().SpanID() != probes[0].SpanContext().SpanID() {
		t.Errorf("the probe's round trip is not a child of the probe span")
	}
}
