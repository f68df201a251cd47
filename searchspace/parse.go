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
// boolean is a constant; a table with exactly one key names the domain,
// e.g. map[string]any{"loguniform": []any{1e-4, 0.1}}. The returned domain
// has been validated. Errors name the domain key where there is one.
func Parse(raw any) (Domain, error) {
	switch v := raw.(type) {
	case map[string]any:
		return parseTable(v)
	case int64, float64, string, bool:
		return Constant{v}, nil
	case int:
		return Constant{int64(v)}, nil
	default:
		return nil, fmt.Errorf("a parameter is a plain value or a table such as { uniform = [0, 1] }, got %T", raw)
	}
}

// DomainKeys lists the table keys Parse accepts.
var DomainKeys = []string{"choice", "loguniform", "randint", "uniform"}

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
		if err != nil {
			return nil, fmt.Errorf("%s: %w", kind, err)
		}
		if err := d.Validate(); err != nil {
			return nil, fmt.Errorf("%s: %w", kind, err)
		}
		return d, nil
	}
	panic("unreachable")
}

func parseKind(kind string, args any) (Domain, error) {
	switch kind {
	case "uniform", "loguniform":
		lo, hi, err := floatPair(args)
		if err != nil {
			return nil, err
		}
		if kind == "uniform" {
			return Uniform{lo, hi}, nil
		}
		return LogUniform{lo, hi}, nil
	case "randint":
		lo, hi, err := intPair(args)
		if err != nil {
			return nil, err
		}
		return RandInt{lo, hi}, nil
	case "choice":
		vals, err := choiceValues(args)
		if err != nil {
			return nil, err
		}
		return Choice{vals}, nil
	default:
		return nil, fmt.Errorf("unknown domain (want one of %s)", strings.Join(DomainKeys, ", "))
	}
}

func list(args any, n int) ([]any, error) {
	xs, ok := args.([]any)
	if !ok {
		return nil, fmt.Errorf("want an array of %d numbers, got %T", n, args)
	}
	if len(xs) != n {
		return nil, fmt.Errorf("want an array of %d numbers, got %d elements", n, len(xs))
	}
	return xs, nil
}

func floatPair(args any) (float64, float64, error) {
	xs, err := list(args, 2)
	if err != nil {
		return 0, 0, err
	}
	var out [2]float64
	for i, x := range xs {
		switch v := x.(type) {
		case float64:
			out[i] = v
		case int64:
			out[i] = float64(v)
		default:
			return 0, 0, fmt.Errorf("bounds must be numbers, got %T", x)
		}
	}
	return out[0], out[1], nil
}

func intPair(args any) (int64, int64, error) {
	xs, err := list(args, 2)
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
			return 0, 0, fmt.Errorf("bounds must be integers, got %T", x)
		}
	}
	return out[0], out[1], nil
}

// choiceValues checks that a choice holds values of one kind. Integers mixed
// with floats become floats.
func choiceValues(args any) ([]any, error) {
	xs, ok := args.([]any)
	if !ok {
		return nil, fmt.Errorf("want an array of values, got %T", args)
	}
	var hasInt, hasFloat, hasString, hasBool bool
	for _, x := range xs {
		switch x.(type) {
		case int64:
			hasInt = true
		case float64:
			hasFloat = true
		case string:
			hasString = true
		case bool:
			hasBool = true
		default:
			return nil, fmt.Errorf("choice values must be numbers, strings or booleans, got %T", x)
		}
	}
	kinds := 0
	for _, b := range []bool{hasInt || hasFloat, hasString, hasBool} {
		if b {
			kinds++
		}
	}
	if kinds > 1 {
		return nil, fmt.Errorf("choice values must all be numbers, all strings or all booleans")
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
