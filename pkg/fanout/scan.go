package fanout

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
)

// A page is read whole into a reused buffer and walked once: the walk
// checks the JSON's syntax, finds each item's (or row's) end and the places
// the cluster's mark goes, and the item is copied to the page's items with
// the mark spliced in. (A bench of 100 clusters found encoding/json's
// Decoder, which scans each item three times, took most of the gateway's
// CPU.)

// errTruncated: the bytes ended inside a JSON value.
var errTruncated = io.ErrUnexpectedEOF

// syntaxError is JSON the walk refuses, at an offset of the page.
type syntaxError struct {
	msg string
	off int
}

func (e *syntaxError) Error() string { return fmt.Sprintf("%s at byte %d", e.msg, e.off) }

// maxDepth is encoding/json's nesting bound.
const maxDepth = 10000

// walker walks one buffer; its slices are reused from item to item.
type walker struct {
	b     []byte
	depth int
	edits []edit
	item  itemMarks
}

// edit replaces b[at:end] (end == at: inserts) with text.
type edit struct {
	at, end int
	text    []byte
}

func (w *walker) bad(msg string, i int) error {
	if i >= len(w.b) {
		return errTruncated
	}
	return &syntaxError{msg: msg, off: i}
}

func (w *walker) ws(i int) int {
	b := w.b
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// plain marks the bytes a string holds as they are.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str returns the index after the string at b[i] ('"').
func (w *walker) str(i int) (int, error) {
	b := w.b
	i++
	for {
		for i < len(b) && plain[b[i]] {
			i++
		}
		if i >= len(b) {
			return 0, errTruncated
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, nil
		case c == '\\':
			if i+1 >= len(b) {
				return 0, errTruncated
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				for k := i + 2; k < i+6; k++ {
					if k >= len(b) {
						return 0, errTruncated
					}
					if !isHex(b[k]) {
						return 0, w.bad("invalid \\u escape in a string", k)
					}
				}
				i += 6
			default:
				return 0, w.bad("invalid escape in a string", i+1)
			}
		default:
			return 0, w.bad("control character in a string", i)
		}
	}
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// number returns the index after the number at b[i].
func (w *walker) number(i int) (int, error) {
	b := w.b
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return 0, errTruncated
	case b[i] == '0':
		i++
	case isDigit(b[i]):
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return 0, w.bad("invalid number", i)
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) {
			return 0, errTruncated
		}
		if !isDigit(b[i]) {
			return 0, w.bad("invalid number", i)
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) {
			return 0, errTruncated
		}
		if !isDigit(b[i]) {
			return 0, w.bad("invalid number", i)
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i >= len(b) {
		return 0, errTruncated // a number cannot end a List
	}
	return i, nil
}

func (w *walker) literal(i int, lit string) (int, error) {
	for k := 0; k < len(lit); k++ {
		if i+k >= len(w.b) {
			return 0, errTruncated
		}
		if w.b[i+k] != lit[k] {
			return 0, w.bad("invalid literal", i+k)
		}
	}
	return i + len(lit), nil
}

// value returns the index after the value at b[i] (no blanks before it).
func (w *walker) value(i int) (int, error) {
	if i >= len(w.b) {
		return 0, errTruncated
	}
	switch c := w.b[i]; {
	case c == '"':
		return w.str(i)
	case c == '{':
		_, end, err := w.object(i, nil)
		return end, err
	case c == '[':
		_, end, err := w.array(i, nil)
		return end, err
	case c == 't':
		return w.literal(i, "true")
	case c == 'f':
		return w.literal(i, "false")
	case c == 'n':
		return w.literal(i, "null")
	case c == '-' || isDigit(c):
		return w.number(i)
	}
	return 0, w.bad("invalid character at the start of a value", i)
}

// object walks the object at b[i] ('{'), calling member (nil: none) with
// each key's span and its value's start; member returns the value's end.
// It returns the number of members and the index after the '}'.
func (w *walker) object(i int, member func(key span, v int) (int, error)) (n, end int, err error) {
	i, done, err := w.open(i, '}')
	if err != nil || done {
		return 0, i, err // i is 0 with an error
	}
	defer w.leave()
	b := w.b
	for {
		if i >= len(b) {
			return 0, 0, errTruncated
		}
		if b[i] != '"' {
			return 0, 0, w.bad("an object's key is not a string", i)
		}
		ke, err := w.str(i)
		if err != nil {
			return 0, 0, err
		}
		key := span{i, ke}
		i = w.ws(ke)
		if i >= len(b) {
			return 0, 0, errTruncated
		}
		if b[i] != ':' {
			return 0, 0, w.bad("no ':' after an object's key", i)
		}
		vs := w.ws(i + 1)
		var ve int
		if member != nil {
			ve, err = member(key, vs)
		} else {
			ve, err = w.value(vs)
		}
		if err != nil {
			return 0, 0, err
		}
		n++
		i, done, err = w.next(ve, '}', "no ',' or '}' after an object's member")
		if err != nil {
			return 0, 0, err
		}
		if done {
			return n, i, nil
		}
	}
}

// array walks the array at b[i] ('['), calling elem (nil: none) with each
// element's start; elem returns the element's end. It returns the number
// of elements and the index after the ']'.
func (w *walker) array(i int, elem func(v int) (int, error)) (n, end int, err error) {
	i, done, err := w.open(i, ']')
	if err != nil || done {
		return 0, i, err
	}
	defer w.leave()
	for {
		var ve int
		if elem != nil {
			ve, err = elem(i)
		} else {
			ve, err = w.value(i)
		}
		if err != nil {
			return 0, 0, err
		}
		n++
		i, done, err = w.next(ve, ']', "no ',' or ']' after an array's element")
		if err != nil {
			return 0, 0, err
		}
		if done {
			return n, i, nil
		}
	}
}

// open is the first step of the object or array at b[i], which the byte
// last ends. It returns the index of its first member or element (after
// blanks), or, with done, the index after last when it is empty; an error
// when it is nested too deeply. Unless done or an error, the walk is one
// level deeper until leave.
func (w *walker) open(i int, last byte) (next int, done bool, err error) {
	if w.depth >= maxDepth {
		return 0, false, w.bad("nested too deeply", i)
	}
	i = w.ws(i + 1)
	if i < len(w.b) && w.b[i] == last {
		return i + 1, true, nil
	}
	w.depth++
	return i, false, nil
}

// leave is the walk out of the object or array that open entered.
func (w *walker) leave() { w.depth-- }

// next is the step after a member or element of an object or array that
// the byte last ends, whose value ended at ve. It returns the index after
// last, with done, when last comes next; else the index of the next member
// or element (after the ',' and blanks); an error, naming what is missing,
// when neither comes.
func (w *walker) next(ve int, last byte, what string) (i int, done bool, err error) {
	if i = w.ws(ve); i < len(w.b) {
		switch w.b[i] {
		case last:
			return i + 1, true, nil
		case ',':
			return w.ws(i + 1), false, nil
		}
	}
	return 0, false, w.bad(what, i) // errTruncated past the end

}

// is tells whether the key's span is want (an escaped key is unquoted).
func (w *walker) is(key span, want string) bool {
	k := w.b[key.start:key.end]
	if len(k) == len(want)+2 && string(k[1:len(k)-1]) == want {
		return true
	}
	return len(k) > len(want)+2 && keyIs(k, want)
}

func (w *walker) isNull(s span) bool { return string(w.b[s.start:s.end]) == "null" }

// itemMarks is what the walk of one object found of its metadata and
// annotations: the last of each, as a decoder keeps.
type itemMarks struct {
	n       int // the object's members
	hasMeta bool
	meta    span
	metaN   int
	hasAnn  bool
	ann     span
	annN    int
	same    []span // values of the cluster annotation's own key
	bad     bool   // metadata or annotations neither an object nor null
}

// markedObject walks the object at b[i] ('{') and adds to w.edits the
// edits that set m in its metadata.annotations (none if it cannot be:
// ok false). It returns the index after the object.
func (w *walker) markedObject(i int, m *mark) (end int, ok bool, err error) {
	it := &w.item
	*it = itemMarks{same: it.same[:0]}
	annotations := func(key span, v int) (int, error) {
		if w.is(key, ClusterAnnotation) {
			e, err := w.value(v)
			it.same = append(it.same, span{v, e})
			return e, err
		}
		return w.value(v)
	}
	metadata := func(key span, v int) (int, error) {
		if !w.is(key, "annotations") {
			return w.value(v)
		}
		it.hasAnn, it.annN, it.same, it.bad = true, 0, it.same[:0], false
		if v < len(w.b) && w.b[v] == '{' {
			n, e, err := w.object(v, annotations)
			it.ann, it.annN = span{v, e}, n
			return e, err
		}
		e, err := w.value(v)
		it.ann = span{v, e}
		it.bad = err == nil && !w.isNull(it.ann)
		return e, err
	}
	top := func(key span, v int) (int, error) {
		if !w.is(key, "metadata") {
			return w.value(v)
		}
		it.hasMeta, it.metaN, it.hasAnn, it.same, it.bad = true, 0, false, it.same[:0], false
		if v < len(w.b) && w.b[v] == '{' {
			n, e, err := w.object(v, metadata)
			it.meta, it.metaN = span{v, e}, n
			return e, err
		}
		e, err := w.value(v)
		it.meta = span{v, e}
		it.bad = err == nil && !w.isNull(it.meta)
		return e, err
	}
	it.n, end, err = w.object(i, top)
	if err != nil || it.bad {
		return end, false, err
	}
	switch {
	case !it.hasMeta:
		w.edits = append(w.edits, edit{at: i + 1, end: i + 1, text: m.noMeta[min(it.n, 1)]})
	case w.isNull(it.meta):
		w.edits = append(w.edits, edit{at: it.meta.start, end: it.meta.end, text: m.metaValue})
	case !it.hasAnn:
		at := it.meta.start + 1
		w.edits = append(w.edits, edit{at: at, end: at, text: m.noAnn[min(it.metaN, 1)]})
	case w.isNull(it.ann):
		w.edits = append(w.edits, edit{at: it.ann.start, end: it.ann.end, text: m.annValue})
	case len(it.same) == 0:
		at := it.ann.end - 1 // the '}'
		w.edits = append(w.edits, edit{at: at, end: at, text: m.lastEntry[min(it.annN, 1)]})
	default:
		for _, s := range it.same {
			w.edits = append(w.edits, edit{at: s.start, end: s.end, text: m.value})
		}
	}
	return end, true, nil
}

// row walks the Table row at b[i] and adds to w.edits the edits that put
// the cluster's cell first and mark its object. cells is the row's cells
// (its last "cells"). A null row is one without cells.
func (w *walker) row(i int, m *mark) (end, cells int, err error) {
	b := w.b
	if i < len(b) && b[i] == 'n' {
		end, err = w.literal(i, "null")
		w.edits = append(w.edits, edit{at: i, end: end, text: m.nullRow})
		return end, 0, err
	}
	if i < len(b) && b[i] != '{' {
		return 0, 0, w.bad("a row of the Table is not a JSON object", i)
	}
	hasCells := false
	member := func(key span, v int) (int, error) {
		switch {
		case w.is(key, "cells"):
			hasCells = true
			if v < len(b) && b[v] == 'n' {
				e, err := w.literal(v, "null")
				w.edits = append(w.edits, edit{at: v, end: e, text: m.cells})
				cells = 0
				return e, err
			}
			if v < len(b) && b[v] != '[' {
				return 0, w.bad("a row's cells are not a JSON array", v)
			}
			n, e, err := w.array(v, nil)
			text := m.firstCell[0]
			if n > 0 {
				text = m.firstCell[1]
			}
			w.edits = append(w.edits, edit{at: v + 1, end: v + 1, text: text})
			cells = n
			return e, err
		case w.is(key, "object") && v < len(b) && b[v] == '{':
			e, _, err := w.markedObject(v, m) // one that cannot be marked stays as it came
			return e, err
		}
		return w.value(v)
	}
	n, end, err := w.object(i, member)
	if err == nil && !hasCells {
		w.edits = append(w.edits, edit{at: i + 1, end: i + 1, text: m.noCells[min(n, 1)]})
	}
	return end, cells, err
}

// applyEdits appends b[start:end] to dst with w.edits made (and clears them).
func (w *walker) applyEdits(dst []byte, start, end int) []byte {
	if len(w.edits) > 1 {
		slices.SortStableFunc(w.edits, func(a, b edit) int { return a.at - b.at })
	}
	prev := start
	for _, e := range w.edits {
		dst = append(dst, w.b[prev:e.at]...)
		dst = append(dst, e.text...)
		prev = e.end
	}
	w.edits = w.edits[:0]
	return append(dst, w.b[prev:end]...)
}

// decodePage walks a List or Table page b, filling p's head and appending
// each item (or row) to p.items marked with m.
func (p *page) decodePage(w *walker, b []byte, m *mark) error {
	w.b, w.depth, w.edits = b, 0, w.edits[:0]
	i := w.ws(0)
	if i >= len(b) {
		return errTruncated
	}
	if b[i] != '{' {
		return errNotList
	}
	cells := -1 // every row's cells (columns may come after the rows)
	head := func(v int, e int, into any) (int, error) {
		if err := json.Unmarshal(b[v:e], into); err != nil {
			return 0, err
		}
		return e, nil
	}
	items := func(v int) (int, error) {
		e, ok, err := 0, false, error(nil)
		if v < len(b) && b[v] == '{' {
			e, ok, err = w.markedObject(v, m)
		} else {
			e, err = w.value(v) // not an object: left out, as the fan-out always has
		}
		if err != nil {
			return 0, err
		}
		if ok {
			p.add(func(dst []byte) []byte { return w.applyEdits(dst, v, e) })
		}
		w.edits = w.edits[:0]
		return e, nil
	}
	rows := func(v int) (int, error) {
		e, n, err := w.row(v, m)
		if err != nil {
			return 0, err
		}
		if cells >= 0 && cells != n {
			p.irregular = true
		}
		cells = n
		p.add(func(dst []byte) []byte { return w.applyEdits(dst, v, e) })
		return e, nil
	}
	member := func(key span, v int) (int, error) {
		var each func(int) (int, error)
		switch {
		case w.is(key, "items"):
			each = items
		case w.is(key, "rows"):
			each = rows
		}
		if each != nil {
			switch {
			case v < len(b) && b[v] == '[':
				_, e, err := w.array(v, each)
				return e, err
			case v < len(b) && b[v] == 'n':
				return w.literal(v, "null")
			case v < len(b):
				return 0, errNotList
			}
		}
		e, err := w.value(v)
		if err != nil {
			return 0, err
		}
		switch {
		case w.is(key, "kind"):
			return head(v, e, &p.Kind)
		case w.is(key, "apiVersion"):
			return head(v, e, &p.APIVersion)
		case w.is(key, "metadata"):
			return head(v, e, &p.Metadata)
		case w.is(key, "columnDefinitions"):
			return head(v, e, &p.ColumnDefinitions)
		}
		return e, nil
	}
	_, end, err := w.object(i, member)
	if err != nil {
		return err
	}
	if j := w.ws(end); j != len(b) {
		return &syntaxError{msg: "data after the List's JSON object", off: j}
	}
	if cells >= 0 && cells != len(p.ColumnDefinitions) {
		p.irregular = true
	}
	return nil
}
