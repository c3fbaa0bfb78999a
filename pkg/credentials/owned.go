package credentials

import (
	"sync"
	"time"
	_ "unsafe" // go:linkname

	"k8s.io/client-go/pkg/apis/clientauthentication"
	"k8s.io/client-go/plugin/pkg/client/auth/exec"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// client-go's exec.GetAuthenticator keeps every Authenticator it builds in
// a process-global cache keyed by its config and cluster (which holds the
// gateway's per-cluster data), and every Authenticator that ran its plugin
// in a process-global map for a certificate-expiry metric: neither ever
// forgets one. A deleted or changed ClusterGateway would leave its
// Authenticator, its last credential included, for the process's life.
// So the gateway builds each Authenticator in a cache of its own and drops
// it from the expiry map when the gateway lets it go (released, tested by
// TestReleasedAuthenticatorIsCollected). Both reach into client-go v0.37's
// exec package; that test fails if a new client-go changes what they rely on.

//go:linkname execNewCache k8s.io/client-go/plugin/pkg/client/auth/exec.newCache
func execNewCache() *execCache

//go:linkname execNewAuthenticator k8s.io/client-go/plugin/pkg/client/auth/exec.newAuthenticator
func execNewAuthenticator(c *execCache, isTerminal func(int) bool, config *clientcmdapi.ExecConfig, cluster *clientauthentication.Cluster) (*exec.Authenticator, error)

//go:linkname execExpirationMetrics k8s.io/client-go/plugin/pkg/client/auth/exec.expirationMetrics
var execExpirationMetrics *execExpirationTracker

// execCache is exec's cache, only ever handled by pointer.
type execCache struct{}

// execExpirationTracker mirrors exec's certificateExpirationTracker.
type execExpirationTracker struct {
	mu        sync.RWMutex
	m         map[*exec.Authenticator]time.Time
	metricSet func(*time.Time)
}

// newOwnedAuthenticator is client-go's Authenticator for config and
// cluster, in a cache of its own: nothing but its owner holds it until it
// runs the plugin (then see released).
func newOwnedAuthenticator(config *clientcmdapi.ExecConfig, cluster *clientauthentication.Cluster) (*exec.Authenticator, error) {
	return execNewAuthenticator(execNewCache(), func(int) bool { return false }, config, cluster)
}

// released forgets a: exec's expiry map no longer holds it.
func released(a *exec.Authenticator) {
	t := execExpirationMetrics
	t.mu.Lock()
	delete(t.m, a)
	t.mu.Unlock()
}
