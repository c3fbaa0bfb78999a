package fanout

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
)

// The cluster annotation is spliced into each item's bytes: the item is
// scanned, not decoded and encoded again, so that merging a page costs
// about the page's bytes (a bench of 100 clusters found the re-encode took
// most of a list's time and heap).

// mark is one cluster's annotation, as JSON, and the texts the walk
// (scan.go) splices into an item or a Table row: [0] where the object it
// goes in has no other member, [1] where it has.
type mark struct {
	entry []byte // "<ClusterAnnotation>":"<cluster>"
	value []byte // "<cluster>"

	noMeta    [2][]byte // "metadata":{"annotations":{entry}}(,)
	metaValue []byte    // {"annotations":{entry}}, for a null metadata
	noAnn     [2][]byte // "annotations":{entry}(,)
	annValue  []byte    // {entry}, for null annotations
	lastEntry [2][]byte // (,)entry, before the annotations' '}'
	nullRow   []byte    // {"cells":[value]}
	cells     []byte    // [value], for null cells
	firstCell [2][]byte // value(,), after the cells' '['
	noCells   [2][]byte // "cells":[value](,)
}

func newMark(cluster string) mark {
	k, _ := json.Marshal(ClusterAnnotation)
	v, _ := json.Marshal(cluster)
	e := append(append(k, ':'), v...)
	cat := func(parts ...string) []byte { return []byte(strings.Join(parts, "")) }
	both := func(parts ...string) [2][]byte { return [2][]byte{cat(parts...), cat(append(parts, ",")...)} }
	es, vs := string(e), string(v)
	return mark{
		entry: e, value: v,
		noMeta:    both(`"metadata":{"annotations":{`, es, `}}`),
		metaValue: cat(`{"annotations":{`, es, `}}`),
		noAnn:     both(`"annotations":{`, es, `}`),
		annValue:  cat(`{`, es, `}`),
		lastEntry: [2][]byte{e, cat(",", es)},
		nullRow:   cat(`{"cells":[`, vs, `]}`),
		cells:     cat(`[`, vs, `]`),
		firstCell: both(vs),
		noCells:   both(`"cells":[`, vs, `]`),
	}
}

// annotate returns obj with the cluster annotation set. obj is checked
// first: the splice trusts its input's syntax (a page's items are checked
// as they are decoded).
func annotate(obj []byte, cluster string) ([]byte, error) {
	if !json.Valid(obj) {
		return nil, errBadJSON
	}
	return appendAnnotated(nil, obj, newMark(cluster))
}

var errNotObject = errors.New("not a JSON object")

// span is a value's bytes, [start, end).
type span struct{ start, end int }

// appendAnnotated appends obj, a JSON object, to dst with m in its
// metadata.annotations: the last "metadata" and "annotations" members are
// the ones a decoder keeps, so those are edited; a member absent or null
// is added; an annotation of the same key has its value replaced.
func appendAnnotated(dst, obj []byte, m mark) ([]byte, error) {
	w := &walker{b: obj}
	open := w.ws(0)
	if open >= len(obj) || obj[open] != '{' {
		return nil, errNotObject
	}
	end, ok, err := w.markedObject(open, &m)
	switch {
	case err != nil:
		return nil, err
	case w.ws(end) != len(obj):
		return nil, errors.New("data after the JSON object")
	case !ok:
		return nil, errors.New("its metadata or annotations are not a JSON object")
	}
	return w.applyEdits(dst, 0, len(obj)), nil
}

func isNull(b []byte, v span) bool { return string(b[v.start:v.end]) == "null" }

// keyIs tells whether the quoted key is want (an escaped key is unquoted).
func keyIs(key []byte, want string) bool {
	if bytes.IndexByte(key, '\\') < 0 {
		return string(key[1:len(key)-1]) == want
	}
	var s string
	return json.Unmarshal(key, &s) == nil && s == want
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

var errBadJSON = errors.New("not valid JSON")
