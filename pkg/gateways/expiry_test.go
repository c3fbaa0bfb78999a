package gateways

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// A cached gateway whose certificate expires turns Ready=False without any
// write to its Secret, and says since when.
func TestCachedGatewayExpires(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	notAfter := time.Now().Add(1500 * time.Millisecond)
	c := newTestCredential(t, time.Now().Add(-time.Hour), notAfter)
	s := mustToSecret(t, x509Gateway(c), nil)
	s.ResourceVersion = "1"
	written := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	s.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "a", Time: &metav1.Time{Time: written.Add(-time.Hour)}}, {Manager: "b", Time: &written}}
	cache := NewStore(fake.NewClientset(s), testNamespace)
	done := make(chan struct{})
	go func() { cache.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "the cache to sync", cache.HasSynced)

	g, err := cache.Get(s.Name)
	if err != nil || !g.Ready {
		t.Fatalf("before expiry: %+v, %v; want ready", g, err)
	}
	if cond := g.Object.Status.Conditions[0]; !cond.LastTransitionTime.Equal(&written) {
		t.Errorf("Ready since %v, want the Secret's last write %v", cond.LastTransitionTime, written)
	}
	waitFor(t, "Ready=False after the certificate expired", func() bool {
		g, err := cache.Get(s.Name)
		return err == nil && !g.Ready
	})
	g, _ = cache.Get(s.Name)
	cond := g.Object.Status.Conditions[0]
	if cond.Reason != v1alpha1.ReasonCertExpired || cond.Status != metav1.ConditionFalse {
		t.Fatalf("after expiry: %+v, want Ready=False %s", cond, v1alpha1.ReasonCertExpired)
	}
	if d := cond.LastTransitionTime.Sub(notAfter); d > time.Second || d < -time.Second {
		t.Errorf("Ready=False since %v, want the certificate's notAfter %v", cond.LastTransitionTime, notAfter)
	}
}
