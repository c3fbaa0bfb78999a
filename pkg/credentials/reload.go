package credentials

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"reflect"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// Reload makes cfg the providers' configuration. Gateways whose provider's
// definition changed (its exec section, timeout or KEP-5339 policies, or it was added or
// removed) lose their Authenticator: their next request runs the new one,
// and OnChange is told. Every other gateway keeps its Authenticator and
// credential, and nothing that is open (a stream, a pooled connection) is
// touched: a credential is sent when a request starts. It returns the
// gateways that changed.
func (p *Providers) Reload(cfg *Config) []string {
	p.mu.Lock()
	old := p.cfg.Swap(cfg)
	var changed []string
	for name, e := range p.clusters {
		if sameProvider(old.provider(e.name), cfg.provider(e.name)) {
			continue
		}
		e.release()
		delete(p.clusters, name)
		changed = append(changed, name)
	}
	// Their messages name the configured providers.
	p.unknown.Clear()
	p.mu.Unlock()
	if fn := p.onChange.Load(); fn != nil {
		for _, name := range changed {
			(*fn)(name)
		}
	}
	return changed
}

func sameProvider(a, b *Provider) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.timeout == b.timeout && reflect.DeepEqual(a.Exec, b.Exec) &&
		a.ProfileSourcedCLIArgsPolicy == b.ProfileSourcedCLIArgsPolicy && a.ProfileSourcedEnvVarsPolicy == b.ProfileSourcedEnvVarsPolicy
}

// WatchConfig reads the providers file at path every interval until ctx
// ends and reloads p when its content changes. A file that cannot be read
// or is not valid keeps the last good configuration: the log says why and
// the reload metric counts a failure; the same bad content is reported once.
func (p *Providers) WatchConfig(ctx context.Context, path string, defaultTimeout, interval time.Duration) {
	// What the gateway runs: a change made after the flags were read is a change.
	var last []byte
	if cfg := p.cfg.Load(); cfg != nil {
		last = cfg.raw
	}
	if last == nil {
		last, _ = os.ReadFile(path)
	}
	p.metrics.reloadOK.Set(1)
	reported := "" // the problem last logged, so each is logged once
	fail := func(key string, err error, msg string) {
		if key != reported {
			klog.ErrorS(err, msg, "path", path)
			p.metrics.reloaded(false)
			reported = key
		}
	}
	wait.UntilWithContext(ctx, func(context.Context) {
		raw, err := os.ReadFile(path)
		if err != nil {
			fail("read "+err.Error(), err, "Cannot read --credential-providers-file: keeping the last good configuration")
			return
		}
		if bytes.Equal(raw, last) {
			if reported != "" {
				reported = "" // back to the content in use
				p.metrics.reloadOK.Set(1)
			}
			return
		}
		sum := sha256.Sum256(raw)
		key := string(sum[:])
		if key == reported {
			return
		}
		cfg, err := parseConfig(raw)
		if err == nil {
			err = cfg.validate(defaultTimeout)
		}
		if err != nil {
			fail(key, err, "The changed --credential-providers-file is not valid: keeping the last good configuration until it is fixed")
			return
		}
		last, reported = raw, ""
		cfg.raw = raw
		changed := p.Reload(cfg)
		p.metrics.reloaded(true)
		klog.InfoS("Reloaded --credential-providers-file", "path", path, "providers", cfg.Names(), "gatewaysChanged", len(changed))
	}, interval)
}

// ReloadConfig says where the providers file is and how often to look at
// it (cmd/apiserver/app/options sets it from the flags).
type ReloadConfig struct {
	File           string
	DefaultTimeout time.Duration
	Interval       time.Duration // 0: never reload
}
