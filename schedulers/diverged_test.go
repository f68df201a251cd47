package schedulers

import (
	"math"
	"testing"
)

// An infinite accuracy in a "max" experiment reaches a scheduler as a
// score of −Inf, which won every comparison; beside a finite record it
// made ASHA's interpolated cutoff NaN (−Inf + Inf), and every later
// trial stopped at that rung. A result that is infinite either way is
// diverged, the worst: it stops its trial and never moves a cutoff.
func TestASHAInfiniteResultsDiverge(t *testing.T) {
	for _, env := range []Env{{Metric: "acc", Mode: "max"}, {Metric: "loss"}} {
		t.Run(env.Metric, func(t *testing.T) {
			sign := 1.0
			if env.Mode == "max" {
				sign = -1
			}
			s := mustNew(t, Config{Kind: "asha", Mode: "stop", MaxT: 8, GracePeriod: 1, ReductionFactor: 2}, env)
			play(t, s, []ev{
				add(1), res(1, 1, sign*0.5, Continue).at(1),
				add(2), res(2, 1, math.Inf(-1), Stop).at(1).cut(0.5).why("diverged"),
				end(2),
				add(3), res(3, 1, math.Inf(1), Stop).at(1).cut(0.5).why("diverged"),
				end(3),
				// The cutoff is still trial 1's 0.5: a better result passes,
				// then the cutoff lies between the two finite records, and a
				// worse one stops.
				add(4), res(4, 1, sign*0.5-0.1, Continue).at(1).cut(0.5),
				add(5), res(5, 1, sign*0.5+0.1, Stop).at(1).cut(0.5 - 0.05*sign),
			})
		})
	}
}

// TestInfiniteResultsStopInEveryScheduler: a first result of −Inf (an
// infinite accuracy, negated) past the grace period stops the trial in
// every scheduler that stops trials, as NaN and +Inf do.
func TestInfiniteResultsStopInEveryScheduler(t *testing.T) {
	lower, patience := 0.0, 1
	for _, c := range []Config{
		{Kind: "asha", Mode: "stop", MaxT: 8},
		{Kind: "asha", Mode: "promote", MaxT: 8},
		{Kind: "hyperband", MaxT: 9},
		{Kind: "median", MinSamplesRequired: 1},
		{Kind: "percentile", Percentile: 50},
		{Kind: "threshold", Lower: &lower},
		{Kind: "patient", Patience: &patience},
		{Kind: "wilcoxon"},
	} {
		for _, score := range []float64{math.Inf(-1), math.Inf(1), math.NaN()} {
			s := mustNew(t, c, Env{Metric: "acc", Mode: "max", Checkpoints: true})
			s.OnTrialAdd(1, map[string]any{})
			if d := s.OnResult(Result{Trial: 1, Time: 1, Score: score}); d.Action != Stop {
				t.Errorf("%s: a score of %g at the grace period: %s (%s), want STOP", c.Kind, score, d.Action, d.Reason)
			}
		}
	}
}
