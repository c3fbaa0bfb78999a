package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// probeTimeout bounds a health probe; a cluster slower than this is not healthy.
const probeTimeout = 5 * time.Second

// Probe asks the named cluster's /readyz through the pooled transport, with the
// gateway's credential: the same path a proxied request takes.
func (p *Proxy) Probe(ctx context.Context, name string) (*v1alpha1.ClusterGatewayHealth, error) {
	gw, err := p.opts.Store.Get(name)
	if err != nil {
		return nil, err
	}
	h := &v1alpha1.ClusterGatewayHealth{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: gw.Object.UID, ResourceVersion: gw.Object.ResourceVersion, CreationTimestamp: gw.Object.CreationTimestamp},
		ProbeTime:  metav1.Now(),
	}
	if !gw.Ready {
		h.Message = gw.Problem
		return h, nil
	}
	target, err := p.target(gw)
	if err != nil {
		h.Message = err.Error()
		return h, nil
	}
	lease, err := p.opts.Pool.Acquire(target)
	if err != nil {
		h.Message = err.Error()
		return h, nil
	}
	defer lease.Release()

	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	u := *gw.Address
	u.Path = joinPath(gw.Address.Path, "/readyz")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	var caller user.Info
	if gw.Object.Spec.Impersonation.Mode == v1alpha1.ImpersonationCaller {
		u, ok := apirequest.UserFrom(ctx)
		if !ok {
			return nil, fmt.Errorf("no hub user on the request to impersonate")
		}
		caller = u
	}
	rt := &upstreamTransport{base: lease.Transport(), id: p.identityFor(gw, caller), cluster: name}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		h.Message = upstreamError(name, err, false).ErrStatus.Message
		return h, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	h.Code = int32(resp.StatusCode)
	h.Healthy = resp.StatusCode == http.StatusOK
	if !h.Healthy {
		h.Message = fmt.Sprintf("/readyz answered %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return h, nil
}
