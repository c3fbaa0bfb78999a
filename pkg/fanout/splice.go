package fanout

import (
	"bytes"
	"encoding/json"
	"errors"
)

// The cluster annotation is spliced into each item's bytes: the item is
// scanned, not decoded and encoded again, so that merging a page costs
// about the page's bytes (a bench of 100 clusters found the re-encode took
// most of a list's time and heap).

// mark is one cluster's annotation, as JSON.
type mark struct {
	entry []byte // "<ClusterAnnotation>":"<cluster>"
	value []byte // "<cluster>"
}

func newMark(cluster string) mark {
	k, _ := json.Marshal(ClusterAnnotation)
	v, _ := json.Marshal(cluster)
	return mark{entry: append(append(k, ':'), v...), value: v}
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
	open := skipWS(obj, 0)
	if open >= len(obj) || obj[open] != '{' {
		return nil, errNotObject
	}
	var meta span
	hasMeta := false
	closing, n, err := scanObject(obj, open, func(key []byte, v span) {
		if keyIs(key, "metadata") {
			meta, hasMeta = v, true
		}
	})
	if err != nil {
		return nil, err
	}
	if skipWS(obj, closing+1) != len(obj) {
		return nil, errors.New("data after the JSON object")
	}
	if !hasMeta {
		dst = append(dst, obj[:open+1]...)
		dst = append(dst, `"metadata":{"annotations":{`...)
		dst = append(dst, m.entry...)
		dst = append(dst, "}}"...)
		if n > 0 {
			dst = append(dst, ',')
		}
		return append(dst, obj[open+1:]...), nil
	}
	switch {
	case isNull(obj, meta):
		dst = append(dst, obj[:meta.start]...)
		dst = append(dst, `{"annotations":{`...)
		dst = append(dst, m.entry...)
		dst = append(dst, "}}"...)
		return append(dst, obj[meta.end:]...), nil
	case obj[meta.start] != '{':
		return nil, errors.New("its metadata is not a JSON object")
	}
	var ann span
	hasAnn := false
	_, n, err = scanObject(obj, meta.start, func(key []byte, v span) {
		if keyIs(key, "annotations") {
			ann, hasAnn = v, true
		}
	})
	if err != nil {
		return nil, err
	}
	if !hasAnn {
		dst = append(dst, obj[:meta.start+1]...)
		dst = append(dst, `"annotations":{`...)
		dst = append(dst, m.entry...)
		dst = append(dst, '}')
		if n > 0 {
			dst = append(dst, ',')
		}
		return append(dst, obj[meta.start+1:]...), nil
	}
	switch {
	case isNull(obj, ann):
		dst = append(dst, obj[:ann.start]...)
		dst = append(dst, '{')
		dst = append(dst, m.entry...)
		dst = append(dst, '}')
		return append(dst, obj[ann.end:]...), nil
	case obj[ann.start] != '{':
		return nil, errors.New("its annotations are not a JSON object")
	}
	var same []span // values of the annotation's own key, replaced
	closing, n, err = scanObject(obj, ann.start, func(key []byte, v span) {
		if keyIs(key, ClusterAnnotation) {
			same = append(same, v)
		}
	})
	if err != nil {
		return nil, err
	}
	if len(same) == 0 {
		dst = append(dst, obj[:closing]...)
		if n > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, m.entry...)
		return append(dst, obj[closing:]...), nil
	}
	prev := 0
	for _, s := range same {
		dst = append(dst, obj[prev:s.start]...)
		dst = append(dst, m.value...)
		prev = s.end
	}
	return append(dst, obj[prev:]...), nil
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

// scanObject walks the object whose '{' is at b[open], calling each with
// every member's quoted key and value span; it returns the index of the
// closing '}' and the number of members.
func scanObject(b []byte, open int, each func(key []byte, v span)) (closing, n int, err error) {
	i := skipWS(b, open+1)
	if i < len(b) && b[i] == '}' {
		return i, 0, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return 0, 0, errBadJSON
		}
		ke, err := skipString(b, i)
		if err != nil {
			return 0, 0, err
		}
		key := b[i:ke]
		i = skipWS(b, ke)
		if i >= len(b) || b[i] != ':' {
			return 0, 0, errBadJSON
		}
		vs := skipWS(b, i+1)
		ve, err := skipValue(b, vs)
		if err != nil {
			return 0, 0, err
		}
		each(key, span{vs, ve})
		n++
		i = skipWS(b, ve)
		switch {
		case i >= len(b):
			return 0, 0, errBadJSON
		case b[i] == '}':
			return i, n, nil
		case b[i] != ',':
			return 0, 0, errBadJSON
		}
		i = skipWS(b, i+1)
	}
}

// skipString returns the index after the string that starts at b[i].
func skipString(b []byte, i int) (int, error) {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1, nil
		}
	}
	return 0, errBadJSON
}

// skipValue returns the index after the value that starts at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errBadJSON
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				e, err := skipString(b, i)
				if err != nil {
					return 0, err
				}
				i = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, nil
				}
			}
		}
		return 0, errBadJSON
	case ',', ':', '}', ']':
		return 0, errBadJSON
	}
	start := i
	for i < len(b) && bytes.IndexByte([]byte(",}] \t\r\n"), b[i]) < 0 {
		i++
	}
	if i == start {
		return 0, errBadJSON
	}
	return i, nil
}
