// Package endpointpolicy decides which addresses the gateway may connect to
// for a ClusterGateway. Whoever may write a ClusterGateway chooses where the
// gateway dials and reads the answer, so without a policy a writer could aim
// it at a cloud metadata service or a node-local endpoint. The policy is
// checked on the address actually dialed, after name resolution, so a name
// that resolves (or rebinds) into a denied range is refused too. Hosts as
// written are read by one parser, ParseHost, wherever they enter (the API,
// the pool, every dial route): an IP address is judged, a DNS name waits for
// resolution, and what a resolver or proxy might read as another address
// than netip does is refused.
package endpointpolicy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
)

// ErrDenied marks a connection the policy refused.
var ErrDenied = errors.New("refused by the gateway's endpoint policy")

// DefaultDeny are link-local ranges, which hold the cloud metadata services
// (169.254.169.254, fe80::/10), and the IPv6 address of AWS's metadata service.
var DefaultDeny = []string{"169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128"}

// Config is the policy's plain config, whose flags (--endpoint-allow-cidrs,
// --endpoint-deny-cidrs) are defined in cmd/apiserver/app/options.
// DefaultConfig has the defaults, Validate the rules; Policy refuses what
// Validate refuses.
type Config struct {
	AllowCIDRs []string
	DenyCIDRs  []string
}

// DefaultConfig returns the defaults: everything but DefaultDeny is allowed.
func DefaultConfig() *Config {
	return &Config{DenyCIDRs: append([]string(nil), DefaultDeny...)}
}

// Validate checks the CIDRs.
func (c *Config) Validate() []error {
	_, err := c.Policy()
	if err != nil {
		return []error{err}
	}
	return nil
}

// Policy parses the config.
func (c *Config) Policy() (*Policy, error) {
	allow, err := parse("--endpoint-allow-cidrs", c.AllowCIDRs)
	if err != nil {
		return nil, err
	}
	deny, err := parse("--endpoint-deny-cidrs", c.DenyCIDRs)
	if err != nil {
		return nil, err
	}
	return &Policy{allow: allow, deny: deny}, nil
}

func parse(flag string, cidrs []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, c := range cidrs {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a CIDR such as 169.254.0.0/16 or fe80::/10: %v", flag, c, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Policy is a parsed allow and deny list. A nil *Policy allows everything.
type Policy struct {
	allow, deny []netip.Prefix
}

// Check says whether the gateway may connect to ip.
func (p *Policy) Check(ip netip.Addr) error {
	if p == nil || !ip.IsValid() {
		return nil
	}
	ip = ip.Unmap().WithZone("") // ::ffff:169.254.169.254 is 169.254.169.254
	name := ip.String()
	if ip.IsUnspecified() {
		// A connection to 0.0.0.0 or :: is made to the local host (Linux):
		// it is judged as the loopback address, so a deny list holding
		// 127.0.0.0/8 and ::1/128 covers it too.
		if ip.Is4() {
			ip = netip.AddrFrom4([4]byte{127, 0, 0, 1})
		} else {
			ip = netip.IPv6Loopback()
		}
		name += " (the local host, judged as " + ip.String() + ")"
	}
	for _, d := range p.deny {
		if d.Contains(ip) {
			return fmt.Errorf("%w: %s is in %s (--endpoint-deny-cidrs)", ErrDenied, name, d)
		}
	}
	if len(p.allow) == 0 {
		return nil
	}
	for _, a := range p.allow {
		if a.Contains(ip) {
			return nil
		}
	}
	return fmt.Errorf("%w: %s is in none of --endpoint-allow-cidrs (%s)", ErrDenied, name, joinPrefixes(p.allow))
}

// CheckHost judges a host as written (ParseHost): an IP address by Check,
// a host that some resolver or proxy could read as an address other than
// what netip reads is refused, and a DNS name passes here, to be judged
// after resolution where the gateway resolves it (Control).
func (p *Policy) CheckHost(host string) error {
	if p == nil {
		return nil
	}
	ip, err := ParseHost(host)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrDenied, err)
	}
	return p.Check(ip)
}

// CheckHostPort is CheckHost for a dial's host:port, before a route that
// resolves the host elsewhere (a forward proxy, a konnectivity agent) sees it.
func (p *Policy) CheckHostPort(address string) error {
	if p == nil {
		return nil
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot split the address %q into host and port: %v", ErrDenied, address, err)
	}
	return p.CheckHost(host)
}

// Control is a net.Dialer Control function: it runs for each address the
// dialer is about to connect to, after resolution, and refuses denied ones
// before any packet is sent.
func (p *Policy) Control(_, address string, _ syscall.RawConn) error {
	if p == nil {
		return nil
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		host = address
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("%w: cannot parse the dialed address %q: %v", ErrDenied, address, err)
	}
	return p.Check(ip)
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}
