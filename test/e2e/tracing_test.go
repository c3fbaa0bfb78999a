package e2e

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	gatewayv1alpha1 "github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// Loopback addresses of this test's own kube-apiservers (other tests use
// .241 to .243 and .250 to .252).
const (
	tracingHubIP     = "127.0.0.245"
	tracingManagedIP = "127.0.0.244"
)

// otlpReceiver is an OTLP/gRPC trace receiver on loopback: the
// collector's TraceService, keeping every span it is sent.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	addr  string
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (r *otlpReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (r *otlpReceiver) all() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...)
}

// startReceiver serves a receiver on 127.0.0.1 until the test ends.
func startReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{addr: l.Addr().String()}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, r)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return r
}

// tracingConfig writes a TracingConfiguration that samples every request
// and exports to r.
func tracingConfig(t *testing.T, dir, name string, r *otlpReceiver) string {
	t.Helper()
	path := filepath.Join(dir, name+"-tracing.yaml")
	cfg := fmt.Sprintf("apiVersion: apiserver.config.k8s.io/v1\nkind: TracingConfiguration\nendpoint: %s\nsamplingRatePerMillion: 1000000\n", r.addr)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return "--tracing-config-file=" + path
}

func spanAttr(s *tracepb.Span, key string) string {
	for _, a := range s.GetAttributes() {
		if a.GetKey() == key {
			return a.GetValue().GetStringValue()
		}
	}
	return ""
}

func hexID(b []byte) string { return hex.EncodeToString(b) }

// With --tracing-config-file on the hub kube-apiserver, the gateway and a
// managed kube-apiserver (each exporting to its own OTLP receiver in this
// test), one GET through the hub and the gateway is one trace: the hub's
// span is the parent of the gateway's server span, which is the parent of
// the gateway's client span, which is the parent of the managed
// kube-apiserver's span. An exec's upgrade is traced the same way up to the
// upgrade: the gateway's upgrade span is the parent of the managed
// kube-apiserver's span of the exec. A GET through a konnectivity tunnel
// is one trace the same way, with the tunnel dial's span in it.
func TestTracingOneTraceThroughHubGatewayAndCluster(t *testing.T) {
	requireGateway(t)
	ctx := context.Background()
	dir := t.TempDir()
	hubR, gwR, managedR := startReceiver(t), startReceiver(t), startReceiver(t)

	// The hub and the managed cluster: replicas of the suite's own with a
	// tracing config (the suite's keep theirs); the gateway restarted with one.
	m := env.Managed[0]
	managed, err := env.StartAPIServerReplica(ctx, m, tracingManagedIP, tracingConfig(t, dir, "managed", managedR))
	if err != nil {
		t.Fatalf("a traced kube-apiserver of %s: %v", m.Name, err)
	}
	t.Cleanup(func() { _ = env.StopCluster(managed) })
	hub, err := env.StartAPIServerReplica(ctx, env.Hub, tracingHubIP, tracingConfig(t, dir, "hub", hubR))
	if err != nil {
		t.Fatalf("a traced hub kube-apiserver: %v", err)
	}
	t.Cleanup(func() { _ = env.StopCluster(hub) })
	restartGateway(t, append(append([]string{}, env.GatewayArgs...), tracingConfig(t, dir, "gateway", gwR)))
	t.Cleanup(func() { restartGateway(t, nil) })

	gw := directGateway(uniqueName(t, "traced"), 0)
	gw.Spec.Endpoint.Address = managed.URL
	kubeconfig := tracedGET(t, hub.URL, gw, "the gateway")

	// Every GET of the namespace gave a trace; one of them is whole once
	// the three have exported (kube-apiserver batches for up to 5s).
	eventually(t, "one trace from the hub through the gateway to the managed cluster", func() error {
		return oneTrace(gwR.all(), hubR.all(), managedR.all(), gw.Name)
	})

	// The same through a konnectivity tunnel: a gateway of the same traced
	// kube-apiserver reached through the proxy-servers (no agent names its
	// address, so the default strategy picks an agent, which dials it on
	// loopback). Its trace is whole too, and holds the tunnel dial's span.
	if env.Konnectivity == nil {
		t.Fatal("this test traces a konnectivity gateway, and the environment runs no proxy-server")
	}
	konn := directGateway(uniqueName(t, "traced-konn"), 0)
	konn.Spec.Endpoint.Type, konn.Spec.Endpoint.Address = gatewayv1alpha1.EndpointKonnectivity, managed.URL
	tracedGET(t, hub.URL, konn, "the gateway and a konnectivity tunnel")
	eventually(t, "one trace from the hub through the gateway and a tunnel to the managed cluster", func() error {
		if err := oneTrace(gwR.all(), hubR.all(), managedR.all(), konn.Name); err != nil {
			return err
		}
		for _, s := range gwR.all() {
			if s.GetName() == "cluster-gateway.dial" && spanAttr(s, "cluster_gateway.cluster") == konn.Name && spanAttr(s, "cluster_gateway.route") == "konnectivity" {
				return nil
			}
		}
		return fmt.Errorf("no dial span of %s with route konnectivity", konn.Name)
	})

	r := kubectl(t, kubeconfig, streamProtocols[0].Env, "", "exec", "demo", "--", "hostname")
	if r.Err != nil {
		t.Fatalf("exec through the traced hub and gateway: %v\nstderr: %s", r.Err, r.Stderr)
	}
	eventually(t, "the exec's upgrade span as the parent of the managed cluster's", func() error {
		ups := 0
		for _, s := range gwR.all() {
			if s.GetName() != "cluster-gateway.upgrade" || spanAttr(s, "cluster_gateway.cluster") != gw.Name {
				continue
			}
			ups++
			if spanAttr(s, "cluster_gateway.resource") != "pods/exec" {
				return fmt.Errorf("the upgrade span names resource %q, want pods/exec", spanAttr(s, "cluster_gateway.resource"))
			}
			for _, ms := range managedR.all() {
				if ms.GetKind() == tracepb.Span_SPAN_KIND_SERVER && hexID(ms.GetParentSpanId()) == hexID(s.GetSpanId()) && hexID(ms.GetTraceId()) == hexID(s.GetTraceId()) {
					return nil
				}
			}
		}
		return fmt.Errorf("%d upgrade spans of %s; none is the parent of a server span of the managed kube-apiserver", ups, gw.Name)
	})
}

// tracedGET creates gw and returns a kubeconfig of the hub admin for it
// through the traced hub at hubURL, once a GET of the default namespace
// through it works (the traced hub aggregates the gateway once it has found
// the APIService); way says what the GET goes through after the hub.
func tracedGET(t *testing.T, hubURL string, gw *gatewayv1alpha1.ClusterGateway, way string) string {
	t.Helper()
	createGateway(t, gw)
	kubeconfig := kubeconfigFile(t, "", hubURL+"/apis/gateway.clustergateway.io/v1alpha1/clustergateways/"+gw.Name+"/proxy", env.Hub.CA.CertPEM,
		&clientcmdapi.AuthInfo{ClientCertificateData: env.Hub.Admin.CertPEM, ClientKeyData: env.Hub.Admin.KeyPEM})
	eventually(t, "a GET through the traced hub and "+way, func() error {
		if r := kubectl(t, kubeconfig, nil, "", "get", "namespace", "default", "-o", "name"); r.Err != nil {
			return fmt.Errorf("%v: %s", r.Err, r.Stderr)
		}
		return nil
	})
	return kubeconfig
}

// oneTrace finds a GET of the namespace whose spans form one trace across
// the three receivers, with the parents as the test names them.
func oneTrace(gw, hub, managed []*tracepb.Span, cluster string) error {
	byID := func(spans []*tracepb.Span) map[string]*tracepb.Span {
		m := map[string]*tracepb.Span{}
		for _, s := range spans {
			m[hexID(s.GetSpanId())] = s
		}
		return m
	}
	hubByID := byID(hub)
	var why []string
	for _, server := range gw {
		if server.GetKind() != tracepb.Span_SPAN_KIND_SERVER || spanAttr(server, "cluster_gateway.cluster") != cluster || spanAttr(server, "cluster_gateway.resource") != "namespaces" {
			continue
		}
		trace := hexID(server.GetTraceId())
		parent, ok := hubByID[hexID(server.GetParentSpanId())]
		if !ok || hexID(parent.GetTraceId()) != trace {
			why = append(why, fmt.Sprintf("the gateway's server span %s has parent %s, not a span of the hub", hexID(server.GetSpanId()), hexID(server.GetParentSpanId())))
			continue
		}
		hubServer := false
		for _, s := range hub {
			hubServer = hubServer || (hexID(s.GetTraceId()) == trace && s.GetKind() == tracepb.Span_SPAN_KIND_SERVER)
		}
		if !hubServer {
			why = append(why, "no server span of the hub in trace "+trace)
			continue
		}
		for _, client := range gw {
			if client.GetKind() != tracepb.Span_SPAN_KIND_CLIENT || hexID(client.GetParentSpanId()) != hexID(server.GetSpanId()) {
				continue
			}
			for _, ms := range managed {
				if ms.GetKind() == tracepb.Span_SPAN_KIND_SERVER && hexID(ms.GetTraceId()) == trace && hexID(ms.GetParentSpanId()) == hexID(client.GetSpanId()) {
					return nil
				}
			}
			why = append(why, "no server span of the managed kube-apiserver under the gateway's client span "+hexID(client.GetSpanId()))
		}
		if len(why) == 0 {
			why = append(why, "no client span under the gateway's server span "+hexID(server.GetSpanId()))
		}
	}
	return fmt.Errorf("no whole trace (spans: hub %d, gateway %d, managed %d): %s", len(hub), len(gw), len(managed), strings.Join(why, "; "))
}
