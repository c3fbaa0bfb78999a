package boundedyaml

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// limits as a caller sets them for a kubeconfig.
var limits = Limits{MaxBytes: 256 << 10, MaxNodes: 10000}

// kubeconfig is what clientcmd writes: what a tool's kubeconfig looks like.
func kubeconfig(t testing.TB) []byte {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://127.0.0.2:6443", CertificateAuthorityData: []byte("-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n"), TLSServerName: "kubernetes"}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t0k", ClientCertificateData: []byte("cert")}
	cfg.Contexts["ctx"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u", Namespace: "ns"}
	cfg.CurrentContext = "ctx"
	raw, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// Alias bombs of a few hundred KiB, each valid YAML that expands to
// gigabytes (or, for the classic one, to a billion nodes) when aliases are
// followed: one long string repeated, nested repetition, and repetition
// through merge keys.
func bombs() map[string][]byte {
	long := "&a \"" + strings.Repeat("x", 200<<10) + "\""
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Config\npreferences:\n  extensions:\n  - name: a\n    extension: %s\n  - name: b\n    extension: [", long)
	for i := range 2000 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("*a")
	}
	b.WriteString("]\n")
	laughs := "a0: &a0 [lol,lol,lol,lol,lol,lol,lol,lol,lol,lol]\n"
	for i := 1; i < 10; i++ {
		p := fmt.Sprintf("*a%d,", i-1)
		laughs += fmt.Sprintf("a%d: &a%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(p, 10), ","))
	}
	merge := "base: &b {k: \"" + strings.Repeat("y", 100<<10) + "\"}\nitems:\n" + strings.Repeat("- {<<: *b, n: 1}\n", 5000)
	return map[string][]byte{"long string": []byte(b.String()), "billion laughs": []byte(laughs), "merge keys": []byte(merge)}
}

// allocated is how many bytes f allocated on the heap (cumulative, so it
// does not depend on when the GC ran).
func allocated(f func()) uint64 {
	// The least of a few runs: the counter is the whole process's, and a
	// goroutine of the test framework or the race detector may allocate
	// during one of them.
	least := uint64(math.MaxUint64)
	for range 3 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}

// An alias bomb is refused before anything expands it: its parse allocates
// a small multiple of its size (sigs.k8s.io/yaml, as clientcmd.Load,
// allocates gigabytes for the first one), and the error says what to do
// without quoting the document.
func TestAliasBombRefusedUnexpanded(t *testing.T) {
	for name, raw := range bombs() {
		if len(raw) > limits.MaxBytes || len(raw) < 100 {
			t.Fatalf("%s: %d bytes, want one under the byte cap", name, len(raw))
		}
		var err error
		// The tree's documented cost, at most 160 bytes allocated per byte
		// of input; following the aliases costs thousands per byte.
		bound := uint64(160*len(raw) + 1<<20)
		if got := allocated(func() { _, err = ToJSON(raw, limits) }); got > bound {
			t.Errorf("%s (%d KiB): allocated %d MiB, want at most %d MiB", name, len(raw)>>10, got>>20, bound>>20)
		}
		if !errors.Is(err, ErrAlias) || !strings.Contains(err.Error(), "write each value out in full") {
			t.Errorf("%s: error %v, want %v saying what to do", name, err, ErrAlias)
		}
		if err != nil && (strings.Contains(err.Error(), "xxx") || strings.Contains(err.Error(), "yyy") || strings.Contains(err.Error(), "lol")) {
			t.Errorf("%s: the error quotes the document: %.200s", name, err)
		}
	}
}

// The widest tree, a flow sequence of one-letter scalars, costs what the
// package documents: at most 160 bytes allocated per byte of input.
func TestWidestTree(t *testing.T) {
	raw := []byte("[" + strings.Repeat("a,", 32<<10) + "a]")
	var err error
	got := allocated(func() { _, err = ToJSON(raw, Limits{MaxBytes: len(raw), MaxNodes: 1 << 20}) })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d bytes allocated per byte of input", got/uint64(len(raw)))
	if bound := uint64(160*len(raw) + 1<<20); got > bound {
		t.Errorf("%d KiB of one-letter scalars allocated %d MiB, want at most %d MiB", len(raw)>>10, got>>20, bound>>20)
	}
}

// An anchor alone expands nothing, but tools never write one: it is refused
// too, so the rule is simply "none".
func TestAnchorWithoutAliasRefused(t *testing.T) {
	if _, err := ToJSON([]byte("a: &x 1\nb: 2\n"), limits); !errors.Is(err, ErrAlias) {
		t.Fatalf("an anchor: %v, want %v", err, ErrAlias)
	}
	if _, err := ToJSON([]byte("? &k a\n: 1\n"), limits); !errors.Is(err, ErrAlias) {
		t.Fatalf("an anchored key: %v, want %v", err, ErrAlias)
	}
}

// The byte cap refuses a larger document unread, so it costs nothing; one
// at the cap is read.
func TestByteCap(t *testing.T) {
	lim := Limits{MaxBytes: 1 << 10, MaxNodes: 10000}
	at := []byte("k: \"" + strings.Repeat("v", lim.MaxBytes-6) + "\"\n")
	if len(at) != lim.MaxBytes {
		t.Fatalf("test document is %d bytes", len(at))
	}
	if _, err := ToJSON(at, lim); err != nil {
		t.Fatalf("a document at the cap: %v", err)
	}
	over := append(at, ' ')
	var err error
	if got := allocated(func() { _, err = ToJSON(over, lim) }); got > 1<<10 {
		t.Errorf("refusing an oversized document allocated %d bytes", got)
	}
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "1025 bytes, more than the 1024 allowed") {
		t.Fatalf("one byte over the cap: %v", err)
	}
}

// The node budget counts every scalar, sequence and mapping, keys included.
func TestNodeBudget(t *testing.T) {
	doc := []byte("a: [1, 2]\nb: {c: d}\n") // mapping, a, seq, 1, 2, b, mapping, c, d
	if _, err := ToJSON(doc, Limits{MaxBytes: 1 << 10, MaxNodes: 9}); err != nil {
		t.Fatalf("9 nodes within a budget of 9: %v", err)
	}
	if _, err := ToJSON(doc, Limits{MaxBytes: 1 << 10, MaxNodes: 8}); !errors.Is(err, ErrTooManyNodes) || !strings.Contains(err.Error(), "more than 8") {
		t.Fatalf("9 nodes over a budget of 8: %v", err)
	}
}

// A kubeconfig as tools write it reads as clientcmd reads it.
func TestKubeconfigReadsAsClientcmd(t *testing.T) {
	raw := kubeconfig(t)
	js, err := ToJSON(raw, limits)
	if err != nil {
		t.Fatal(err)
	}
	want, err := clientcmd.Load(raw)
	if err != nil {
		t.Fatal(err)
	}
	got, err := clientcmd.Load(js)
	if err != nil {
		t.Fatalf("clientcmd cannot read the JSON: %v\n%s", err, js)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the JSON reads as\n%#v\nthe YAML as\n%#v", got, want)
	}
}

// Scalars read as YAML 1.2 and JSON holds them; what JSON has no type for
// keeps its text.
func TestScalars(t *testing.T) {
	for in, want := range map[string]string{
		`{a: true, b: "true", c: yes, d: null, e: ~, f: , g: 1, h: -2.5, i: 1e3, j: 0x10, k: '7'}`: `{"a":true,"b":"true","c":"yes","d":null,"e":null,"f":null,"g":1,"h":-2.5,"i":1000,"j":16,"k":"7"}`,
		"t: 2024-01-02T03:04:05Z\nd: 2024-01-02\n":                                                 `{"t":"2024-01-02T03:04:05Z","d":"2024-01-02"}`,
		"b: !!binary aGk=\nc: !mine x\n":                                                           `{"b":"aGk=","c":"x"}`,
		"s: |\n  two\n  lines\n":                                                                   `{"s":"two\nlines\n"}`,
		"1: a\ntrue: b\n":                                                                          `{"1":"a","true":"b"}`,
		"[1, [], {}]":                                                                              `[1,[],{}]`,
		"":                                                                                         `null`,
		"# only a comment\n":                                                                       `null`,
		`{"json": ["is", "yaml"], "n": 1}`:                                                         `{"json":["is","yaml"],"n":1}`,
		"html: <&>":                                                                                `{"html":"<&>"}`,
		`esc: "q\"b\\s\x01\t\n\u00e9"`:                                                             `{"esc":"q\"b\\s\u0001\t\né"}`,
	} {
		got, err := ToJSON([]byte(in), limits)
		if err != nil || string(got) != want {
			t.Errorf("%q: %s, %v; want %s", in, got, err, want)
		}
	}
}

// What one reader could read one way and another reader another way is
// refused, saying where; no error quotes a value.
func TestAmbiguityRefused(t *testing.T) {
	const secret = "s3cr3t-value"
	for in, want := range map[string]string{
		"token: a\ntoken: " + secret + "\n":      "appears twice",
		"<<: {token: " + secret + "}\n":          "merge key",
		"? [a]\n: " + secret + "\n":              "not a scalar",
		"n: .inf\n":                              "infinite",
		"token: !!int " + secret + "\n":          "not the !!int",
		"token: \"" + secret + "\n":              "is not YAML",
		"a:\n\t- " + secret + "\n":               "is not YAML",
		"user: {token: " + secret + "}: more\n":  "is not YAML",
		"{\"token\": \"a\"} " + secret:           "data after the first",
		"token: a\n---\ntoken: " + secret + "\n": "more than one YAML document",
	} {
		_, err := ToJSON([]byte(in), limits)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error saying %q", in, err, want)
		} else if strings.Contains(err.Error(), secret) {
			t.Errorf("%q: the error quotes a value: %v", in, err)
		}
	}
}

// FuzzToJSON: whatever the input, no panic; what is accepted is valid JSON
// no more than a small multiple of the input (nothing expanded), and within
// the node budget.
// Fuzz it with: go test -run '^$' -fuzz FuzzToJSON -fuzztime 1m ./pkg/boundedyaml/
func FuzzToJSON(f *testing.F) {
	f.Add(kubeconfig(f))
	for _, b := range bombs() {
		f.Add(b[:min(len(b), 4<<10)])
	}
	for _, s := range []string{"a: &x 1\nb: *x\n", "<<: {a: 1}", "a: [1, {b: c}]\n", "- <\n- \"\\x01\"\n", "? a\n", "!!binary x", "a: !!float 1"} {
		f.Add([]byte(s))
	}
	lim := Limits{MaxBytes: 64 << 10, MaxNodes: 500}
	f.Fuzz(func(t *testing.T, raw []byte) {
		js, err := ToJSON(raw, lim)
		if err != nil {
			return
		}
		if !json.Valid(js) || !utf8.Valid(js) {
			t.Fatalf("not JSON: %q from %q", js, raw)
		}
		// The widest conversions are about 5 times: an empty key in a flow
		// sequence ("?,", 2 bytes) becomes {"":null}, (10 bytes).
		if len(js) > 8*len(raw)+8 {
			t.Fatalf("%d bytes of input became %d of JSON: something expanded", len(raw), len(js))
		}
		var v any
		if err := json.Unmarshal(js, &v); err != nil {
			t.Fatal(err)
		}
		if n := nodes(v); n > lim.MaxNodes {
			t.Fatalf("%d nodes accepted over a budget of %d", n, lim.MaxNodes)
		}
	})
}

// nodes counts what ToJSON counts: values and mapping keys.
func nodes(v any) int {
	n := 1
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			n += 1 + nodes(e)
		}
	case []any:
		for _, e := range v {
			n += nodes(e)
		}
	}
	return n
}
