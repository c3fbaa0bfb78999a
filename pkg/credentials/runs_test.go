package credentials

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/component-base/metrics"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/clustergateway/cluster-gateway/internal/testmetrics"
	"github.com/clustergateway/cluster-gateway/internal/testpoll"
)

// failureBackoff is a Providers whose backoff clock is the test's, with
// metrics of its own.
func failureBackoff(t *testing.T, timeout time.Duration, ps ...Provider) (*Providers, *clocktesting.FakeClock, func() float64) {
	t.Helper()
	p := providers(t, timeout, ps...)
	clk := clocktesting.NewFakeClock(time.Now())
	p.clock = clk
	p.metrics = newMetrics()
	reg := metrics.NewKubeRegistry()
	p.metrics.Register(reg)
	backedOff := func() float64 {
		t.Helper()
		samples, err := testmetrics.Gather(reg)
		if err != nil {
			t.Fatal(err)
		}
		return samples.Sum("cluster_gateway_credential_provider_backoff_total")
	}
	return p, clk, backedOff
}

// A failing provider is not run for every request: its failure is kept for
// 1 s, doubled by each failure in a row up to 1 min; concurrent and
// sequential Gets and 401s meanwhile have the failure without a run, and
// are counted. A new credential ends the backoff (the next failure waits 1
// s again), and a gateway whose provider config changed runs at once.
func TestProviderFailureBackoff(t *testing.T) {
	dir := t.TempDir()
	runs, tokenFile := filepath.Join(dir, "runs"), filepath.Join(dir, "token") // no token file: the provider fails
	p, clk, backedOff := failureBackoff(t, 10*time.Second, Provider{Name: "p", Exec: execOf(providerBin,
		envVar("PROVIDER_RUNS", runs), envVar("PROVIDER_TOKEN_FILE", tokenFile))})
	c := &Cluster{Gateway: "c", Provider: "p"}
	getAll := func(n int) {
		t.Helper()
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if st, err := p.Get(context.Background(), c); err != nil || st.Problem == "" {
					t.Errorf("Get = %+v, %v; want the failure", st, err)
				}
			}()
		}
		wg.Wait()
		for range n {
			if st, err := p.Get(context.Background(), c); err != nil || st.Problem == "" {
				t.Fatalf("Get = %+v, %v; want the failure", st, err)
			}
			p.Unauthorized(context.Background(), c, "some-token", nil)
		}
	}
	wantRuns := func(want int) {
		t.Helper()
		if got := countRuns(t, runs); got != want {
			t.Fatalf("the provider ran %d times, want %d", got, want)
		}
	}
	getAll(8)
	wantRuns(1)
	if got := backedOff(); got < 16 {
		t.Errorf("backoff counted %v requests, want at least the 16 sequential ones", got)
	}
	// Each failure in a row doubles the wait, up to a minute.
	for i, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute} {
		clk.Step(wait - time.Millisecond)
		getAll(3)
		wantRuns(i + 1)
		clk.Step(time.Millisecond)
		getAll(3)
		wantRuns(i + 2)
	}

	// A new credential ends the backoff: the next failure (the refresh
	// after a 401) waits 1 s again, not 2 min.
	writeFile(t, tokenFile, []byte("tok"))
	clk.Step(time.Minute)
	if st, _ := p.Get(context.Background(), c); st.Token != "tok" {
		t.Fatalf("Get = %+v, want tok", st)
	}
	wantRuns(10)
	if err := os.Remove(tokenFile); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		p.Unauthorized(context.Background(), c, "tok", nil) // the first runs and fails: client-go keeps tok
	}
	wantRuns(11)
	clk.Step(time.Second)
	p.Unauthorized(context.Background(), c, "tok", nil)
	wantRuns(12)

	// A changed gateway starts without backoff.
	c2 := &Cluster{Gateway: "c", Provider: "p", Config: []byte(`{"changed":true}`)}
	if st, _ := p.Get(context.Background(), c2); st.Problem == "" {
		t.Fatalf("Get = %+v, want the failure", st)
	}
	wantRuns(13)
}

// Concurrent requests for one gateway share one run: Gets for a credential
// that has expired already (client-go would run the provider for the token
// and again for the certificate), 401s for the current and for an older
// credential, and 401s to a provider that gives the refused token again
// (client-go would run it again for each 401 it is shown).
func TestProviderConcurrentRequestsShareOneRun(t *testing.T) {
	dir := t.TempDir()
	expiredRuns, runs, sameRuns := filepath.Join(dir, "expired"), filepath.Join(dir, "runs"), filepath.Join(dir, "same")
	p := providers(t, 30*time.Second,
		Provider{Name: "same", Exec: execOf(providerBin, envVar("PROVIDER_RUNS", sameRuns), envVar("PROVIDER_TOKEN", "same"),
			envVar("PROVIDER_SLEEP", "300ms"))},
		Provider{Name: "expired", Exec: execOf(providerBin, envVar("PROVIDER_RUNS", expiredRuns), envVar("PROVIDER_TOKEN", "t%d"),
			envVar("PROVIDER_SLEEP", "300ms"), envVar("PROVIDER_EXPIRED", "1"))},
		Provider{Name: "hour", Exec: execOf(providerBin, envVar("PROVIDER_RUNS", runs), envVar("PROVIDER_TOKEN", "t%d"),
			envVar("PROVIDER_SLEEP", "300ms"), envVar("PROVIDER_LIFETIME", "1h"))})
	concurrently := func(n int, fn func()) {
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() { defer wg.Done(); fn() }()
		}
		wg.Wait()
	}
	for _, tc := range []struct{ provider, runs string }{{"expired", expiredRuns}, {"hour", runs}} {
		c := &Cluster{Gateway: tc.provider, Provider: tc.provider}
		var mu sync.Mutex
		states := map[*State]bool{}
		concurrently(6, func() {
			st, err := p.Get(context.Background(), c)
			if err != nil || st.Token != "t1" {
				t.Errorf("%s: Get = %+v, %v; want t1", tc.provider, st, err)
			}
			mu.Lock()
			states[st] = true
			mu.Unlock()
		})
		if got := countRuns(t, tc.runs); got != 1 || len(states) != 1 {
			t.Errorf("%s: 6 concurrent Gets ran the provider %d times for %d States, want 1 and 1", tc.provider, got, len(states))
		}
	}
	// 401s for the current token and an older one, and Gets, at once.
	c := &Cluster{Gateway: "hour", Provider: "hour"}
	concurrently(18, func() {
		p.Unauthorized(context.Background(), c, "t1", nil)
		p.Unauthorized(context.Background(), c, "t0", nil)
		if _, err := p.Get(context.Background(), c); err != nil {
			t.Error(err)
		}
	})
	if got := countRuns(t, runs); got != 2 {
		t.Errorf("401s for one token ran the provider %d times in all, want 2", got)
	}
	if st := p.Latest(c); st.Token != "t2" {
		t.Errorf("after the 401s: %+v, want t2", st)
	}

	same := &Cluster{Gateway: "same", Provider: "same"}
	if st, err := p.Get(context.Background(), same); err != nil || st.Token != "same" {
		t.Fatalf("Get = %+v, %v", st, err)
	}
	concurrently(6, func() { p.Unauthorized(context.Background(), same, "same", nil) })
	if got := countRuns(t, sameRuns); got != 2 {
		t.Errorf("401s to a token the provider gives again ran it %d times in all, want 2", got)
	}
}

// A caller whose ctx ends while the provider runs gets ctx's error then,
// not when the run ends; the run goes on and the next caller has its
// credential, without a second run; nothing is left running.
func TestProviderGetCancelled(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	runs := filepath.Join(t.TempDir(), "runs")
	p := providers(t, 30*time.Second, Provider{Name: "p", Exec: execOf(providerBin,
		envVar("PROVIDER_RUNS", runs), envVar("PROVIDER_TOKEN", "t%d"), envVar("PROVIDER_SLEEP", "3s"))})
	c := &Cluster{Gateway: "c", Provider: "p"}
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		st  *State
		err error
		ran *State // the provider's State when Get returned
	}
	done := make(chan result, 1)
	go func() {
		st, err := p.Get(ctx, c)
		done <- result{st, err, p.Latest(c)}
	}()
	testpoll.EventuallyTrue(t, 30*time.Second, "the provider to start", func() bool { return countRuns(t, runs) == 1 })
	cancel()
	r := <-done
	if !errors.Is(r.err, context.Canceled) || r.st != nil {
		t.Fatalf("Get whose ctx ended = %+v, %v; want context.Canceled", r.st, r.err)
	}
	if r.ran != nil {
		t.Fatalf("Get returned once the run ended (%+v), not when its ctx did", r.ran)
	}
	st, err := p.Get(context.Background(), c)
	if err != nil || st.Token != "t1" || countRuns(t, runs) != 1 {
		t.Fatalf("the next Get = %+v, %v after %d runs; want t1 from the first", st, err, countRuns(t, runs))
	}
}
