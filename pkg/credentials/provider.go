package credentials

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/singleflight"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/pkg/apis/clientauthentication"
	"k8s.io/client-go/plugin/pkg/client/auth/exec"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/transport"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
	"github.com/clustergateway/cluster-gateway/pkg/tracing"
)

// Cluster is what a ClusterGateway gives its provider: the provider's name
// and, in the ExecCredential's spec.cluster, the endpoint and its config.
type Cluster struct {
	Gateway  string // one Authenticator per gateway name
	Provider string
	Config   []byte // spec.credential.provider.config
	Server   string
	CAData   []byte
	// ServerName, Insecure and ProxyURL as the gateway dials.
	ServerName string
	Insecure   bool
	ProxyURL   string
	// AdditionalArgs and AdditionalEnv are spec.credential.provider's
	// (KEP-5339's ClusterProfile extensions): the provider gets them only
	// as its policies in the providers file allow.
	AdditionalArgs []string
	AdditionalEnv  []EnvVar
}

// EnvVar is one variable of a provider's environment.
type EnvVar struct{ Name, Value string }

func (c *Cluster) equal(o *Cluster) bool {
	return c.Gateway == o.Gateway && c.Provider == o.Provider && string(c.Config) == string(o.Config) &&
		c.Server == o.Server && string(c.CAData) == string(o.CAData) && c.ServerName == o.ServerName &&
		c.Insecure == o.Insecure && c.ProxyURL == o.ProxyURL &&
		slices.Equal(c.AdditionalArgs, o.AdditionalArgs) && slices.Equal(c.AdditionalEnv, o.AdditionalEnv)
}

// State is a provider's latest credential for one gateway. It is
// immutable: a new credential or failure is a new State.
type State struct {
	Token     string
	Cert, Key []byte // PEM, when the provider returned a client certificate
	Rotated   time.Time
	// Expires is when the credential expires, where the provider said or
	// its certificate does: the ExecCredential's expirationTimestamp as the
	// provider printed it (not as moved for client-go's early refresh), else
	// the client certificate's notAfter; zero when neither is known (a JWT's
	// exp is read by the gateway).
	Expires time.Time
	// Problem says why there is no usable credential; it never holds the
	// provider's output.
	Problem string
}

// Providers runs the configured providers for the gateways that name one.
type Providers struct {
	cfg  atomic.Pointer[Config] // replaced by Reload
	self string                 // the launcher: this binary
	// dir is private to this Providers (0700): the launcher notes there
	// each gateway's credential's expiry, which client-go does not tell
	// ("": none could be made).
	dir      string
	metrics  *Metrics
	clock    clock.Clock // of the failure backoff
	mu       sync.Mutex
	clusters map[string]*cluster
	seq      uint64 // numbers the clusters' expiry files
	onChange atomic.Pointer[func(gateway string)]
	unknown  sync.Map // provider name -> *State of a provider not configured
	tracer   *tracing.Tracer
}

// Trace has each run of a provider (a fetch: client-go runs the plugin
// unless its credential is still good) make a span under the request that
// asked for it, with the gateway, the provider and the outcome; never the
// credential or the plugin's output. Call it before the first Get.
func (p *Providers) Trace(t *tracing.Tracer) { p.tracer = t }

// New returns the providers of cfg (nil: none configured).
func New(cfg *Config) (*Providers, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("credential providers run this binary as their launcher, but its path is unknown: %w", err)
	}
	dir, err := os.MkdirTemp("", "cluster-gateway-credentials-") // 0700
	if err != nil {
		// Providers still work; an opaque token's expiry is not known.
		klog.InfoS("Warning: no private directory for credential providers' expiry notes: status.credential.expirationTime will not show an ExecCredential's expirationTimestamp (give the gateway a writable $TMPDIR)", "err", err)
		dir = ""
	}
	p := &Providers{self: self, dir: dir, metrics: newMetrics(), clock: clock.RealClock{}, clusters: map[string]*cluster{}}
	p.cfg.Store(cfg)
	return p, nil
}

// Metrics returns the providers' metrics, for the server to Register once.
func (p *Providers) Metrics() *Metrics { return p.metrics }

// Close releases every gateway and removes the private directory.
func (p *Providers) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for name, e := range p.clusters {
		e.release()
		delete(p.clusters, name)
	}
	if p.dir == "" {
		return nil
	}
	return os.RemoveAll(p.dir)
}

// OnChange has fn called with a gateway's name whenever its State changes
// (a new credential, a failure). fn must not block.
func (p *Providers) OnChange(fn func(gateway string)) { p.onChange.Store(&fn) }

// cluster is one gateway's Authenticator and its latest State.
type cluster struct {
	spec    Cluster
	name    string // the provider's
	timeout time.Duration
	auth    *exec.Authenticator // nil when the provider is not configured
	wrap    transport.WrapperFunc
	getCert func() (*tls.Certificate, error)
	flight  singleflight.Group // one run at a time; waiters share its State
	runMu   sync.Mutex         // a fetch's runs and its reading of expiry are one
	// backoff keeps a failure (a failed run, or a refused credential the
	// provider did not replace) for a while: requests meanwhile have the
	// latest State without a run, so a failing provider is not run for
	// each.
	backoff *flowcontrol.Backoff
	expiry  string      // the file where the launcher notes the credential's expiry
	gone    atomic.Bool // released: a run that ends after removes its file
	state   atomic.Pointer[State]
}

// entry is c's cluster, built anew when the gateway changed what its
// provider gets (the old one is released).
func (p *Providers) entry(c *Cluster) *cluster {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.clusters[c.Gateway]; ok && e.spec.equal(c) {
		return e
	} else if ok {
		e.release()
	}
	e := &cluster{spec: *c, name: c.Provider, backoff: flowcontrol.NewBackOff(minBackoff, maxBackoff)}
	e.backoff.Clock = p.clock
	p.clusters[c.Gateway] = e
	prov := p.cfg.Load().provider(c.Provider)
	if prov == nil {
		st, _ := p.unknown.LoadOrStore(c.Provider, p.unconfigured(c.Provider))
		e.state.Store(st.(*State))
		return e
	}
	e.timeout = prov.timeout
	// Named for the gateway (hashed: its name is never a path) and this
	// version of it: a replaced version's run cannot write the new one's.
	if p.dir != "" {
		p.seq++
		sum := sha256.Sum256([]byte(c.Gateway))
		e.expiry = filepath.Join(p.dir, fmt.Sprintf("%x-%d", sum[:16], p.seq))
	}
	a, err := newOwnedAuthenticator(p.execConfig(prov, c, e.expiry), &clientauthentication.Cluster{
		Server: c.Server, TLSServerName: c.ServerName, InsecureSkipTLSVerify: c.Insecure,
		CertificateAuthorityData: c.CAData, ProxyURL: c.ProxyURL, Config: clusterConfig(c.Config),
	})
	if err == nil {
		tc := &transport.Config{}
		if err = a.UpdateTransportConfig(tc); err == nil {
			e.auth, e.wrap, e.getCert = a, tc.WrapTransport, tc.TLS.GetCertHolder.GetCert
		}
	}
	if err != nil {
		e.state.Store(&State{Problem: fmt.Sprintf("credential provider %q cannot be set up: %v", c.Provider, err)})
	}
	return e
}

func describeNames(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// execConfig runs the launcher for prov and c: the file's args, then c's
// when the file's profileSourcedCLIArgsPolicy is Append; the file's
// environment, and c's variables that the file does not set when its
// profileSourcedEnvVarsPolicy is AppendIfNotExists. Otherwise (Ignore, the
// default) c's are dropped: the operator decides what a gateway or
// ClusterProfile writer may add to a command only the operator names.
func (p *Providers) execConfig(prov *Provider, c *Cluster, expiryFile string) *clientcmdapi.ExecConfig {
	env := make([]clientcmdapi.ExecEnvVar, 0, len(prov.Exec.Env)+len(c.AdditionalEnv))
	for _, e := range prov.Exec.Env {
		env = append(env, clientcmdapi.ExecEnvVar{Name: e.Name, Value: e.Value})
	}
	if prov.ProfileSourcedEnvVarsPolicy == EnvPolicyAppendIfNotExists {
		for _, e := range c.AdditionalEnv {
			// The API refuses reserved names; checked again here, where they would run.
			set := slices.ContainsFunc(env, func(f clientcmdapi.ExecEnvVar) bool { return f.Name == e.Name })
			if !set && !v1alpha1.ReservedEnv(e.Name) {
				env = append(env, clientcmdapi.ExecEnvVar{Name: e.Name, Value: e.Value})
			}
		}
	}
	var args []string
	if prov.ProfileSourcedCLIArgsPolicy == ArgsPolicyAppend {
		args = c.AdditionalArgs
	}
	return &clientcmdapi.ExecConfig{
		Command: p.self, Args: launcherArgs(prov, env, args, expiryFile), Env: env, APIVersion: prov.Exec.APIVersion,
		ProvideClusterInfo: true, InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
	}
}

// Latest is c's State without running its provider (nor building
// anything): nil before its first run, or when c is not what the gateway's
// provider last ran for (an older version of the gateway, say).
func (p *Providers) Latest(c *Cluster) *State {
	if p.cfg.Load().provider(c.Provider) == nil {
		st, _ := p.unknown.LoadOrStore(c.Provider, p.unconfigured(c.Provider))
		return st.(*State)
	}
	p.mu.Lock()
	e, ok := p.clusters[c.Gateway]
	p.mu.Unlock()
	if !ok || !e.spec.equal(c) {
		return nil
	}
	return e.state.Load()
}

func (p *Providers) unconfigured(name string) *State {
	return &State{Problem: fmt.Sprintf("names credential provider %q, which this gateway does not configure (its --credential-providers-file has %s): name one of those, or add it there",
		name, describeNames(p.cfg.Load().Names()))}
}

// Get is c's credential as client-go's Authenticator has it, running the
// provider when it has none or it expired: at most one run at a time per
// gateway, shared by concurrent callers, bounded by the provider's timeout,
// and none during the backoff after a failure (the failure is the State).
// A caller whose ctx ends first gets ctx's error; the run goes on for the
// next caller.
func (p *Providers) Get(ctx context.Context, c *Cluster) (*State, error) {
	return p.get(ctx, p.entry(c), refused{})
}

// Unauthorized tells c's provider that the cluster refused its credential:
// token, or when that is empty the client certificate cert (PEM, as
// State.Cert has it). Unless it has been replaced already, or a failure
// is in its backoff, client-go runs the provider again; a run that does not
// replace it is a failure.
func (p *Providers) Unauthorized(ctx context.Context, c *Cluster, token string, cert []byte) {
	r := refused{token: token}
	if token == "" {
		r.cert = string(cert)
	}
	if r == (refused{}) {
		return
	}
	_, _ = p.get(ctx, p.entry(c), r)
}

// refused is the credential a cluster refused: a token, or a client
// certificate (PEM) with no token; zero: none.
type refused struct{ token, cert string }

// key is r's singleflight key: the fetches for one refused credential are one.
func (r refused) key() string {
	switch {
	case r.token != "":
		return "token:" + r.token
	case r.cert != "":
		sum := sha256.Sum256([]byte(r.cert))
		return fmt.Sprintf("cert:%x", sum)
	}
	return ""
}

// The backoff after a failure: 1 s, doubled by each failure in a row up
// to 1 min; a new credential ends it, and a changed gateway (a new
// cluster) starts without.
const minBackoff, maxBackoff = time.Second, time.Minute

func (p *Providers) get(ctx context.Context, e *cluster, r refused) (*State, error) {
	if e.auth == nil {
		return e.state.Load(), nil
	}
	// The run goes on when this caller leaves: its span keeps only the
	// caller's span context, not its cancellation.
	sctx := context.Background()
	if p.tracer != nil {
		sctx = trace.ContextWithSpanContext(sctx, trace.SpanContextFromContext(ctx))
	}
	ch := e.flight.DoChan(r.key(), func() (interface{}, error) { return p.fetch(sctx, e, r), nil })
	select {
	case r := <-ch:
		return r.Val.(*State), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// fetch asks the Authenticator for its credential the one way client-go
// offers: a round trip through its wrapper, which sets the token (running
// the plugin if needed) and runs it again on a 401 for the credential
// refused (its token, or its certificate when it has no token).
func (p *Providers) fetch(ctx context.Context, e *cluster, ref refused) *State {
	e.runMu.Lock() // the expiry read below is of the runs of this fetch
	defer e.runMu.Unlock()
	if e.backoff.IsInBackOffSinceUpdate("", p.clock.Now()) {
		// A failure just now (set under runMu, so a fetch that waited for
		// the failed one sees it): its State stands until the backoff ends.
		p.metrics.backedOff(e.name)
		return e.state.Load()
	}
	outcome := "ok"
	if p.tracer != nil { // its attributes would allocate on every fetch, traced or not
		_, span := p.tracer.Start(ctx, "cluster-gateway.credential-provider.run", trace.SpanKindInternal,
			tracing.Cluster.String(e.spec.Gateway), tracing.Provider.String(e.name))
		defer func() {
			if outcome != "ok" && outcome != "cached" {
				span.SetStatus(codes.Error, outcome)
			}
			span.SetAttributes(tracing.Outcome.String(outcome))
			span.End()
		}()
	}
	start := time.Now()
	var token string
	isRefused := func() bool { // the credential client-go has now is ref
		return ref.token != "" && token == ref.token || ref.cert != "" && token == "" && e.certIs(ref.cert)
	}
	refuse, refusedCurrent := ref != (refused{}), false
	capture := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		token = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		code := http.StatusOK
		// Only the first answer may be a 401: client-go runs the provider
		// again on each, the one it just ran included.
		if refuse && isRefused() {
			code, refusedCurrent = http.StatusUnauthorized, true
		}
		refuse = false
		return &http.Response{StatusCode: code, Body: http.NoBody, Request: r}, nil
	})
	ask := func() error { // client-go sets the header on the request it gets: a new one each time
		req, _ := http.NewRequest(http.MethodGet, "https://provider.invalid/", nil)
		_, err := e.wrap(capture).RoundTrip(req)
		return err
	}
	err := ask()
	if refusedCurrent && err == nil {
		err = ask() // the refreshed one
	}
	var cert *tls.Certificate
	if err == nil {
		cert, err = e.getCert()
	}
	prev := e.state.Load()
	if err != nil {
		e.backoff.Next("", p.clock.Now())
		reason, problem := describe(err, e.name, e.timeout)
		p.metrics.providerCall(e.name, reason, time.Since(start))
		outcome = reason
		if prev != nil && prev.Problem == problem {
			return prev
		}
		return p.publish(e, &State{Problem: problem, Rotated: time.Now()})
	}
	if refusedCurrent && isRefused() {
		// client-go's run failed (it logs why, without the output) or gave
		// the refused credential again: the cluster would refuse it again.
		e.backoff.Next("", p.clock.Now())
	}
	next := &State{Token: token}
	if e.expiry != "" {
		next.Expires = readExpiry(e.expiry)
	}
	if e.expiry != "" && e.gone.Load() {
		_ = os.Remove(e.expiry) // a run of a released gateway leaves nothing
	}
	if cert != nil {
		next.Cert, next.Key = certPEM(cert)
		if next.Expires.IsZero() {
			next.Expires = certNotAfter(cert)
		}
	}
	same := prev != nil && prev.Problem == "" && prev.Token == next.Token && string(prev.Cert) == string(next.Cert)
	if !same {
		e.backoff.Reset("") // a new credential
	}
	if same && prev.Expires.Equal(next.Expires) {
		outcome = "cached"
		return prev // client-go's cached credential
	}
	p.metrics.providerCall(e.name, "ok", time.Since(start))
	next.Rotated = time.Now()
	if same { // the same credential, with a new expiry: no rotation
		next.Rotated = prev.Rotated
	}
	return p.publish(e, next)
}

func (p *Providers) publish(e *cluster, st *State) *State {
	e.state.Store(st)
	if fn := p.onChange.Load(); fn != nil {
		(*fn)(e.spec.Gateway)
	}
	return st
}

// Release lets a deleted gateway's Authenticator go.
func (p *Providers) Release(gateway string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.clusters[gateway]; ok {
		e.release()
		delete(p.clusters, gateway)
	}
}

func (e *cluster) release() {
	if e.auth != nil {
		released(e.auth)
	}
	if e.expiry != "" {
		e.gone.Store(true)
		_ = os.Remove(e.expiry)
	}
}

// Len is how many gateways hold an Authenticator, for tests.
func (p *Providers) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.clusters)
}

func certPEM(c *tls.Certificate) (certs, key []byte) {
	for _, der := range c.Certificate {
		certs = append(certs, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	if der, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey); err == nil {
		key = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	}
	return certs, key
}

// certIs tells whether client-go's current client certificate is pem (as
// State.Cert has it).
func (e *cluster) certIs(pem string) bool {
	c, err := e.getCert()
	if err != nil || c == nil {
		return false
	}
	certs, _ := certPEM(c)
	return string(certs) == pem
}

// certNotAfter is when c's leaf expires (zero: unknown).
func certNotAfter(c *tls.Certificate) time.Time {
	if c.Leaf != nil {
		return c.Leaf.NotAfter
	}
	if len(c.Certificate) == 0 {
		return time.Time{}
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		return time.Time{}
	}
	return leaf.NotAfter
}

var exitCode = regexp.MustCompile(`failed with exit code (-?\d+)`)

// describe turns client-go's error into a reason (a metric label) and a
// message a user can act on. It never passes client-go's text on: a
// decoding error can quote the provider's output, which may hold a token.
func describe(err error, name string, timeout time.Duration) (reason, message string) {
	s := err.Error()
	prefix := fmt.Sprintf("credential provider %q ", name)
	if m := exitCode.FindStringSubmatch(s); m != nil {
		code, _ := strconv.Atoi(m[1])
		switch code {
		case exitTimeout:
			return "timeout", prefix + fmt.Sprintf("did not answer within %v and was stopped (or exited with code %d): check what it waits for, or raise its timeout in the providers file", timeout, exitTimeout)
		case exitTooLarge:
			return "malformed", prefix + "printed more than 1 MiB (or exited with code 125): it must print one ExecCredential"
		case exitNotRun:
			return "failed", prefix + "could not be started (or exited with code 127): check exec.command and that it can run with only exec.env as its environment"
		case exitNotCredential:
			return "malformed", prefix + "printed no ExecCredential client-go can use (or exited with code 126): its standard output must be one ExecCredential of the configured exec.apiVersion whose status has a token or a PEM clientCertificateData with its clientKeyData, and an RFC 3339 expirationTimestamp if any; run it by hand with the same KUBERNETES_EXEC_INFO and exec.env to see what it prints (the gateway never logs its output)"
		}
		return "failed", prefix + fmt.Sprintf("exited with code %d: run it by hand with the same KUBERNETES_EXEC_INFO and exec.env to see why (the gateway never logs its output)", code)
	}
	for _, known := range []string{"didn't return a token or cert/key pair", "returned only certificate or key", "plugin returned version", "failed parsing client key/certificate", "didn't return a status field", "decoding stdout"} {
		if strings.Contains(s, known) {
			return "malformed", prefix + "returned an ExecCredential the gateway cannot use (" + known + ")"
		}
	}
	return "failed", prefix + "failed to run (is the gateway's own binary still at its path? providers run through it)"
}

// clusterConfig is spec.cluster.config as client-go encodes it (nil: none).
func clusterConfig(raw []byte) runtime.Object {
	if len(raw) == 0 {
		return nil
	}
	return &runtime.Unknown{Raw: raw, ContentType: runtime.ContentTypeJSON}
}
