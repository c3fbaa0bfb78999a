package fanout

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// A set's continue token resumes every cluster of a paged list: for each
// cluster still open, its own continue token (or where its list starts, if
// no page of it was read yet), in order; and the set's resourceVersion so
// far. It is `fc1.` and the base64url of that JSON. A client treats it as
// opaque; the gateway checks it strictly, since a client can write anything
// in it, and still reads only clusters the caller may use now.
const continuePrefix = "fc1."

// maxContinueBytes bounds a token the gateway decodes (a request line is
// at most about 1 MiB anyway).
const maxContinueBytes = 1 << 20

// listToken is what a set's continue token holds.
type listToken struct {
	// Key binds the token to its set and path (tokenKey).
	Key string `json:"k"`
	// Match is the list's resourceVersionMatch, for clusters not started.
	Match string `json:"m,omitempty"`
	// Open are the clusters with items still to read, in order.
	Open []*openCluster `json:"o,omitempty"`
	// RVs is the set's resourceVersion so far: each cluster read.
	RVs map[string]string `json:"rv,omitempty"`
}

// openCluster is one cluster of a list with items still to read.
type openCluster struct {
	Name string `json:"n"`
	// Continue is the cluster's own token; "": no page of it read yet.
	Continue string `json:"c,omitempty"`
	// RV is the resourceVersion its first page is asked at (Continue "").
	RV string `json:"r,omitempty"`
	// Wait: its last read failed after the answer had begun, so it could
	// not be a warning; the next page reads it before its answer begins.
	Wait bool `json:"w,omitempty"`

	done bool // its last page was read, or it failed (this request)
	read bool // read in this request
}

// tokenKey binds a token to the set and the path it lists: a token given
// for another list is refused rather than read as this one's.
func tokenKey(set, subpath string) string {
	h := sha256.Sum256([]byte(set + "\x00" + strings.TrimPrefix(subpath, "/")))
	return base64.RawURLEncoding.EncodeToString(h[:12])
}

func encodeContinue(t *listToken) string {
	b, _ := json.Marshal(t) // strings, bools and maps of strings always encode
	return continuePrefix + base64.RawURLEncoding.EncodeToString(b)
}

var errForeignToken = errors.New("it was given for another set or path")

// decodeContinue reads a continue token the client sent for the list key
// names; its error says what is wrong.
func decodeContinue(s, key string) (*listToken, error) {
	if len(s) > maxContinueBytes {
		return nil, fmt.Errorf("it is over %d KiB", maxContinueBytes>>10)
	}
	enc, ok := strings.CutPrefix(s, continuePrefix)
	if !ok {
		return nil, fmt.Errorf("it does not start with %q", continuePrefix)
	}
	b, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return nil, fmt.Errorf("it is not base64url: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var t listToken
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("it is not the JSON of a set's token: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("it has data after its JSON")
	}
	if t.Key != key {
		return nil, errForeignToken
	}
	switch t.Match {
	case "", "Exact", "NotOlderThan":
	default:
		return nil, fmt.Errorf("its resourceVersionMatch %q is not one a list takes", t.Match)
	}
	seen := make(map[string]bool, len(t.Open))
	for _, c := range t.Open {
		if c == nil {
			return nil, errors.New("it holds a null cluster")
		}
		if errs := validation.IsDNS1123Subdomain(c.Name); len(errs) > 0 {
			return nil, fmt.Errorf("%q is not a ClusterGateway name", c.Name)
		}
		if seen[c.Name] {
			return nil, fmt.Errorf("it names %q twice", c.Name)
		}
		seen[c.Name] = true
		if c.Continue != "" && c.RV != "" {
			return nil, fmt.Errorf("cluster %q has both a continue token and a resourceVersion", c.Name)
		}
	}
	if t.RVs == nil {
		t.RVs = map[string]string{}
	}
	for n := range t.RVs {
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			return nil, fmt.Errorf("%q is not a ClusterGateway name", n)
		}
	}
	return &t, nil
}

// keep drops the clusters the caller may not use now (allowed, sorted):
// such a cluster is neither read nor named again. A cluster allowed now
// that the token does not name is not added: the list began without it.
func (t *listToken) keep(allowed []string) {
	ok := make(map[string]bool, len(allowed))
	for _, n := range allowed {
		ok[n] = true
	}
	open := t.Open[:0]
	for _, c := range t.Open {
		if ok[c.Name] {
			open = append(open, c)
		}
	}
	t.Open = open
	for n := range t.RVs {
		if !ok[n] {
			delete(t.RVs, n)
		}
	}
}

// next is the token of the page after this one: the clusters still open;
// "" when none is.
func (t *listToken) next() string {
	var open []*openCluster
	for _, c := range t.Open {
		if !c.done {
			open = append(open, c)
		}
	}
	if len(open) == 0 {
		return ""
	}
	return encodeContinue(&listToken{Key: t.Key, Match: t.Match, Open: open, RVs: t.RVs})
}
