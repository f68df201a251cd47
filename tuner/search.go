package tuner

import (
	"fmt"
	"strings"

	"github.com/gotune/gotune/search"
	"github.com/gotune/gotune/searchspace"
)

// newSearcher builds the searcher a [search] section describes: the
// algorithm over the non-grid parameters, inside a search.GridSearch that
// expands the grid parameters and ends the search after
// NumSamples × cells trials. sc must have its defaults applied.
//
// obj's constraints and objectives go to TPE and NSGA-II; sched's
// HyperBand budgets to BOHB.
func newSearcher(sc SearchConfig, seed int64, obj Objective, sched SchedulerConfig) (search.Searcher, error) {
	constraints := searchConstraints(obj.constraints())
	objs := searchObjectives(obj)
	rest := sc.Space.WithoutGrid()
	// With grid parameters, the inner searcher's configurations repeat
	// across cells by design.
	repeats := sc.AllowRepeats || sc.Space.GridSize() > 1
	var inner search.Searcher
	var err error
	switch sc.Algorithm {
	case "random", "grid":
		var opts []search.RandomOption
		if repeats {
			opts = append(opts, search.RandomAllowRepeats())
		}
		inner = search.NewRandomSearch(rest, seed, opts...)
	case "tpe":
		opts := []search.TPEOption{search.TPEConstraints(constraints), search.TPEObjectives(objs)}
		if repeats {
			opts = append(opts, search.TPEAllowRepeats())
		}
		inner, err = search.NewTPE(rest, seed, opts...)
	case "bohb":
		if sched.Kind != "hyperband" {
			return nil, fieldErr("search.algorithm", "\"bohb\" chooses the configurations of HyperBand's brackets: set [scheduler] kind = \"hyperband\" (got %q)", sched.Kind)
		}
		if obj.multi() {
			return nil, fieldErr("search.algorithm", "bohb optimises one objective: with several, use \"tpe\" (MOTPE), \"nsga2\" or \"random\"")
		}
		opts := []search.TPEOption{search.TPEConstraints(constraints)}
		if repeats {
			opts = append(opts, search.TPEAllowRepeats())
		}
		inner, err = search.NewBOHB(rest, seed, sched.WithDefaults().HyperBandBudgets(), opts...)
	case "nsga2":
		var opts []search.NSGA2Option
		if repeats {
			opts = append(opts, search.NSGA2AllowRepeats())
		}
		inner, err = search.NewNSGA2(rest, seed, objs, constraints, opts...)
	case "cmaes":
		var opts []search.CMAESOption
		if repeats {
			opts = append(opts, search.CMAESAllowRepeats())
		}
		inner, err = search.NewCMAES(rest, seed, opts...)
	default:
		err = fieldErr("search.algorithm", "unknown algorithm %q (have %s)", sc.Algorithm, strings.Join(Algorithms, ", "))
	}
	if err != nil {
		return nil, err
	}
	if len(sc.PointsToEvaluate) > 0 {
		if n := sc.Trials(); len(sc.PointsToEvaluate) > n {
			return nil, fieldErr("search.points_to_evaluate", "%d points, but the sweep runs %d trials (num_samples × grid cells)", len(sc.PointsToEvaluate), n)
		}
		for i, pt := range sc.PointsToEvaluate {
			for k := range pt {
				if _, isGrid := sc.Space.Domain(k).(searchspace.Grid); isGrid {
					return nil, fieldErr(fmt.Sprintf("search.points_to_evaluate[%d].%s", i, k), "%s is a grid parameter, which the grid sets in every trial: leave it out of the points", k)
				}
			}
		}
		if inner, err = search.NewPoints(rest, sc.PointsToEvaluate, seed, inner); err != nil {
			return nil, err
		}
	}
	return search.NewGridSearch(sc.Space, sc.NumSamples, inner)
}

// searchConstraints converts constraints to the searchers' type.
func searchConstraints(cs []Constraint) []search.Constraint {
	if len(cs) == 0 {
		return nil
	}
	out := make([]search.Constraint, len(cs))
	for i, c := range cs {
		out[i] = search.Constraint(c)
	}
	return out
}

// searchObjectives lists obj's objectives (with defaults applied) in the
// searchers' terms, one for a single-objective sweep.
func searchObjectives(obj Objective) []search.Objective {
	objs := obj.objectives()
	out := make([]search.Objective, len(objs))
	for i, o := range objs {
		out[i] = search.Objective{Metric: o.Metric, Mode: o.Mode}
	}
	return out
}
