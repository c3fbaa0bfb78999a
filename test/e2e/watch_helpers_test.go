package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// Watches through the gateway: markers they must report, and how they end.

func createConfigMap(t *testing.T, c kubernetes.Interface, ns, name string) {
	t.Helper()
	if _, err := c.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitAdded waits until w reports ConfigMap name as ADDED.
func waitAdded(w watch.Interface, name string) error {
	timeout := time.After(pollTimeout)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("the watch ended before it reported ConfigMap %s", name)
			}
			if cm, isCM := ev.Object.(*corev1.ConfigMap); isCM && ev.Type == watch.Added && cm.Name == name {
				return nil
			}
		case <-timeout:
			return fmt.Errorf("the watch did not report ConfigMap %s within %s", name, pollTimeout)
		}
	}
}

// expectAdded creates ConfigMap name directly on the managed cluster and
// waits for w to report it.
func expectAdded(t *testing.T, w watch.Interface, direct kubernetes.Interface, ns, name string) {
	t.Helper()
	createConfigMap(t, direct, ns, name)
	if err := waitAdded(w, name); err != nil {
		t.Fatal(err)
	}
}

// watchEnds waits until w ends cleanly. Cleanly is how a managed cluster
// ends a watch at its timeout, and how the gateway ends one whose upstream
// connection it cut: the result channel closes with no error event, and
// clients re-watch. It returns an error if w delivers an error event or
// has not ended within d. The watch ended when watchEnds returns nil.
func watchEnds(w watch.Interface, d time.Duration) error {
	timeout := time.After(d)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil
			}
			if ev.Type == watch.Error {
				w.Stop()
				return fmt.Errorf("the watch ended with an error event instead of cleanly: %v", ev.Object)
			}
		case <-timeout:
			w.Stop()
			return fmt.Errorf("the watch did not end within %s", d)
		}
	}
}

// graceCheck follows a watch on a retired pool entry or tunnel through the
// grace period (startGraceCheck, then wait).
type graceCheck struct {
	w                       watch.Interface
	marker                  string
	retiredAfter, retiredBy time.Time
	grace                   time.Duration
	stopCreating            context.CancelFunc
	creating                sync.WaitGroup
	done                    chan struct{} // closed once the watch ended

	mu          sync.Mutex
	createdAt   map[string]time.Time // each marker: when its create was sent
	createErr   error
	lastCreated time.Time // of the newest marker the watch delivered, by createdAt
	delivered   int
	errEvent    error     // an error event, if the watch ended with one
	ended       time.Time // when the watch was seen to end
}

// markerEvery is how often a graceCheck creates a marker.
const markerEvery = 200 * time.Millisecond

// startGraceCheck starts following w, a watch on an entry or tunnel whose
// retirement began after retiredAfter and before retiredBy; call it at once,
// then wait. Until w ends it creates a ConfigMap <marker>-<n> in ns on the
// managed cluster every markerEvery and notes which of them w delivers.
func startGraceCheck(t *testing.T, w watch.Interface, direct kubernetes.Interface, ns, marker string, retiredAfter, retiredBy time.Time, grace time.Duration) *graceCheck {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	g := &graceCheck{w: w, marker: marker, retiredAfter: retiredAfter, retiredBy: retiredBy, grace: grace,
		stopCreating: cancel, done: make(chan struct{}), createdAt: map[string]time.Time{}}
	g.creating.Go(func() {
		tick := time.NewTicker(markerEvery)
		defer tick.Stop()
		for n := 0; ; n++ {
			name := fmt.Sprintf("%s-%d", marker, n)
			g.mu.Lock()
			g.createdAt[name] = time.Now() // before the create: it cannot exist earlier
			g.mu.Unlock()
			_, err := direct.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			if err != nil && ctx.Err() == nil {
				g.mu.Lock()
				g.createErr = fmt.Errorf("create ConfigMap %s: %w", name, err)
				g.mu.Unlock()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	go func() {
		defer close(g.done)
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				g.mu.Lock()
				g.errEvent = fmt.Errorf("%v", ev.Object)
				g.mu.Unlock()
				w.Stop()
				continue
			}
			cm, isCM := ev.Object.(*corev1.ConfigMap)
			if !isCM || ev.Type != watch.Added {
				continue
			}
			g.mu.Lock()
			if at, ok := g.createdAt[cm.Name]; ok {
				g.delivered++
				if at.After(g.lastCreated) {
					g.lastCreated = at
				}
			}
			g.mu.Unlock()
		}
		g.mu.Lock()
		g.ended = time.Now()
		g.mu.Unlock()
	}()
	t.Cleanup(func() { g.stop() })
	return g
}

func (g *graceCheck) stop() {
	g.stopCreating()
	g.creating.Wait()
}

// wait asserts that the watch lived through the grace period and then
// ended, cleanly: it delivered a marker whose create was sent once half the
// grace had passed since retiredBy, and it ended no earlier than grace after
// retiredAfter (and within pollTimeout of the grace's end). The markers go
// on until the watch ends, so however late the test or the machine runs,
// the one created first after half the grace had until the end of the grace
// to arrive, on a gateway that keeps the watch that long.
func (g *graceCheck) wait(t *testing.T) {
	t.Helper()
	select {
	case <-g.done:
	case <-time.After(time.Until(g.retiredBy.Add(g.grace + pollTimeout))):
		g.w.Stop()
		<-g.done
		g.stop()
		t.Fatalf("the watch on the retired entry did not end within %s of the %s grace", pollTimeout, g.grace)
	}
	g.stop()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.createErr != nil {
		t.Fatal(g.createErr)
	}
	if g.errEvent != nil {
		t.Fatalf("the watch on the retired entry ended with an error event instead of cleanly: %v", g.errEvent)
	}
	half := g.retiredBy.Add(g.grace / 2)
	if g.lastCreated.Before(half) {
		last := "none"
		if g.delivered > 0 {
			last = fmt.Sprintf("the newest was created %s after the retirement", g.lastCreated.Sub(g.retiredBy).Round(time.Millisecond))
		}
		t.Errorf("the watch on the retired entry delivered no ConfigMap created after half the %s grace (%d delivered; %s); it ended %s after the retirement began",
			g.grace, g.delivered, last, g.ended.Sub(g.retiredAfter).Round(time.Millisecond))
	}
	if d := g.ended.Sub(g.retiredAfter); d < g.grace {
		t.Errorf("the watch on the retired entry ended %s after its retirement began at the earliest, before the %s grace period", d.Round(time.Millisecond), g.grace)
	}
	if g.delivered > 0 {
		t.Logf("the watch on the retired entry delivered %d markers, the newest created %s after the retirement, and ended %s after it (grace %s)",
			g.delivered, g.lastCreated.Sub(g.retiredBy).Round(10*time.Millisecond), g.ended.Sub(g.retiredAfter).Round(10*time.Millisecond), g.grace)
	}
}
