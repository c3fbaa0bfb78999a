package fanout

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	kjson "sigs.k8s.io/json"
)

// annotateByMaps is how the fan-out marked an item before the splice:
// decoded into maps and encoded again. The splice must mean the same.
func annotateByMaps(obj json.RawMessage, cluster string) ([]byte, error) {
	return editMeta(obj, func(meta map[string]json.RawMessage) error {
		var ann map[string]string
		if a, ok := meta["annotations"]; ok {
			if err := json.Unmarshal(a, &ann); err != nil {
				return err
			}
		}
		if ann == nil {
			ann = map[string]string{}
		}
		ann[ClusterAnnotation] = cluster
		b, err := json.Marshal(ann)
		meta["annotations"] = b
		return err
	})
}

// trickyItems are objects whose metadata and annotations are absent, null,
// empty, present, repeated, escaped, or hidden in strings and nested objects.
var trickyItems = []string{
	`{}`,
	`{"kind":"ConfigMap"}`,
	`{"metadata":null}`,
	`{"metadata":{}}`,
	`{"metadata":{"name":"a"},"data":{"k":"v"}}`,
	`{"metadata":{"name":"a","annotations":null}}`,
	`{"metadata":{"name":"a","annotations":{}}}`,
	`{"metadata":{"annotations":{"x":"y","z":""},"name":"a"}}`,
	`{"metadata":{"annotations":{"gateway.clustergateway.io/cluster":"elsewhere"}}}`,
	`{"metadata":{"annotations":{"gateway.clustergateway.io/cluster":"one","a":"b","gateway.clustergateway.io/cluster":"two"}}}`,
	`{"metadata":{"annotations":{"gateway.clustergateway.io\/cluster":"escaped key","b":"c"}}}`,
	`{"meta\u0064ata":{"annot\u0061tions":{"q":"r"}}}`,
	`{"metadata":{"name":"a"},"metadata":{"name":"b","annotations":{"last":"wins"}}}`,
	`{"metadata":{"annotations":{"first":"1"},"annotations":{"second":"2"}}}`,
	`{"a":"}{\"metadata\":{\"annotations\":{}}","metadata":{"name":"q\"}{","annotations":{"k":"\\\"}"}}}`,
	`{"spec":{"metadata":{"annotations":{"inner":"x"}}},"status":[{"metadata":null}]}`,
	"{\n  \"metadata\" : {\n    \"annotations\" : {\n      \"a\" : \"b\"\n    }\n  } ,\n  \"n\" : [ 1 , 2.5e3 , true , false , null ]\n}",
	"{ \"metadata\" : { } }",
	"{ \"metadata\" : { \"annotations\" : { } } }",
	`{"metadata":{"name":"\u00e9t\u00e9 ☃","labels":{"a":"b"},"annotations":{"html":"<&>","uni":"☃\ud83d\ude00"}},"data":{"x":"` + strings.Repeat("y", 2000) + `"}}`,
	`{"Metadata":{"annotations":{"case":"matters"}}}`,
	`{"metadata":{"Annotations":{"case":"matters"}}}`,
}

// badItems are refused by both (the item is left out of a list).
var badItems = []string{
	`null`, `[]`, `"s"`, `1`, `{"metadata":1}`, `{"metadata":"x"}`, `{"metadata":{"annotations":"x"}}`,
	`{"metadata":{"annotations":[]}}`, `{"metadata":`, `{"metadata":{}`, `{"a":1}x`, ``, `{`, `{"a"}`, `{"a":}`,
	`{"a":1,}`, `{"a" 1}`, `{"a":"\`,
}

func decodeAny(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return v
}

func TestSpliceMeansWhatMapsMeant(t *testing.T) {
	for _, cluster := range []string{"prod-eu-1", `a"b\c<&>`} {
		for _, item := range trickyItems {
			want, err := annotateByMaps(json.RawMessage(item), cluster)
			if err != nil {
				t.Fatalf("by maps, %s: %v", item, err)
			}
			got, err := annotate([]byte(item), cluster)
			if err != nil {
				t.Errorf("spliced, %s: %v", item, err)
				continue
			}
			if !json.Valid(got) {
				t.Errorf("spliced %s into invalid JSON %s", item, got)
				continue
			}
			if g, w := decodeAny(t, got), decodeAny(t, want); !reflect.DeepEqual(g, w) {
				t.Errorf("%s:\nspliced %s\nmeans   %v\nmaps    %s\nmean    %v", item, got, g, want, w)
			}
		}
	}
	for _, item := range badItems {
		if _, err := annotateByMaps(json.RawMessage(item), "c"); err == nil {
			t.Errorf("by maps took %q", item)
		}
		if got, err := annotate([]byte(item), "c"); err == nil {
			t.Errorf("spliced %q into %s, want an error", item, got)
		}
	}
}

// The splice trusts that a page's items are valid JSON (the decoder checked
// them): on anything else it must fail or give valid JSON, never panic.
func FuzzAnnotate(f *testing.F) {
	for _, s := range append(append([]string{}, trickyItems...), badItems...) {
		f.Add([]byte(s))
	}
	m := newMark("c")
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := appendAnnotated(nil, b, m)
		if err == nil && json.Valid(b) && !json.Valid(got) {
			t.Fatalf("spliced %q into invalid %q", b, got)
		}
		want, werr := annotateByMaps(b, "c")
		if werr == nil {
			got, err := annotate(b, "c")
			if err != nil {
				t.Fatalf("maps took %q, the splice did not: %v", b, err)
			}
			var g, w any
			_ = json.Unmarshal(got, &g)
			_ = json.Unmarshal(want, &w)
			if !reflect.DeepEqual(g, w) {
				t.Fatalf("%q: spliced %s, maps %s", b, got, want)
			}
		}
	})
}

// listBody is a List page of items, as a kube-apiserver writes it.
func listBody(items []string) string {
	return `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"42","continue":"tok"},"items":[` +
		strings.Join(items, ",") + `]}`
}

func TestStreamedPageMeansWhatMapsMeant(t *testing.T) {
	items := append(append([]string{}, trickyItems...), `null`, `[1]`) // the last two: left out by both
	p, err := decodeBody(strings.NewReader(listBody(items)), "c1", false)
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind != "ConfigMapList" || p.APIVersion != "v1" || p.Metadata.ResourceVersion != "42" || p.Metadata.Continue != "tok" {
		t.Errorf("page head: %+v", p)
	}
	var got []json.RawMessage
	if err := json.Unmarshal([]byte("["+string(p.items)+"]"), &got); err != nil {
		t.Fatalf("the page's items are not JSON: %v\n%s", err, p.items)
	}
	if len(got) != p.n || p.n != len(trickyItems) {
		t.Fatalf("%d items decoded, n %d, want %d", len(got), p.n, len(trickyItems))
	}
	for i, item := range trickyItems {
		want, _ := annotateByMaps(json.RawMessage(item), "c1")
		if g, w := decodeAny(t, got[i]), decodeAny(t, want); !reflect.DeepEqual(g, w) {
			t.Errorf("item %d: streamed %s, maps %s", i, got[i], want)
		}
	}
}

func TestStreamedTableRows(t *testing.T) {
	body := `{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"9"},` +
		`"columnDefinitions":[{"name":"Name","type":"string"},{"name":"Age","type":"string"}],"rows":[` +
		`{"cells":["a","1m"],"object":{"metadata":{"name":"a","annotations":{"x":"y"}}}},` +
		`{"cells":["b","2m"],"conditions":[{"type":"Completed","status":"True"}],"object":null},` +
		`{"cells":["c","3m"]}]}`
	p, err := decodeBody(strings.NewReader(body), "c1", false)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"cells":["c1","a","1m"],"object":{"metadata":{"name":"a","annotations":{"x":"y","gateway.clustergateway.io/cluster":"c1"}}}},` +
		`{"cells":["c1","b","2m"],"conditions":[{"type":"Completed","status":"True"}],"object":null},` +
		`{"cells":["c1","c","3m"]}`
	if string(p.items) != want || p.n != 3 || p.irregular || len(p.ColumnDefinitions) != 2 {
		t.Errorf("rows:\n%s\nwant\n%s\n(n %d, irregular %v)", p.items, want, p.n, p.irregular)
	}
	// A row short of a cell: its cells are placed one by one when written.
	p, err = decodeBody(strings.NewReader(strings.Replace(body, `["c","3m"]`, `["c"]`, 1)), "c1", false)
	if err != nil || !p.irregular {
		t.Errorf("a short row: irregular %v, err %v", p != nil && p.irregular, err)
	}
}

func TestStreamedPageFailures(t *testing.T) {
	for body, want := range map[string]string{
		`{"kind":"Pod","metadata":{}}`:       `its answer is a "Pod", not a list or Table`,
		`{"kind":"PodList","items":[{"a":1}`: "its answer ended before its JSON did",
		``:                                   "its answer ended before its JSON did",
		`{"kind":"PodList","items":{}}`:      "its answer is not JSON",
		`[]`:                                 "its answer is not JSON",
		`<html>`:                             "its answer is not JSON",
	} {
		if _, err := decodeBody(strings.NewReader(body), "c", false); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
	r := &pageLimit{r: strings.NewReader("0123456789"), n: 5}
	if b, err := readAllSmall(r); err != errPageTooLarge || string(b) != "01234" {
		t.Errorf("past the limit: %q, %v", b, err)
	}
	r = &pageLimit{r: strings.NewReader("0123"), n: 5}
	if b, err := readAllSmall(r); err != nil || string(b) != "0123" {
		t.Errorf("within the limit: %q, %v", b, err)
	}
}

func readAllSmall(r *pageLimit) ([]byte, error) {
	var out bytes.Buffer
	buf := make([]byte, 3)
	for {
		n, err := r.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			if errors.Is(err, io.EOF) {
				return out.Bytes(), nil
			}
			return out.Bytes(), err
		}
	}
}

// A get's object (not as a Table) is read whole and marked as one item.
func TestWholeObjectIsOneMarkedItem(t *testing.T) {
	obj := `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","resourceVersion":"77"},"spec":{"containers":[]}}`
	p, err := decodeBody(strings.NewReader(obj), "c2", true)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := annotateByMaps(json.RawMessage(obj), "c2")
	if p.n != 1 || p.Kind != "Pod" || p.isList() || p.Metadata.ResourceVersion != "77" {
		t.Fatalf("page %+v", p)
	}
	if g, w := decodeAny(t, p.items), decodeAny(t, want); !reflect.DeepEqual(g, w) {
		t.Errorf("whole: %s, maps %s", p.items, want)
	}
	if _, err := decodeBody(strings.NewReader(`{"kind":`), "c2", true); err == nil || !strings.Contains(err.Error(), "its answer") {
		t.Errorf("a cut object: %v", err)
	}
}

// pageByDecoder is how the fan-out read a page before the walk (scan.go):
// encoding/json's Decoder, one item or row at a time, each item marked by
// maps. It is the walk's reference: items as JSON values, rows as
// {cells, conditions, object}.
func pageByDecoder(b []byte, cluster string) (p *page, items []any, isRow []bool, err error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	p = &page{}
	if t, err := dec.Token(); err != nil {
		return nil, nil, nil, err
	} else if t != json.Delim('{') {
		return nil, nil, nil, errNotList
	}
	name, _ := json.Marshal(cluster)
	var skip json.RawMessage
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, nil, nil, err
		}
		switch t {
		case "kind":
			err = dec.Decode(&p.Kind)
		case "apiVersion":
			err = dec.Decode(&p.APIVersion)
		case "metadata":
			err = dec.Decode(&p.Metadata)
		case "columnDefinitions":
			err = dec.Decode(&p.ColumnDefinitions)
		case "items":
			err = eachElement(dec, func() error {
				var raw json.RawMessage
				if err := dec.Decode(&raw); err != nil {
					return err
				}
				if b, err := annotateByMaps(raw, cluster); err == nil {
					var v any
					_ = json.Unmarshal(b, &v)
					items, isRow = append(items, v), append(isRow, false)
				}
				return nil
			})
		case "rows":
			err = eachElement(dec, func() error {
				// A row's members by their exact names, as a Kubernetes
				// client decodes them (sigs.k8s.io/json), and the walk.
				var raw json.RawMessage
				if err := dec.Decode(&raw); err != nil {
					return err
				}
				var r row
				if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &r); err != nil {
					return err
				}
				obj := []byte(r.Object)
				if len(obj) > 0 {
					if b, err := annotateByMaps(r.Object, cluster); err == nil {
						obj = b
					}
				}
				items, isRow = append(items, rowValue(append([]json.RawMessage{name}, r.Cells...), r.Conditions, obj)), append(isRow, true)
				return nil
			})
		default:
			err = dec.Decode(&skip)
		}
		if err != nil {
			return nil, nil, nil, err
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, nil, nil, err
	}
	return p, items, isRow, nil
}

// rowValue is a row as the comparison sees it.
func rowValue(cells []json.RawMessage, conditions, object []byte) any {
	v := map[string]any{}
	var cs []any
	for _, c := range cells {
		var x any
		_ = json.Unmarshal(c, &x)
		cs = append(cs, x)
	}
	v["cells"] = cs
	if len(conditions) > 0 {
		var x any
		_ = json.Unmarshal(conditions, &x)
		v["conditions"] = x
	}
	if len(object) > 0 {
		var x any
		_ = json.Unmarshal(object, &x)
		v["object"] = x
	}
	return v
}

// pageItems are the walk's items as the comparison sees them.
func pageItems(t *testing.T, p *page, isRow []bool) []any {
	t.Helper()
	var raws []json.RawMessage
	if err := json.Unmarshal([]byte("["+string(p.items)+"]"), &raws); err != nil {
		t.Fatalf("the page's items are not JSON: %v\n%s", err, p.items)
	}
	var out []any
	if len(raws) != len(isRow) {
		return nil
	}
	for i, r := range raws {
		if !isRow[i] {
			var v any
			_ = json.Unmarshal(r, &v)
			out = append(out, v)
			continue
		}
		var x row
		if err := kjson.UnmarshalCaseSensitivePreserveInts(r, &x); err != nil {
			t.Fatalf("a row is not a row: %v\n%s", err, r)
		}
		out = append(out, rowValue(x.Cells, x.Conditions, x.Object))
	}
	return out
}

// pageSeeds are pages whose items, rows and heads are tricky.
func pageSeeds() []string {
	seeds := []string{
		listBody(trickyItems),
		listBody(append(append([]string{}, trickyItems...), `null`, `[1]`, `"s"`, `{"metadata":1}`)),
		`{"items":null,"kind":"PodList"}`,
		`{"kind":"PodList","items":[]}` + "\n",
		` { "kind" : "PodList" , "items" : [ { } , { "metadata" : null } ] , "metadata" : { "continue" : "x" } } `,
		`{"a":"\"items\":[{\"metadata\":{}}]","kind":"PodList","items":[{"b":"\"metadata\":{}"}]}`,
		`{"kind":"PodList","items":[{"a":[[[1,{"metadata":{}}]]],"metadata":{"annotations":{"x":"\u00e9\ud83d\ude00\\\"\/"}}}]}`,
		`{"ki\u006ed":"PodList","ite\u006ds":[{"metadata":{"annotations":{}}}]}`,
		`{"kind":"PodList","items":[{"metadata":{}}],"items":[{"x":-0.5e+10}]}`,
		`{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"9"},` +
			`"columnDefinitions":[{"name":"Name","type":"string"},{"name":"Age","type":"string"}],"rows":[` +
			`{"cells":["a","1m"],"object":{"metadata":{"name":"a","annotations":{"x":"y"}}}},` +
			`{"cells":["b","2m"],"conditions":[{"type":"Completed","status":"True"}],"object":null},` +
			`{"cells":["c","3m"]},{"cells":[]},{"cells":null,"object":{"metadata":1}},{},null,{"object":"s","x":1},` +
			`{"object":{"metadata":{"annotations":null}},"cells":[1,{"a":[]},null]}]}`,
	}
	for _, bad := range []string{`{`, `{"kind":"PodList","items":[{"a":1}`, `{"kind":"PodList","items":[{"a":1},]}`,
		`{"kind":"PodList","items":[{"a":01}]}`, `{"kind":"PodList","items":[{"a":"\x"}]}`, `{"kind":"PodList","items":[]}x`,
		`{"kind":1,"items":[]}`, `{"kind":"Table","rows":[1]}`, `{"kind":"Table","rows":[{"cells":{}}]}`, `{"items":{}}`, `[]`, `<html>`} {
		seeds = append(seeds, bad)
	}
	return seeds
}

// The walk reads a page as encoding/json's Decoder did, marking the items
// as maps did; JSON the Decoder refuses (or json.Valid does) it refuses,
// and nothing makes it panic.
func FuzzPageWalkMeansWhatTheDecoderMeant(f *testing.F) {
	for _, s := range pageSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkWalk(t, b)
	})
}

func TestPageWalkMeansWhatTheDecoderMeant(t *testing.T) {
	for _, s := range pageSeeds() {
		checkWalk(t, []byte(s))
	}
}

func checkWalk(t *testing.T, b []byte) {
	t.Helper()
	const cluster = `c"1`
	m := newMark(cluster)
	got := &page{}
	gerr := got.decodePage(new(walker), b, &m)
	want, witems, isRow, werr := pageByDecoder(b, cluster)
	valid := json.Valid(b)
	switch {
	case !valid && gerr == nil:
		t.Fatalf("%q: the walk took JSON json.Valid refuses", b)
	case valid && (werr == nil) != (gerr == nil):
		t.Fatalf("%q: the walk's error %v, the decoder's %v", b, gerr, werr)
	case gerr != nil:
		if e := readError(gerr).Error(); !strings.HasPrefix(e, "its answer is not JSON") && !strings.HasPrefix(e, "its answer ended before its JSON did") {
			t.Fatalf("%q: the walk's error reads %q", b, e)
		}
		return
	}
	if got.Kind != want.Kind || got.APIVersion != want.APIVersion || got.Metadata != want.Metadata ||
		!reflect.DeepEqual(got.ColumnDefinitions, want.ColumnDefinitions) {
		t.Fatalf("%q: head %+v, the decoder's %+v", b, got, want)
	}
	items := pageItems(t, got, isRow)
	if got.n != len(witems) || !reflect.DeepEqual(items, witems) {
		t.Fatalf("%q:\nwalked  %d %v\ndecoder %d %v", b, got.n, items, len(witems), witems)
	}
}
