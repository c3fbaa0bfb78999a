package pool

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	utilproxy "k8s.io/apimachinery/pkg/util/proxy"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
)

// apiServers are in-process stand-ins for the API servers of one cluster:
// one CA, one client CA, each on its own loopback IP with a serving
// certificate for that IP only, so a connection verified against another
// address's name fails.
type apiServers struct {
	srvs     []*httptest.Server
	urls     []*url.URL
	served   []atomic.Int64 // requests to /hello
	serverCA *testpki.CA
	clientCA *testpki.CA
}

func newAPIServers(t *testing.T, ips ...string) *apiServers {
	t.Helper()
	s := &apiServers{serverCA: testpki.MustCA(t, "server-ca"), clientCA: testpki.MustCA(t, "client-ca"), served: make([]atomic.Int64, len(ips))}
	for i, ip := range ips {
		mux := http.NewServeMux()
		mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
			s.served[i].Add(1)
			fmt.Fprintf(w, "%s", ip)
		})
		mux.HandleFunc("/watch", watchHandler)
		mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(w, r.Body) })
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatalf("listen on %s (all of 127.0.0.0/8 reaches lo on Linux): %v", ip, err)
		}
		srv := httptest.NewUnstartedServer(mux)
		srv.Listener.Close()
		srv.Listener = l
		srv.EnableHTTP2 = true
		serving := s.serverCA.MustIssue(t, testpki.Spec{CommonName: "apiserver", IPs: []string{ip}, Server: true})
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{serving.TLS()}, NextProtos: []string{"h2", "http/1.1"}}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		u, _ := url.Parse(srv.URL)
		s.srvs, s.urls = append(s.srvs, srv), append(s.urls, u)
	}
	return s
}

// target names the first server as address and the others as additional.
func (s *apiServers) target(t *testing.T, cluster string) *Target {
	client := s.clientCA.MustIssue(t, testpki.Spec{CommonName: "gateway", Client: true})
	tg := &Target{Cluster: cluster, Address: s.urls[0], CAData: s.serverCA.CertPEM, CertData: client.CertPEM, KeyData: client.KeyPEM}
	tg.Additional = append(tg.Additional, s.urls[1:]...)
	return tg
}

// Requests sent to the primary address go to each address in turn, each
// verified against its own IP.
func TestSpreadOverAddresses(t *testing.T) {
	s := newAPIServers(t, "127.0.0.1", "127.0.0.2")
	p := newTestPool(t, Config{})
	l := acquire(t, p, s.target(t, "ha"))
	defer l.Release()
	for range 10 {
		mustGet(t, l.Transport(), s.urls[0], "/hello")
	}
	if a, b := s.served[0].Load(), s.served[1].Load(); a != 5 || b != 5 {
		t.Fatalf("10 requests: %d to the first address, %d to the second; want 5 and 5", a, b)
	}
	if st := p.Stats(); st.Live != 1 || st.OpenConns != 2 {
		t.Fatalf("one entry with one HTTP/2 connection per address: %d entries, %d connections", st.Live, st.OpenConns)
	}
}

// exec, attach and port-forward dial the address PickAddress names, as
// UpgradeAwareHandler does (DialURL), verified against that address.
func TestPickAddressForUpgrades(t *testing.T) {
	s := newAPIServers(t, "127.0.0.1", "127.0.0.2")
	p := newTestPool(t, Config{})
	l := acquire(t, p, s.target(t, "ha"))
	defer l.Release()
	seen := map[string]bool{}
	for range 2 {
		u := *s.urls[0]
		l.PickAddress(&u)
		conn, err := utilproxy.DialURL(t.Context(), &u, l.UpgradeTransport())
		if err != nil {
			t.Fatalf("upgrade dial of %s: %v", u.Host, err)
		}
		conn.Close()
		seen[u.Host] = true
	}
	if !seen[s.urls[0].Host] || !seen[s.urls[1].Host] {
		t.Fatalf("PickAddress twice named %v, want both addresses", seen)
	}
}

// An address that refuses connections costs one failed dial, whose request
// goes to the other address; then it is left out until addressRetryAfter
// has passed, or a probe finds it answering.
func TestSpreadSkipsFailedAddress(t *testing.T) {
	s := newAPIServers(t, "127.0.0.1", "127.0.0.2")
	s.srvs[1].Close() // its port now refuses connections
	clk := testingclock.NewFakeClock(time.Now())
	p := newFakeClockPool(t, Config{}, clk)
	tg := s.target(t, "ha")
	l := acquire(t, p, tg)
	defer l.Release()
	for range 10 {
		mustGet(t, l.Transport(), s.urls[0], "/hello")
	}
	if a, f, m := s.served[0].Load(), p.Stats().DialFailures, p.Stats().AddressFailovers; a != 10 || f != 1 || m != 1 {
		t.Fatalf("with the second address down: %d of 10 requests served by the first, %d failed dials, %d moved; want 10, 1 and 1", a, f, m)
	}
	clk.Step(addressRetryAfter)
	mustGet(t, l.Transport(), s.urls[0], "/hello")
	mustGet(t, l.Transport(), s.urls[0], "/hello")
	if f, m := p.Stats().DialFailures, p.Stats().AddressFailovers; f != 2 || m != 2 {
		t.Fatalf("after addressRetryAfter the down address is tried once more: %d failed dials, %d requests moved; want 2 and 2", f, m)
	}
	if a := s.served[0].Load(); a != 12 {
		t.Fatalf("%d of 12 requests served, want all", a)
	}
}

// A probe that finds an address not answering leaves it out of the
// spreading; one that finds it answering brings it back.
func TestReportAddressSkipsAndRestores(t *testing.T) {
	s := newAPIServers(t, "127.0.0.1", "127.0.0.2")
	clk := testingclock.NewFakeClock(time.Now())
	p := newFakeClockPool(t, Config{}, clk)
	tg := s.target(t, "ha")
	l := acquire(t, p, tg)
	defer l.Release()
	p.ReportAddress(tg, s.urls[1], false)
	for range 4 {
		mustGet(t, l.Transport(), s.urls[0], "/hello")
	}
	if a, b := s.served[0].Load(), s.served[1].Load(); a != 4 || b != 0 {
		t.Fatalf("with the second address reported down: %d and %d requests, want 4 and 0", a, b)
	}
	p.ReportAddress(tg, s.urls[1], true)
	for range 4 {
		mustGet(t, l.Transport(), s.urls[0], "/hello")
	}
	if a, b := s.served[0].Load(), s.served[1].Load(); a != 6 || b != 2 {
		t.Fatalf("with the second address back: %d and %d requests in all, want 6 and 2", a, b)
	}
	// Probe's transport asks the address a URL names, not the next in turn.
	if err := p.Probe(tg, func(rt http.RoundTripper) error {
		for range 2 {
			if _, body, err := get(t.Context(), rt, s.urls[1], "/hello"); err != nil || body != "127.0.0.2" {
				return fmt.Errorf("probe of the second address: %q, %v", body, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// Retiring the entry closes the connections to every address, live
// streams included.
func TestRetireClosesEveryAddress(t *testing.T) {
	s := newAPIServers(t, "127.0.0.1", "127.0.0.2")
	p := newTestPool(t, Config{RetireGrace: time.Hour})
	l := acquire(t, p, s.target(t, "ha"))
	var streams []*http.Response
	for range 2 {
		req, _ := http.NewRequest(http.MethodGet, s.urls[0].String()+"/watch", nil)
		resp, err := l.Transport().RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, resp)
	}
	if st := p.Stats(); st.OpenConns != 2 {
		t.Fatalf("two watches spread over two addresses: %d connections, want 2", st.OpenConns)
	}
	p.Remove("ha", ReasonDeleted)
	l.Release() // the grace period ends with the last lease
	for _, resp := range streams {
		_, _ = io.Copy(io.Discard, resp.Body) // ends when its connection is closed
		resp.Body.Close()
	}
	eventually(t, "every connection of the retired entry to close", func() bool { return p.Stats().OpenConns == 0 })
}

// Each address starts cold on its own: a burst of requests to a new entry
// makes one dial per address, not one per request.
func TestColdStartPerAddress(t *testing.T) {
	s := newAPIServers(t, "127.0.0.1", "127.0.0.2")
	p := newTestPool(t, Config{})
	l := acquire(t, p, s.target(t, "ha"))
	defer l.Release()
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() {
			if _, _, err := get(t.Context(), l.Transport(), s.urls[0], "/hello"); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Dials != 2 || st.OpenConns != 2 {
		t.Fatalf("20 requests at once to a new entry with two addresses: %d dials, %d connections; want 2 and 2", st.Dials, st.OpenConns)
	}
	if a, b := s.served[0].Load(), s.served[1].Load(); a != 10 || b != 10 {
		t.Fatalf("%d and %d requests per address, want 10 and 10", a, b)
	}
}

// A request whose dial failed goes to the next address only when its body
// can be sent again: of two POSTs to a new entry whose second address
// refuses connections, one dials it first. With GetBody both arrive whole;
// without it, that one fails.
func TestSpreadSendsBodyAgainOnlyWithGetBody(t *testing.T) {
	s := newAPIServers(t, "127.0.0.1", "127.0.0.2")
	s.srvs[1].Close()
	post := func(l *Lease, rewindable bool) (string, error) {
		var body io.Reader = strings.NewReader("payload")
		if !rewindable {
			body = io.NopCloser(body) // http.NewRequest sets no GetBody for it
		}
		req, _ := http.NewRequest(http.MethodPost, s.urls[0].String()+"/echo", body)
		resp, err := l.Transport().RoundTrip(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	for _, rewindable := range []bool{true, false} {
		p := newTestPool(t, Config{})
		l := acquire(t, p, s.target(t, "ha"))
		var failed int
		for range 2 {
			got, err := post(l, rewindable)
			switch {
			case err != nil:
				failed++
			case got != "payload":
				t.Fatalf("rewindable %v: the body arrived as %q", rewindable, got)
			}
		}
		l.Release()
		if want := map[bool]int{true: 0, false: 1}[rewindable]; failed != want {
			t.Fatalf("rewindable body %v: %d of 2 POSTs failed, want %d", rewindable, failed, want)
		}
		// Only a request that was sent again counts as moved.
		if m, want := p.Stats().AddressFailovers, map[bool]int64{true: 1, false: 0}[rewindable]; m != want {
			t.Fatalf("rewindable body %v: %d requests moved to the other address, want %d", rewindable, m, want)
		}
	}
}
