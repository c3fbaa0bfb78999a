package options

import (
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/clustergateway/cluster-gateway/pkg/pool/konnectivity"
)

// --konnectivity-server-address takes several proxy-servers either way:
// repeated, comma-separated, or both, in the order given.
func TestAddressFlagRepeatedOrCommaSeparated(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--konnectivity-server-address=a.example:8090"}, []string{"a.example:8090"}},
		{[]string{"--konnectivity-server-address=a.example:8090,b.example:8090"}, []string{"a.example:8090", "b.example:8090"}},
		{[]string{"--konnectivity-server-address=a.example:8090", "--konnectivity-server-address=b.example:8090,c.example:8090"},
			[]string{"a.example:8090", "b.example:8090", "c.example:8090"}},
	} {
		o := konnectivity.DefaultConfig()
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		addKonnectivityFlags(o, fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if !slices.Equal(o.Addresses, tc.want) {
			t.Errorf("%v: addresses %q, want %q", tc.args, o.Addresses, tc.want)
		}
	}
}

// An address with white space around it (a list written "a:1, b:2") is
// refused with a message that says so, instead of later failing to resolve
// a host named " b".
func TestAddressWithSpacesRefused(t *testing.T) {
	o := konnectivity.DefaultConfig()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	addKonnectivityFlags(o, fs)
	if err := fs.Parse([]string{"--konnectivity-server-address=a.example:8090, b.example:8090"}); err != nil {
		t.Fatal(err)
	}
	o.CAFile, o.CertFile, o.KeyFile = "ca", "cert", "key"
	errs := o.Validate()
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), `" b.example:8090" has white space`) {
		t.Fatalf("Validate: %v, want one error about the space in \" b.example:8090\"", errs)
	}
}
