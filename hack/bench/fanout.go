package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
)

// The fan-out: one list through a set of clusters
// (clustersets/<set>/proxy, pkg/fanout), against the same lists one
// cluster at a time through the gateway.
const (
	fanoutClusters    = 100
	fanoutObjects     = 2000 // ConfigMaps per cluster
	fanoutObjectBytes = 1024 // each ConfigMap's data
	fanoutNamespace   = "bench-fanout"
	fanoutLabel       = "cluster-gateway-bench-fanout"
	fanoutPage        = 500 // pkg/fanout's DefaultPageSize: the list without a limit
	// fanoutOtherPage is a second list's page (--fanout-page-size): does the peak follow the
	// page? Not larger: the set can hold two pages per cluster at once (its
	// first, and the next one read meanwhile), and two of 1,000 are a
	// cluster's whole list. Not 100: that list outlasted the one-minute
	// request timeout on 2 shared CPUs.
	fanoutOtherPage = 250
	// fanoutProfile is the gateway's CPU profile during the first list
	// through the set, for its first fanoutProfileFor.
	fanoutProfile    = "gateway-cpu-fanout.pprof"
	fanoutProfileFor = 20 * time.Second
	fanoutClients    = 16
	// fanoutApiservers are the Direct managed kube-apiservers benchSecret
	// spreads gateways over (managed-1 and managed-2).
	fanoutApiservers = 2
	// pkg/fanout's default --fanout-max-clusters (fanout.DefaultConfig; hack
	// does not import pkg/fanout, whose dependencies it would pull in).
	fanoutDefaultMaxClusters = 16
	fanoutSampleEvery        = 100 * time.Millisecond
	fanoutCompleteGoal       = 1.2 // complete list ≤ 1.2× the slowest single cluster's
	fanoutFirstRowGoal       = 1.1 // first row ≤ 1.1× the fastest single cluster's list
	// fanoutAnnotation is the cluster annotation on every item of a set's
	// answer (docs/api.md): its first occurrence is the first row.
	fanoutAnnotation = "gateway.clustergateway.io/cluster"
	// fanoutWatches watches of a set of the first fanoutWatchSet clusters are
	// held at once, then as many single-cluster watches of each of them.
	fanoutWatches, fanoutWatchSet = 1000, 10
)

// fanoutCPU is what the bench (the client), the gateway, the hub, the
// managed kube-apiservers (together) and etcd used of the CPUs while
// reading every cluster one way.
type fanoutCPU struct{ Client, Gateway, Hub, Managed, Etcd time.Duration }

// fanoutCPU runs f and returns the bench's and the other processes' CPU
// meanwhile.
func (s *session) fanoutCPU(f func() error) (fanoutCPU, error) {
	pids := map[string]int{"gateway": s.env.Gateway.Process.Pid(), "hub": s.env.Hub.Process.Pid(), "etcd": s.env.Etcd.Pid()}
	for i, m := range s.env.Managed[:min(fanoutApiservers, len(s.env.Managed))] {
		pids[fmt.Sprintf("managed-%d", i)] = m.Process.Pid()
	}
	c, err := cpuDuring(pids, f)
	var managed time.Duration
	for i := range fanoutApiservers {
		managed += c[fmt.Sprintf("managed-%d", i)]
	}
	cpu := fanoutCPU{Client: c["bench"], Gateway: c["gateway"], Hub: c["hub"], Managed: managed, Etcd: c["etcd"]}
	logf("fanout: CPU client %s, gateway %s, hub %s, managed kube-apiservers %s, etcd %s", fmtDur(cpu.Client), fmtDur(cpu.Gateway), fmtDur(cpu.Hub), fmtDur(cpu.Managed), fmtDur(cpu.Etcd))
	return cpu, err
}

// fanoutList is one list through the set.
type fanoutList struct {
	Page      int           // the page size the gateway read each cluster in
	FirstRow  time.Duration // from the request until the first item's bytes arrived
	Complete  time.Duration // until the answer's last byte
	Bytes     float64       // the answer's size
	Items     int           // items in the answer (cluster annotations counted)
	Base      float64       // heap in use before (forced GC)
	PeakHeap  float64       // highest heap in use sampled every fanoutSampleEvery
	Samples   int
	Warnings  int // Warning headers: clusters that failed
	FirstErr  string
	PageBytes float64 // one page of one cluster, at the singles' bytes per object
	CPU       fanoutCPU
}

// Growth is the peak heap in use above the base.
func (l fanoutList) Growth() float64 { return max(0, l.PeakHeap-l.Base) }

type fanoutResult struct {
	Clusters, Objects, ObjectBytes, Apiservers int
	MaxClusters                                int // --fanout-max-clusters (pkg/fanout's default unless the gateway's args say)
	// Singles are the list of each cluster through the gateway, one at a
	// time (one request each, no limit), in the order of the gateways.
	Singles     []time.Duration
	SingleBytes float64 // the answer of one single list (they are all alike)
	Loop16      time.Duration
	Loop16First time.Duration // the first of the loop's lists to end
	// SeqCPU is the CPU over the singles (a sequential loop), Loop16CPU
	// over the loop of fanoutClients at a time.
	SeqCPU, Loop16CPU fanoutCPU
	// Watches are the set's watches, then the single-cluster ones; FDs the
	// gateway's and the bench's open files with each, NoFile their limit.
	Watches   []*watchResult
	FDs       [][2]int
	NoFile    uint64
	Lists     []fanoutList // the default page first, then fanoutOtherPage
	Profile   *pathProfile // the gateway's CPU during the first list
	SetupTime time.Duration
}

// fanouter runs the fan-out's steps over one hub client.
type fanouter struct {
	s   *session
	env *localenv.Env
	res *fanoutResult
	hub *http.Client
}

// runFanout stores fanoutClusters ClusterGateways over the managed
// kube-apiservers (alternately), creates fanoutObjects ConfigMaps of
// fanoutObjectBytes once in one namespace on each kube-apiserver (every
// gateway of a kube-apiserver lists the same objects), lists each cluster
// alone through the gateway, then the whole set at once, twice: with the
// default page and with limit=fanoutOtherPage.
func runFanout(ctx context.Context, s *session) (err error) {
	env := s.env
	f := &fanouter{s: s, env: env, res: &fanoutResult{Clusters: fanoutClusters, Objects: fanoutObjects, ObjectBytes: fanoutObjectBytes, Apiservers: fanoutApiservers, MaxClusters: fanoutDefaultMaxClusters}}
	s.rep.Fanout = f.res
	logf("fanout: %d ClusterGateways over %d kube-apiservers, %d ConfigMaps of %d bytes each", fanoutClusters, fanoutApiservers, fanoutObjects, fanoutObjectBytes)
	start := time.Now()
	secrets, err := hubSecrets(env)
	if err != nil {
		return err
	}
	defer deleteLabelled(secrets, fanoutLabel, "fanout")
	admins, err := managedAdmins(ctx, env, fanoutApiservers, fanoutNamespace)
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for _, cs := range admins {
			_ = cs.CoreV1().Namespaces().Delete(dctx, fanoutNamespace, metav1.DeleteOptions{})
		}
	}()
	if err == nil {
		err = fanoutObjectsOn(ctx, admins)
	}
	if err != nil {
		return err
	}
	if err := parallel(ctx, fanoutClusters, fanoutClients, func(i int) error {
		_, err := secrets.Create(ctx, fanoutSecret(env, i), metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("create gateways: %w", err)
	}
	if f.hub, err = mtlsClient(env.Hub.CA.CertPEM, env.Hub.Admin); err != nil {
		return err
	}
	defer f.hub.CloseIdleConnections()
	// The servers' request timeouts (a minute) end a list, not the client.
	f.hub.Timeout = 3 * time.Minute
	if err := waitFanoutListed(ctx, f.hub, env); err != nil {
		return err
	}
	f.res.SetupTime = time.Since(start)
	if err := f.singles(ctx); err != nil {
		return err
	}
	for _, page := range []int{fanoutPage, fanoutOtherPage} {
		if err := f.list(ctx, page); err != nil {
			return err
		}
	}
	if err := s.restartGateway(ctx, nil); err != nil {
		return err
	}
	for _, a := range env.Gateway.Args {
		if v, ok := strings.CutPrefix(a, "--fanout-max-clusters="); ok {
			fmt.Sscan(v, &f.res.MaxClusters)
		}
	}
	return fanoutWatch(ctx, s, f.hub, f.res)
}

// single is the list of cluster i alone through the hub.
func (f *fanouter) single(i int) string {
	return f.env.Hub.URL + "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/" + fanoutName(i) + "/proxy/api/v1/namespaces/" + fanoutNamespace + "/configmaps"
}

// singles lists each cluster alone, after a warm-up round (so that every
// cluster's pool entry exists and no list pays a handshake the others do
// not): one at a time, then fanoutClients at a time.
func (f *fanouter) singles(ctx context.Context) (err error) {
	res := f.res
	if err := parallel(ctx, fanoutClusters, fanoutClients, func(i int) error { _, _, err := timedList(ctx, f.hub, f.single(i)); return err }); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	logf("fanout: %d single-cluster lists, one at a time", fanoutClusters)
	if res.SeqCPU, err = f.s.fanoutCPU(func() error {
		for i := range fanoutClusters {
			d, n, err := timedList(ctx, f.hub, f.single(i))
			if err != nil {
				return fmt.Errorf("list of %s: %w", fanoutName(i), err)
			}
			res.Singles, res.SingleBytes = append(res.Singles, d), float64(n)
		}
		return nil
	}); err != nil {
		return err
	}
	var first sync.Once
	loop := time.Now()
	res.Loop16CPU, err = f.s.fanoutCPU(func() error {
		return parallel(ctx, fanoutClusters, fanoutClients, func(i int) error {
			_, _, err := timedList(ctx, f.hub, f.single(i))
			first.Do(func() { res.Loop16First = time.Since(loop) })
			return err
		})
	})
	res.Loop16 = time.Since(loop)
	return err
}

// list lists the whole set in one request with the gateway reading each
// cluster in pages of page; the default page's list is CPU-profiled.
func (f *fanouter) list(ctx context.Context, page int) error {
	s, res := f.s, f.res
	url := f.env.Hub.URL + "/apis/gateway.clustergateway.io/v1alpha1/clustersets/labels:" + fanoutLabel + "=true/proxy/api/v1/namespaces/" + fanoutNamespace + "/configmaps"
	profile := filepath.Join(s.o.StateDir, fanoutProfile)
	var err error
	if page != fanoutPage {
		// The page is the gateway's (--fanout-page-size): a client's
		// limit pages the answer itself.
		err = s.restartGateway(ctx, append(slices.Clone(s.env.GatewayArgs), fmt.Sprintf("--fanout-page-size=%d", page)))
	}
	if err == nil {
		// One unmeasured list through the set first, as the single lists
		// have their warm-up round, so that no list through the set is
		// the gateway's first.
		_, err = measureFanoutList(ctx, s.gw, f.hub, url)
	}
	if err != nil {
		return errors.Join(err, s.restartGateway(ctx, nil))
	}
	var prof chan error
	if page == fanoutPage {
		prof = make(chan error, 1)
		go func() { prof <- s.gw.cpuProfile(ctx, fanoutProfileFor, profile) }()
	}
	var l fanoutList
	cpu, err := s.fanoutCPU(func() (err error) { l, err = measureFanoutList(ctx, s.gw, f.hub, url); return err })
	l.CPU = cpu
	if prof != nil {
		if perr := <-prof; perr != nil {
			logf("fanout: CPU profile: %v", perr)
		} else if top, perr := pprofTop(ctx, s.o.Go, "-nodecount="+strconv.Itoa(topFuncs), profile); perr == nil {
			res.Profile = &pathProfile{Path: profile, Top: top}
		}
	}
	if err != nil {
		return err
	}
	l.Page, l.PageBytes = page, res.SingleBytes/fanoutObjects*float64(page)
	logf("fanout: page %d: first row %s, complete %s, %s, %d items, peak heap %s above %s, %d warnings",
		page, fmtDur(l.FirstRow), fmtDur(l.Complete), mib(l.Bytes), l.Items, mib(l.Growth()), mib(l.Base), l.Warnings)
	res.Lists = append(res.Lists, l)
	return nil
}

// fanoutWatch holds fanoutWatches watches of the set of the first
// fanoutWatchSet clusters through the gateway's port, then fanoutWatches
// single-cluster watches of each of those clusters (the same upstream
// watches), each on a fresh gateway whose limiter admits them all, as
// section 7 holds its watches.
func fanoutWatch(ctx context.Context, s *session, hub *http.Client, res *fanoutResult) (err error) {
	args := streamLimits(s.env.GatewayArgs, fanoutWatches)
	defer func() { err = errors.Join(err, s.restartGateway(ctx, nil)) }()
	users, err := newUsers(s.env, benchUser+"-fanout-watch:proxy-reader", "cluster-gateway:proxy-reader", numbered(benchUser+"-fanout-watch", *watchUsers)...)
	if err != nil {
		return err
	}
	var rl syscall.Rlimit // the gateway inherits the bench's
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl)
	res.NoFile = rl.Cur
	var set []string
	for i := range fanoutWatchSet {
		set = append(set, fanoutName(i))
	}
	for _, key := range []string{"set", "single"} {
		if err := s.restartGateway(ctx, args); err != nil {
			return err
		}
		if err := waitFanoutListed(ctx, hub, s.env); err != nil {
			return err
		}
		h, err := gatewayHolder(s.o, s.env, s.gw, users)
		if err != nil {
			return err
		}
		// Its heap profiles apart from section 7's.
		sample := h.sample
		h.sample = func(ctx context.Context, when string) (memSample, error) {
			if when == "after" {
				gw, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", s.env.Gateway.Process.Pid()))
				self, _ := os.ReadDir("/proc/self/fd")
				res.FDs = append(res.FDs, [2]int{len(gw), len(self)})
			}
			return sample(ctx, "fanout-"+key+"-"+when)
		}
		h.Key, h.Name, h.bases = key, fmt.Sprintf("gateway port, a set of %d clusters", fanoutWatchSet), []string{s.env.Gateway.URL + "/apis/gateway.clustergateway.io/v1alpha1/clustersets/names:" + strings.Join(set, ",") + "/proxy"}
		n := fanoutWatches
		if key == "single" {
			h.Name, h.bases, n = fmt.Sprintf("gateway port, each of those clusters alone (%d each)", fanoutWatches), nil, fanoutWatches*fanoutWatchSet
			for _, c := range set {
				h.bases = append(h.bases, s.env.Gateway.URL+gatewaysPath+c+"/proxy")
			}
		}
		w, err := holdWatches(ctx, s.env, h, n, len(users))
		if err != nil {
			return fmt.Errorf("watches of %s: %w", h.Name, err)
		}
		res.Watches = append(res.Watches, w)
	}
	return nil
}

// fanoutObjectsOn creates the ConfigMaps on every managed kube-apiserver.
func fanoutObjectsOn(ctx context.Context, admins []kubernetes.Interface) error {
	data := map[string]string{"data": strings.Repeat("x", fanoutObjectBytes)}
	for k, cs := range admins {
		if err := parallel(ctx, fanoutObjects, fanoutClients, func(i int) error {
			_, err := cs.CoreV1().ConfigMaps(fanoutNamespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%04d", i)}, Data: data}, metav1.CreateOptions{})
			return err
		}); err != nil {
			return fmt.Errorf("ConfigMaps on managed cluster %d: %w", k+1, err)
		}
	}
	return nil
}

func fanoutName(i int) string { return fmt.Sprintf("fanout-%03d", i) }

// fanoutSecret is gateway i, on managed cluster i mod 2, labelled for the set.
func fanoutSecret(env *localenv.Env, i int) *corev1.Secret {
	s := benchSecret(env, i)
	s.Name = fanoutName(i)
	s.Labels = map[string]string{gateways.LabelGateway: "true", fanoutLabel: "true"}
	s.Data[gateways.KeyLabels] = []byte(`{"` + fanoutLabel + `":"true"}`)
	return s
}

// waitFanoutListed waits until a list through the set reads every cluster
// (no warning, as many items as all clusters hold): the gateway has them
// all, and the hub authorizes each.
func waitFanoutListed(ctx context.Context, hub *http.Client, env *localenv.Env) error {
	url := env.Hub.URL + "/apis/gateway.clustergateway.io/v1alpha1/clustergateways?labelSelector=" + fanoutLabel + "%3Dtrue"
	_, err := poll(ctx, 500*time.Millisecond, 2*time.Minute, fmt.Sprintf("the hub listing %d fanout gateways", fanoutClusters), func(ctx context.Context) error {
		resp, err := getOK(ctx, hub, url, "")
		if err != nil {
			return again(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if n := bytes.Count(b, []byte(`"name":"fanout-`)); n < fanoutClusters {
			return again(fmt.Errorf("%d listed", n))
		}
		return nil
	})
	return err
}

// timedList GETs url and reads the answer to its end: its duration and size.
func timedList(ctx context.Context, c *http.Client, url string) (time.Duration, int64, error) {
	start := time.Now()
	resp, err := getOK(ctx, c, url, "")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	return time.Since(start), n, err
}

// measureFanoutList forces GCs in the gateway, then lists url while
// sampling the gateway's heap in use, timing the first item's arrival (the
// first cluster annotation in the body) and the answer's end.
func measureFanoutList(ctx context.Context, gw *gatewayAdmin, c *http.Client, url string) (l fanoutList, err error) {
	// Two GCs: pooled buffers (pkg/fanout's pages) outlive the first.
	if err := gw.gc(ctx, ""); err != nil {
		return l, err
	}
	base, err := afterGC(ctx, gw, "")
	if err != nil {
		return l, err
	}
	l.Base = base.Heap
	stop := sampleMax(fanoutSampleEvery, func() (float64, error) { m, err := gw.metrics(ctx); return m[mHeapInuse], err })
	defer func() { l.PeakHeap, l.Samples = stop() }()
	start := time.Now()
	resp, err := getOK(ctx, c, url, "")
	if err != nil {
		return l, err
	}
	defer resp.Body.Close()
	if l.Warnings = len(resp.Header.Values("Warning")); l.Warnings > 0 {
		l.FirstErr = resp.Header.Get("Warning")
	}
	cnt := &annotationCounter{key: []byte(fanoutAnnotation), first: func() { l.FirstRow = time.Since(start) }}
	n, err := io.Copy(cnt, resp.Body)
	l.Complete, l.Bytes, l.Items = time.Since(start), float64(n), cnt.n
	return l, err
}

// annotationCounter counts occurrences of key in what is written to it,
// across writes, and calls first at the first.
type annotationCounter struct {
	key   []byte
	tail  []byte // the last len(key)-1 bytes, for a key split across writes
	n     int
	first func()
}

func (a *annotationCounter) Write(p []byte) (int, error) {
	buf := append(a.tail, p...)
	if c := bytes.Count(buf, a.key); c > 0 {
		if a.n == 0 && a.first != nil {
			a.first()
		}
		a.n += c
	}
	keep := min(len(buf), len(a.key)-1)
	a.tail = append(a.tail[:0], buf[len(buf)-keep:]...)
	return len(p), nil
}

// The table and figures of section 8 (report.md.tmpl).

// Slowest and Fastest are the single lists' extremes, 0 without any.
func (r *fanoutResult) Slowest() time.Duration { return ifAny(r.Singles, slices.Max[[]time.Duration]) }
func (r *fanoutResult) Fastest() time.Duration { return ifAny(r.Singles, slices.Min[[]time.Duration]) }

func ifAny(ds []time.Duration, f func([]time.Duration) time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return f(ds)
}

// Sequential is a client's loop over the clusters, one after another.
func (r *fanoutResult) Sequential() time.Duration {
	var d time.Duration
	for _, s := range r.Singles {
		d += s
	}
	return d
}

// List is the list with the default page, or nil.
func (r *fanoutResult) List() *fanoutList {
	if len(r.Lists) == 0 {
		return nil
	}
	return &r.Lists[0]
}

// Pages are the requests l made to the clusters: each cluster's list in l.Page pages.
func (r *fanoutResult) Pages(l fanoutList) int {
	return r.Clusters * ((r.Objects + l.Page - 1) / max(1, l.Page))
}

// PerCluster is l's peak heap growth per cluster of the set.
func (r *fanoutResult) PerCluster(l fanoutList) float64 { return l.Growth() / float64(r.Clusters) }

// PageBound is clusters × one page's bytes: what a list holding one page
// per cluster holds.
func (r *fanoutResult) PageBound(l fanoutList) float64 { return float64(r.Clusters) * l.PageBytes }

// Follows compares the two lists through the set, which read the same
// objects with different pages: the growth of the second over the first's
// (got), and the bound it must reach to follow the page rather than the
// objects (halfway from 1, what a heap bounded by the objects gives, to the
// pages' ratio, what one bounded by clusters × page gives); ok is false
// without two lists with a growth.
func (r *fanoutResult) Follows() (got, bound float64, ok bool) {
	if len(r.Lists) < 2 || r.Lists[0].Growth() <= 0 || r.Lists[0].Page == r.Lists[1].Page {
		return 0, 0, false
	}
	a, b := r.Lists[0], r.Lists[1]
	pages := float64(b.Page) / float64(a.Page)
	return b.Growth() / a.Growth(), (1 + pages) / 2, true
}

// Bounded says whether the peak heap followed the page size, not the objects.
func (r *fanoutResult) Bounded() bool {
	got, bound, ok := r.Follows()
	if !ok {
		return false
	}
	if bound >= 1 {
		return got >= bound
	}
	return got <= bound
}

func (r *fanoutResult) Table() *table {
	t := newTable("lrrrrrrrrrrr", "list", "page", "first row", "complete", "client CPU", "gateway CPU", "answer", "items",
		"peak heap in use above the base (sampled)", "per cluster", "÷ answer", "÷ (clusters × page)")
	for _, l := range r.Lists {
		name := fmt.Sprintf("the set (%d clusters)", r.Clusters)
		if l.Warnings > 0 {
			name += fmt.Sprintf(", %d warnings", l.Warnings)
		}
		t.add(name, fmt.Sprint(l.Page), fmtDur(l.FirstRow), fmtDur(l.Complete), fmtDur(l.CPU.Client), fmtDur(l.CPU.Gateway), mib(l.Bytes), fmt.Sprint(l.Items), mib(l.Growth()),
			kib(r.PerCluster(l)), fmt.Sprintf("%.2f", div(l.Growth(), l.Bytes)), fmt.Sprintf("%.2f", div(l.Growth(), r.PageBound(l))))
	}
	if len(r.Singles) > 0 {
		t.add("one cluster, the fastest", "none", "", fmtDur(r.Fastest()), "", "", mib(r.SingleBytes), fmt.Sprint(r.Objects))
		t.add("one cluster, the slowest", "none", "", fmtDur(r.Slowest()), "", "", mib(r.SingleBytes), fmt.Sprint(r.Objects))
		t.add(fmt.Sprintf("a client's loop, one cluster after another (%d)", len(r.Singles)), "none", fmtDur(r.Singles[0]), fmtDur(r.Sequential()), fmtDur(r.SeqCPU.Client), fmtDur(r.SeqCPU.Gateway))
	}
	if r.Loop16 > 0 {
		t.add(fmt.Sprintf("a client's loop, %d clusters at a time", fanoutClients), "none", fmtDur(r.Loop16First), fmtDur(r.Loop16), fmtDur(r.Loop16CPU.Client), fmtDur(r.Loop16CPU.Gateway))
	}
	return t
}

func div(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// fanoutGoals are section 8's goals; none when the section did not run (a
// report without it lists no fan-out goal).
func (r *report) fanoutGoals() []goal {
	if r.Fanout == nil {
		return nil
	}
	return r.Fanout.Goals()
}

// Goals are the goals, then the same bounds against the fair
// references of this machine (bench checks): the 16-at-once client loop,
// which lists the same clusters at the set's concurrency, and the
// single-cluster watches a set watch replaces.
func (f *fanoutResult) Goals() goalList {
	complete := goal{Goal: fmt.Sprintf("Fan-out list of %d clusters: time to the complete list ≤ %.1f× the slowest single cluster's list through the gateway", f.Clusters, fanoutCompleteGoal), Limit: fanoutCompleteGoal}.not("no list through the set")
	fairComplete := goal{Goal: fmt.Sprintf("Fan-out list: time to the complete list ≤ %.1f× the client's loop over the same clusters, %d at a time", fanoutCompleteGoal, fanoutClients), Limit: fanoutCompleteGoal, Evidence: true}.not("no list through the set and client loop")
	fairFirst := goal{Goal: fmt.Sprintf("Fan-out list: time to the first row ≤ %.1f× the first list of that loop to end", fanoutFirstRowGoal), Limit: fanoutFirstRowGoal, Evidence: true}.not("no list through the set and client loop")
	watch := goal{Goal: fmt.Sprintf("Fan-out watch: Go heap + stacks per watch of a %d-cluster set ≤ %d single-cluster watches'", fanoutWatchSet, fanoutWatchSet), Limit: 1, Evidence: true}.not("no watches")
	first := goal{Goal: fmt.Sprintf("Fan-out list of %d clusters: time to the first row ≤ %.1f× the fastest single cluster's list through the gateway", f.Clusters, fanoutFirstRowGoal), Limit: fanoutFirstRowGoal}.not("no list through the set")
	heap := goal{Goal: fmt.Sprintf("Fan-out list of %d clusters × %d objects: peak heap bounded by clusters × page size, not by the objects (the same list with two page sizes: the growth follows the page)", f.Clusters, f.Objects)}.not("not two lists through the set with different pages")
	l := f.List()
	switch {
	case l == nil:
	case len(f.Singles) == 0 || f.Fastest() <= 0:
		complete, first = complete.not("no single-cluster list"), first.not("no single-cluster list")
	default:
		complete = complete.is(ratio(l.Complete, f.Slowest()), "%.2f× (%s vs %s, section 8)", ratio(l.Complete, f.Slowest()), fmtDur(l.Complete), fmtDur(f.Slowest()))
		first = first.is(ratio(l.FirstRow, f.Fastest()), "%.2f× (%s vs %s, section 8)", ratio(l.FirstRow, f.Fastest()), fmtDur(l.FirstRow), fmtDur(f.Fastest()))
	}
	if l != nil && f.Loop16First > 0 {
		fairComplete = fairComplete.is(ratio(l.Complete, f.Loop16), "%.2f× (%s vs %s, section 8)", ratio(l.Complete, f.Loop16), fmtDur(l.Complete), fmtDur(f.Loop16))
		fairFirst = fairFirst.is(ratio(l.FirstRow, f.Loop16First), "%.2f× (%s vs %s, section 8)", ratio(l.FirstRow, f.Loop16First), fmtDur(l.FirstRow), fmtDur(f.Loop16First))
	}
	if w := f.WatchPer(); w != nil {
		set, ten := w[0], w[1]
		watch = watch.is(div(set.Live(), ten.Live()), "%.2f× (%s vs %s; RSS %.2f×, goroutines %.1f vs %.1f), section 8", div(set.Live(), ten.Live()), kib(set.Live()), kib(ten.Live()), div(set.RSS, ten.RSS), set.Goroutines, ten.Goroutines)
	}
	if got, bound, ok := f.Follows(); ok {
		a, b := f.Lists[0], f.Lists[1]
		// A larger second page must grow the heap, a smaller one shrink it.
		heap.Limit, heap.AtLeast = bound, bound >= 1
		cmpSign := "≤"
		if heap.AtLeast {
			cmpSign = "≥"
		}
		heap = heap.is(got, "%.2f× the growth with %.2g× the page (needs "+cmpSign+" %.2f×): %s with %d, %s with %d (%.2f× and %.2f× clusters × page; %.2f× and %.2f× the answer's %s), section 8",
			got, float64(b.Page)/float64(a.Page), bound, mib(a.Growth()), a.Page, mib(b.Growth()), b.Page,
			div(a.Growth(), f.PageBound(a)), div(b.Growth(), f.PageBound(b)), div(a.Growth(), a.Bytes), div(b.Growth(), b.Bytes), mib(a.Bytes))
	}
	return goalList{complete, first, heap, fairComplete, fairFirst, watch}
}

// WatchPer is what the gateway held per set watch, and per fanoutWatchSet
// single-cluster watches (the ones a set watch replaces).
func (f *fanoutResult) WatchPer() []memSample {
	if len(f.Watches) < 2 {
		return nil
	}
	one, k := f.Watches[1].PerWatch(), float64(fanoutWatchSet)
	return []memSample{f.Watches[0].PerWatch(), {RSS: k * one.RSS, Heap: k * one.Heap, Stacks: k * one.Stacks, Goroutines: k * one.Goroutines}}
}

// WatchTable is the watches in section 7's table.
func (f *fanoutResult) WatchTable() *watchesResult { return &watchesResult{Holders: f.Watches} }
