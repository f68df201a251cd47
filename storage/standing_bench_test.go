package storage

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkTrialStanding measures ParetoFront, which reads
// trial_standing_v, for an experiment of n finished trials with two or
// three objectives and a constraint, one report each.
func BenchmarkTrialStanding(b *testing.B) {
	for _, objectives := range [][]Objective{
		{{"f1", "min"}, {"f2", "max"}},
		{{"f1", "min"}, {"f2", "max"}, {"f3", "min"}},
	} {
		for _, n := range []int{1_000, 10_000} {
			b.Run(fmt.Sprintf("objectives=%d/n=%d", len(objectives), n), func(b *testing.B) {
				ctx := context.Background()
				db := mustOpen(b)
				exp, err := db.CreateExperiment(ctx, "mo", "f1", "min", map[string]any{})
				if err != nil {
					b.Fatal(err)
				}
				if err := db.SetObjectives(ctx, exp.ID, objectives); err != nil {
					b.Fatal(err)
				}
				if err := db.SetConstraints(ctx, exp.ID, []Constraint{{"mem", "<=", 90}}); err != nil {
					b.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(1, 2))
				for i := range n {
					tr, err := db.CreateTrial(ctx, exp.ID, i+1, map[string]any{"x": i})
					if err != nil {
						b.Fatal(err)
					}
					// f2 grows with f1 (a trade-off) and f3 is independent.
					f1 := rng.Float64()
					m := map[string]float64{"f1": f1, "f2": f1 + rng.Float64(), "f3": rng.Float64(), "mem": float64(rng.IntN(100))}
					if err := db.AddReport(ctx, tr.ID(), Report{Iteration: 1, Time: time.Now(), Metrics: m}, &f1); err != nil {
						b.Fatal(err)
					}
					if err := db.FinishTrial(ctx, tr.ID(), TrialTerminated, ""); err != nil {
						b.Fatal(err)
					}
				}
				var front []*Trial
				for b.Loop() {
					if front, err = db.ParetoFront(ctx, "mo"); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(front)), "front")
			})
		}
	}
}
