package proxy

import (
	"net/http"
	"net/url"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apiserver/pkg/authentication/user"
)

// The headers a client or the hub may send that must never reach a managed
// cluster: hub credentials, and identities the gateway did not assert itself.
var strippedPrefixes = []string{
	"impersonate-",
	"x-remote-",
}

var strippedHeaders = []string{
	"Authorization",
	"Proxy-Authorization",
	"Cookie",
}

// stripIdentity removes every client-sent credential and identity header.
func stripIdentity(h http.Header) {
	for _, k := range strippedHeaders {
		h.Del(k)
	}
	for k := range h {
		lk := strings.ToLower(k)
		for _, p := range strippedPrefixes {
			if strings.HasPrefix(lk, p) {
				delete(h, k)
				break
			}
		}
	}
}

// setImpersonation asks the managed cluster to act as the hub caller. The
// groups it adds itself and service-account-only extras (which would need
// their own impersonate permission and mean nothing there) are left out.
func setImpersonation(h http.Header, u user.Info) {
	h.Set(authenticationv1.ImpersonateUserHeader, u.GetName())
	if uid := u.GetUID(); uid != "" {
		h.Set(authenticationv1.ImpersonateUIDHeader, uid)
	}
	for _, g := range u.GetGroups() {
		if g == user.AllAuthenticated {
			continue
		}
		h.Add(authenticationv1.ImpersonateGroupHeader, g)
	}
	for k, vs := range u.GetExtra() {
		if strings.HasPrefix(k, "authentication.kubernetes.io/") {
			continue
		}
		for _, v := range vs {
			h.Add(authenticationv1.ImpersonateUserExtraHeaderPrefix+url.PathEscape(k), v)
		}
	}
}
