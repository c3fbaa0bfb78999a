package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/clustergateway/cluster-gateway/hack/localenv"
	"github.com/clustergateway/cluster-gateway/pkg/gateways"
)

// benchLabel marks the gateways created here, to list and delete them at once.
const benchLabel = "cluster-gateway-bench"

// pooledResult is the gateway with no extra gateways, with n stored but
// unused, with n pooled (one request through each), right after deletion,
// and once their memory is released.
type pooledResult struct {
	N                             int
	Base, Stored, Pooled, Deleted memState
	Released                      memState // once the heap in use is back near Base
	CreateTime, RequestTime       time.Duration
	DeleteTime, ReleaseTime       time.Duration
}

// measurePooled creates n ClusterGateways as Secrets on the hub, sends one
// request through each on the gateway's port, and deletes them, reading the
// gateway after forced GCs (medianAfterGC, as the scan does) at each step.
func measurePooled(ctx context.Context, env *localenv.Env, gw *gatewayAdmin, n, conc int, profileDir string) (*pooledResult, error) {
	secrets, err := hubSecrets(env)
	if err != nil {
		return nil, err
	}
	res := &pooledResult{N: n}
	var none time.Duration
	for _, st := range []struct {
		name string
		m    *memState
		took *time.Duration // how long f took
		f    func() error
	}{
		{"before", &res.Base, &none, func() error { return nil }},
		{"stored", &res.Stored, &res.CreateTime, func() error { return createGateways(ctx, secrets, env, gw, n, conc) }},
		{"pooled", &res.Pooled, &res.RequestTime, func() error {
			return parallel(ctx, n, conc, func(i int) error {
				url := gw.env.Gateway.URL + gatewaysPath + benchName(i) + "/proxy" + requestPath
				_, err := poll(ctx, 100*time.Millisecond, time.Minute, "GET "+url, func(ctx context.Context) error {
					err := get(ctx, gw.client, url)
					if err != nil && strings.Contains(err.Error(), "404") {
						return retry{err} // the informer has not seen it yet
					}
					return err
				})
				return err
			})
		}},
		{"deleted", &res.Deleted, &res.DeleteTime, func() error {
			if err := secrets.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: benchLabel + "=true"}); err != nil {
				return fmt.Errorf("delete gateways: %w", err)
			}
			return waitPoolBack(ctx, gw, res.Base.gwState)
		}},
	} {
		start := time.Now()
		if err := st.f(); err != nil {
			return nil, fmt.Errorf("%s: %w", st.name, err)
		}
		*st.took = time.Since(start)
		if *st.m, err = medianAfterGC(ctx, gw, filepath.Join(profileDir, "gateway-heap-"+st.name+".pprof")); err != nil {
			return nil, err
		}
	}
	// The heap in use comes back as the spans that held the entries empty
	// out: one forced GC per look, for up to a minute.
	start := time.Now()
	for {
		if err := sleep(ctx, 5*time.Second); err != nil {
			return nil, err
		}
		if res.Released, err = afterGC(ctx, gw, filepath.Join(profileDir, "gateway-heap-released.pprof")); err != nil {
			return nil, err
		}
		if res.Released.Heap-res.Base.Heap <= (res.Pooled.Heap-res.Base.Heap)/10 || time.Since(start) > time.Minute {
			break
		}
	}
	res.ReleaseTime = time.Since(start)
	return res, nil
}

// createGateways creates n bench ClusterGateways with conc clients and
// waits until the gateway lists them all.
func createGateways(ctx context.Context, secrets corev1client.SecretInterface, env *localenv.Env, gw *gatewayAdmin, n, conc int) error {
	if err := parallel(ctx, n, conc, func(i int) error {
		_, err := secrets.Create(ctx, benchSecret(env, i), metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("create gateways: %w", err)
	}
	return waitListed(ctx, gw, n)
}

// The table and figures of section 3 (report.md.tmpl).

// Per is a - b per gateway.
func (p *pooledResult) Per(a, b float64) float64 { return (a - b) / float64(p.N) }

func benchName(i int) string { return fmt.Sprintf("bench-%04d", i) }

func benchSecret(env *localenv.Env, i int) *corev1.Secret {
	m := env.Managed[i%2]
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: benchName(i), Namespace: localenv.GatewayNamespace,
			Labels: map[string]string{gateways.LabelGateway: "true", benchLabel: "true"}},
		Data: map[string][]byte{
			gateways.KeyEndpointType:   []byte("Direct"),
			gateways.KeyEndpoint:       []byte(m.URL),
			gateways.KeyCABundle:       m.CA.CertPEM,
			gateways.KeyCredentialType: []byte("X509Certificate"),
			gateways.KeyCertificate:    m.GatewayUser.CertPEM,
			gateways.KeyPrivateKey:     m.GatewayUser.KeyPEM,
			// The gateway's own label, to list them through the API; the
			// Secret's label above is for deleting the Secrets at once.
			gateways.KeyLabels: []byte(`{"` + benchLabel + `":"true"}`),
		},
	}
}

// waitListed waits until the gateway's cache holds all n bench gateways.
func waitListed(ctx context.Context, gw *gatewayAdmin, n int) error {
	_, err := poll(ctx, 500*time.Millisecond, 2*time.Minute, fmt.Sprintf("the gateway listing %d bench gateways", n), func(ctx context.Context) error {
		body, err := gw.get(ctx, gatewaysPath[:len(gatewaysPath)-1]+"?labelSelector="+benchLabel+"%3Dtrue")
		if listed := strings.Count(body, `"name":"bench-`); err == nil && listed < n {
			err = fmt.Errorf("%d listed", listed)
		}
		return again(err)
	})
	return err
}

// waitPoolBack waits until the deleted gateways' entries are retired and
// their connections closed.
func waitPoolBack(ctx context.Context, gw *gatewayAdmin, base gwState) error {
	_, err := poll(ctx, 500*time.Millisecond, 2*time.Minute, "the pool back to its baseline after deleting the bench gateways", func(ctx context.Context) error {
		s, err := gw.state(ctx)
		if err == nil && (s.Entries > base.Entries || s.Retiring != 0 || s.OpenConns > base.OpenConns) {
			err = fmt.Errorf("%+v, base %+v", s, base)
		}
		return again(err)
	})
	return err
}

// parallel runs f(0..n-1) on conc workers and returns the first error.
func parallel(ctx context.Context, n, conc int, f func(int) error) error {
	var next atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// hubSecrets is a client of the Secrets that store the ClusterGateways, with
// room to create thousands of them quickly.
func hubSecrets(env *localenv.Env) (corev1client.SecretInterface, error) {
	cfg := env.Hub.RESTConfig()
	cfg.QPS, cfg.Burst = 1000, 1000
	hub, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return hub.CoreV1().Secrets(localenv.GatewayNamespace), nil
}

// deleteLabelled deletes the gateways labelled label=true, whatever
// happened to the section (a context of its own): the environment is left as
// it was.
func deleteLabelled(secrets corev1client.SecretInterface, label, section string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := secrets.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: label + "=true"}); err != nil {
		logf("%s: deleting the bench gateways: %v", section, err)
	}
}

// managedAdmins are clients of the first n managed kube-apiservers as their
// admins, with room to create thousands of objects quickly, and namespace
// ns created on each; on an error, those on which it was created.
func managedAdmins(ctx context.Context, env *localenv.Env, n int, ns string) ([]kubernetes.Interface, error) {
	var out []kubernetes.Interface
	for _, c := range env.Managed[:n] {
		cfg := c.RESTConfig()
		cfg.QPS, cfg.Burst = 1000, 1000
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return out, err
		}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return out, fmt.Errorf("namespace %s on %s: %w", ns, c.Name, err)
		}
		out = append(out, cs)
	}
	return out, nil
}
