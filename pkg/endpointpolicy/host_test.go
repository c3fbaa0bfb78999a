package endpointpolicy

import (
	"errors"
	"strings"
	"testing"
)

// Hosts that inet_aton (glibc, so cgo resolvers, curl, most forward
// proxies) or the WHATWG URL parser read as 127.0.0.1 while netip parses
// none of them. As names they used to pass CheckHost and reach loopback
// behind a forward proxy or a konnectivity agent.
var otherLoopbackForms = []string{
	"2130706433",      // one 32-bit number
	"127.1",           // two parts: the last fills three bytes
	"127.0.1",         // three parts
	"0177.0.0.1",      // octal
	"0x7f000001",      // hex
	"0X7F000001",      // hex, upper case
	"017700000001",    // octal, one number
	"0x7f.1",          // hex and decimal mixed
	"0177.1",          // octal, two parts
	"0x7f.0.0.0x1",    // hex parts
	"127.000.000.001", // leading zeros (octal to inet_aton)
	"127.0.0.1.",      // a trailing dot, which URL parsers drop
	"0x7f.1.",         // both
}

// Refused whatever the lists say: the policy cannot judge what it cannot
// read, and the message says what to write instead.
func TestCheckHostRefusesOtherIPv4Forms(t *testing.T) {
	def, err := DefaultConfig().Policy()
	if err != nil {
		t.Fatal(err)
	}
	loopbackDenied, err := (&Config{DenyCIDRs: []string{"127.0.0.0/8", "::1/128"}}).Policy()
	if err != nil {
		t.Fatal(err)
	}
	denyNothing, err := (&Config{DenyCIDRs: []string{""}}).Policy()
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range otherLoopbackForms {
		for name, p := range map[string]*Policy{"default": def, "loopback denied": loopbackDenied, "deny nothing": denyNothing} {
			err := p.CheckHost(host)
			if !errors.Is(err, ErrDenied) {
				t.Errorf("%s: CheckHost(%q) = %v, want ErrDenied", name, host, err)
				continue
			}
			if msg := err.Error(); !strings.Contains(msg, "dotted-decimal form, 127.0.0.1") {
				t.Errorf("%s: CheckHost(%q) = %q, want it to say: write it in dotted-decimal form, 127.0.0.1", name, host, msg)
			}
		}
	}
	for _, host := range []string{
		"1.2.3.4.5",        // ends in a number, no address at all
		"cluster.123",      // no top-level domain is numeric
		"cluster.0x1f",     // nor hex
		"0",                // inet_aton: 0.0.0.0, the local host
		"0x",               // WHATWG: 0
		"08.0.0.1",         // not octal, not a name either
		"１２７.０.０.１",        // fullwidth digits: 127.0.0.1 once mapped to ASCII
		"127。0。0。1",        // ideographic full stops, likewise
		"127.0.0.1%eth0",   // a zone on IPv4
		"exa$mple.com",     // not a DNS name
		"cluster..example", // an empty label
		"[127.0.0.1]",      // IPv4 in brackets
		"[::1",             // unbalanced
		"",
	} {
		if err := def.CheckHost(host); !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "write") {
			t.Errorf("CheckHost(%q) = %v, want ErrDenied saying what to write", host, err)
		}
	}
}

// Canonical literals are judged as before, IPv6 forms included, and names
// pass (they are judged where they are resolved).
func TestCheckHostJudgesCanonicalFormsAndPassesNames(t *testing.T) {
	loopbackDenied, err := (&Config{DenyCIDRs: []string{"169.254.0.0/16", "fe80::/10", "127.0.0.0/8", "::1/128"}}).Policy()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host   string
		denied bool
	}{
		{"127.0.0.1", true},
		{"127.0.0.3", true},
		{"::1", true},
		{"[::1]", true},
		{"::ffff:127.0.0.1", true}, // IPv4-mapped
		{"::ffff:7f00:1", true},    // IPv4-mapped, in hex
		{"[::ffff:7f00:1]", true},
		{"0.0.0.0", true}, // the local host, judged as loopback
		{"::", true},
		{"[::]", true},
		{"::ffff:0.0.0.0", true},
		{"fe80::1%eth0", true}, // zoned link-local
		{"[fe80::1%eth0]", true},
		{"169.254.169.254", true},
		{"10.0.0.1", false},
		{"2001:db8::1", false},
		{"[2001:db8::1]", false},
		{"localhost", false}, // a name: judged after resolution (Control)
		{"cluster.example", false},
		{"cluster.example.", false},
		{"Cluster-1.Example", false},
		{"_api._tcp.example", false},
		{"1e100.net", false},
		{"0x.example", false},
		{"cluster.0x1g", false}, // not hex: a name to URL parsers too
		{"127.0.0.1.nip.io", false},
		{"bücher.example", false}, // IDNA
	} {
		err := loopbackDenied.CheckHost(tc.host)
		if (err != nil) != tc.denied || (err != nil && !errors.Is(err, ErrDenied)) {
			t.Errorf("CheckHost(%q) = %v, want denied=%v", tc.host, err, tc.denied)
		}
	}
	var none *Policy
	if err := none.CheckHost("127.1"); err != nil {
		t.Errorf("a nil policy allows everything, got %v", err)
	}
}

func TestInetAton(t *testing.T) {
	for _, s := range otherLoopbackForms {
		s = strings.TrimSuffix(s, ".")
		if ip, ok := inetAton(s); !ok || ip.String() != "127.0.0.1" {
			t.Errorf("inetAton(%q) = %v, %v, want 127.0.0.1", s, ip, ok)
		}
	}
	for s, want := range map[string]string{"0": "0.0.0.0", "10.1": "10.0.0.1", "4294967295": "255.255.255.255", "1.2.65535": "1.2.255.255"} {
		if ip, ok := inetAton(s); !ok || ip.String() != want {
			t.Errorf("inetAton(%q) = %v, %v, want %s", s, ip, ok, want)
		}
	}
	for _, s := range []string{"1.2.3.4.5", "4294967296", "256.1", "1.2.65536", "08", "0x1g", "1..2", ""} {
		if ip, ok := inetAton(s); ok {
			t.Errorf("inetAton(%q) = %v, want no address", s, ip)
		}
	}
}
