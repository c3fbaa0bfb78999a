package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestHubRestart kills the hub's kube-apiserver and starts it again on its
// port, with its flags. Meanwhile the gateway stays up and serves, straight
// on its own port as the hub admin: proxied requests to a managed cluster,
// and gets and lists of ClusterGateways with resourceVersion 0 from its
// cache; a write, and a get of the most recent, fail with 503 naming the
// hub. After the restart the gateway's informer has resynced:
// a ClusterGateway created through the hub is seen in the gateway's cache
// and is usable through the hub, and the APIService is Available again
// (StartCluster waits for that, as StartGateway does). It stops the hub, so
// it is not parallel.
func TestHubRestart(t *testing.T) {
	requireGateway(t)
	ctx := context.Background()
	m := env.Managed[0]
	expectOK(t, m.GatewayName)
	gwPid := env.Gateway.Process.Pid()
	direct := gatewayDirect(t).GatewayV1alpha1().ClusterGateways()
	throughGateway := proxyDirect(t, m.GatewayName)

	restarted := false
	t.Cleanup(func() {
		if !restarted {
			if err := env.StartCluster(context.Background(), env.Hub); err != nil {
				t.Errorf("restart the hub: %v", err)
			}
		}
	})
	stoppedAt := time.Now()
	// SIGKILL, as a crash would; kube-apiserver's own SIGTERM shutdown
	// takes longer than localenv's grace anyway.
	if err := env.KillCluster(env.Hub); err != nil {
		t.Fatalf("kill the hub: %v", err)
	}
	if code, _, err := hubDo(proxyPath(m.GatewayName, "/api")); err == nil {
		t.Fatalf("the hub answered %d after it was stopped", code)
	}

	// Reads with a resourceVersion come from the gateway's cache; a read
	// of the most recent (none) needs the hub and says so.
	if _, err := direct.Get(ctx, m.GatewayName, metav1.GetOptions{ResourceVersion: "0"}); err != nil {
		t.Fatalf("get a ClusterGateway (resourceVersion 0) from the gateway while the hub is down: %v", err)
	}
	list, err := direct.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil || len(list.Items) < len(env.Managed) {
		t.Fatalf("list ClusterGateways (resourceVersion 0) from the gateway while the hub is down: %v (%d items)", err, len(list.Items))
	}
	if _, err := direct.Get(ctx, m.GatewayName, metav1.GetOptions{}); !hubDown(err) {
		t.Fatalf("a most-recent get while the hub is down: %v; want 503 saying the hub's API server could not be reached", err)
	}
	// Proxied requests: the managed cluster does not need the hub.
	if _, err := throughGateway.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("a proxied get while the hub is down: %v", err)
	}
	if _, err := throughGateway.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("a proxied list while the hub is down: %v", err)
	}
	// A write: 503 naming the hub.
	newGW := directGateway(uniqueName(t, "after-hub-restart"), 0)
	_, err = direct.Create(ctx, newGW.DeepCopy(), metav1.CreateOptions{})
	if !hubDown(err) {
		t.Fatalf("create a ClusterGateway while the hub is down: %v; want 503 saying the hub's API server could not be reached", err)
	}
	t.Logf("create while the hub is down: %v", err)
	downFor := time.Since(stoppedAt)

	if err := env.StartCluster(ctx, env.Hub); err != nil {
		t.Fatalf("start the hub again: %v", err)
	}
	restarted = true
	backAt := time.Now()
	t.Logf("the hub was down %s; back (APIService Available, the hub lists ClusterGateways through the gateway) %s after its restart began",
		downFor.Round(100*time.Millisecond), time.Since(stoppedAt.Add(downFor)).Round(100*time.Millisecond))
	if env.Gateway.Process.Exited() || env.Gateway.Process.Pid() != gwPid {
		t.Fatalf("the gateway did not stay up (pid %d, exited %v)", gwPid, env.Gateway.Process.Exited())
	}

	// The informer resynced: a gateway created through the hub now is in
	// the gateway's cache and usable through the hub.
	createGateway(t, newGW)
	eventually(t, "the gateway's cache has the ClusterGateway created after the restart", func() error {
		_, err := direct.Get(ctx, newGW.Name, metav1.GetOptions{})
		return err
	})
	t.Logf("the new ClusterGateway was in the gateway's cache %s after the hub was back", time.Since(backAt).Round(100*time.Millisecond))
	eventually(t, "a request through the hub to the new ClusterGateway", func() error {
		code, body, err := hubDo(proxyPath(newGW.Name, "/api/v1/namespaces/default"))
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return &httpError{code, body}
		}
		return nil
	})
	expectOK(t, m.GatewayName)
}

// hubDown tells the gateway's error for a hub that does not answer.
func hubDown(err error) bool {
	return apierrors.IsServiceUnavailable(err) && strings.Contains(err.Error(), "hub's API server") && strings.Contains(err.Error(), "could not be reached")
}

type httpError struct {
	code int
	body string
}

func (e *httpError) Error() string { return http.StatusText(e.code) + ": " + e.body }
