package searchspace

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Domain is the set of values one hyperparameter may take and the
// distribution random search draws from it.
//
// The domains of this package are Uniform, LogUniform, QUniform,
// QLogUniform, RandInt, LogRandInt, Choice, Grid and Constant. A user's own
// type may implement Domain too; random search samples it, while model-based
// searchers (TPE, CMA-ES) refuse it because they cannot model it.
type Domain interface {
	// Sample draws one value. It never fails for a domain that passed Validate.
	Sample(r *rand.Rand) any
	// Validate reports why the domain cannot be sampled (an empty or inverted
	// range, a log range that touches zero, a step q ≤ 0, an empty choice), or nil.
	Validate() error
	// String renders the domain in sweep-file syntax, e.g. "{ loguniform = [0.0001, 0.1] }".
	String() string
}

// Uniform draws a float64 uniformly from [Low, High).
type Uniform struct{ Low, High float64 }

// Sample implements Domain.
func (d Uniform) Sample(r *rand.Rand) any { return d.Low + r.Float64()*(d.High-d.Low) }

// Validate implements Domain.
func (d Uniform) Validate() error { return checkRange(d.Low, d.High) }

func (d Uniform) String() string { return table("uniform", d.Low, d.High) }

// LogUniform draws a float64 whose logarithm is uniform on [log Low, log High).
// Both bounds must be positive.
type LogUniform struct{ Low, High float64 }

// Sample implements Domain.
func (d LogUniform) Sample(r *rand.Rand) any { return logUniform(r, d.Low, d.High) }

// Validate implements Domain.
func (d LogUniform) Validate() error { return checkLogRange(d.Low, d.High) }

func (d LogUniform) String() string { return table("loguniform", d.Low, d.High) }

// QUniform draws a float64 from the values Low, Low+Q, Low+2Q, … up to and
// including High when High−Low is a multiple of Q, each equally likely. Q is
// the step; it must be positive and no wider than the range. Values are
// rounded to 12 significant digits, so that 0.5 + 3×0.01 is 0.53 and not
// 0.53000000000000003.
type QUniform struct{ Low, High, Q float64 }

// Sample implements Domain.
func (d QUniform) Sample(r *rand.Rand) any {
	return d.Value(r.IntN(d.Steps() + 1))
}

// Validate implements Domain.
func (d QUniform) Validate() error { return checkStep(d.Low, d.High, d.Q, checkRange) }

// Steps is the index of the largest value: the domain holds Steps()+1 values.
func (d QUniform) Steps() int { return steps(d.Low, d.High, d.Q) }

// Value is the k-th value of the domain, Low + k·Q rounded to 12 significant digits.
func (d QUniform) Value(k int) float64 { return stepValue(d.Low, d.Q, k) }

// Round maps x to the nearest value of the domain.
func (d QUniform) Round(x float64) float64 { return roundStep(d.Low, d.High, d.Q, x) }

func (d QUniform) String() string { return table("quniform", d.Low, d.High, d.Q) }

// QLogUniform draws a value log-uniformly from [Low, High] and rounds it to
// the nearest of Low, Low+Q, Low+2Q, … (no further than High). Low must be
// positive; Q must be positive and no wider than the range. Small values
// are more likely than large ones, as with LogUniform.
type QLogUniform struct{ Low, High, Q float64 }

// Sample implements Domain.
func (d QLogUniform) Sample(r *rand.Rand) any { return d.Round(logUniform(r, d.Low, d.High)) }

// Validate implements Domain.
func (d QLogUniform) Validate() error { return checkStep(d.Low, d.High, d.Q, checkLogRange) }

// Round maps x to the nearest value of the domain.
func (d QLogUniform) Round(x float64) float64 { return roundStep(d.Low, d.High, d.Q, x) }

// Top is the largest value of the domain.
func (d QLogUniform) Top() float64 { return stepValue(d.Low, d.Q, steps(d.Low, d.High, d.Q)) }

func (d QLogUniform) String() string { return table("qloguniform", d.Low, d.High, d.Q) }

// RandInt draws an int64 uniformly from [Low, High): the low bound is
// inclusive and the high bound exclusive, as in Python's range.
type RandInt struct{ Low, High int64 }

// Sample implements Domain.
func (d RandInt) Sample(r *rand.Rand) any { return d.Low + r.Int64N(d.High-d.Low) }

// Validate implements Domain.
func (d RandInt) Validate() error { return checkIntRange(d.Low, d.High) }

func (d RandInt) String() string { return table("randint", d.Low, d.High) }

// LogRandInt draws an int64 from [Low, High) (high exclusive) whose
// logarithm is roughly uniform: 1 to 10 is as likely as 10 to 100. Low must
// be at least 1.
type LogRandInt struct{ Low, High int64 }

// Sample implements Domain.
func (d LogRandInt) Sample(r *rand.Rand) any {
	v := int64(math.Floor(logUniform(r, float64(d.Low), float64(d.High))))
	return min(max(v, d.Low), d.High-1)
}

// Validate implements Domain.
func (d LogRandInt) Validate() error {
	if err := checkIntRange(d.Low, d.High); err != nil {
		return err
	}
	if d.Low < 1 {
		return fmt.Errorf("log range [%d, %d) %s: low must be at least 1", d.Low, d.High, zeroOrNegative(float64(d.Low)))
	}
	return nil
}

func (d LogRandInt) String() string { return table("lograndint", d.Low, d.High) }

// Choice draws one of Values with equal probability. Values are all float64,
// all int64, all string or all bool. A string choice can fill a {param}
// argument of a trainer command.
type Choice struct{ Values []any }

// Sample implements Domain.
func (d Choice) Sample(r *rand.Rand) any { return d.Values[r.IntN(len(d.Values))] }

// Validate implements Domain.
func (d Choice) Validate() error { return checkValues("choice", d.Values) }

func (d Choice) String() string { return table("choice", d.Values...) }

// Grid is a parameter whose every value is tried: a sweep runs the cartesian
// product of its grid parameters, num_samples times over (see
// Space.GridCells). Values are all float64, all int64, all string or all
// bool. A searcher that samples a Grid itself draws it like a Choice.
type Grid struct{ Values []any }

// Sample implements Domain.
func (d Grid) Sample(r *rand.Rand) any { return d.Values[r.IntN(len(d.Values))] }

// Validate implements Domain.
func (d Grid) Validate() error { return checkValues("grid", d.Values) }

func (d Grid) String() string { return table("grid", d.Values...) }

// Constant always yields Value.
type Constant struct{ Value any }

// Sample implements Domain.
func (d Constant) Sample(*rand.Rand) any { return d.Value }

// Validate implements Domain.
func (d Constant) Validate() error {
	if f, ok := d.Value.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
		return fmt.Errorf("a constant must be finite, got %g", f)
	}
	return checkKind(d.Value)
}

func (d Constant) String() string { return literal(d.Value) }

// logUniform draws from [low, high) log-uniformly; the clamp guards
// against exp(log(x)) rounding past a bound.
func logUniform(r *rand.Rand, low, high float64) float64 {
	lo, hi := math.Log(low), math.Log(high)
	return min(max(math.Exp(lo+r.Float64()*(hi-lo)), low), math.Nextafter(high, low))
}

func checkRange(low, high float64) error {
	if math.IsNaN(low) || math.IsNaN(high) || math.IsInf(low, 0) || math.IsInf(high, 0) {
		return fmt.Errorf("range bounds must be finite, got [%g, %g]", low, high)
	}
	if high <= low {
		return fmt.Errorf("empty or inverted range [%g, %g]: high must exceed low", low, high)
	}
	return nil
}

func checkLogRange(low, high float64) error {
	if err := checkRange(low, high); err != nil {
		return err
	}
	if low <= 0 {
		return fmt.Errorf("log range [%g, %g] %s: low must be positive", low, high, zeroOrNegative(low))
	}
	return nil
}

func zeroOrNegative(low float64) string {
	if low == 0 {
		return "touches zero"
	}
	return "goes negative"
}

func checkIntRange(low, high int64) error {
	if high <= low {
		return fmt.Errorf("empty or inverted integer range [%d, %d): high must exceed low (high is exclusive)", low, high)
	}
	return nil
}

// checkStep validates a quantised range: the range itself, then the step q.
func checkStep(low, high, q float64, rangeOK func(low, high float64) error) error {
	if err := rangeOK(low, high); err != nil {
		return err
	}
	switch {
	case math.IsNaN(q) || math.IsInf(q, 0):
		return fmt.Errorf("step q must be finite, got %g", q)
	case q <= 0:
		return fmt.Errorf("step q must be positive, got %g", q)
	case q > high-low:
		return fmt.Errorf("step q %g is wider than the range [%g, %g], which would hold one value: use a constant", q, low, high)
	case (high-low)/q > 1<<40:
		return fmt.Errorf("step q %g splits [%g, %g] into more than 2^40 values: use a uniform range", q, low, high)
	}
	return nil
}

// steps is the largest k with low + k·q ≤ high, allowing for rounding
// error in (high−low)/q.
func steps(low, high, q float64) int {
	return int(math.Floor((high-low)/q + 1e-9))
}

// roundStep maps x to the nearest of low, low+q, … no higher than high.
func roundStep(low, high, q, x float64) float64 {
	k := math.Round((x - low) / q)
	return stepValue(low, q, int(min(max(k, 0), float64(steps(low, high, q)))))
}

func stepValue(low, q float64, k int) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(low+float64(k)*q, 'g', 12, 64), 64)
	return v
}

func checkValues(kind string, values []any) error {
	if len(values) == 0 {
		return fmt.Errorf("%s needs at least one value", kind)
	}
	first := valueKind(values[0])
	for _, v := range values {
		if err := checkKind(v); err != nil {
			return err
		}
		if valueKind(v) != first {
			return fmt.Errorf("%s values must all be numbers, all strings or all booleans, got %s and %s", kind, first, valueKind(v))
		}
	}
	return nil
}

func checkKind(v any) error {
	switch v.(type) {
	case float64, int64, string, bool:
		return nil
	}
	return fmt.Errorf("values must be float64, int64, string or bool, got %T", v)
}

// valueKind names the sweep-file kind of a value: ints and floats are both numbers.
func valueKind(v any) string {
	switch v.(type) {
	case float64, int64:
		return "numbers"
	case string:
		return "strings"
	case bool:
		return "booleans"
	}
	return fmt.Sprintf("%T", v)
}

// table renders a domain as an inline TOML table.
func table[T any](kind string, args ...T) string {
	parts := make([]string, len(args))
	for i, a := range args {
		parts[i] = literal(a)
	}
	return fmt.Sprintf("{ %s = [%s] }", kind, strings.Join(parts, ", "))
}

// literal renders a value as a TOML literal.
func literal(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case float64:
		s := strconv.FormatFloat(x, 'g', -1, 64)
		if !strings.ContainsAny(s, ".eEn") { // keep it a float: 2 -> 2.0
			s += ".0"
		}
		return s
	default:
		return FormatValue(v)
	}
}

// FormatValue renders a configuration value the way it is substituted into a
// command argument: integers without a decimal point, floats in the shortest
// form that parses back to the same value.
func FormatValue(v any) string {
	switch x := v.(type) {
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case int64:
		return strconv.FormatInt(x, 10)
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	default:
		return fmt.Sprint(x)
	}
}
