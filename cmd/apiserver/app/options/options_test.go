package options

import (
	"math"
	"net"
	"strconv"
	"strings"
	"testing"

	genericoptions "k8s.io/apiserver/pkg/server/options"

	"github.com/clustergateway/cluster-gateway/internal/testpki"
)

// testOptions are the defaults, with the self-signed serving certificate
// that Complete makes kept in the test's own directory.
func testOptions(t *testing.T) *Options {
	o := NewOptions()
	o.Recommended.SecureServing.ServerCert.CertDirectory = t.TempDir()
	return o
}

// Every component's flags are validated in one pass, the same way: each
// invalid value is named by its flag, and the shared flags (--retire-grace-
// period, --dial-timeout) mean one thing for the pool and the tunnel.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string // in the error; none: valid
	}{
		{args: nil},
		{args: []string{"--retire-grace-period=0", "--pool-idle-ttl=0"}}, // 0: at once, never
		{args: []string{"--pool-capacity=0"}, want: []string{"--pool-capacity must be at least 1"}},
		{args: []string{"--retire-grace-period=-1s", "--dial-timeout=0s"}, want: []string{"--retire-grace-period must not be negative", "--dial-timeout must be positive"}},
		{args: []string{"--konnectivity-server-address=127.0.0.1:8090", "--retire-grace-period=-1s"},
			want: []string{"--konnectivity-ca-file, --konnectivity-cert-file and --konnectivity-key-file are all required", "--retire-grace-period must not be negative"}},
		{args: []string{"--konnectivity-server-address=nohostport", "--konnectivity-ca-file=a", "--konnectivity-cert-file=b", "--konnectivity-key-file=c"},
			want: []string{"--konnectivity-server-address must be host:port"}},
		{args: []string{"--konnectivity-server-address=127.0.0.1:8090,127.0.0.2:8090", "--konnectivity-ca-file=a", "--konnectivity-cert-file=b", "--konnectivity-key-file=c"}},
		{args: []string{"--konnectivity-server-address=127.0.0.1:8090,127.0.0.1:8090", "--konnectivity-ca-file=a", "--konnectivity-cert-file=b", "--konnectivity-key-file=c", "--konnectivity-health-timeout=0s"},
			want: []string{"--konnectivity-server-address lists 127.0.0.1:8090 twice", "--konnectivity-health-timeout must be positive"}},
		{args: []string{"--endpoint-deny-cidrs=169.254.0.0"}, want: []string{"--endpoint-deny-cidrs"}},
		{args: []string{"--secret-namespace="}, want: []string{"--secret-namespace must not be empty"}},
		{args: []string{"--max-requests-per-cluster=0", "--max-streams-per-cluster=0", "--max-queued-per-cluster=0", "--queue-wait-timeout=0"}}, // no bounds
		{args: []string{"--max-requests-per-cluster=-1", "--max-queued-per-cluster=-2"},
			want: []string{"--max-requests-per-cluster must not be negative", "--max-queued-per-cluster must not be negative"}},
		{args: []string{"--queue-wait-timeout=0"}, want: []string{"--queue-wait-timeout must be positive when --max-queued-per-cluster is"}},
		{args: []string{"--shutdown-send-retry-after=true", "--shutdown-watch-termination-grace-period=5s"},
			want: []string{"--shutdown-send-retry-after is not supported", "--shutdown-watch-termination-grace-period is not supported"}},
		{args: []string{"--ab-stock-proxy-path=true"}},
		{args: []string{"--per-cluster-metrics-max-clusters=100"}},
		{args: []string{"--per-cluster-metrics-max-clusters=-1"}, want: []string{"--per-cluster-metrics-max-clusters must not be negative"}},
		{args: []string{"--ab-stock-handler-chain=true", "--ab-stock-proxy-path=true"}, want: []string{"set one at most"}},
		{args: []string{"--fanout-max-clusters=0", "--fanout-cluster-timeout=0", "--fanout-first-row-wait=0"}}, // every cluster at once; the request's timeout only; the answer begins with the first page
		{args: []string{"--fanout-max-clusters=-1", "--fanout-cluster-timeout=-1s", "--fanout-first-row-wait=-1s", "--fanout-page-size=0"},
			want: []string{"--fanout-max-clusters must not be negative", "--fanout-cluster-timeout must not be negative", "--fanout-first-row-wait must not be negative", "--fanout-page-size must be at least 1"}},
		{args: []string{"--max-requests-per-cluster=150", "--max-queued-per-cluster=50"},
			want: []string{"--max-requests-per-cluster + --max-queued-per-cluster (200) must be less than --max-mutating-requests-inflight (200)"}},
	} {
		o := testOptions(t)
		fs := o.Flags()
		for _, f := range fs.FlagSets {
			for _, a := range tc.args {
				name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
				if fl := f.Lookup(name); fl != nil {
					if err := f.Set(name, value); err != nil {
						t.Fatalf("%s: %v", a, err)
					}
				}
			}
		}
		if err := o.Complete(); err != nil {
			t.Fatalf("%v: Complete: %v", tc.args, err)
		}
		err := o.Validate()
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("%v: %v, want valid", tc.args, err)
			}
			continue
		}
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %v, want it to say %q", tc.args, err, w)
			}
		}
		// A shared flag's problem is reported once.
		if err != nil && strings.Count(err.Error(), "--retire-grace-period must not be negative") > 1 {
			t.Errorf("%v: reported twice: %v", tc.args, err)
		}
	}
}

// A huge --max-queued-per-cluster is refused like a merely large one: the
// sum with --max-requests-per-cluster must not overflow and slip past the
// check that keeps one saturated cluster from taking every in-flight slot.
func TestHugeMaxQueuedRefused(t *testing.T) {
	for _, q := range []int{1000, math.MaxInt} {
		o := NewOptions()
		fs := o.Flags()
		if err := fs.FlagSet("per-cluster limits").Set("max-queued-per-cluster", strconv.Itoa(q)); err != nil {
			t.Fatal(err)
		}
		err := o.Validate()
		if err == nil || !strings.Contains(err.Error(), "must be less than --max-requests-inflight") {
			t.Errorf("--max-queued-per-cluster=%d: %v, want it refused against --max-requests-inflight", q, err)
		}
	}
}

// The generic server and the certificate cache verify users' client
// certificates with one CA provider, so a CA removed from the bundle is
// refused by both at the same moment (TestClientCARotation, end to end).
func TestOneClientCAProvider(t *testing.T) {
	dir := t.TempDir()
	caFile, _, err := testpki.MustCA(t, "options-client-ca").WriteFiles(dir, "client-ca")
	if err != nil {
		t.Fatal(err)
	}
	o := NewOptions()
	o.Recommended.SecureServing.ServerCert.CertDirectory = dir
	o.Recommended.SecureServing.BindPort = 0
	o.Recommended.SecureServing.Listener, o.Recommended.SecureServing.BindPort, err = genericoptions.CreateListener("tcp", "127.0.0.1:0", net.ListenConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Recommended.SecureServing.Listener.Close()
	a := o.Recommended.Authentication
	a.ClientCert.ClientCA = caFile
	a.SkipInClusterLookup = true // no request-header CA: the serving CA is the client CA alone
	a.RemoteKubeConfigFileOptional = true
	o.Recommended.Authorization, o.Recommended.CoreAPI = nil, nil
	if err := o.Complete(); err != nil { // the self-signed serving certificate
		t.Fatal(err)
	}
	cfg, err := o.ServerConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Extra.ClientCA == nil {
		t.Fatal("the certificate cache has no client CA")
	}
	if cfg.Generic.SecureServing.ClientCA != cfg.Extra.ClientCA {
		t.Fatalf("the generic server verifies client certificates with %v (%T), the certificate cache with %v (%T): want one provider",
			cfg.Generic.SecureServing.ClientCA, cfg.Generic.SecureServing.ClientCA, cfg.Extra.ClientCA, cfg.Extra.ClientCA)
	}
	if a.ClientCert.CAContentProvider != nil {
		t.Fatal("ServerConfig changed the options it was given")
	}
}
