package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
)

var (
	watchCount   = flag.Int("watches", 10000, "watches: idle watches held at once through the gateway, then through the bare proxy (0 skips the section)")
	watchUsers   = flag.Int("watch-users", 20, "watches: hub users the watches are spread over (each its own client, as separate programs would be)")
	watchOpeners = flag.Int("watch-openers", 64, "watches: watches being opened at once")
)

// watchHolder is a proxy that holds the watches: the gateway, or the bare
// proxies (one per managed cluster).
type watchHolder struct {
	Key, Name string
	bases     []string                                                  // per managed cluster: what /api/v1/... is appended to
	client    func(user, cluster int) *http.Client                      // user's client to the proxy for cluster
	sample    func(ctx context.Context, when string) (memSample, error) // when: "before" or "after"
	cleanup   func() error
}

// memSample is the holder's process(es) after a GC: RSS, the Go heap and
// goroutine stacks in use, and the goroutines.
type memSample struct {
	RSS, Heap, Stacks, Goroutines float64
}

// perWatch is (a - b) / n.
func (a memSample) perWatch(b memSample, n int) memSample {
	f := float64(max(1, n))
	return memSample{RSS: (a.RSS - b.RSS) / f, Heap: (a.Heap - b.Heap) / f, Stacks: (a.Stacks - b.Stacks) / f, Goroutines: (a.Goroutines - b.Goroutines) / f}
}

// Live is what a process holds for its goroutines and objects: the Go heap
// and goroutine stacks in use.
func (a memSample) Live() float64 { return a.Heap + a.Stacks }

// watchResult is one holder's measurement.
type watchResult struct {
	Key, Name     string
	Watches       int
	Before, After memSample
	Open          time.Duration // to open all of them
	Deliver       time.Duration // from creating one object per cluster until every watch had its event
}

// PerWatch is the growth per watch.
func (w *watchResult) PerWatch() memSample { return w.After.perWatch(w.Before, w.Watches) }

// watchesResult is the watches section.
type watchesResult struct {
	N, Users, Clusters int
	GatewayArgs        []string
	Holders            []*watchResult
	HeapTop            string // what the gateway's heap grew by with the watches (pprof)
}

func (s *watchesResult) Holder(key string) *watchResult {
	if s == nil {
		return nil
	}
	return byKey(s.Holders, key, func(h *watchResult) string { return h.Key })
}

// byKey is the first of xs whose key is k, or nil.
func byKey[T any](xs []*T, k string, key func(*T) string) *T {
	for _, x := range xs {
		if key(x) == k {
			return x
		}
	}
	return nil
}

// runWatches holds -watches idle watches of ConfigMaps, spread over
// -watch-users users and the Direct managed clusters, first through the
// gateway's port (restarted with stream limits that admit them all), then
// through bare reverse proxies, and measures their memory per watch and how
// long one event takes to reach all of them.
func runWatches(ctx context.Context, s *session) (err error) {
	n, users := *watchCount, max(1, *watchUsers)
	if n <= 0 {
		return nil
	}
	logf("watches: %d idle watches through the gateway, then through bare proxies", n)
	o, env := s.o, s.env
	res := &watchesResult{N: n, Users: users, Clusters: len(env.Managed)}
	s.rep.Watches = res
	perCluster := (n + len(env.Managed) - 1) / len(env.Managed)
	if err := s.restartGateway(ctx, streamLimits(env.GatewayArgs, perCluster)); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.restartGateway(ctx, nil)) }()
	res.GatewayArgs = env.Gateway.Args
	// A watch is a GET of the proxy subresource.
	hubUsers, err := newUsers(env, benchUser+"-watch:proxy-reader", "cluster-gateway:proxy-reader", numbered(benchUser+"-watch", users)...)
	if err != nil {
		return err
	}
	for _, newHolder := range []func() (*watchHolder, error){
		func() (*watchHolder, error) { return gatewayHolder(o, env, s.gw, hubUsers) },
		func() (*watchHolder, error) { return bareHolder(ctx, env, users) },
	} {
		h, err := newHolder()
		if err != nil {
			return err
		}
		r, err := holdWatches(ctx, env, h, n, users)
		if err := errors.Join(err, h.cleanup()); err != nil {
			return err
		}
		res.Holders = append(res.Holders, r)
	}
	res.HeapTop = heapDiffTop(ctx, o.Go, watchHeapPath(o, "after"), watchHeapPath(o, "before"))
	return nil
}

// watchClient is c without its overall timeout, which would end a watch.
func watchClient(c *http.Client) *http.Client {
	cc := *c
	cc.Timeout = 0
	return &cc
}

// watchHeapPath is the gateway's heap profile before or after the watches.
func watchHeapPath(o options, when string) string {
	return filepath.Join(o.StateDir, "gateway-heap-watches-"+when+".pprof")
}

func gatewayHolder(o options, env *localenv.Env, gw *gatewayAdmin, users []*localenv.User) (*watchHolder, error) {
	h := &watchHolder{Key: "gateway", Name: "gateway port", cleanup: func() error { return nil }}
	for _, c := range env.Managed {
		h.bases = append(h.bases, env.Gateway.URL+proxyPrefix(c))
	}
	var clients []*http.Client
	for _, u := range users {
		c, err := mtlsClient(env.Gateway.CA.CertPEM, u.Cert)
		if err != nil {
			return nil, err
		}
		clients = append(clients, watchClient(c))
	}
	h.client = func(u, _ int) *http.Client { return clients[u] }
	h.sample = func(ctx context.Context, when string) (memSample, error) {
		if err := gw.gc(ctx, watchHeapPath(o, when)); err != nil {
			return memSample{}, err
		}
		m, err := gw.metrics(ctx)
		if err != nil {
			return memSample{}, err
		}
		rss, err := procRSS(env.Gateway.Process.Pid())
		return memSample{RSS: rss, Heap: m[mHeapInuse], Stacks: m[mStackInuse], Goroutines: m[mGoroutines]}, err
	}
	return h, nil
}

// bareHolder starts a bare proxy per managed cluster; its users are as
// many clients without a client certificate (the bare proxy has no users).
func bareHolder(ctx context.Context, env *localenv.Env, users int) (h *watchHolder, err error) {
	k := &kit{ctx: ctx}
	h = &watchHolder{Key: "bare", Name: fmt.Sprintf("bare reverse proxies (one per cluster, %d processes)", len(env.Managed)), cleanup: k.stop}
	defer func() {
		if err != nil {
			err = errors.Join(err, h.cleanup())
		}
	}()
	var bares []*bareProxy
	var admin []*http.Client // one per bare proxy, for its stats
	for _, c := range env.Managed {
		b, err := k.bare(c, nil, false)
		if err != nil {
			return nil, err
		}
		bares, h.bases, admin = append(bares, b), append(h.bases, b.URL), append(admin, k.client(b.CAPEM, nil))
	}
	// Every bare proxy has its own CA: a client per user and proxy.
	var clients []*http.Client
	for range users {
		for _, b := range bares {
			clients = append(clients, k.client(b.CAPEM, nil))
		}
	}
	if err := k.err(); err != nil {
		return nil, err
	}
	for i, c := range clients {
		clients[i] = watchClient(c)
	}
	h.client = func(u, i int) *http.Client { return clients[u*len(bares)+i] }
	h.sample = func(ctx context.Context, _ string) (sum memSample, err error) {
		for i, b := range bares {
			st, err := b.stats(ctx, admin[i])
			if err != nil {
				return sum, err
			}
			rss, err := procRSS(b.Pid())
			if err != nil {
				return sum, err
			}
			sum = memSample{RSS: sum.RSS + rss, Heap: sum.Heap + st.HeapInuse, Stacks: sum.Stacks + st.StackInuse, Goroutines: sum.Goroutines + st.Goroutines}
		}
		return sum, nil
	}
	return h, nil
}

// holdWatches opens n watches through h (watch k: user k mod users, cluster
// k/users mod clusters), samples h before and after, creates one ConfigMap
// per cluster and times its delivery to every watch, then ends them all.
// Each holder watches a namespace of its own, empty until the event.
func holdWatches(ctx context.Context, env *localenv.Env, h *watchHolder, n, users int) (*watchResult, error) {
	ns := "bench-watch-" + h.Key
	admins, err := managedAdmins(ctx, env, len(env.Managed), ns)
	if err != nil {
		return nil, err
	}
	res := &watchResult{Key: h.Key, Name: h.Name, Watches: n}
	if res.Before, err = h.sample(ctx, "before"); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &heldWatches{delivered: make(chan struct{})}
	w.left.Store(int64(n))
	defer func() { cancel(); w.held.Wait() }()
	logf("watches: opening %d watches through the %s", n, h.Name)
	start := time.Now()
	if err := w.open(wctx, cancel, h, n, users, ns); err != nil {
		return nil, err
	}
	res.Open = time.Since(start)
	logf("watches: %d open through the %s in %s", n, h.Name, res.Open.Round(time.Millisecond))
	if res.After, err = h.sample(ctx, "after"); err != nil {
		return nil, err
	}
	start = time.Now()
	for i, cs := range admins {
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "event"}}, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("the event's ConfigMap on %s: %w", env.Managed[i].Name, err)
		}
	}
	select {
	case <-w.delivered:
		res.Deliver = time.Since(start)
	case <-time.After(2 * time.Minute):
		return nil, fmt.Errorf("watches: %d of %d watches through the %s had the event after 2 minutes", n-int(w.left.Load()), n, h.Name)
	}
	logf("watches: the event reached all %d watches through the %s in %s", n, h.Name, res.Deliver.Round(time.Millisecond))
	return res, nil
}

// heldWatches are the watches open through a holder: delivered is closed
// once left, the watches without the event, is 0.
type heldWatches struct {
	held      sync.WaitGroup // their readers
	left      atomic.Int64
	delivered chan struct{}
}

// open opens n watches through h, *watchOpeners at a time (watch k: user k
// mod users, cluster k/users mod clusters), each read until it ends; the
// first that fails cancels the rest.
func (w *heldWatches) open(ctx context.Context, cancel func(), h *watchHolder, n, users int, ns string) error {
	var next atomic.Int64
	errs := make(chan error, 1)
	var openers sync.WaitGroup
	for range *watchOpeners {
		openers.Go(func() {
			for k := int(next.Add(1)) - 1; k < n && ctx.Err() == nil; k = int(next.Add(1)) - 1 {
				u, i := k%users, (k/users)%len(h.bases)
				body, err := openWatch(ctx, h.client(u, i), h.bases[i]+"/api/v1/namespaces/"+ns+"/configmaps?watch=true&timeoutSeconds=3600")
				if err != nil {
					select {
					case errs <- fmt.Errorf("watch %d through the %s: %w", k, h.Name, err):
					default:
					}
					cancel()
					return
				}
				w.held.Go(func() { w.read(body) })
			}
		})
	}
	openers.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// read counts the watch's first bytes (the event) and reads it until it ends.
func (w *heldWatches) read(body io.ReadCloser) {
	defer body.Close()
	for buf := make([]byte, 512); ; {
		m, err := body.Read(buf)
		if m > 0 && w.left.Add(-1) == 0 {
			close(w.delivered)
		}
		if m > 0 || err != nil {
			break
		}
	}
	_, _ = io.Copy(io.Discard, body)
}

// openWatch sends the watch and returns its body once the answer's headers
// came: kube-apiserver sends them when the watch is registered.
func openWatch(ctx context.Context, c *http.Client, url string) (io.ReadCloser, error) {
	resp, err := getOK(ctx, c, url, "application/json")
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// The table and figures of section 7 (report.md.tmpl).

func (s *watchesResult) Openers() int { return *watchOpeners }

// StreamLimits are the gateway's --max-streams flags in the section.
func (s *watchesResult) StreamLimits() []string {
	return slices.DeleteFunc(slices.Clone(s.GatewayArgs), func(a string) bool { return !strings.HasPrefix(a, "--max-streams") })
}

func (r *report) WatchHeapPath(when string) string { return watchHeapPath(r.Opts, when) }
