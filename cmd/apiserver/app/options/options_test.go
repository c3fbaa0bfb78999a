package options

import (
	"math"
	"strconv"
	"strings"
	"testing"
)

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
		{args: []string{"--endpoint-deny-cidrs=169.254.0.0"}, want: []string{"--endpoint-deny-cidrs"}},
		{args: []string{"--secret-namespace="}, want: []string{"--secret-namespace must not be empty"}},
		{args: []string{"--max-requests-per-cluster=0", "--max-streams-per-cluster=0", "--max-queued-per-cluster=0", "--queue-wait-timeout=0"}}, // no bounds
		{args: []string{"--max-requests-per-cluster=-1", "--max-queued-per-cluster=-2"},
			want: []string{"--max-requests-per-cluster must not be negative", "--max-queued-per-cluster must not be negative"}},
		{args: []string{"--queue-wait-timeout=0"}, want: []string{"--queue-wait-timeout must be positive when --max-queued-per-cluster is"}},
		{args: []string{"--shutdown-send-retry-after=true", "--shutdown-watch-termination-grace-period=5s"},
			want: []string{"--shutdown-send-retry-after is not supported", "--shutdown-watch-termination-grace-period is not supported"}},
		{args: []string{"--max-requests-per-cluster=150", "--max-queued-per-cluster=50"},
			want: []string{"--max-requests-per-cluster + --max-queued-per-cluster (200) must be less than --max-mutating-requests-inflight (200)"}},
	} {
		o := NewOptions()
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
