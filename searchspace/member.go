package searchspace

import (
	"fmt"
	"math"
)

// Member checks that v is a value d can yield and returns it with the Go
// type d's samples have: an integer given for a float domain becomes a
// float64, a whole float64 given for an integer domain an int64 (as JSON
// and TOML readers yield them), and a value of a choice or grid becomes
// the very value the domain holds (1 and 1.0 are the same number). A
// quantised domain holds only its steps, compared to 12 significant
// digits as its samples are rounded. A Domain of another package accepts
// any float64, int64, string or bool, unchanged.
func Member(d Domain, v any) (any, error) {
	if err := checkKind(v); err != nil {
		return nil, err
	}
	switch d := d.(type) {
	case Uniform:
		return inFloat(v, d.Low, d.High, false, d)
	case LogUniform:
		return inFloat(v, d.Low, d.High, false, d)
	case QUniform:
		return onStep(v, d.Low, d.High, d.Q, d.Round, d)
	case QLogUniform:
		return onStep(v, d.Low, d.High, d.Q, d.Round, d)
	case RandInt:
		return inInt(v, d.Low, d.High, d)
	case LogRandInt:
		return inInt(v, d.Low, d.High, d)
	case Choice:
		return oneOf(v, d.Values, d)
	case Grid:
		return oneOf(v, d.Values, d)
	case Constant:
		return oneOf(v, []any{d.Value}, d)
	}
	return v, nil
}

// number returns v as a float64 when it is a number.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int64:
		return float64(x), true
	}
	return 0, false
}

func notIn(v any, d Domain) error {
	return fmt.Errorf("%s is not a value of %s", literal(v), d)
}

// inFloat accepts a number in [low, high), or [low, high] when closed.
func inFloat(v any, low, high float64, closed bool, d Domain) (any, error) {
	x, ok := number(v)
	if !ok || math.IsNaN(x) || x < low || x > high || x == high && !closed {
		return nil, notIn(v, d)
	}
	return x, nil
}

// onStep accepts a number of [low, high] that round maps onto itself.
func onStep(v any, low, high, q float64, round func(float64) float64, d Domain) (any, error) {
	x, err := inFloat(v, low, high, true, d)
	if err != nil {
		return nil, err
	}
	f := x.(float64)
	if r := round(f); math.Abs(r-f) > 1e-9*max(math.Abs(f), q) {
		return nil, fmt.Errorf("%s is not a value of %s: the nearest step is %s", literal(v), d, literal(r))
	}
	return round(f), nil
}

// inInt accepts a whole number in [low, high).
func inInt(v any, low, high int64, d Domain) (any, error) {
	x, ok := number(v)
	if !ok || x != math.Trunc(x) || x < float64(low) || x >= float64(high) {
		return nil, notIn(v, d)
	}
	return int64(x), nil
}

// oneOf returns the value of values equal to v, numbers compared by value.
func oneOf(v any, values []any, d Domain) (any, error) {
	x, isNum := number(v)
	for _, c := range values {
		if y, ok := number(c); ok && isNum && x == y || c == v {
			return c, nil
		}
	}
	return nil, notIn(v, d)
}
