package searchspace

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Condition makes a parameter conditional: the parameter is present in a
// configuration only when the condition holds, as momentum only matters
// with opt == 'sgd'. It compares the value of another parameter, a choice
// or a grid (its parent), with values of that parameter's domain:
//
//	opt == 'sgd'
//	opt != 'adam'
//	layers in [2, 3]
//	opt not in ['adam', 'adamw']
//
// Strings are quoted with ' or "; numbers and true/false are plain.
type Condition struct {
	// Param names the parent parameter.
	Param string
	// Op is "==", "!=", "in" or "not in".
	Op string
	// Values are what Param is compared with: one value for == and !=.
	Values []any
}

// maxConditionLen bounds a condition's text, so that a mistake reads as
// one rather than as a long parse.
const maxConditionLen = 4096

// ParseCondition parses a condition's text (see Condition). It checks the
// syntax only; Space.Check checks the condition against the space.
func ParseCondition(s string) (*Condition, error) {
	if len(s) > maxConditionLen {
		return nil, fmt.Errorf("a condition is at most %d bytes, got %d", maxConditionLen, len(s))
	}
	if !utf8.ValidString(s) {
		return nil, errors.New("a condition must be valid UTF-8")
	}
	p := &condParser{s: s}
	c, err := p.condition()
	if err != nil {
		return nil, fmt.Errorf("condition %q: %w (want e.g. \"opt == 'sgd'\", \"opt != 'adam'\" or \"layers in [2, 3]\")", s, err)
	}
	return c, nil
}

type condParser struct {
	s   string
	pos int
}

func (p *condParser) space() {
	for p.pos < len(p.s) && (p.s[p.pos] == ' ' || p.s[p.pos] == '\t') {
		p.pos++
	}
}

func (p *condParser) condition() (*Condition, error) {
	p.space()
	name := p.name()
	if name == "" {
		return nil, p.errorf("it starts with a parameter's name")
	}
	c := &Condition{Param: name}
	p.space()
	switch {
	case p.take("=="):
		c.Op = "=="
	case p.take("!="):
		c.Op = "!="
	case p.word("in"):
		c.Op = "in"
	case p.word("not"):
		p.space()
		if !p.word("in") {
			return nil, p.errorf("\"not\" is followed by \"in\"")
		}
		c.Op = "not in"
	default:
		return nil, p.errorf("the name is followed by ==, !=, in or not in")
	}
	p.space()
	if c.Op == "==" || c.Op == "!=" {
		v, err := p.literal()
		if err != nil {
			return nil, err
		}
		c.Values = []any{v}
	} else {
		vs, err := p.list()
		if err != nil {
			return nil, err
		}
		c.Values = vs
	}
	p.space()
	if p.pos < len(p.s) {
		return nil, p.errorf("unexpected %q after the condition", p.s[p.pos:])
	}
	return c, nil
}

func (p *condParser) errorf(format string, args ...any) error {
	return fmt.Errorf("at byte %d: %s", p.pos, fmt.Sprintf(format, args...))
}

func (p *condParser) take(tok string) bool {
	if strings.HasPrefix(p.s[p.pos:], tok) {
		p.pos += len(tok)
		return true
	}
	return false
}

// word takes w when it is not followed by more of a name.
func (p *condParser) word(w string) bool {
	rest := p.s[p.pos:]
	if !strings.HasPrefix(rest, w) {
		return false
	}
	if r, _ := utf8.DecodeRuneInString(rest[len(w):]); len(rest) > len(w) && isNameRune(r) {
		return false
	}
	p.pos += len(w)
	return true
}

func isNameRune(r rune) bool {
	return r == '_' || r == '-' || r == '.' || unicode.IsLetter(r) || unicode.IsDigit(r)
}

// name takes a parameter's name: letters, digits, _ - and ., not
// starting with a digit, - or '.'.
func (p *condParser) name() string {
	start := p.pos
	for p.pos < len(p.s) {
		r, n := utf8.DecodeRuneInString(p.s[p.pos:])
		if !isNameRune(r) || p.pos == start && (unicode.IsDigit(r) || r == '-' || r == '.') {
			break
		}
		p.pos += n
	}
	return p.s[start:p.pos]
}

func (p *condParser) list() ([]any, error) {
	if !p.take("[") {
		return nil, p.errorf("in and not in are followed by a list such as [2, 3]")
	}
	var vs []any
	for {
		p.space()
		if len(vs) == 0 && p.take("]") {
			return nil, p.errorf("the list is empty")
		}
		v, err := p.literal()
		if err != nil {
			return nil, err
		}
		vs = append(vs, v)
		p.space()
		if p.take("]") {
			return vs, nil
		}
		if !p.take(",") {
			return nil, p.errorf("values of a list are separated by commas and end with ]")
		}
	}
}

// literal takes a quoted string, a number, true or false.
func (p *condParser) literal() (any, error) {
	if p.pos >= len(p.s) {
		return nil, p.errorf("a value is missing")
	}
	switch q := p.s[p.pos]; {
	case q == '\'' || q == '"':
		end := strings.IndexByte(p.s[p.pos+1:], q)
		if end < 0 {
			return nil, p.errorf("the string has no closing %c", q)
		}
		v := p.s[p.pos+1 : p.pos+1+end]
		p.pos += end + 2
		return v, nil
	case p.word("true"):
		return true, nil
	case p.word("false"):
		return false, nil
	}
	start := p.pos
	for p.pos < len(p.s) && strings.IndexByte("+-.0123456789eE_", p.s[p.pos]) >= 0 {
		p.pos++
	}
	text := p.s[start:p.pos]
	if text == "" {
		return nil, p.errorf("a value is a quoted string, a number, true or false")
	}
	if i, err := strconv.ParseInt(text, 10, 64); err == nil {
		return i, nil
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil || strings.Contains(text, "_") {
		p.pos = start
		return nil, p.errorf("%q is not a number", text)
	}
	return f, nil
}

// Holds reports whether the condition holds in cfg: false when cfg has no
// value for the parent. Numbers compare by value (1 equals 1.0).
func (c *Condition) Holds(cfg map[string]any) bool {
	v, ok := cfg[c.Param]
	if !ok {
		return false
	}
	in := false
	for _, w := range c.Values {
		if sameValue(v, w) {
			in = true
			break
		}
	}
	if c.Op == "!=" || c.Op == "not in" {
		return !in
	}
	return in
}

// sameValue compares two configuration values, numbers by value.
func sameValue(a, b any) bool {
	x, aNum := number(a)
	y, bNum := number(b)
	if aNum || bNum {
		return aNum && bNum && x == y
	}
	return a == b
}

// String renders the condition so that ParseCondition reads it back.
func (c *Condition) String() string {
	vals := make([]string, len(c.Values))
	for i, v := range c.Values {
		if s, ok := v.(string); ok && !strings.Contains(s, "'") {
			vals[i] = "'" + s + "'"
		} else if ok {
			vals[i] = `"` + s + `"`
		} else {
			vals[i] = literal(v)
		}
	}
	if c.Op == "==" || c.Op == "!=" {
		return fmt.Sprintf("%s %s %s", c.Param, c.Op, vals[0])
	}
	return fmt.Sprintf("%s %s [%s]", c.Param, c.Op, strings.Join(vals, ", "))
}
