package gateways

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// A watch with a label selector sees a gateway arrive when it starts to
// match and leave when it stops, as the hub's own watch cache reports it.
func TestSelectorFilter(t *testing.T) {
	sel, _ := labels.Parse("env=prod")
	f := &selectorFilter{sel: sel, matching: map[string]bool{"known": true}}
	gw := func(name, env string) *v1alpha1.ClusterGateway {
		return &v1alpha1.ClusterGateway{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"env": env}}}
	}
	steps := []struct {
		in   watch.EventType
		gw   *v1alpha1.ClusterGateway
		want watch.EventType // "" = dropped
	}{
		{watch.Added, gw("a", "dev"), ""},
		{watch.Modified, gw("a", "prod"), watch.Added},
		{watch.Modified, gw("a", "prod"), watch.Modified},
		{watch.Modified, gw("a", "dev"), watch.Deleted},
		{watch.Modified, gw("a", "dev"), ""},
		{watch.Deleted, gw("a", "dev"), ""},
		{watch.Added, gw("b", "prod"), watch.Added},
		{watch.Deleted, gw("b", "prod"), watch.Deleted},
		{watch.Modified, gw("known", "prod"), watch.Modified},
		{watch.Modified, gw("known", "qa"), watch.Deleted},
	}
	for i, s := range steps {
		typ, ok := f.event(s.in, s.gw)
		got := watch.EventType("")
		if ok {
			got = typ
		}
		if got != s.want {
			t.Fatalf("step %d: %s of %s with labels %v gave %q, want %q", i, s.in, s.gw.Name, s.gw.Labels, got, s.want)
		}
	}
	all := &selectorFilter{sel: labels.Everything()}
	if typ, ok := all.event(watch.Modified, gw("x", "dev")); !ok || typ != watch.Modified {
		t.Fatalf("without a selector every event passes unchanged, got %q %v", typ, ok)
	}
}
