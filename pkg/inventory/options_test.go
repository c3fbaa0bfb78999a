package inventory

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestOptionsValidate(t *testing.T) {
	if errs := NewOptions().Validate(); len(errs) > 0 {
		t.Errorf("the defaults (off): %v", errs)
	}
	on := func(edit func(*Options)) *Options {
		o := NewOptions()
		o.Sources = []string{"capi"}
		edit(o)
		return o
	}
	if errs := on(func(*Options) {}).Validate(); len(errs) > 0 {
		t.Errorf("--inventory-sync=capi: %v", errs)
	}
	for _, c := range []struct {
		o    *Options
		want string
	}{
		{on(func(o *Options) { o.Sources = []string{"capi", "cluster-api"} }), `"cluster-api" is not an inventory`},
		{on(func(o *Options) { o.Sources = []string{"clusterprofile"} }), "needs --inventory-sync-providers"},
		{on(func(o *Options) { o.Providers = []string{"Not_A_Name"} }), "is not a provider name"},
		{on(func(o *Options) { o.LeaseDuration = o.RenewDeadline }), "--inventory-sync-lease-duration"},
		{on(func(o *Options) { o.RetryPeriod = 9 * time.Second }), "--inventory-sync-renew-deadline"},
		{on(func(o *Options) { o.RetryPeriod = 0 }), "--inventory-sync-retry-period must be positive"},
	} {
		if err := errors.Join(c.o.Validate()...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", c.o, err, c.want)
		}
	}
}
