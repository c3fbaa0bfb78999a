package konnectivity

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/clustergateway/cluster-gateway/internal/testbalancer"
	"github.com/clustergateway/cluster-gateway/internal/testmetrics"
	"github.com/clustergateway/cluster-gateway/internal/testpki"
	"github.com/clustergateway/cluster-gateway/internal/testpoll"
	"github.com/clustergateway/cluster-gateway/internal/testproc"
)

// backendIP is where the agent's "managed cluster" lives; the agent
// advertises it with --agent-identifiers so destHost routes to it.
const backendIP = "127.0.0.3"

// stack is real proxy-servers and a proxy-agent on loopback, with an HTTPS
// server behind the agent standing for a managed cluster's API server. The
// agent reaches every proxy-server through one balanced address, as it
// would through a Service (--server-count tells it how many to hold).
type stack struct {
	t   testing.TB
	dir string
	bin string

	servers                         []*proxyServer
	balancer                        *testbalancer.Balancer // the agent's one address for several proxy-servers
	agentOn                         []int                  // the proxy-servers the agent reaches; nil: all
	agentAddr                       string                 // where the agent connects: the balancer, or the one proxy-server it reaches
	agentAdminPort, agentHealthPort int

	serverCA, clientCA, clusterCA, backendCA *testpki.CA
	agent                                    *exec.Cmd

	backend     *httptest.Server
	backendAddr string

	// The gateway's material as files.
	caFile, certFile, keyFile string
}

// proxyServer is one proxy-server process and its ports on 127.0.0.1.
type proxyServer struct {
	id                                           string
	serverPort, agentPort, adminPort, healthPort int
	cmd                                          *exec.Cmd
}

func (p *proxyServer) address() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.serverPort))
}

// findBinaries looks in $KONNECTIVITY_BIN if set, else in $KUBE_BIN and the
// Makefile's output, and fails the test if proxy-server and proxy-agent are
// not there (`make test-unit` builds them first).
func findBinaries(t testing.TB) string {
	t.Helper()
	dirs := []string{os.Getenv("KUBE_BIN"), "../../../_output/bin"}
	if explicit := os.Getenv("KONNECTIVITY_BIN"); explicit != "" {
		dirs = []string{explicit} // asked for: use it or fail
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if isExec(filepath.Join(d, "proxy-server")) && isExec(filepath.Join(d, "proxy-agent")) {
			abs, err := filepath.Abs(d)
			if err != nil {
				t.Fatal(err)
			}
			return abs
		}
	}
	t.Fatalf("proxy-server and proxy-agent are not in %q: build them with `make tools` (or set KONNECTIVITY_BIN)", dirs)
	return ""
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// newStack starts one proxy-server; newStackN starts n, the agent
// connected to each.
func newStack(t testing.TB) *stack { return newStackN(t, 1) }

func newStackN(t testing.TB, n int) *stack { return newStackAgentOn(t, n, nil) }

// newStackAgentOn starts n proxy-servers, the agent connected only to those
// listed (nil: all), as when an agent has not reached every proxy-server.
func newStackAgentOn(t testing.TB, n int, agentOn []int) *stack {
	t.Helper()
	s := &stack{t: t, dir: t.TempDir(), bin: findBinaries(t), agentOn: agentOn}
	s.serverCA, s.clientCA = testpki.MustCA(t, "proxy-server-ca"), testpki.MustCA(t, "gateway-client-ca")
	s.clusterCA, s.backendCA = testpki.MustCA(t, "agent-ca"), testpki.MustCA(t, "managed-cluster-ca")
	ports := freePorts(t, 2+4*n)
	s.agentAdminPort, s.agentHealthPort = ports[0], ports[1]
	var agentAddrs []string
	for i := range n {
		p := ports[2+4*i:]
		ps := &proxyServer{id: fmt.Sprintf("server-%d", i), serverPort: p[0], agentPort: p[1], adminPort: p[2], healthPort: p[3]}
		s.servers = append(s.servers, ps)
		if s.hasAgent(i) {
			agentAddrs = append(agentAddrs, net.JoinHostPort("127.0.0.1", strconv.Itoa(ps.agentPort)))
		}
	}

	certs := map[string][]byte{"server-ca.crt": s.clientCA.CertPEM, "cluster-ca.crt": s.clusterCA.CertPEM}
	certs["server.crt"], certs["server.key"] = issue(t, s.serverCA, "proxy-server", "127.0.0.1")
	certs["cluster.crt"], certs["cluster.key"] = issue(t, s.clusterCA, "proxy-server-cluster", "127.0.0.1")
	certs["agent-ca.crt"] = s.clusterCA.CertPEM
	certs["agent.crt"], certs["agent.key"] = issue(t, s.clusterCA, "proxy-agent")
	for name, data := range certs {
		writeFile(t, s.path(name), data)
	}
	s.caFile, s.certFile, s.keyFile = s.path("gw-ca.crt"), s.path("gw.crt"), s.path("gw.key")
	writeFile(t, s.caFile, s.serverCA.CertPEM)
	s.rotateClientCert()

	// A balancer only in front of several: the agent's reconnections to
	// one it alone reaches stay between it and that proxy-server, out of
	// this process, whose fds the tests count.
	s.agentAddr = agentAddrs[0]
	if len(agentAddrs) > 1 {
		b, err := testbalancer.Listen("127.0.0.1", agentAddrs...)
		if err != nil {
			t.Fatal(err)
		}
		s.balancer = b
		s.agentAddr = b.Addr
		b.Start()
	}
	s.startBackend()
	for i := range s.servers {
		s.startServer(i)
	}
	s.startAgent()
	t.Cleanup(s.stop)
	s.waitReady()
	return s
}

func (s *stack) path(name string) string { return filepath.Join(s.dir, name) }

// rotateClientCert writes a fresh gateway client cert and key (key first:
// the reload must cope with a moment where they do not match).
func (s *stack) rotateClientCert() {
	cert, key := issue(s.t, s.clientCA, "cluster-gateway")
	writeFile(s.t, s.keyFile, key)
	writeFile(s.t, s.certFile, cert)
}

// addresses are the proxy-servers' addresses for the gateway.
func (s *stack) addresses() []string {
	var as []string
	for _, p := range s.servers {
		as = append(as, p.address())
	}
	return as
}

func (s *stack) config() Config {
	return Config{
		Addresses: s.addresses(),
		CAFile:    s.caFile, CertFile: s.certFile, KeyFile: s.keyFile,
		ReloadInterval:         100 * time.Millisecond,
		HealthInterval:         time.Second,
		HealthTimeout:          time.Second,
		HealthFailureThreshold: 3, // the default
		RetireGrace:            time.Minute,
		DialTimeout:            10 * time.Second,
	}
}

func (s *stack) serverArgs(p *proxyServer) []string {
	return []string{
		"--mode=grpc", "--proxy-strategies=destHost,default", "--uds-name=",
		"--server-id=" + p.id, "--server-count=" + strconv.Itoa(len(s.servers)),
		"--server-bind-address=127.0.0.1", "--server-port=" + strconv.Itoa(p.serverPort),
		"--agent-bind-address=127.0.0.1", "--agent-port=" + strconv.Itoa(p.agentPort),
		"--admin-bind-address=127.0.0.1", "--admin-port=" + strconv.Itoa(p.adminPort),
		"--health-bind-address=127.0.0.1", "--health-port=" + strconv.Itoa(p.healthPort),
		"--server-ca-cert=" + s.path("server-ca.crt"), "--server-cert=" + s.path("server.crt"), "--server-key=" + s.path("server.key"),
		"--cluster-ca-cert=" + s.path("cluster-ca.crt"), "--cluster-cert=" + s.path("cluster.crt"), "--cluster-key=" + s.path("cluster.key"),
		"--v=2",
	}
}

func (s *stack) agentArgs() []string {
	host, port, err := net.SplitHostPort(s.agentAddr)
	if err != nil {
		s.t.Fatal(err)
	}
	return []string{
		"--proxy-server-host=" + host, "--proxy-server-port=" + port,
		"--ca-cert=" + s.path("agent-ca.crt"), "--agent-cert=" + s.path("agent.crt"), "--agent-key=" + s.path("agent.key"),
		"--agent-identifiers=ipv4=" + backendIP,
		"--admin-bind-address=127.0.0.1", "--admin-server-port=" + strconv.Itoa(s.agentAdminPort),
		"--health-server-host=127.0.0.1", "--health-server-port=" + strconv.Itoa(s.agentHealthPort),
		"--sync-interval=200ms", "--sync-interval-cap=1s", "--probe-interval=200ms", "--v=2",
	}
}

// start runs a binary with its output in a log file; the parent's copy of
// the file is closed at once so the test's fd count is not disturbed.
func (s *stack) start(name, logName string, args []string) *exec.Cmd {
	s.t.Helper()
	log, err := os.OpenFile(s.path(logName+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		s.t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("starting %s: %v", name, err)
	}
	return cmd
}

func (s *stack) startServer(i int) {
	p := s.servers[i]
	p.cmd = s.start("proxy-server", p.id, s.serverArgs(p))
}
func (s *stack) startAgent() { s.agent = s.start("proxy-agent", "proxy-agent", s.agentArgs()) }

// killServer SIGKILLs proxy-server i by pid and reaps it.
func (s *stack) killServer(i int) {
	kill(s.servers[i].cmd)
	s.servers[i].cmd = nil
}

// kill SIGKILLs by pid (proxy-agent would drain on the first SIGTERM).
func kill(cmd *exec.Cmd) {
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies on SIGKILL too, but let it say so in its log
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
}

func (s *stack) stop() {
	kill(s.agent)
	for _, p := range s.servers {
		kill(p.cmd)
	}
	if s.balancer != nil {
		s.balancer.Close()
	}
	s.backend.Close()
	if s.t.Failed() {
		logs := []string{"proxy-agent"}
		for _, p := range s.servers {
			logs = append(logs, p.id)
		}
		for _, name := range logs {
			s.t.Logf("--- tail of %s.log:\n%s", name, tail(s.path(name+".log"), 40))
		}
	}
}

func (s *stack) hasAgent(i int) bool { return s.agentOn == nil || slices.Contains(s.agentOn, i) }

// waitReady waits until every running proxy-server the agent reaches has it
// as a backend.
func (s *stack) waitReady() {
	s.t.Helper()
	for i, p := range s.servers {
		if p.cmd == nil || !s.hasAgent(i) {
			continue
		}
		url := fmt.Sprintf("http://127.0.0.1:%d/readyz", p.healthPort)
		testpoll.Eventually(s.t, 30*time.Second, p.id+" ready with an agent", func() error {
			return httpGetOK(url)
		})
	}
}

// startBackend serves "/" (ok) and "/stream" (a line every 20 ms until the
// client goes, like a watch) over TLS on backendIP.
func (s *stack) startBackend() {
	cert, key := issue(s.t, s.backendCA, "managed-apiserver", backendIP)
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		s.t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(backendIP, "0"))
	if err != nil {
		s.t.Fatalf("listening on %s (all of 127.0.0.0/8 is loopback on Linux): %v", backendIP, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		for i := 0; ; i++ {
			if _, err := fmt.Fprintf(w, "tick %d\n", i); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	s.backend = &httptest.Server{Listener: ln, Config: &http.Server{Handler: mux}}
	s.backend.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	s.backend.StartTLS()
	s.backendAddr = ln.Addr().String()
}

// backendTLS verifies the managed cluster's certificate through the tunnel.
func (s *stack) backendTLS() *tls.Config {
	return &tls.Config{RootCAs: s.backendCA.Pool(), ServerName: backendIP}
}

// proxyConnections counts the ESTABLISHED TCP connections from this
// process (the Manager under test) to the proxy-servers' server ports, as
// the kernel sees them.
func (s *stack) proxyConnections() int {
	s.t.Helper()
	total := 0
	for i := range s.servers {
		total += s.proxyConnectionsTo(i)
	}
	return total
}

// proxyConnectionsTo counts them to proxy-server i.
func (s *stack) proxyConnectionsTo(i int) int {
	s.t.Helper()
	n, err := testproc.TCPConns(os.Getpid(), "127.0.0.1", s.servers[i].serverPort)
	if err != nil {
		s.t.Fatal(err)
	}
	return n
}

func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

func httpGetOK(url string) error {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

func tail(path string, lines int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var all []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		all = append(all, sc.Text())
	}
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// serverMetric sums a metric's samples from the running proxy-servers' /metrics.
func (s *stack) serverMetric(name string) (float64, error) {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	sum := 0.0
	for _, p := range s.servers {
		if p.cmd == nil {
			continue
		}
		m, err := testmetrics.Scrape(c, fmt.Sprintf("http://127.0.0.1:%d/metrics", p.healthPort))
		if err != nil {
			return 0, err
		}
		if !m.Has(name) {
			return 0, fmt.Errorf("%s exports no %s", p.id, name)
		}
		sum += m.Sum(name)
	}
	return sum, nil
}
