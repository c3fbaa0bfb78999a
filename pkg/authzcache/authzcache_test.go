package authzcache

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	clocktesting "k8s.io/utils/clock/testing"
)

// counting answers with decide and counts the questions.
type counting struct {
	calls  atomic.Int64
	decide func(authorizer.Attributes) (authorizer.Decision, string, error)
	gate   chan struct{} // when set, every question waits for it
}

func (c *counting) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	c.calls.Add(1)
	if c.gate != nil {
		<-c.gate
	}
	if c.decide == nil {
		return authorizer.DecisionAllow, "ok", nil
	}
	return c.decide(a)
}

func (c *counting) ConditionsAwareAuthorize(ctx context.Context, a authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(c.Authorize(ctx, a))
}

func (*counting) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

func base() *authorizer.AttributesRecord {
	return &authorizer.AttributesRecord{
		User:            &user.DefaultInfo{Name: "alice", UID: "u1", Groups: []string{"g1", "g2"}, Extra: map[string][]string{"scope": {"a", "b"}}},
		Verb:            "get",
		Namespace:       "",
		APIGroup:        "gateway.clustergateway.io",
		APIVersion:      "v1alpha1",
		Resource:        "clustergateways",
		Subresource:     "proxy",
		Name:            "prod",
		ResourceRequest: true,
		Path:            "/apis/gateway.clustergateway.io/v1alpha1/clustergateways/prod/proxy/api",
	}
}

func newCache(t *testing.T, next authorizer.Authorizer, clk *clocktesting.FakeClock) *Authorizer {
	t.Helper()
	a, err := newWithClock(next, Options{Size: 100, AllowTTL: 10 * time.Second, DenyTTL: 5 * time.Second}, clk)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// A decision is asked for once per TTL, and only for the same attributes:
// a request that differs in any one attribute the hub's decision may
// depend on is asked for on its own, never answered with another's.
func TestEveryAttributeIsPartOfTheKey(t *testing.T) {
	next := &counting{}
	a := newCache(t, next, clocktesting.NewFakeClock(time.Now()))
	ctx := context.Background()
	ask := func(attr authorizer.Attributes) {
		t.Helper()
		if d, _, err := a.Authorize(ctx, attr); d != authorizer.DecisionAllow || err != nil {
			t.Fatalf("decision %v, err %v", d, err)
		}
	}
	ask(base())
	ask(base())
	if got := next.calls.Load(); got != 1 {
		t.Fatalf("the same attributes twice: %d questions, want 1", got)
	}
	variants := map[string]func(r *authorizer.AttributesRecord){
		"user":             func(r *authorizer.AttributesRecord) { r.User.(*user.DefaultInfo).Name = "bob" },
		"uid":              func(r *authorizer.AttributesRecord) { r.User.(*user.DefaultInfo).UID = "u2" },
		"one group less":   func(r *authorizer.AttributesRecord) { r.User.(*user.DefaultInfo).Groups = []string{"g1"} },
		"groups merged":    func(r *authorizer.AttributesRecord) { r.User.(*user.DefaultInfo).Groups = []string{"g1g2"} },
		"groups reordered": func(r *authorizer.AttributesRecord) { r.User.(*user.DefaultInfo).Groups = []string{"g2", "g1"} },
		"extra value": func(r *authorizer.AttributesRecord) {
			r.User.(*user.DefaultInfo).Extra = map[string][]string{"scope": {"a"}}
		},
		"extra key": func(r *authorizer.AttributesRecord) {
			r.User.(*user.DefaultInfo).Extra = map[string][]string{"scope2": {"a", "b"}}
		},
		"extra split": func(r *authorizer.AttributesRecord) {
			r.User.(*user.DefaultInfo).Extra = map[string][]string{"scope": {"ab"}}
		},
		"no user":     func(r *authorizer.AttributesRecord) { r.User = nil },
		"verb":        func(r *authorizer.AttributesRecord) { r.Verb = "create" },
		"namespace":   func(r *authorizer.AttributesRecord) { r.Namespace = "default" },
		"api group":   func(r *authorizer.AttributesRecord) { r.APIGroup = "" },
		"api version": func(r *authorizer.AttributesRecord) { r.APIVersion = "v1" },
		"resource":    func(r *authorizer.AttributesRecord) { r.Resource = "secrets" },
		"subresource": func(r *authorizer.AttributesRecord) { r.Subresource = "health" },
		"name":        func(r *authorizer.AttributesRecord) { r.Name = "staging" },
		"name into subresource": func(r *authorizer.AttributesRecord) {
			r.Subresource, r.Name = "proxyprod", ""
		},
		"non-resource": func(r *authorizer.AttributesRecord) { r.ResourceRequest = false },
		"field selector": func(r *authorizer.AttributesRecord) {
			r.FieldSelectorRequirements = fields.Requirements{{Operator: selection.Equals, Field: "metadata.name", Value: "prod"}}
		},
		"label selector": func(r *authorizer.AttributesRecord) {
			req, err := labels.NewRequirement("env", selection.Equals, []string{"prod"})
			if err != nil {
				t.Fatal(err)
			}
			r.LabelSelectorRequirements = labels.Requirements{*req}
		},
	}
	want := int64(1)
	for name, change := range variants {
		r := base()
		change(r)
		ask(r)
		want++
		if got := next.calls.Load(); got != want {
			t.Fatalf("%s: answered from another request's decision (%d questions, want %d)", name, got, want)
		}
		ask(r) // and now it is cached itself
		if got := next.calls.Load(); got != want {
			t.Fatalf("%s: not cached (%d questions, want %d)", name, got, want)
		}
	}
	// A non-resource request is keyed by its path and verb.
	nr := func(path string) *authorizer.AttributesRecord {
		return &authorizer.AttributesRecord{User: &user.DefaultInfo{Name: "alice"}, Verb: "get", Path: path}
	}
	ask(nr("/healthz"))
	ask(nr("/metrics"))
	ask(nr("/healthz"))
	if got := next.calls.Load(); got != want+2 {
		t.Fatalf("non-resource paths: %d questions, want %d", got, want+2)
	}
}

// Allowed decisions are kept for the allowed TTL, denied and no-opinion ones
// for the unauthorized TTL; then the next request asks again and gets the
// new answer (a revoked binding takes effect).
func TestDecisionsExpire(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	allowed := atomic.Bool{}
	allowed.Store(true)
	next := &counting{decide: func(a authorizer.Attributes) (authorizer.Decision, string, error) {
		if a.GetVerb() == "delete" {
			return authorizer.DecisionDeny, "never", nil
		}
		if allowed.Load() {
			return authorizer.DecisionAllow, "bound", nil
		}
		return authorizer.DecisionNoOpinion, "no binding", nil
	}}
	a := newCache(t, next, clk)
	ctx := context.Background()
	get, del := base(), base()
	del.Verb = "delete"

	if d, reason, _ := a.Authorize(ctx, get); d != authorizer.DecisionAllow || reason != "bound" {
		t.Fatalf("get: %v %q", d, reason)
	}
	if d, _, _ := a.Authorize(ctx, del); d != authorizer.DecisionDeny {
		t.Fatalf("delete: %v", d)
	}
	allowed.Store(false) // the binding is revoked on the hub
	clk.Step(5*time.Second + time.Millisecond)
	if d, _, _ := a.Authorize(ctx, get); d != authorizer.DecisionAllow {
		t.Fatalf("get within the allowed TTL: %v, want the cached allow", d)
	}
	if d, _, _ := a.Authorize(ctx, del); d != authorizer.DecisionDeny || next.calls.Load() != 3 {
		t.Fatalf("delete after the unauthorized TTL: %v after %d questions, want deny asked again (3)", d, next.calls.Load())
	}
	clk.Step(5 * time.Second)
	if d, reason, _ := a.Authorize(ctx, get); d != authorizer.DecisionNoOpinion || reason != "no binding" {
		t.Fatalf("get after the allowed TTL: %v %q, want the hub's new answer", d, reason)
	}
	if d, _, _ := a.Authorize(ctx, get); d != authorizer.DecisionNoOpinion || next.calls.Load() != 4 {
		t.Fatalf("the new no-opinion: %v after %d questions, want it cached (4)", d, next.calls.Load())
	}
}

// An error (the hub could not be asked) is returned and never cached.
func TestErrorsAreNotCached(t *testing.T) {
	fail := atomic.Bool{}
	fail.Store(true)
	next := &counting{decide: func(authorizer.Attributes) (authorizer.Decision, string, error) {
		if fail.Load() {
			return authorizer.DecisionNoOpinion, "", errors.New("hub unreachable")
		}
		return authorizer.DecisionAllow, "", nil
	}}
	a := newCache(t, next, clocktesting.NewFakeClock(time.Now()))
	if d, _, err := a.Authorize(context.Background(), base()); d != authorizer.DecisionNoOpinion || err == nil {
		t.Fatalf("%v %v, want the error", d, err)
	}
	fail.Store(false)
	if d, _, err := a.Authorize(context.Background(), base()); d != authorizer.DecisionAllow || err != nil || next.calls.Load() != 2 {
		t.Fatalf("%v %v after %d questions, want the hub asked again and allow", d, err, next.calls.Load())
	}
}

// Concurrent requests that miss with the same attributes wait for one
// question; one that gives up waiting does not fail the others.
func TestConcurrentMissesAskOnce(t *testing.T) {
	next := &counting{gate: make(chan struct{})}
	a := newCache(t, next, clocktesting.NewFakeClock(time.Now()))
	const waiters = 64
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	for range waiters {
		wg.Go(func() {
			if d, _, err := a.Authorize(context.Background(), base()); d != authorizer.DecisionAllow || err != nil {
				errs <- errors.New("a waiter did not get the shared allow")
			}
		})
	}
	impatient, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		_, _, err := a.Authorize(impatient, base())
		gaveUp <- err
	}()
	for next.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled request: %v, want context.Canceled", err)
	}
	time.Sleep(10 * time.Millisecond) // let the others reach the wait
	close(next.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := next.calls.Load(); got != 1 {
		t.Fatalf("%d concurrent misses asked %d times, want once", waiters+1, got)
	}
}

// The cache holds at most Size decisions; oversized attributes and
// selectors that did not parse are never cached (asked every time).
func TestBoundedAndUncachable(t *testing.T) {
	next := &counting{}
	a, err := newWithClock(next, Options{Size: 10, AllowTTL: time.Minute, DenyTTL: time.Minute}, clocktesting.NewFakeClock(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		r := base()
		r.Name = strings.Repeat("x", i+1)
		_, _, _ = a.Authorize(context.Background(), r)
	}
	if n := len(a.cache.Keys()); n > 10 {
		t.Fatalf("%d decisions kept, want at most 10", n)
	}
	huge := base()
	huge.Name = strings.Repeat("n", maxAttributesSize)
	bad := base()
	bad.FieldSelectorParsingErr = errors.New("bad selector")
	for _, r := range []*authorizer.AttributesRecord{huge, bad} {
		before := next.calls.Load()
		_, _, _ = a.Authorize(context.Background(), r)
		_, _, _ = a.Authorize(context.Background(), r)
		if got := next.calls.Load() - before; got != 2 {
			t.Fatalf("uncachable attributes asked %d times for 2 requests", got)
		}
	}
	if _, err := New(next, Options{Size: 0}); err == nil {
		t.Fatal("size 0 accepted")
	}
}

// entries counts what the cache holds, expired decisions included.
func entries(a *Authorizer) int {
	n := 0
	a.cache.RemoveAll(func(any) bool { n++; return false })
	return n
}

// Expired decisions are dropped, whether allowed or denied, and unexpired
// ones stay and are still answered from the cache.
func TestExpiredDecisionsAreDropped(t *testing.T) {
	next := &counting{decide: func(a authorizer.Attributes) (authorizer.Decision, string, error) {
		if strings.HasPrefix(a.GetName(), "deny") {
			return authorizer.DecisionDeny, "no", nil
		}
		return authorizer.DecisionAllow, "ok", nil
	}}
	clk := clocktesting.NewFakeClock(time.Now())
	a := newCache(t, next, clk) // allowed kept 10s, denied 5s
	ctx := context.Background()
	ask := func(name string) {
		t.Helper()
		attr := base()
		attr.Name = name
		if _, _, err := a.Authorize(ctx, attr); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"allow-1", "allow-2", "allow-3", "deny-1", "deny-2"} {
		ask(n)
	}
	if got := entries(a); got != 5 {
		t.Fatalf("%d decisions cached, want 5", got)
	}
	clk.Step(6 * time.Second) // the denied ones have expired
	a.dropExpired()
	if got := entries(a); got != 3 {
		t.Fatalf("%d decisions kept after the denied ones expired, want the 3 allowed", got)
	}
	ask("allow-4")
	clk.Step(5 * time.Second) // allow-1..3 expired at 10s; allow-4 lives until 16s
	a.dropExpired()
	if got := entries(a); got != 1 {
		t.Fatalf("%d decisions kept, want only allow-4", got)
	}
	calls := next.calls.Load()
	ask("allow-4")
	if next.calls.Load() != calls {
		t.Fatal("the unexpired decision was dropped: asked again")
	}
	ask("allow-1")
	if next.calls.Load() != calls+1 {
		t.Fatal("an expired decision was answered from the cache")
	}
}

// Run sweeps every TTL until its context ends: a burst that filled the
// cache leaves nothing once its decisions have expired.
func TestRunDropsExpiredDecisions(t *testing.T) {
	next := &counting{}
	clk := clocktesting.NewFakeClock(time.Now())
	a := newCache(t, next, clk)
	for i := range 100 { // Size
		attr := base()
		attr.Name = "cluster-" + strings.Repeat("x", i)
		if _, _, err := a.Authorize(context.Background(), attr); err != nil {
			t.Fatal(err)
		}
	}
	if got := entries(a); got != 100 {
		t.Fatalf("%d decisions cached, want 100", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	// Step once Run's ticker exists, and again until it has swept.
	deadline := time.Now().Add(10 * time.Second)
	for entries(a) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d expired decisions still cached after Run's ticks", entries(a))
		}
		if clk.HasWaiters() {
			clk.Step(10 * time.Second)
		}
		time.Sleep(time.Millisecond)
	}
}

// A count (of groups, extra keys, an extra key's values, selector
// requirements) followed by a length-prefixed field must not read as another
// count and length: one group of 150 bytes was written "1" "150:..." and
// eleven groups, the first of 50 bytes, "11" "50:...", the same key.
func TestCountsAndLengthsDoNotRunTogether(t *testing.T) {
	first, last := strings.Repeat("a", 50), strings.Repeat("b", 79)
	one := []string{first + strings.Repeat("0:", 9) + "79:" + last}       // 150 bytes
	eleven := append(append([]string{first}, make([]string, 9)...), last) // 50, nine empty, 79
	pairs := map[string][2]*user.DefaultInfo{
		"groups": {
			{Name: "alice", Groups: one},
			{Name: "alice", Groups: eleven},
		},
		"an extra key's values": {
			{Name: "alice", Extra: map[string][]string{"scope": one}},
			{Name: "alice", Extra: map[string][]string{"scope": eleven}},
		},
	}
	for name, p := range pairs {
		a, b := base(), base()
		a.User, b.User = p[0], p[1]
		ka, okA := key(a)
		kb, okB := key(b)
		if !okA || !okB {
			t.Fatalf("%s: not cachable", name)
		}
		if ka == kb {
			t.Errorf("%s: %d and %d values share the key %q", name, len(p[0].Groups)+len(p[0].Extra["scope"]), len(p[1].Groups)+len(p[1].Extra["scope"]), ka)
		}
	}
}
