// Package boundedyaml reads YAML that a less trusted party wrote (a
// kubeconfig in a credential Secret, a credential provider's output) as
// JSON, within bounds that hold before anything is expanded.
//
// An alias repeats what its anchor names without costing bytes: a few
// hundred KiB of aliases to one long string expand to gigabytes in any
// YAML-to-JSON conversion that follows them (clientcmd.Load and
// sigs.k8s.io/yaml included). Here the document is parsed into a tree of
// nodes (go.yaml.in/yaml/v3), in which an alias is one small node pointing
// at its anchor, never a copy, and the converter refuses every anchor and
// alias where it meets one, so it never follows one. Kubeconfigs and
// ExecCredentials written by tools never use them. What is left costs
// memory in proportion to the bytes, hence the byte cap: at most 160 bytes
// allocated per byte of input (about 140 measured for the widest tree, a
// flow sequence of one-letter scalars, of which about 80 live at once), and
// JSON of at most a few times the input. The node budget bounds the
// conversion's work and what the caller decodes.
package boundedyaml

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Limits bound one document.
type Limits struct {
	// MaxBytes is the largest input read; a larger one is refused unread.
	MaxBytes int
	// MaxNodes is the most scalars, sequences and mappings (keys
	// included) the document may hold.
	MaxNodes int
}

// Errors that say which bound a document broke; the error returned wraps
// one of them, or says why the document is not YAML that JSON can hold.
// No error quotes the document: what it holds may be a credential.
var (
	ErrTooLarge      = errors.New("is too large")
	ErrAlias         = errors.New("uses a YAML anchor or alias")
	ErrTooManyNodes  = errors.New("has too many YAML nodes")
	ErrNotJSONCompat = errors.New("holds YAML that JSON cannot hold")
)

// ToJSON converts the one YAML document of raw (JSON is YAML) to JSON
// within lim. Scalars read as YAML 1.2 (go.yaml.in/yaml/v3): true and false
// are booleans, yes and no are strings; a timestamp keeps its text. A
// duplicate mapping key, a merge key (<<), a key that is not a scalar and
// a number JSON cannot hold (.inf, .nan) are refused rather than read one
// way here and another elsewhere. An empty document is null.
func ToJSON(raw []byte, lim Limits) ([]byte, error) {
	if len(raw) > lim.MaxBytes {
		return nil, fmt.Errorf("%w: %d bytes, more than the %d allowed", ErrTooLarge, len(raw), lim.MaxBytes)
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		// The parser's messages name a line and a syntax problem, or an
		// anchor's name; never a value.
		return nil, fmt.Errorf("is not YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	// One document and nothing after it: what a reader that takes only the
	// first would ignore, another reader may not (client-go refuses
	// trailing data).
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: more than one YAML document, or data after the first", ErrNotJSONCompat)
	}
	c := converter{max: lim.MaxNodes}
	if doc.Kind == 0 || len(doc.Content) == 0 { // empty, or only comments
		return []byte("null"), nil
	}
	if err := c.write(doc.Content[0]); err != nil {
		return nil, err
	}
	return c.out.Bytes(), nil
}

type converter struct {
	out       bytes.Buffer
	max, used int
}

// count counts n against the budget and refuses an anchor or an alias
// before anything reads what it names.
func (c *converter) count(n *yaml.Node) error {
	if c.used++; c.used > c.max {
		return fmt.Errorf("%w: more than %d", ErrTooManyNodes, c.max)
	}
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return fmt.Errorf("%w (line %d): write each value out in full", ErrAlias, n.Line)
	}
	return nil
}

func (c *converter) write(n *yaml.Node) error {
	if err := c.count(n); err != nil {
		return err
	}
	switch n.Kind {
	case yaml.MappingNode:
		return c.mapping(n)
	case yaml.SequenceNode:
		c.out.WriteByte('[')
		for i, e := range n.Content {
			if i > 0 {
				c.out.WriteByte(',')
			}
			if err := c.write(e); err != nil {
				return err
			}
		}
		c.out.WriteByte(']')
		return nil
	case yaml.ScalarNode:
		return c.scalar(n)
	}
	return fmt.Errorf("%w (line %d): a node of kind %d", ErrNotJSONCompat, n.Line, n.Kind)
}

func (c *converter) mapping(n *yaml.Node) error {
	seen := make(map[string]struct{}, len(n.Content)/2)
	c.out.WriteByte('{')
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if err := c.count(k); err != nil {
			return err
		}
		switch {
		case k.Kind != yaml.ScalarNode:
			return fmt.Errorf("%w (line %d): a mapping key that is not a scalar", ErrNotJSONCompat, k.Line)
		case k.ShortTag() == "!!merge":
			return fmt.Errorf("%w (line %d): a merge key (<<); write the mapping out in full", ErrNotJSONCompat, k.Line)
		}
		if _, dup := seen[k.Value]; dup {
			return fmt.Errorf("%w (line %d): a mapping key that appears twice in one mapping", ErrNotJSONCompat, k.Line)
		}
		seen[k.Value] = struct{}{}
		if i > 0 {
			c.out.WriteByte(',')
		}
		c.str(k.Value)
		c.out.WriteByte(':')
		if err := c.write(v); err != nil {
			return err
		}
	}
	c.out.WriteByte('}')
	return nil
}

func (c *converter) scalar(n *yaml.Node) error {
	switch n.ShortTag() {
	case "!!null":
		c.out.WriteString("null")
		return nil
	case "!!bool", "!!int", "!!float":
		var v any
		if err := n.Decode(&v); err != nil { // its message would quote the value
			return fmt.Errorf("%w (line %d): a value that is not the %s its tag says", ErrNotJSONCompat, n.Line, n.ShortTag())
		}
		if f, ok := v.(float64); ok && (math.IsInf(f, 0) || math.IsNaN(f)) {
			return fmt.Errorf("%w (line %d): an infinite or not-a-number value", ErrNotJSONCompat, n.Line)
		}
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("%w (line %d): a number", ErrNotJSONCompat, n.Line)
		}
		c.out.Write(b)
		return nil
	}
	// Strings, and what JSON has no type for (timestamps, binary, tags of
	// the writer's own): the text as written, as sigs.k8s.io/yaml keeps it.
	c.str(n.Value)
	return nil
}

// str writes s as a JSON string. The parser has checked that the input is
// UTF-8, so only quotes, backslashes and control characters need escaping.
func (c *converter) str(s string) {
	const hex = "0123456789abcdef"
	c.out.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch b := s[i]; {
		case b == '"' || b == '\\':
			c.out.WriteByte('\\')
			c.out.WriteByte(b)
		case b == '\n':
			c.out.WriteString(`\n`)
		case b == '\t':
			c.out.WriteString(`\t`)
		case b < 0x20:
			c.out.WriteString(`\u00`)
			c.out.WriteByte(hex[b>>4])
			c.out.WriteByte(hex[b&0xf])
		default:
			c.out.WriteByte(b)
		}
	}
	c.out.WriteByte('"')
}
