package search

import (
	"math"
	"testing"

	"github.com/gotune/gotune/searchspace"
)

// TestTPEModelsFeasibility drives TPE where the objective improves
// towards x = 0.8 but only x ≤ 0.4 is feasible (mem = 100·x ≤ 40): told
// the constraint, TPE samples far fewer infeasible configurations than
// without it, and closes in on the feasible optimum.
func TestTPEModelsFeasibility(t *testing.T) {
	space := mustSpace(t,
		searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: 0, High: 1}},
		searchspace.Param{Name: "y", Domain: searchspace.Uniform{Low: -1, High: 1}},
	)
	cs := []Constraint{{Metric: "mem", Op: "<=", Bound: 40}}
	run := func(opts ...TPEOption) (infeasible int, best float64) {
		tpe := mustTPE(t, space, 4, opts...)
		best = math.Inf(1)
		const trials = 60
		for n := 1; n <= trials; n++ {
			cfg, err := tpe.Suggest(n)
			if err != nil {
				t.Fatal(err)
			}
			x, y := cfg["x"].(float64), cfg["y"].(float64)
			m := map[string]float64{"loss": math.Pow(x-0.8, 2) + 0.1*y*y, "mem": 100 * x}
			tpe.OnTrialEnd(n, TrialEnd{Status: TrialCompleted, Last: &Observation{Score: m["loss"], Metrics: m}})
			if Violation(cs, m) > 0 {
				if n > trials/2 {
					infeasible++
				}
			} else {
				best = min(best, m["loss"])
			}
		}
		return infeasible, best
	}
	blind, _ := run()
	aware, best := run(TPEConstraints(cs))
	// The optimum lies on the boundary, so some draws just past it remain.
	if aware*2 > blind {
		t.Errorf("of the last 30 trials, %d were infeasible with the constraint modelled and %d without: want at most half as many", aware, blind)
	}
	if best > 0.17 {
		t.Errorf("the best feasible loss is %.4f, want within 0.01 of the feasible optimum 0.16", best)
	}
	t.Logf("infeasible among the last 30: %d modelled, %d not; best feasible loss %.4f", aware, blind, best)
}

// TestViolation: a met constraint adds nothing, a missed one its miss, a
// strict bound met with equality at least 1e-12, and a missing or NaN
// metric makes the violation infinite.
func TestViolation(t *testing.T) {
	cs := []Constraint{{Metric: "mem", Op: "<=", Bound: 40}, {Metric: "lat", Op: "<", Bound: 20}}
	for _, c := range []struct {
		metrics map[string]float64
		want    float64
	}{
		{map[string]float64{"mem": 40, "lat": 19}, 0},
		{map[string]float64{"mem": 45, "lat": 22}, 7},
		{map[string]float64{"mem": 1, "lat": 20}, 1e-12},
		{map[string]float64{"mem": 1}, math.Inf(1)},
		{map[string]float64{"mem": math.NaN(), "lat": 1}, math.Inf(1)},
	} {
		if got := Violation(cs, c.metrics); got != c.want {
			t.Errorf("Violation(%v): got %g, want %g", c.metrics, got, c.want)
		}
	}
}
