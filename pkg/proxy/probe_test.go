package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/health"
	"github.com/clustergateway/cluster-gateway/pkg/pool"
)

// The prober's probe tells a refused connection, an untrusted certificate,
// an HTTP error and a cluster that does not answer apart, against real
// servers on loopback, and reads the version of one that answers. Only the
// silent cluster's probe reaches its deadline, and only once its request has
// reached the cluster: no outcome depends on how fast the machine is.
func TestProbeClusterClassifies(t *testing.T) {
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	var agents sync.Map
	ok := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		agents.Store(r.UserAgent(), true)
		if r.URL.Path == "/version" {
			_, _ = w.Write([]byte(`{"gitVersion":"v1.37.2"}`))
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	failing := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "[-]etcd failed", http.StatusInternalServerError)
	}))
	asked := make(chan struct{}, 1)
	silent := newTLSUpstream(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		select {
		case asked <- struct{}{}:
		default:
		}
		<-block
	}))
	closed := closedAddress(t)

	px := newFixtureProxy(t,
		tokenSecret("ok", ok.URL, upstreamCA(ok), "t", "Caller"),
		tokenSecret("failing", failing.URL, upstreamCA(failing), "t", "None"),
		tokenSecret("silent", silent.URL, upstreamCA(silent), "t", "None"),
		tokenSecret("untrusted", ok.URL, upstreamCA(failing), "t", "None"),
		tokenSecret("refused", closed, upstreamCA(ok), "t", "None"),
		tokenSecret("unusable", "http://127.0.0.1:1", nil, "t", "None"))
	for name, want := range map[string]string{
		"ok": v1alpha1.ReasonReachable, "failing": v1alpha1.ReasonHTTPError, "silent": v1alpha1.ReasonNoAnswer,
		"untrusted": v1alpha1.ReasonTLSFailed, "refused": v1alpha1.ReasonDialFailed, "unusable": v1alpha1.ReasonGatewayNotReady,
	} {
		var out health.Outcome
		if name == "silent" {
			// Its deadline passes once the request has reached it: it had
			// a connection and did not answer on it, however long the
			// dial and handshake took.
			ctx := newDeadlineCtx()
			done := make(chan health.Outcome, 1)
			go func() { done <- px.ProbeCluster(ctx, name) }()
			select {
			case <-asked:
			case out = <-done:
				t.Fatalf("silent: the probe returned before its request reached the cluster: %s (%s)", out.Reason, out.Message)
			case <-time.After(30 * time.Second): // a hang, not a speed
				t.Fatal("silent: the probe's request did not reach the cluster")
			}
			ctx.expire()
			out = <-done
		} else {
			// A deadline only for a hang: a loaded machine may take its time.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			out = px.ProbeCluster(ctx, name)
			cancel()
		}
		if out.Reason != want {
			t.Errorf("%s: %s (%s), want %s", name, out.Reason, out.Message, want)
		}
		if name == "ok" && (out.ServerVersion != "v1.37.2" || out.Latency <= 0) {
			t.Errorf("ok: version %q latency %v", out.ServerVersion, out.Latency)
		}
		if name == "failing" && !strings.Contains(out.Message, "500") {
			t.Errorf("failing: message %q does not give the status", out.Message)
		}
		if name == "silent" && (strings.Contains(out.Message, "no connection") || !strings.Contains(out.Message, "did not answer")) {
			t.Errorf("silent: message %q; want it to say the cluster did not answer on its connection", out.Message)
		}
	}
	if _, named := agents.Load(proberUserAgent); !named || !strings.HasPrefix(proberUserAgent, "cluster-gateway-prober/") {
		t.Errorf("the prober's requests were not sent as %s", proberUserAgent)
	}
	// Probes go around the pool: they must not evict users' entries.
	if st := px.opts.Pool.Stats(); st.Live != 0 || st.Created != 0 {
		t.Errorf("probes left %d live entries (%d created), want the pool untouched", st.Live, st.Created)
	}
}

// deadlineCtx is a context whose deadline passes when the test calls
// expire, at a moment the test chooses rather than after a duration that a
// slow machine could take up before the probe even reaches the cluster.
type deadlineCtx struct {
	context.Context
	done chan struct{}
	once sync.Once
}

func newDeadlineCtx() *deadlineCtx {
	return &deadlineCtx{Context: context.Background(), done: make(chan struct{})}
}

func (c *deadlineCtx) expire()               { c.once.Do(func() { close(c.done) }) }
func (c *deadlineCtx) Done() <-chan struct{} { return c.done }

func (c *deadlineCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

type fakeHealth struct{ result health.Result }

func (f *fakeHealth) Get(string) (health.Result, bool) { return f.result, true }
func (f *fakeHealth) ProbeNow(string)                  {}
func (f *fakeHealth) Interval() time.Duration          { return 20 * time.Second }

// A cluster the prober knows to be unreachable fails at once with 503 and
// Retry-After, naming the probe's reason, and nothing is sent to it.
func TestFailFastWhenUnreachable(t *testing.T) {
	up := newCapture(t)
	h := &fakeHealth{result: health.Result{Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonDialFailed, Message: "connection refused", LastTransitionTime: time.Now()}}
	px := newFixtureProxy(t, tokenSecret("c", up.srv.URL, upstreamCA(up.srv), "t", "None"))
	px.health = h // what a prober would know
	rec := serveAs(px, "c", "/api", alice, httptest.NewRequest(http.MethodGet, "/x", nil))
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "20" || !strings.Contains(rec.Body.String(), "DialFailed: connection refused") {
		t.Fatalf("%d Retry-After=%q %s; want 503 with Retry-After 20 naming the probe's reason", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("the cluster received %d requests", n)
	}
	h.result.Status = metav1.ConditionTrue
	if rec := serveAs(px, "c", "/api", alice, httptest.NewRequest(http.MethodGet, "/x", nil)); rec.Code != http.StatusOK {
		t.Fatalf("once reachable: %d %s", rec.Code, rec.Body)
	}
}

// A cluster that accepts a request and never answers does not hold it: a
// watch (exempt from the request timeout) gets 504 once the response-header
// timeout passes.
func TestSilentClusterBoundsAWatch(t *testing.T) {
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	silent := newTLSUpstream(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-block }))
	px := newFixtureProxyWith(t, func(o *Config) {
		po := pool.DefaultConfig()
		po.ResponseHeaderTimeout = 300 * time.Millisecond
		pl, err := pool.New(*po)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pl.Close)
		o.Pool = pl
	}, tokenSecret("silent", silent.URL, upstreamCA(silent), "t", "None"))
	req := httptest.NewRequest(http.MethodGet, "/x?watch=true", nil)
	rec := serveAs(px, "silent", "/api/v1/namespaces/default/configmaps", alice, req)
	if rec.Code != http.StatusGatewayTimeout || !strings.Contains(rec.Body.String(), "--upstream-response-header-timeout") {
		t.Fatalf("%d %s; want 504 naming the response-header timeout", rec.Code, rec.Body)
	}
}

// A hostile cluster that answers /readyz with a huge or never-ending body
// neither holds the probe past its deadline nor fills the message.
func TestProbeBoundedAgainstAHostileReadyz(t *testing.T) {
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	drip := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		for {
			select {
			case <-stop:
				return
			case <-r.Context().Done():
				return
			case <-time.After(10 * time.Millisecond):
				_, _ = w.Write([]byte("x"))
				w.(http.Flusher).Flush()
			}
		}
	}))
	huge := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(strings.Repeat("y", 8<<20)))
	}))
	redirect := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/api/v1/secrets", http.StatusFound)
	}))
	px := newFixtureProxy(t,
		tokenSecret("drip", drip.URL, upstreamCA(drip), "t", "None"),
		tokenSecret("huge", huge.URL, upstreamCA(huge), "t", "None"),
		tokenSecret("redirect", redirect.URL, upstreamCA(redirect), "t", "Caller"))
	for _, name := range []string{"drip", "huge"} {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		done := make(chan health.Outcome, 1)
		go func() { done <- px.ProbeCluster(ctx, name) }()
		select {
		case out := <-done:
			if len(out.Message) > 5000 {
				t.Errorf("%s: message of %d bytes", name, len(out.Message))
			}
		case <-time.After(30 * time.Second): // liveness, not timing: the body never ends
			t.Errorf("%s: the probe did not return after its deadline", name)
		}
		cancel()
	}
	ctx := apirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "alice"})
	h, err := px.Probe(ctx, "redirect")
	if err != nil || h.Healthy || (h.Code != http.StatusFound && h.Code != http.StatusBadGateway) || strings.Contains(h.Message, "answered 200") {
		t.Errorf("redirect: %+v %v; want the redirect not followed", h, err)
	}
}

// The health subresource probes as the caller in Caller mode, and refuses
// without a hub user; in None mode with the stored credential only.
func TestHealthProbesAsTheCaller(t *testing.T) {
	seen := make(chan http.Header, 4)
	up := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		_, _ = w.Write([]byte("ok"))
	}))
	px := newFixtureProxy(t,
		tokenSecret("caller", up.URL, upstreamCA(up), "stored", "Caller"),
		tokenSecret("none", up.URL, upstreamCA(up), "stored", "None"))
	ctx := apirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "alice", Groups: []string{"devs", "system:authenticated"}})
	if h, err := px.Probe(ctx, "caller"); err != nil || !h.Healthy {
		t.Fatalf("caller: %+v %v", h, err)
	}
	hd := <-seen
	if hd.Get("Impersonate-User") != "alice" || hd.Get("Authorization") != "Bearer stored" {
		t.Errorf("caller mode probe sent Impersonate-User %q Authorization %q", hd.Get("Impersonate-User"), hd.Get("Authorization"))
	}
	if _, err := px.Probe(context.Background(), "caller"); err == nil {
		t.Errorf("caller mode probe without a hub user was sent")
	}
	if h, err := px.Probe(ctx, "none"); err != nil || !h.Healthy {
		t.Fatalf("none: %+v %v", h, err)
	}
	if hd := <-seen; hd.Get("Impersonate-User") != "" {
		t.Errorf("None mode probe impersonated %q", hd.Get("Impersonate-User"))
	}
}
