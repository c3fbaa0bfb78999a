package pool

import (
	"net/url"
	"testing"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
)

// BenchmarkAcquireRelease is the per-request cost of the pool itself (a
// lookup, a comparison with the entry's Target, a lease, as the proxy takes
// it), with a realistic CA and client cert.
func BenchmarkAcquireRelease(b *testing.B) {
	ca := testpki.MustCA(b, "ca")
	client := ca.MustIssue(b, testpki.Spec{CommonName: "client", Client: true})
	p := mustNew(b, Config{Capacity: 16})
	defer p.Close()
	tg := &Target{
		Cluster:  "bench",
		Address:  &url.URL{Scheme: "https", Host: "127.0.0.1:6443"},
		CAData:   ca.CertPEM,
		CertData: client.CertPEM,
		KeyData:  client.KeyPEM,
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l, err := p.Acquire(tg)
			if err != nil {
				b.Error(err)
				return
			}
			l.Release()
		}
	})
	if p.Stats().Created != 1 {
		b.Errorf("created %d entries, want 1", p.Stats().Created)
	}
}
