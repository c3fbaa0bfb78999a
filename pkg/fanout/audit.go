package fanout

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/proxy"
)

// The set's audit event names the clusters it read, and for each the
// identity it was read as, as the single-cluster path records it for
// clustergateways/{name}/proxy (proxy.AuditIdentity and the rest). Both are
// bounded: a set can hold thousands of clusters, and an audit event is one
// log line.
const (
	// AuditClusterCount is how many clusters the set read.
	AuditClusterCount = "fanout." + v1alpha1.GroupName + "/cluster-count"
	// AuditIdentityPrefix + cluster is that cluster's identity, a JSON
	// object of the single-cluster annotations (impersonation, identity,
	// authenticated-as), for the first MaxAuditClusters clusters whose
	// answer began.
	AuditIdentityPrefix = "fanout." + v1alpha1.GroupName + "/identity."
)

// MaxAuditClusters bounds the clusters named in AuditClusters and the
// AuditIdentityPrefix annotations of one request.
const MaxAuditClusters = 50

// auditClusters annotates the set's event with the clusters it reads: their
// count, and the first MaxAuditClusters names (then "+N more").
func auditClusters(ctx context.Context, clusters []string) {
	if !auditing(ctx) {
		return
	}
	names := strings.Join(clusters[:min(len(clusters), MaxAuditClusters)], ",")
	if n := len(clusters) - MaxAuditClusters; n > 0 {
		names += fmt.Sprintf(",+%d more", n)
	}
	audit.AddAuditAnnotations(ctx, AuditClusters, names, AuditClusterCount, strconv.Itoa(len(clusters)))
}

func auditing(ctx context.Context) bool {
	ac := audit.AuditContextFrom(ctx)
	return ac != nil && ac.GetEventLevel().GreaterOrEqual(auditinternal.LevelMetadata)
}

// setAudit is the set's audit event, where each cluster's read adds its
// identity.
type setAudit struct {
	ac *audit.AuditContext
	// ctx is the set's request's: its audit context is ac (each cluster's
	// request has one of its own).
	ctx   context.Context //nolint:containedctx // only to reach ac through audit.AddAuditAnnotation
	mu    sync.Mutex
	named int
}

type setAuditKey struct{}

// withSetAudit keeps the set's audit context for the clusters' reads, whose
// requests get audit contexts of their own (open).
func withSetAudit(ctx context.Context) context.Context {
	if !auditing(ctx) {
		return ctx
	}
	return context.WithValue(ctx, setAuditKey{}, &setAudit{ac: audit.AuditContextFrom(ctx), ctx: ctx})
}

// auditedServe is serve, with each cluster's request audited at the set's
// level, so that the single-cluster path records what it records for one
// cluster; that is not emitted, but once the cluster's answer begins its
// identity goes into the set's event.
func auditedServe(serve ServeFunc) ServeFunc {
	return func(w http.ResponseWriter, req *http.Request, cluster, subpath string) {
		set, _ := req.Context().Value(setAuditKey{}).(*setAudit)
		if set == nil {
			serve(w, req, cluster, subpath)
			return
		}
		// audit.WithAuditContext keeps a context's audit context if it has
		// one: every cluster's request would annotate the set's event, the
		// first cluster's values winning (and each other's logged as a
		// conflict). So the set's is hidden first.
		req = req.WithContext(audit.WithAuditContext(withoutAudit{req.Context()}))
		inner := audit.AuditContextFrom(req.Context())
		if inner.Init(audit.RequestAuditConfig{Level: set.ac.GetEventLevel()}, nil) != nil {
			serve(w, req, cluster, subpath)
			return
		}
		rw := &auditWriter{ResponseWriter: w}
		rw.record = func() { set.add(cluster, inner) }
		defer rw.begin() // refused before it was sent: nothing to add, as nothing was recorded
		serve(rw, req, cluster, subpath)
	}
}

func (s *setAudit) add(cluster string, inner *audit.AuditContext) {
	var id struct {
		Impersonation   string `json:"impersonation"`
		Identity        string `json:"identity"`
		AuthenticatedAs string `json:"authenticated-as"`
	}
	var ok bool
	if id.Identity, ok = inner.GetEventAnnotation(proxy.AuditIdentity); !ok {
		return // not sent to the cluster
	}
	id.Impersonation, _ = inner.GetEventAnnotation(proxy.AuditImpersonation)
	id.AuthenticatedAs, _ = inner.GetEventAnnotation(proxy.AuditAuthenticatedAs)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.named >= MaxAuditClusters {
		return
	}
	s.named++
	b, _ := json.Marshal(id)
	audit.AddAuditAnnotation(s.ctx, AuditIdentityPrefix+cluster, string(b))
}

// withoutAudit is its context without its audit context: the audit
// package's key is unexported, so the value is recognised by its type.
type withoutAudit struct{ context.Context } //nolint:containedctx // a context that hides one value

func (c withoutAudit) Value(key any) any {
	v := c.Context.Value(key)
	if _, ok := v.(*audit.AuditContext); ok {
		return nil
	}
	return v
}

// auditWriter calls record once, when the answer begins.
type auditWriter struct {
	http.ResponseWriter
	once   sync.Once
	record func()
}

func (w *auditWriter) begin() { w.once.Do(w.record) }

func (w *auditWriter) WriteHeader(code int) {
	if code >= 200 {
		w.begin()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *auditWriter) Write(b []byte) (int, error) {
	w.begin()
	return w.ResponseWriter.Write(b)
}

func (w *auditWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// CloseNotify is the wrapped writer's (the reverse proxy may ask for it).
func (w *auditWriter) CloseNotify() <-chan bool {
	if c, ok := w.ResponseWriter.(http.CloseNotifier); ok { //nolint:staticcheck // what the proxy may assert
		return c.CloseNotify()
	}
	return nil
}

func (w *auditWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
