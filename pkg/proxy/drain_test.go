package proxy

import (
	"bufio"
	"io"
	"net/http"
	"testing"
	"time"
)

// On shutdown a proxied watch ends as a cluster ends one at its timeout: the
// response simply ends, over HTTP/2, with every event so far and no reset
// (client-go would report a reset as a decode error). A watch that starts
// while draining ends at once.
func TestDrainEndsWatchesCleanly(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	up := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		for i := 0; ; i++ {
			if _, err := w.Write([]byte(`{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1"}}` + "\n")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}))
	px := newFixtureProxy(t, tokenSecret("c", up.URL, upstreamCA(up), "t", "None"))
	srv := proxyServer(t, px, alice, true)
	watch := func() *http.Response {
		t.Helper()
		resp, err := srv.Client().Get(srv.URL + "/c/proxy/api/v1/namespaces/default/configmaps?watch=true")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
			t.Fatalf("watch: %d over %s", resp.StatusCode, resp.Proto)
		}
		return resp
	}
	resp := watch()
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatalf("first event: %v", err)
	}
	px.Drain(time.Second)
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatalf("the watch ended with %v after %d more bytes, want a clean end", err, len(rest))
	}
	late := watch()
	defer late.Body.Close()
	if _, err := io.ReadAll(late.Body); err != nil {
		t.Fatalf("a watch started while draining: %v, want it ended cleanly", err)
	}
}
