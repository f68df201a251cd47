package sweepfile

import (
	"fmt"
	"strings"

	"github.com/pelletier/go-toml/v2/unstable"
)

// lineIndex maps every dotted key of a TOML document (tables, keys, and the
// keys of inline tables) to the line it starts on.
type lineIndex map[string]int

// keyLines parses data and indexes the line of each key.
func keyLines(data []byte) (lineIndex, error) {
	idx := lineIndex{}
	var p unstable.Parser
	p.Reset(data)
	var table []string
	for p.NextExpression() {
		expr := p.Expression()
		switch expr.Kind {
		case unstable.Table, unstable.ArrayTable:
			table = keyParts(expr.Key())
			idx.add(&p, strings.Join(table, "."), expr)
		case unstable.KeyValue:
			idx.keyValue(&p, table, expr)
		}
	}
	return idx, p.Error()
}

func keyParts(it unstable.Iterator) []string {
	var parts []string
	for it.Next() {
		parts = append(parts, string(it.Node().Data))
	}
	return parts
}

func (idx lineIndex) keyValue(p *unstable.Parser, table []string, kv *unstable.Node) {
	it := kv.Key()
	parts := append(append([]string{}, table...), keyParts(it)...)
	key := strings.Join(parts, ".")
	first := kv.Key()
	first.Next()
	idx.add(p, key, first.Node())
	idx.value(p, parts, kv.Value())
}

// value indexes the keys inside a value: those of an inline table, and
// an array's elements as key[i] (i from 0), with the keys inside them.
func (idx lineIndex) value(p *unstable.Parser, parts []string, v *unstable.Node) {
	switch v.Kind {
	case unstable.InlineTable:
		children := v.Children()
		for children.Next() {
			idx.keyValue(p, parts, children.Node())
		}
	case unstable.Array:
		last := len(parts) - 1
		children := v.Children()
		for i := 0; children.Next(); i++ {
			elem := append(append([]string{}, parts[:last]...), fmt.Sprintf("%s[%d]", parts[last], i))
			n := children.Node()
			if n.Raw.Length > 0 {
				idx[strings.Join(elem, ".")] = p.Shape(n.Raw).Start.Line
			}
			idx.value(p, elem, n)
		}
	}
}

func (idx lineIndex) add(p *unstable.Parser, key string, n *unstable.Node) {
	if _, seen := idx[key]; seen || n == nil {
		return
	}
	if n.Raw.Length == 0 {
		// Table headers carry their range on the key parts.
		it := n.Key()
		if it.Next() {
			n = it.Node()
		}
	}
	idx[key] = p.Shape(n.Raw).Start.Line
}

// find returns the line of key, or of its closest enclosing table that the
// document has, or 0.
func (idx lineIndex) find(key string) int {
	for key != "" {
		if l, ok := idx[key]; ok {
			return l
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 {
			break
		}
		key = key[:i]
	}
	return 0
}
