package gateways

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/clustergateway/cluster-gateway/internal/testgateways"
	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// A cached gateway whose certificate expires turns Ready=False without any
// write to its Secret, and says since when; one not valid yet turns Ready
// when its notBefore passes. The store's clock is a fake one.
func TestCachedGatewayFollowsValidity(t *testing.T) {
	t0 := time.Now().Truncate(time.Second)
	expiring := testgateways.ClientCredential(t, t0.Add(-time.Hour), t0.Add(time.Hour))
	s := mustToSecret(t, testgateways.X509Gateway(expiring), nil)
	s.ResourceVersion = "1"
	written := metav1.NewTime(t0.Add(-time.Minute))
	s.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "a", Time: &metav1.Time{Time: written.Add(-time.Hour)}}, {Manager: "b", Time: &written}}
	early := testgateways.ClientCredential(t, t0.Add(time.Hour), t0.Add(3*time.Hour))
	s2 := mustToSecret(t, testgateways.X509Gateway(early), nil)
	s2.Name, s2.ResourceVersion = "early", "2"

	clk := testingclock.NewFakePassiveClock(t0)
	store := NewStore(fake.NewClientset(s, s2), testNamespace)
	store.clock = clk
	startStore(t, store)

	g, err := store.Get(s.Name)
	if err != nil || !g.Ready {
		t.Fatalf("before expiry: %+v, %v; want ready", g, err)
	}
	if cond := g.Object.Status.Conditions[0]; !cond.LastTransitionTime.Equal(&written) {
		t.Errorf("Ready since %v, want the Secret's last write %v", cond.LastTransitionTime, written)
	}
	if e, _ := store.Get("early"); e.Ready || e.Object.Status.Conditions[0].Reason != v1alpha1.ReasonCertNotYetValid {
		t.Fatalf("a certificate valid from t0+1h at t0: %+v, want Ready=False %s", e.Object.Status.Conditions, v1alpha1.ReasonCertNotYetValid)
	}

	clk.SetTime(t0.Add(90 * time.Minute))
	g, _ = store.Get(s.Name)
	cond := g.Object.Status.Conditions[0]
	if g.Ready || cond.Reason != v1alpha1.ReasonCertExpired || cond.Status != metav1.ConditionFalse {
		t.Fatalf("after expiry: %+v, want Ready=False %s", cond, v1alpha1.ReasonCertExpired)
	}
	if !cond.LastTransitionTime.Time.Equal(t0.Add(time.Hour)) {
		t.Errorf("Ready=False since %v, want the certificate's notAfter %v", cond.LastTransitionTime, t0.Add(time.Hour))
	}
	if again, _ := store.Get(s.Name); again != g {
		t.Errorf("the expired form was computed twice")
	}
	if e, _ := store.Get("early"); !e.Ready {
		t.Fatalf("after its notBefore: %+v, want Ready", e.Object.Status.Conditions)
	}
}
