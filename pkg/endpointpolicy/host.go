package endpointpolicy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"golang.org/x/net/idna"
)

// ParseHost reads a host as written in a URL (IPv6 in brackets or not, an
// IPv6 zone allowed) and tells what will be dialed: an IP address (a valid
// Addr, which Check judges) or a DNS name (the zero Addr, judged after
// resolution where the gateway resolves it).
//
// Hosts that another parser on the way may read as an IP address which
// netip does not parse are refused: a forward proxy, a konnectivity agent or
// a cgo/glibc resolver reads "127.1", "2130706433", "0x7f000001",
// "0177.0.0.1" or "127.0.0.1." with inet_aton or WHATWG URL rules, as
// 127.0.0.1, so as names they would pass the policy and reach an address it
// denies. So is anything that is neither an IP address nor a DNS name, and
// a host that becomes an IP address only once mapped to ASCII (IDNA, as
// net/http maps it before dialing: "１２７.０.０.１").
func ParseHost(host string) (netip.Addr, error) {
	if host == "" {
		return netip.Addr{}, fmt.Errorf("the host is empty: write an IP address or a DNS name")
	}
	if strings.HasPrefix(host, "[") || strings.HasSuffix(host, "]") {
		ip, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
		if err != nil || !strings.HasPrefix(host, "[") || !strings.HasSuffix(host, "]") || !ip.Is6() {
			return netip.Addr{}, fmt.Errorf("host %q is not an IPv6 address in brackets: write an IPv6 address in brackets, such as [2001:db8::1], or an IPv4 address in dotted-decimal form without, such as 10.0.0.1", host)
		}
		return ip, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip, nil
	}
	// What is dialed: net/http and the pool map a host to ASCII (IDNA,
	// lower case) and keep it as written when that fails.
	dialed := strings.ToLower(host)
	if ascii, err := idna.Lookup.ToASCII(host); err == nil {
		dialed = ascii
	}
	if ip, err := netip.ParseAddr(dialed); err == nil {
		return netip.Addr{}, fmt.Errorf("host %q is the IP address %s once mapped to ASCII (IDNA): %s", host, ip, writeAs(ip))
	}
	// A DNS name may end with a dot; an IP address may not, but URL
	// parsers drop that dot and read the rest as an address.
	name := strings.TrimSuffix(dialed, ".")
	if ip, err := netip.ParseAddr(name); err == nil {
		return netip.Addr{}, fmt.Errorf("host %q is the IP address %s with a trailing dot, which URL parsers and proxies drop: %s", host, ip, writeAs(ip))
	}
	last := name[strings.LastIndexByte(name, '.')+1:]
	if isIPv4Number(last) {
		// No top-level domain is numeric, so this is no name: the WHATWG
		// URL parser ("ends in a number") and inet_aton take it for an
		// IPv4 address, in a form netip refuses.
		if ip, ok := inetAton(name); ok {
			return netip.Addr{}, fmt.Errorf("host %q is an IPv4 address in a form (fewer than four parts, octal, hex or leading zeros) that resolvers and proxies read as %s: %s", host, ip, writeAs(ip))
		}
		return netip.Addr{}, fmt.Errorf("host %q ends in a number, so URL parsers and resolvers take it for an IPv4 address, and it is not one: write an IPv4 address in dotted-decimal form (such as 10.0.0.1) or use a DNS name", host)
	}
	if err := checkDNSName(name); err != nil {
		return netip.Addr{}, fmt.Errorf("host %q is neither an IP address nor a DNS name (%v): write an IP address such as 10.0.0.1 or [2001:db8::1], or a DNS name", host, err)
	}
	return netip.Addr{}, nil
}

// writeAs says how to write ip so that every parser reads it the same.
func writeAs(ip netip.Addr) string {
	if ip.Is4() {
		return "write it in dotted-decimal form, " + ip.String()
	}
	return "write it as " + ip.String()
}

// isIPv4Number tells whether s is a part that inet_aton or the WHATWG URL
// parser reads as a number: decimal digits, or 0x followed by hex digits
// (none too: WHATWG reads "0x" as 0).
func isIPv4Number(s string) bool {
	if len(s) >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		for _, c := range s[2:] {
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
		return true
	}
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// inetAton reads s as glibc's inet_aton does: one to four parts, each
// decimal, octal (leading 0) or hex (0x); the last part fills the bytes
// left (127.1 is 127.0.0.1, 2130706433 is 127.0.0.1). It only names the
// address in ParseHost's refusal, so the writer knows what to write.
func inetAton(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var nums []uint64
	for _, p := range parts {
		base, digits := 10, p
		switch {
		case len(p) >= 2 && (p[:2] == "0x" || p[:2] == "0X"):
			base, digits = 16, p[2:]
			if digits == "" {
				digits = "0"
			}
		case len(p) > 1 && p[0] == '0':
			base, digits = 8, p[1:]
		}
		n, err := strconv.ParseUint(digits, base, 32)
		if err != nil || p == "" {
			return netip.Addr{}, false
		}
		nums = append(nums, n)
	}
	var v uint64
	for i, n := range nums[:len(nums)-1] {
		if n > 0xff {
			return netip.Addr{}, false
		}
		v |= n << (8 * (3 - i))
	}
	last := nums[len(nums)-1]
	if last >= 1<<(8*(5-len(nums))) {
		return netip.Addr{}, false
	}
	v |= last
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// checkDNSName accepts what a resolver can look up: dot-separated labels
// of letters, digits, '-' and '_' (in use for service names), each 1 to
// 63 bytes, 253 in all.
func checkDNSName(name string) error {
	if len(name) > 253 {
		return fmt.Errorf("longer than 253 bytes")
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("a label is empty or longer than 63 bytes")
		}
		for _, c := range label {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("%q is not a letter, digit, '-' or '_'", c)
			}
		}
	}
	return nil
}
