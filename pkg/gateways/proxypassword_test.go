package gateways

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clustergateway/cluster-gateway/internal/testgateways"
	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// A proxy password that holds a '/' (common in generated, base64-like
// passwords) and is not percent-encoded ends the URL's authority early:
// url.Parse then sees no user info at all. What readers of the gateway (the
// viewer role, aggregated into view) get must still never hold the password.
func TestProxyPasswordWithSlashNotShown(t *testing.T) {
	const secret = "S3cr3tPr0xyPass"
	for _, proxyURL := range []string{
		"http://proxyuser:/" + secret + "@proxy.example:3128",     // password starts with '/': parses, no user info
		"http://proxyuser:4242/" + secret + "@proxy.example:3128", // digits before '/': parses, no user info
		"http://proxyuser:" + secret + "/x@proxy.example:3128",    // does not parse: "invalid port" names the password
	} {
		t.Run(proxyURL, func(t *testing.T) {
			tok := testgateways.TokenGateway("stored-token")
			tok.Spec.Endpoint.ProxyURL = proxyURL
			sec := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: "c2", Namespace: testNamespace, Labels: map[string]string{LabelGateway: "true"}},
				Data: map[string][]byte{
					KeyEndpoint: []byte(tok.Spec.Endpoint.Address), KeyInsecure: []byte("true"), KeyProxyURL: []byte(proxyURL),
					KeyCredentialType: []byte(v1alpha1.CredentialBearerToken), KeyToken: []byte("stored-token"),
				},
			}
			raw, err := json.Marshal(Parse(sec).Public())
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(raw), secret) || strings.Contains(string(raw), secret[:4]) {
				t.Errorf("a reader of the gateway sees the proxy password: %s", raw)
			}
		})
	}
	// The same for user info in a hand-written endpoint: not Ready, but shown
	// (and, where it does not parse, named in the condition's message).
	for _, address := range []string{
		"https://admin:" + secret + "@127.0.0.3:6443",
		"https://admin:/" + secret + "@127.0.0.3:6443",
		"https://admin:" + secret + "/x@127.0.0.3:6443", // "invalid port"
	} {
		t.Run("endpoint "+address, func(t *testing.T) {
			sec := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: "c3", Namespace: testNamespace, Labels: map[string]string{LabelGateway: "true"}},
				Data: map[string][]byte{
					KeyEndpoint: []byte(address), KeyInsecure: []byte("true"),
					KeyCredentialType: []byte(v1alpha1.CredentialBearerToken), KeyToken: []byte("stored-token"),
				},
			}
			raw, err := json.Marshal(Parse(sec).Public())
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(raw), secret[:4]) {
				t.Errorf("a reader of the gateway sees the password in the endpoint: %s", raw)
			}
		})
	}
}
