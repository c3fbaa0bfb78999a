package gateways

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// WatchOptions are what a watch of gateways passes on to the hub's watch of
// their Secrets, and the label selector applied here.
type WatchOptions struct {
	Labels               labels.Selector
	Fields               fields.Selector
	ResourceVersion      string
	ResourceVersionMatch metav1.ResourceVersionMatch
	AllowWatchBookmarks  bool
	SendInitialEvents    *bool
	TimeoutSeconds       *int64
}

// Watch follows the hub's watch of the gateway Secrets, so resourceVersions,
// bookmarks and "too old" errors behave as for any hub resource. Events
// carry gateways without material. The gateway's labels are in its Secret's
// data, so a label selector is applied here, not by the hub.
func (s *Store) Watch(ctx context.Context, o WatchOptions) (watch.Interface, error) {
	opts := metav1.ListOptions{
		LabelSelector:        LabelGateway + "=true",
		ResourceVersion:      o.ResourceVersion,
		ResourceVersionMatch: o.ResourceVersionMatch,
		AllowWatchBookmarks:  o.AllowWatchBookmarks,
		SendInitialEvents:    o.SendInitialEvents,
		TimeoutSeconds:       o.TimeoutSeconds,
	}
	if o.Fields != nil {
		opts.FieldSelector = o.Fields.String()
	}
	w, err := s.client.CoreV1().Secrets(s.namespace).Watch(ctx, opts)
	if err != nil {
		return nil, translateError(err, "")
	}
	sel := newSelectorFilter(o.Labels, s)
	return watch.Filter(w, func(in watch.Event) (watch.Event, bool) {
		switch sec := in.Object.(type) {
		case *corev1.Secret:
			if in.Type == watch.Bookmark {
				// A bookmark carries a resourceVersion and, at the end of the
				// initial events, one annotation; nothing else of the Secret.
				bm := &v1alpha1.ClusterGateway{ObjectMeta: metav1.ObjectMeta{ResourceVersion: sec.ResourceVersion}}
				if v, ok := sec.Annotations[metav1.InitialEventsAnnotationKey]; ok {
					bm.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: v}
				}
				return watch.Event{Type: in.Type, Object: bm}, true
			}
			gw := s.view(parseAt(sec, s.clock.Now()), s.clock.Now()).Public()
			typ, ok := sel.event(in.Type, gw)
			return watch.Event{Type: typ, Object: gw}, ok
		case *metav1.Status:
			return in, true
		default:
			return in, false
		}
	}), nil
}

// selectorFilter turns the hub's events for all gateways into the events a
// watch with a label selector expects: an update that makes a gateway match
// is ADDED, one that makes it stop matching is DELETED. It remembers which
// gateways this watch last saw matching; it starts from the store, so a
// gateway it cannot be sure about gets an event rather than none (clients
// take a MODIFIED of an unknown object as an add, a DELETED of one as a no-op).
type selectorFilter struct {
	sel      labels.Selector
	matching map[string]bool // by name; nil when the selector selects everything
}

func newSelectorFilter(sel labels.Selector, s *Store) *selectorFilter {
	f := &selectorFilter{sel: sel}
	if sel == nil || sel.Empty() {
		return f
	}
	f.matching = map[string]bool{}
	if gws, _, err := s.List(sel); err == nil {
		for _, g := range gws {
			f.matching[g.Name()] = true
		}
	}
	return f
}

func (f *selectorFilter) event(t watch.EventType, gw *v1alpha1.ClusterGateway) (watch.EventType, bool) {
	if f.matching == nil {
		return t, true
	}
	was, now := f.matching[gw.Name], f.sel.Matches(labels.Set(gw.Labels))
	if t == watch.Deleted {
		delete(f.matching, gw.Name)
		return t, was || now
	}
	if now {
		f.matching[gw.Name] = true
	} else {
		delete(f.matching, gw.Name)
	}
	switch {
	case now && t == watch.Added, now && !was:
		return watch.Added, true
	case now:
		return watch.Modified, true
	case was:
		return watch.Deleted, true
	}
	return t, false
}
