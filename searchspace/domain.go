package searchspace

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
)

// Domain is the set of values one hyperparameter may take and the
// distribution random search draws from it.
type Domain interface {
	// Sample draws one value. It never fails for a domain that passed Validate.
	Sample(r *rand.Rand) any
	// Validate reports why the domain cannot be sampled (an empty or inverted
	// range, a log range that touches zero), or nil.
	Validate() error
	// String renders the domain in sweep-file syntax, e.g. "loguniform(0.0001, 0.1)".
	String() string
}

// Uniform draws a float64 uniformly from [Low, High).
type Uniform struct{ Low, High float64 }

// Sample implements Domain.
func (d Uniform) Sample(r *rand.Rand) any { return d.Low + r.Float64()*(d.High-d.Low) }

// Validate implements Domain.
func (d Uniform) Validate() error { return checkRange(d.Low, d.High) }

func (d Uniform) String() string { return fmt.Sprintf("uniform(%g, %g)", d.Low, d.High) }

// LogUniform draws a float64 whose logarithm is uniform on [log Low, log High).
// Both bounds must be positive.
type LogUniform struct{ Low, High float64 }

// Sample implements Domain.
func (d LogUniform) Sample(r *rand.Rand) any {
	lo, hi := math.Log(d.Low), math.Log(d.High)
	return math.Exp(lo + r.Float64()*(hi-lo))
}

// Validate implements Domain.
func (d LogUniform) Validate() error {
	if err := checkRange(d.Low, d.High); err != nil {
		return err
	}
	if d.Low <= 0 {
		return fmt.Errorf("log range must be positive, got low %g", d.Low)
	}
	return nil
}

func (d LogUniform) String() string { return fmt.Sprintf("loguniform(%g, %g)", d.Low, d.High) }

// RandInt draws an int64 uniformly from [Low, High): the low bound is
// inclusive and the high bound exclusive, as in Python's range.
type RandInt struct{ Low, High int64 }

// Sample implements Domain.
func (d RandInt) Sample(r *rand.Rand) any { return d.Low + r.Int64N(d.High-d.Low) }

// Validate implements Domain.
func (d RandInt) Validate() error {
	if d.High <= d.Low {
		return fmt.Errorf("empty integer range [%d, %d): high must exceed low", d.Low, d.High)
	}
	return nil
}

func (d RandInt) String() string { return fmt.Sprintf("randint(%d, %d)", d.Low, d.High) }

// Choice draws one of Values with equal probability. Values are all float64,
// all int64, all string or all bool.
type Choice struct{ Values []any }

// Sample implements Domain.
func (d Choice) Sample(r *rand.Rand) any { return d.Values[r.IntN(len(d.Values))] }

// Validate implements Domain.
func (d Choice) Validate() error {
	if len(d.Values) == 0 {
		return fmt.Errorf("choice needs at least one value")
	}
	return nil
}

func (d Choice) String() string { return fmt.Sprintf("choice%v", d.Values) }

// Constant always yields Value.
type Constant struct{ Value any }

// Sample implements Domain.
func (d Constant) Sample(*rand.Rand) any { return d.Value }

// Validate implements Domain.
func (d Constant) Validate() error { return nil }

func (d Constant) String() string { return FormatValue(d.Value) }

func checkRange(low, high float64) error {
	if math.IsNaN(low) || math.IsNaN(high) || math.IsInf(low, 0) || math.IsInf(high, 0) {
		return fmt.Errorf("range bounds must be finite, got [%g, %g]", low, high)
	}
	if high <= low {
		return fmt.Errorf("empty or inverted range [%g, %g]: high must exceed low", low, high)
	}
	return nil
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
