package search

import (
	"fmt"
	"math"
)

// Objective is one metric a multi-objective searcher optimises.
type Objective struct {
	Metric string
	// Mode is "min" or "max".
	Mode string
}

// objectiveScores returns metrics' values of objs, lower is better ("max" ones
// negated); ok is false when a metric is missing.
func objectiveScores(objs []Objective, metrics map[string]float64) (scores []float64, ok bool) {
	scores = make([]float64, len(objs))
	for i, o := range objs {
		v, has := metrics[o.Metric]
		if !has {
			return nil, false
		}
		if o.Mode == "max" {
			v = -v
		}
		scores[i] = v
	}
	return scores, true
}

// Constraint bounds a reported metric: a trial is feasible when its last
// result meets every constraint.
type Constraint struct {
	Metric string
	// Op is "<=", "<", ">=" or ">": the result's value of Metric, Op,
	// Bound must hold. A result without the metric, or with NaN, fails.
	Op    string
	Bound float64
}

// Violation is how far metrics are from meeting every constraint of cs:
// 0 when they meet them all, else the sum of the amounts by which they
// miss (at least 1e-12 for a strict bound met with equality), +Inf when
// a constrained metric is missing or NaN. It ranks infeasible trials, as
// the constraint values of Optuna's constraints_func do.
func Violation(cs []Constraint, metrics map[string]float64) float64 {
	sum := 0.0
	for _, c := range cs {
		v, ok := metrics[c.Metric]
		if !ok || math.IsNaN(v) {
			return math.Inf(1)
		}
		var miss float64
		switch c.Op {
		case "<=":
			miss = v - c.Bound
		case "<":
			miss = v - c.Bound
			if miss == 0 {
				miss = 1e-12
			}
		case ">=":
			miss = c.Bound - v
		case ">":
			miss = c.Bound - v
			if miss == 0 {
				miss = 1e-12
			}
		}
		if miss > 0 {
			sum += miss
		}
	}
	return sum
}

// ConfigError is an invalid setting, named by its dotted key in sweep-file
// terms (for example "search.space.lr" or "trainer.scaling.num_workers").
type ConfigError struct {
	Key string
	Err error
}

func (e *ConfigError) Error() string { return e.Key + ": " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

func fieldErr(key, format string, args ...any) error {
	return &ConfigError{Key: key, Err: fmt.Errorf(format, args...)}
}
