package proxy

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/clustergateway/cluster-gateway/internal/testfrontend"
	"github.com/clustergateway/cluster-gateway/internal/testpoll"
	"github.com/clustergateway/cluster-gateway/pkg/fairness"
)

// slotsFixture is a proxy with per-cluster limits in front of an upstream,
// behind the HTTP/2 front end with a request deadline.
func slotsFixture(t *testing.T, up http.Handler, timeout time.Duration) (*testfrontend.Server, *fairness.Limiter) {
	t.Helper()
	u := newTLSUpstream(t, up)
	lim, err := fairness.New(fairness.Config{MaxRequests: 2, MaxStreams: 2, MaxQueued: 1, QueueWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	px := newFixtureProxyWith(t, func(o *Config) { o.Limiter, o.MaxBodyBytes = lim, 1<<20 },
		tokenSecret("c", u.URL, upstreamCA(u), "t", "None"))
	return testfrontend.MustStart(t, testfrontend.Handler(timedConnecter{px: px, timeout: timeout}, &user.DefaultInfo{Name: "mallory"})), lim
}

func slotsFree(lim *fairness.Limiter) error {
	if s := lim.Stats(); s.InFlight[fairness.Request] != 0 || s.Queued[fairness.Request] != 0 {
		return fmt.Errorf("in flight %d, queued %d", s.InFlight[fairness.Request], s.Queued[fairness.Request])
	}
	return nil
}

// A client that never reads the answer (HTTP/2 with an initial window of
// 0 and no WINDOW_UPDATE) blocks the reverse proxy in Write, which no
// context ends: the answer's writes are bounded by the request's deadline,
// so its stream is reset and the cluster's slots are given back then.
func TestStalledReaderGivesSlotsBackAtItsDeadline(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 1<<20)
	srv, lim := slotsFixture(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(big)
	}), 2*time.Second)

	conn, err := tls.Dial("tcp", strings.TrimPrefix(srv.URL, "https://"), func() *tls.Config {
		c := srv.TLSConfig().Clone()
		c.NextProtos = []string{"h2"}
		return c
	}())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	var writing sync.Mutex // the framer's writes: the reader acks settings
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}); err != nil {
		t.Fatal(err)
	}
	resets := make(chan uint32, 8)
	go func() { // read frames, never WINDOW_UPDATE
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				close(resets)
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					writing.Lock()
					_ = fr.WriteSettingsAck()
					writing.Unlock()
				}
			case *http2.RSTStreamFrame:
				resets <- f.StreamID
			}
		}
	}()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for i := uint32(1); i <= 3; i += 2 { // both of the cluster's slots
		hb.Reset()
		for _, hf := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "x"},
			{":path", testfrontend.Prefix + "c/proxy/api/v1/namespaces"}} {
			_ = enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
		}
		writing.Lock()
		err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: i, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
		writing.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	}
	testpoll.Eventually(t, time.Minute, "both slots held by the stalled reader", func() error {
		if n := lim.Stats().InFlight[fairness.Request]; n != 2 {
			return fmt.Errorf("%d in flight", n)
		}
		return nil
	})
	// Without the bound the slots stay held as long as the connection
	// does; with it, they are given back soon after the 2s deadline (the
	// minute only guards against a hang on a loaded machine).
	testpoll.Eventually(t, time.Minute, "the slots given back after the deadline", func() error { return slotsFree(lim) })
	for range 2 {
		select {
		case <-resets:
		case <-time.After(10 * time.Second):
			t.Fatal("the stalled streams were not reset")
		}
	}
}

// An ordinary request's body is read before it takes a cluster slot: one
// that trickles in holds none, and one that does not arrive by the
// request's deadline gets the 504 Timeout Status without ever taking one.
// A body that did arrive reaches the cluster whole.
func TestTricklingBodyHoldsNoSlot(t *testing.T) {
	got := make(chan string, 1)
	srv, lim := slotsFixture(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- fmt.Sprintf("%d %s", r.ContentLength, b)
	}), 3*time.Second)
	c := srv.Client()
	defer c.CloseIdleConnections()

	post := func(body io.Reader) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, srv.ProxyURL("c")+"/api/v1/namespaces", body)
		return c.Do(req)
	}
	// A body that comes a byte at a time, and is complete before the deadline.
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		resp, err := post(pr)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("%s", resp.Status)
			}
		}
		done <- err
	}()
	for _, b := range []byte(`{"a":1}`) {
		if _, err := pw.Write([]byte{b}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		if err := slotsFree(lim); err != nil {
			t.Fatalf("while the body trickles in: %v, want no slot taken", err)
		}
	}
	pw.Close()
	if err := <-done; err != nil {
		t.Fatalf("the trickled request: %v", err)
	}
	if g := <-got; g != `7 {"a":1}` {
		t.Fatalf("the cluster received %q, want the whole body with its length", g)
	}

	// A body that never ends: 504 at the deadline, no slot taken.
	pr, pw = io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write([]byte("{")) }()
	resp, err := post(pr)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(body), "body did not arrive") {
		t.Fatalf("a body that never ends: %d %s, want the 504 naming the body", resp.StatusCode, body)
	}
	if err := slotsFree(lim); err != nil {
		t.Fatal(err)
	}
	select {
	case g := <-got:
		t.Fatalf("the cluster received %q", g)
	default:
	}
}
