package pack

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The YAML files are built as node trees rather than marshalled structs, so
// they keep their comments and key order and write multi-line expressions
// as literal blocks.

// mapping returns a mapping node of the key/value pairs kv, in order. A
// value is a *yaml.Node or a string.
func mapping(kv ...any) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode}
	for i := 0; i < len(kv); i += 2 {
		n.Content = append(n.Content, str(kv[i].(string)), node(kv[i+1]))
	}
	return n
}

// flow returns mapping(kv...) written on one line ({from: 600, to: 0}).
func flow(kv ...any) *yaml.Node {
	n := mapping(kv...)
	n.Style = yaml.FlowStyle
	return n
}

// sequence returns a sequence node of items.
func sequence(items ...*yaml.Node) *yaml.Node {
	return &yaml.Node{Kind: yaml.SequenceNode, Content: items}
}

func node(v any) *yaml.Node {
	switch v := v.(type) {
	case *yaml.Node:
		return v
	case string:
		return str(v)
	default:
		panic(fmt.Sprintf("pack: no YAML node for %T", v))
	}
}

// str is a string scalar: a literal block when it spans lines, plain
// when YAML reads it back as the same string, double-quoted otherwise.
func str(s string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
	if strings.Contains(strings.TrimSuffix(s, "\n"), "\n") {
		n.Style = yaml.LiteralStyle
	}
	return n
}

// number is a numeric scalar, written as an integer when it is one (0,
// not !!float 0).
func number(v float64) *yaml.Node {
	if v == math.Trunc(v) {
		return integer(int64(v))
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: strconv.FormatFloat(v, 'f', -1, 64)}
}

// integer is an integer scalar.
func integer(v int64) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(v, 10)}
}

// boolean is a boolean scalar.
func boolean(v bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v)}
}

// encode writes root as YAML indented by two spaces, after header (each of
// its lines becomes a comment).
func encode(header string, root *yaml.Node) ([]byte, error) {
	var buf bytes.Buffer
	for line := range strings.SplitSeq(strings.TrimSpace(header), "\n") {
		buf.WriteString(strings.TrimRight("# "+line, " ") + "\n")
	}
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("error encoding yaml: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("error encoding yaml: %w", err)
	}
	return buf.Bytes(), nil
}

// comment turns text into a YAML comment's lines ("# " before each).
func comment(text string) string {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight("# "+l, " ")
	}
	return strings.Join(lines, "\n")
}
