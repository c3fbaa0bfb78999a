package testfrontend

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
)

// connecter answers with what it was handed.
type connecter struct{}

func (connecter) Serve(w http.ResponseWriter, r *http.Request, name, subpath string) {
	u, _ := apirequest.UserFrom(r.Context())
	ri, _ := apirequest.RequestInfoFrom(r.Context())
	fmt.Fprintf(w, "%s %s %s %s %s/%s %s", r.Proto, name, subpath, u.GetName(), ri.Resource, ri.Subresource, r.URL.RawQuery)
}

func TestHandlerAndServer(t *testing.T) {
	s := MustStart(t, Handler(connecter{}, &user.DefaultInfo{Name: "alice"}))
	c := s.Client()
	defer c.CloseIdleConnections()
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(s.ProxyURL("c1") + "/api/v1/pods?limit=1"); code != http.StatusOK ||
		body != "HTTP/2.0 c1 /api/v1/pods alice clustergateways/proxy limit=1" {
		t.Errorf("proxy request: %d %q", code, body)
	}
	if code, body := get(s.ProxyURL("c1")); code != http.StatusOK || body != "HTTP/2.0 c1  alice clustergateways/proxy " {
		t.Errorf("proxy request without a subpath: %d %q", code, body)
	}
	// Another version is not Prefix: no subpath can be cut out of it.
	other := strings.Replace(Prefix, "/v1alpha1/", "/v1beta1/", 1) + "c1/proxy/api/v1/pods"
	for _, path := range []string{"/api/v1/pods", Prefix + "c1", Prefix + "c1/health", other} {
		if code, _ := get(s.URL + path); code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, code)
		}
	}
}
