package e2e

import (
	"context"
	"fmt"
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

// checkRunsToGrace asserts that a watch on a retired pool entry or tunnel
// lives through the grace period and then ends, cleanly. The retirement
// began after retiredAfter and before retiredBy: a ConfigMap created once
// half the grace has passed since retiredBy still reaches w, and w ends no
// earlier than grace after retiredAfter.
func checkRunsToGrace(t *testing.T, w watch.Interface, direct kubernetes.Interface, ns, marker string, retiredAfter, retiredBy time.Time, grace time.Duration) {
	t.Helper()
	time.Sleep(time.Until(retiredBy.Add(grace / 2)))
	expectAdded(t, w, direct, ns, marker)
	delivered := time.Now()
	if err := watchEnds(w, grace+pollTimeout); err != nil {
		t.Fatalf("the watch on the retired entry: %v", err)
	}
	ended := time.Now()
	if d := ended.Sub(retiredAfter); d < grace {
		t.Errorf("the watch on the retired entry ended %s after its retirement began at the earliest, before the %s grace period", d.Round(time.Millisecond), grace)
	}
	t.Logf("the watch on the retired entry delivered %s and ended %s after the retirement (grace %s)",
		delivered.Sub(retiredBy).Round(10*time.Millisecond), ended.Sub(retiredAfter).Round(10*time.Millisecond), grace)
}
