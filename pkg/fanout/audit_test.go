package fanout

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/clustergateway/cluster-gateway/pkg/proxy"
)

// The set's audit event names the clusters it read (bounded) and, for each
// cluster sent the request, the identity the single-cluster path recorded
// for it; that path audits at the set's level, and computes nothing when the
// set's request is not audited.
func TestSetAuditNamesClustersAndTheirIdentities(t *testing.T) {
	run := func(t *testing.T, n int, level auditinternal.Level) (map[string]string, int32) {
		gws := fakeGateways{}
		for i := range n {
			gws[fmt.Sprintf("c%02d", i)] = labels.Set{}
		}
		gws["down"] = labels.Set{}
		allow := authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
			return authorizer.DecisionAllow, "", nil
		})
		var audited atomic.Int32
		f, err := New(Params{Gateways: gws, Authorizer: allow, Serve: func(w http.ResponseWriter, req *http.Request, cluster, _ string) {
			w.Header().Set("Content-Type", "application/json")
			if cluster == "down" { // refused before it was sent, as the prober's fail-fast is
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":503}`))
				return
			}
			// As proxy.Serve records the identity it sends with, when
			// its request's event is at Metadata or more.
			if ac := audit.AuditContextFrom(req.Context()); ac != nil && ac.GetEventLevel().GreaterOrEqual(auditinternal.LevelMetadata) {
				audited.Add(1)
				audit.AddAuditAnnotations(req.Context(), proxy.AuditImpersonation, "None", proxy.AuditIdentity, "x509:CN="+cluster, proxy.AuditAuthenticatedAs, "x509:CN="+cluster)
			}
			_, _ = w.Write([]byte(`{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}`))
		}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := audit.WithAuditContext(apirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "alice"}))
		if level != "" {
			if err := audit.AuditContextFrom(ctx).Init(audit.RequestAuditConfig{Level: level}, nil); err != nil {
				t.Fatal(err)
			}
		}
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/x/api/v1/pods", nil)
		rec := httptest.NewRecorder()
		f.Serve(rec, req, "labels:", "/api/v1/pods")
		if rec.Code != http.StatusOK {
			t.Fatalf("list: %d %s", rec.Code, rec.Body)
		}
		return audit.AuditContextFrom(ctx).GetEventAnnotations(), audited.Load()
	}

	t.Run("a few clusters", func(t *testing.T) {
		ann, _ := run(t, 2, auditinternal.LevelMetadata)
		if ann[AuditClusters] != "c00,c01,down" || ann[AuditClusterCount] != "3" {
			t.Errorf("clusters %q count %q, want c00,c01,down and 3", ann[AuditClusters], ann[AuditClusterCount])
		}
		for _, c := range []string{"c00", "c01"} {
			var id map[string]string
			if err := json.Unmarshal([]byte(ann[AuditIdentityPrefix+c]), &id); err != nil ||
				id["impersonation"] != "None" || id["identity"] != "x509:CN="+c || id["authenticated-as"] != "x509:CN="+c {
				t.Errorf("%s%s = %q (%v), want the identity its read recorded", AuditIdentityPrefix, c, ann[AuditIdentityPrefix+c], err)
			}
		}
		// Each cluster's request has an audit context of its own: the
		// set's event does not take the first cluster's as its own.
		if v, ok := ann[proxy.AuditIdentity]; ok {
			t.Errorf("the set's event has %s = %q, one cluster's", proxy.AuditIdentity, v)
		}
		if v, ok := ann[AuditIdentityPrefix+"down"]; ok {
			t.Errorf("a cluster not sent the request has an identity: %q", v)
		}
	})

	t.Run("bounded", func(t *testing.T) {
		ann, _ := run(t, MaxAuditClusters+10, auditinternal.LevelMetadata)
		names := strings.Split(ann[AuditClusters], ",")
		if len(names) != MaxAuditClusters+1 || names[MaxAuditClusters] != "+11 more" || ann[AuditClusterCount] != fmt.Sprint(MaxAuditClusters+11) {
			t.Errorf("clusters %q (%d names) count %q, want %d names then +11 more", ann[AuditClusters], len(names), ann[AuditClusterCount], MaxAuditClusters)
		}
		ids := 0
		for k := range ann {
			if strings.HasPrefix(k, AuditIdentityPrefix) {
				ids++
			}
		}
		if ids != MaxAuditClusters {
			t.Errorf("%d identity annotations, want %d", ids, MaxAuditClusters)
		}
	})

	t.Run("not audited", func(t *testing.T) {
		for _, level := range []auditinternal.Level{"", auditinternal.LevelNone} {
			ann, audited := run(t, 2, level)
			if len(ann) != 0 || audited != 0 {
				t.Errorf("level %q: annotations %v, %d clusters audited; want none", level, ann, audited)
			}
		}
	})
}
