package e2e

import (
	"testing"
)

// The gateway verifies a client-certificate chain once, not per request: 100
// requests through the hub (each authenticated by the hub's front-proxy
// certificate, the user read from its headers) are all served from the
// certificate cache, and none verifies a chain again.
func TestAuthenticationCertificateCache(t *testing.T) {
	const (
		hits   = "cluster_gateway_authentication_certificate_cache_hits_total"
		misses = "cluster_gateway_authentication_certificate_cache_misses_total"
	)
	gw := directGateway(uniqueName(t, "authn-cache"), 0)
	createGateway(t, gw)
	path := "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/" + gw.Name + "/proxy/api/v1/namespaces/default"
	if code, body := hubGet(t, path); code != 200 { // the front-proxy chain is verified here, at the latest
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	before := gatewayMetrics(t) // and the admin's chain, for the scrapes
	const requests = 100
	for range requests {
		if code, body := hubGet(t, path); code != 200 {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
	}
	after := gatewayMetrics(t)
	// The second scrape's own certificate (the admin's) is tried as the
	// front proxy's first, and that refusal is never kept: one miss.
	if got := after[misses] - before[misses]; got != 1 {
		t.Errorf("%v chains verified during %d requests with certificates already seen and one scrape, want 1 (the scrape's refusal as the front proxy)", got, requests)
	}
	if got := after[hits] - before[hits]; got < requests {
		t.Errorf("%v certificate-cache hits for %d requests, want every request authenticated from the cache", got, requests)
	}
}
