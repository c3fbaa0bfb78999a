package fanout

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
)

// tableEventByDecoder is how Table events were marked before the walk
// (scan.go): scanned by scanObject, each row decoded by encoding/json's
// Decoder and written by appendRow. TestTableEventWalkMeansWhatTheDecoderMeant
// holds the walk to it. A row's members are matched by their exact names,
// as Kubernetes' own decoding does (sigs.k8s.io/json, which kubectl and
// client-go use): to encoding/json alone "oBjeCt" is the row's object, to a
// Kubernetes client it is an unknown member.
func tableEventByDecoder(obj json.RawMessage, cluster string, headers bool) ([]byte, error) {
	open := skipWS(obj, 0)
	if !json.Valid(obj) || open >= len(obj) || obj[open] != '{' {
		return nil, errNotObject
	}
	var cols, rows span
	hasCols, hasRows := false, false
	var members []span // key through value, of the members kept as they are
	_, _, err := scanObject(obj, open, func(key []byte, v span) {
		switch {
		case keyIs(key, "columnDefinitions"):
			cols, hasCols = v, true
		case keyIs(key, "rows"):
			rows, hasRows = v, true
		default:
			start := v.start - 1
			for start > 0 && obj[start] != '"' { // back over ':' and blanks to the key's end
				start--
			}
			members = append(members, span{start + 1 - len(key), v.end})
		}
	})
	if err != nil {
		return nil, err
	}
	m := newMark(cluster)
	out := []byte{'{'}
	sep := func() {
		if len(out) > 1 {
			out = append(out, ',')
		}
	}
	for _, mb := range members {
		sep()
		out = append(out, obj[mb.start:mb.end]...)
	}
	if headers {
		var defs []metav1.TableColumnDefinition
		if hasCols && !isNull(obj, cols) {
			if err := json.Unmarshal(obj[cols.start:cols.end], &defs); err != nil {
				return nil, err
			}
		}
		b, err := json.Marshal(append([]metav1.TableColumnDefinition{clusterColumn}, defs...))
		if err != nil {
			return nil, err
		}
		sep()
		out = append(append(out, `"columnDefinitions":`...), b...)
	}
	sep()
	if !hasRows || isNull(obj, rows) {
		return append(out, `"rows":null}`...), nil
	}
	if obj[rows.start] != '[' {
		return nil, errors.New("its rows are not a JSON array")
	}
	out = append(out, `"rows":[`...)
	dec := json.NewDecoder(bytes.NewReader(obj[rows.start:rows.end]))
	var r row
	n := 0
	err = eachElement(dec, func() error {
		r.Cells, r.Conditions, r.Object = r.Cells[:0], r.Conditions[:0], r.Object[:0]
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return err
		}
		if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &r); err != nil {
			return err
		}
		if n > 0 {
			out = append(out, ',')
		}
		n++
		out = appendRow(out, m.value, r.Cells, r.Conditions, r.Object, &m)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return append(out, "]}"...), nil
}

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

// eachElement calls each for every element of the array dec is at (null:
// none).
func eachElement(dec *json.Decoder, each func() error) error {
	t, err := dec.Token()
	switch {
	case err != nil:
		return err
	case t == nil:
		return nil
	case t != json.Delim('['):
		return errNotList
	}
	for dec.More() {
		if err := each(); err != nil {
			return err
		}
	}
	_, err = dec.Token() // ']'
	return err
}

// tableSeeds are Table events whose rows and members are tricky.
func tableSeeds() []string {
	return []string{
		`{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"3"},"columnDefinitions":[{"name":"Name","type":"string","format":"name","description":"d","priority":0}],"rows":[{"cells":["x",1,{"a":[1]}],"object":{"metadata":{"name":"x"}}}]}`,
		`{"rows":[{"cells":["x"],"conditions":[{"type":"Completed","status":"True"}],"object":{"metadata":{"annotations":{"gateway.clustergateway.io/cluster":"forged"}}}},{"cells":[],"object":null}],"kind":"Table"}`,
		` { "kind" : "Table" , "rows" : [ { "cells" : [ "a\"}" ] , "object" : { "metadata" : null } } ] , "columnDefinitions" : null } `,
		`{"kind":"Table","rows":null}`,
		`{"kind":"Table"}`,
		`{"kind":"Table","rows":[{"cells":["x"],"object":{"kind":"Pod"}}],"rows\u0000":1}`,
		`{"kind":"Table","rows":[{"cells":["x"],"object":[1]}]}`,
		`{"kind":"Table","rows":[{"cells":["c","3m"]},{"cells":null,"object":{"metadata":1}},{},null,{"object":"s"},` +
			`{"object":{"metadata":{"annotations":null}},"cells":[1,{"a":[]},null]}]}`,
		`{"kind":"Table","rows":[1],"rows":[{"cells":["last"]}]}`,
		`{"ro\u0077s":[{"cells":["x"]}],"kind":"Table","metadata":{"a":"\u00e9\ud83d\ude00\\\"\/"}}`,
		`{"kind":"Table","rows":[{"cells":["x"],"object":{"metadata":{"annotations":{"x":"y"}}},"conditions":null}]}`,
		// Refused by both.
		`{"kind":"Table","rows":[1]}`, `{"kind":"Table","rows":[{"cells":{}}]}`, `{"kind":"Table","rows":{}}`,
		`{"rows":[`, `{"kind":"Table"}x`, `[]`, `null`, `{"kind":"Table","rows":[{"cells":["x"]},]}`,
		`{"kind":"Table","rows":[{"cells":["\x"]}]}`, `{"kind":"Table","columnDefinitions":[1]}`,
	}
}

// eventValue is a Table event as the comparison sees it: its members as
// JSON values, its rows as {cells, conditions, object} as a Kubernetes
// client decodes them (exact member names; others ignored).
func eventValue(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, b)
	}
	out := map[string]any{}
	for k, v := range m {
		if k != "rows" {
			var x any
			_ = json.Unmarshal(v, &x)
			out[k] = x
			continue
		}
		var rows []row
		if err := kjson.UnmarshalCaseSensitivePreserveInts(v, &rows); err != nil {
			t.Fatalf("rows are not rows: %v\n%s", err, v)
		}
		var rs []any
		for _, r := range rows {
			rs = append(rs, rowValue(r.Cells, r.Conditions, r.Object))
		}
		out[k] = rs
	}
	return out
}

func checkTableEvent(t *testing.T, in []byte) {
	t.Helper()
	for _, headers := range []bool{true, false} {
		got, gerr := tableEvent(in, `c"1`, headers)
		want, werr := tableEventByDecoder(in, `c"1`, headers)
		if (gerr != nil) != (werr != nil) {
			t.Fatalf("%q (headers %v): the walk's error %v, the decoder's %v", in, headers, gerr, werr)
		}
		if gerr != nil {
			continue
		}
		if g, w := eventValue(t, got), eventValue(t, want); !reflect.DeepEqual(g, w) {
			t.Fatalf("%q (headers %v):\nwalked  %s\ndecoder %s", in, headers, got, want)
		}
	}
}

// The walk marks a Table event as the Decoder did: the same members, the
// same rows with the cluster's cell first and their objects marked; what
// the Decoder (or json.Valid) refused, it refuses.
func TestTableEventWalkMeansWhatTheDecoderMeant(t *testing.T) {
	for _, s := range tableSeeds() {
		checkTableEvent(t, []byte(s))
	}
}

func FuzzTableEventWalkMeansWhatTheDecoderMeant(f *testing.F) {
	for _, s := range tableSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkTableEvent(t, b)
	})
}
