// Package authzcache caches the gateway's authorization decisions per caller
// and request attributes, in front of the generic server's authorizer (the
// hub's SubjectAccessReviews through the delegated webhook authorizer, whose
// own cache is then turned off). It does what that cache did, cheaper and
// with concurrent misses merged:
//
//   - the key is the attributes themselves (user, UID, groups, extra; verb,
//     namespace, API group and version, resource, subresource, name, or the
//     non-resource path; field and label selectors), not the JSON of a
//     SubjectAccessReview marshalled on every request;
//   - concurrent requests that miss with the same key wait for one review
//     (the webhook sent one per request until the first answer was cached:
//     a burst of clients after each TTL);
//   - allowed decisions are kept for the allowed TTL, denied and no-opinion
//     ones for the unauthorized TTL, errors never, so a decision is never
//     older than the webhook's cache would have let it be;
//   - expired decisions are dropped (Run), so the cache holds what callers
//     asked in the last TTL or two, not Size decisions long after a burst
//     (a controller that scanned every cluster once).
package authzcache

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/singleflight"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/utils/clock"
)

// maxAttributesSize is the webhook authorizer's bound on what it caches
// (the namespace, verb, group, version, resource, subresource, name and
// path together): larger requests are authorized every time.
const maxAttributesSize = 10000

// Options size and time the cache.
type Options struct {
	// Size bounds the decisions kept (least recently used go first).
	Size int
	// AllowTTL and DenyTTL are how long an allowed, and a denied or
	// no-opinion, decision is kept; 0 keeps none of that kind.
	AllowTTL, DenyTTL time.Duration
}

// Authorizer is next with its decisions cached.
type Authorizer struct {
	next   authorizer.Authorizer
	opts   Options
	clock  clock.WithTicker
	cache  *cache.LRUExpireCache
	flight singleflight.Group
}

// New caches next's decisions.
func New(next authorizer.Authorizer, opts Options) (*Authorizer, error) {
	return newWithClock(next, opts, clock.RealClock{})
}

func newWithClock(next authorizer.Authorizer, opts Options, c clock.WithTicker) (*Authorizer, error) {
	if opts.Size <= 0 {
		return nil, fmt.Errorf("authorization cache size must be positive, not %d", opts.Size)
	}
	if opts.AllowTTL < 0 || opts.DenyTTL < 0 {
		return nil, fmt.Errorf("authorization cache TTLs must not be negative (allowed %v, unauthorized %v)", opts.AllowTTL, opts.DenyTTL)
	}
	return &Authorizer{next: next, opts: opts, clock: c, cache: cache.NewLRUExpireCacheWithClock(opts.Size, c)}, nil
}

// Run drops expired decisions every TTL (the longer of the two) until ctx
// is done. LRUExpireCache forgets an expired decision only when it is asked
// for again or pushed out by newer ones: without this, one burst of
// distinct requests (a scan of every cluster) keeps Size decisions for good.
func (a *Authorizer) Run(ctx context.Context) {
	every := max(a.opts.AllowTTL, a.opts.DenyTTL)
	if every <= 0 {
		return // nothing is ever kept
	}
	t := a.clock.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			a.dropExpired()
		}
	}
}

// dropExpired removes the decisions that have expired. The cache lists only
// unexpired keys, so the expired ones are all keys less those; a decision
// added meanwhile is not among all keys and stays.
func (a *Authorizer) dropExpired() {
	var all []any
	a.cache.RemoveAll(func(k any) bool { all = append(all, k); return false })
	if len(all) == 0 {
		return
	}
	live := make(map[any]struct{}, len(all))
	for _, k := range a.cache.Keys() {
		live[k] = struct{}{}
	}
	expired := make(map[any]struct{}, len(all)-min(len(all), len(live)))
	for _, k := range all {
		if _, ok := live[k]; !ok {
			expired[k] = struct{}{}
		}
	}
	if len(expired) > 0 {
		// One re-added since the listing goes too: one more review, never
		// a stale decision.
		a.cache.RemoveAll(func(k any) bool { _, ok := expired[k]; return ok })
	}
}

type decision struct {
	decision authorizer.Decision
	reason   string
	err      error
}

// ConditionsAwareAuthorize is Authorize as an unconditional decision: the
// cache keeps decisions, not conditions (the delegated authorizer it sits
// in front of makes no conditional ones).
func (a *Authorizer) ConditionsAwareAuthorize(ctx context.Context, attr authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(a.Authorize(ctx, attr))
}

// EvaluateConditions is not supported: no decision here is conditional.
func (*Authorizer) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

var _ authorizer.Authorizer = &Authorizer{}

// Authorize answers from the cache, or asks next once for all concurrent
// requests with the same attributes.
func (a *Authorizer) Authorize(ctx context.Context, attr authorizer.Attributes) (authorizer.Decision, string, error) {
	k, ok := key(attr)
	if !ok {
		return a.next.Authorize(ctx, attr)
	}
	if v, hit := a.cache.Get(k); hit {
		d := v.(decision)
		return d.decision, d.reason, nil
	}
	ch := a.flight.DoChan(k, func() (any, error) {
		// Shared by every request waiting: no one request's cancellation
		// may fail the others (the webhook's client has its own timeout).
		d, reason, err := a.next.Authorize(context.WithoutCancel(ctx), attr)
		if err == nil {
			ttl := a.opts.DenyTTL
			if d == authorizer.DecisionAllow {
				ttl = a.opts.AllowTTL
			}
			if ttl > 0 {
				// The key shares its builder's spare room; a full cache
				// keeps Size of them, so keep an exact copy.
				a.cache.Add(strings.Clone(k), decision{decision: d, reason: reason}, ttl)
			}
		}
		return decision{decision: d, reason: reason, err: err}, nil
	})
	select {
	case r := <-ch:
		d := r.Val.(decision)
		return d.decision, d.reason, d.err
	case <-ctx.Done():
		return authorizer.DecisionNoOpinion, "", ctx.Err()
	}
}

// key is every attribute a decision may depend on, each length-prefixed so
// that no two different attribute sets share a key; ok is false for what
// is not cached (selectors that did not parse, oversized attributes).
func key(attr authorizer.Attributes) (string, bool) {
	size := len(attr.GetNamespace()) + len(attr.GetVerb()) + len(attr.GetAPIGroup()) + len(attr.GetAPIVersion()) +
		len(attr.GetResource()) + len(attr.GetSubresource()) + len(attr.GetName()) + len(attr.GetPath())
	if size >= maxAttributesSize {
		return "", false
	}
	fieldReqs, ferr := attr.GetFieldSelector()
	labelReqs, lerr := attr.GetLabelSelector()
	if ferr != nil || lerr != nil {
		return "", false
	}
	var b strings.Builder
	b.Grow(size + 128)
	field := func(s string) {
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
	}
	// A count is terminated too: written bare before a field, its digits
	// and the field's length would read as one number (1 group of 150
	// bytes, "1150:...", would be 11 groups, the first of 50 bytes).
	count := func(n int) {
		b.WriteString(strconv.Itoa(n))
		b.WriteByte('#')
	}
	if u := attr.GetUser(); u != nil {
		b.WriteByte('u')
		field(u.GetName())
		field(u.GetUID())
		groups := u.GetGroups()
		count(len(groups))
		for _, g := range groups {
			field(g)
		}
		extra := u.GetExtra()
		count(len(extra))
		if len(extra) > 0 {
			keys := make([]string, 0, len(extra))
			for k := range extra {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				field(k)
				count(len(extra[k]))
				for _, v := range extra[k] {
					field(v)
				}
			}
		}
	} else {
		b.WriteByte('-')
	}
	if attr.IsResourceRequest() {
		b.WriteByte('r')
		for _, s := range []string{attr.GetVerb(), attr.GetNamespace(), attr.GetAPIGroup(), attr.GetAPIVersion(), attr.GetResource(), attr.GetSubresource(), attr.GetName()} {
			field(s)
		}
		count(len(fieldReqs))
		for _, r := range fieldReqs {
			field(string(r.Operator))
			field(r.Field)
			field(r.Value)
		}
		count(len(labelReqs))
		for _, r := range labelReqs {
			field(r.String())
		}
	} else {
		b.WriteByte('n')
		field(attr.GetVerb())
		field(attr.GetPath())
	}
	return b.String(), true
}
