package proxy

import (
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// checkSubpath refuses a proxied path with empty, "." or ".." segments
// (after percent-decoding, which the server has done): the path that hub RBAC
// and --authorize-proxy-subpath judge must be the path the cluster serves,
// and a server or intermediary that cleans paths would serve another one.
// A trailing slash is kept as the client sent it.
func checkSubpath(subpath string) error {
	p := strings.TrimPrefix(subpath, "/")
	p = strings.TrimSuffix(p, "/")
	if p == "" {
		return nil
	}
	for {
		seg, rest, more := strings.Cut(p, "/")
		switch seg {
		case "", ".", "..":
			return apierrors.NewBadRequest(fmt.Sprintf(
				"the proxied path %q has an empty, \".\" or \"..\" segment; send the path as the cluster should serve it, without relative segments or double slashes", subpath))
		}
		if !more {
			return nil
		}
		p = rest
	}
}
