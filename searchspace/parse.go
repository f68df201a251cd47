package searchspace

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Parse turns the sweep-file form of one parameter into a Domain.
//
// raw is what a TOML decoder yields for the value: a plain number, string or
// boolean is a constant; a table with exactly one key names the domain:
//
//	lr       = { loguniform = [1e-4, 1e-1] }
//	dropout  = { uniform = [0.0, 0.5] }
//	momentum = { quniform = [0.5, 0.99, 0.01] }      # low, high, step q
//	wd       = { qloguniform = [1e-5, 1e-2, 1e-5] }
//	layers   = { randint = [1, 4] }                  # high is exclusive
//	width    = { lograndint = [16, 1024] }           # high is exclusive
//	hidden   = { choice = [32, 64, 128] }            # numbers, strings or booleans
//	batch    = { grid = [32, 64] }                   # every value is tried
//	epochs   = 27                                    # a constant
//
// The returned domain has been validated. Errors start with the domain key
// where there is one, e.g. "loguniform: log range [0, 0.1] touches zero: …".
func Parse(raw any) (Domain, error) {
	switch v := raw.(type) {
	case map[string]any:
		return parseTable(v)
	case int64, float64, string, bool:
		d := Constant{v}
		return d, d.Validate()
	case int:
		return Constant{int64(v)}, nil
	default:
		return nil, fmt.Errorf("a parameter is a plain value or a table such as { uniform = [0, 1] }, got %s", typeName(raw))
	}
}

// ParseConditional is Parse for a parameter that may be conditional: a
// table may carry, besides its domain, a "when" key whose string is a
// condition (see ParseCondition), as in
//
//	momentum = { uniform = [0.0, 0.99], when = "opt == 'sgd'" }
//
// The condition is nil when there is none. A bad condition is a
// *ConditionError (without a parameter name, which the caller knows);
// Space.Check checks the condition against the space.
func ParseConditional(raw any) (Domain, *Condition, error) {
	t, ok := raw.(map[string]any)
	w, hasWhen := t["when"]
	if !ok || !hasWhen {
		d, err := Parse(raw)
		return d, nil, err
	}
	text, ok := w.(string)
	if !ok {
		return nil, nil, &ConditionError{Err: fmt.Errorf("want a string such as \"opt == 'sgd'\", got %s", typeName(w))}
	}
	c, err := ParseCondition(text)
	if err != nil {
		return nil, nil, &ConditionError{Err: err}
	}
	rest := make(map[string]any, len(t)-1)
	for k, v := range t {
		if k != "when" {
			rest[k] = v
		}
	}
	d, err := Parse(rest)
	return d, c, err
}

// DomainKeys lists the table keys Parse accepts, sorted.
var DomainKeys = []string{"choice", "grid", "loguniform", "lograndint", "qloguniform", "quniform", "randint", "uniform"}

func parseTable(t map[string]any) (Domain, error) {
	if len(t) != 1 {
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return nil, fmt.Errorf("a parameter table has exactly one key (one of %s), got %d: %s",
			strings.Join(DomainKeys, ", "), len(t), strings.Join(keys, ", "))
	}
	for kind, args := range t {
		d, err := parseKind(kind, args)
		if err == nil {
			err = d.Validate()
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", kind, err)
		}
		return d, nil
	}
	panic("unreachable")
}

func parseKind(kind string, args any) (Domain, error) {
	switch kind {
	case "uniform", "loguniform":
		xs, err := floats(args, "low, high")
		if err != nil {
			return nil, err
		}
		if kind == "uniform" {
			return Uniform{xs[0], xs[1]}, nil
		}
		return LogUniform{xs[0], xs[1]}, nil
	case "quniform", "qloguniform":
		xs, err := floats(args, "low, high, q")
		if err != nil {
			return nil, err
		}
		if kind == "quniform" {
			return QUniform{xs[0], xs[1], xs[2]}, nil
		}
		return QLogUniform{xs[0], xs[1], xs[2]}, nil
	case "randint", "lograndint":
		lo, hi, err := intPair(args)
		if err != nil {
			return nil, err
		}
		if kind == "randint" {
			return RandInt{lo, hi}, nil
		}
		return LogRandInt{lo, hi}, nil
	case "choice", "grid":
		vals, err := values(kind, args)
		if err != nil {
			return nil, err
		}
		if kind == "choice" {
			return Choice{vals}, nil
		}
		return Grid{vals}, nil
	default:
		return nil, fmt.Errorf("unknown domain (want one of %s)", strings.Join(DomainKeys, ", "))
	}
}

// list checks that args is an array of as many elements as names lists.
func list(args any, names string) ([]any, error) {
	n := strings.Count(names, ",") + 1
	xs, ok := args.([]any)
	if !ok {
		return nil, fmt.Errorf("want an array [%s], got %s", names, typeName(args))
	}
	if len(xs) != n {
		noun := "elements"
		if len(xs) == 1 {
			noun = "element"
		}
		return nil, fmt.Errorf("want an array [%s] of %d numbers, got %d %s", names, n, len(xs), noun)
	}
	return xs, nil
}

func floats(args any, names string) ([]float64, error) {
	xs, err := list(args, names)
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(xs))
	for i, x := range xs {
		switch v := x.(type) {
		case float64:
			out[i] = v
		case int64:
			out[i] = float64(v)
		default:
			return nil, fmt.Errorf("[%s] must be numbers, got %s", names, typeName(x))
		}
	}
	return out, nil
}

func intPair(args any) (int64, int64, error) {
	xs, err := list(args, "low, high")
	if err != nil {
		return 0, 0, err
	}
	var out [2]int64
	for i, x := range xs {
		switch v := x.(type) {
		case int64:
			out[i] = v
		case float64:
			if v != math.Trunc(v) || math.Abs(v) > 1<<53 {
				return 0, 0, fmt.Errorf("bounds must be integers, got %g", v)
			}
			out[i] = int64(v)
		default:
			return 0, 0, fmt.Errorf("bounds must be integers, got %s", typeName(x))
		}
	}
	return out[0], out[1], nil
}

// values checks that a choice or grid holds values of one kind. Integers
// mixed with floats become floats.
func values(kind string, args any) ([]any, error) {
	xs, ok := args.([]any)
	if !ok {
		return nil, fmt.Errorf("want an array of values, got %s", typeName(args))
	}
	hasFloat := false
	for _, x := range xs {
		switch x.(type) {
		case float64:
			hasFloat = true
		case int64, string, bool:
		default:
			return nil, fmt.Errorf("%s values must be numbers, strings or booleans, got %s", kind, typeName(x))
		}
	}
	out := make([]any, len(xs))
	for i, x := range xs {
		if n, ok := x.(int64); ok && hasFloat {
			out[i] = float64(n)
		} else {
			out[i] = x
		}
	}
	return out, nil
}

// typeName names the TOML kind of a decoded value.
func typeName(v any) string {
	switch v.(type) {
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case float64, int64, int:
		return "a number"
	case nil:
		return "nothing"
	}
	return fmt.Sprintf("a %T", v)
}
