package gateways

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// GetFresh reads the named gateway from the hub, not from this replica's
// cache: Kubernetes' "most recent" semantics of a read without a
// resourceVersion, so a read on one replica sees a write made through
// another. The parse of an unchanged gateway is the cached one.
func (s *Store) GetFresh(ctx context.Context, name string) (*Gateway, error) {
	c, err := s.GetCurrent(ctx, name)
	if err != nil {
		return nil, err
	}
	return c.Gateway, nil
}

// Current is a gateway as the hub has it now, with the Secret it is stored
// in: what Update starts from, so keys and metadata of the Secret that the
// gateway does not model survive a write. The cache does not keep Secrets.
type Current struct {
	*Gateway
	secret *corev1.Secret
}

// GetCurrent reads the named gateway and its Secret from the hub (see
// GetFresh), for a write.
func (s *Store) GetCurrent(ctx context.Context, name string) (*Current, error) {
	sec, err := s.client.CoreV1().Secrets(s.namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, translateError(err, name)
	}
	if sec.Labels[LabelGateway] != "true" {
		return nil, apierrors.NewNotFound(Resource, name)
	}
	now := s.clock.Now()
	g := s.reuse(sec.Name, sec.UID, sec.ResourceVersion, func() *Gateway { return s.view(parseAt(sec, now), now) })
	return &Current{Gateway: g, secret: sec}, nil
}

// ListFresh lists the gateways from the hub (see GetFresh), with the hub's
// resourceVersion of the list.
func (s *Store) ListFresh(ctx context.Context, selector labels.Selector) ([]*Gateway, string, error) {
	secs, err := s.client.CoreV1().Secrets(s.namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelGateway + "=true"})
	if err != nil {
		return nil, "", translateError(err, "")
	}
	now := s.clock.Now()
	out := make([]*Gateway, 0, len(secs.Items))
	for i := range secs.Items {
		sec := &secs.Items[i]
		g := s.reuse(sec.Name, sec.UID, sec.ResourceVersion, func() *Gateway { return s.view(parseAt(sec, now), now) })
		if selector != nil && !selector.Matches(labels.Set(g.Object.Labels)) {
			continue
		}
		out = append(out, g)
	}
	return out, secs.ResourceVersion, nil
}

// reuse returns the cached gateway if it is this very version, else parse().
func (s *Store) reuse(name string, uid types.UID, rv string, parse func() *Gateway) *Gateway {
	if g, err := s.Get(name); err == nil && g.Object.UID == uid && g.Object.ResourceVersion == rv {
		return g
	}
	return parse()
}
