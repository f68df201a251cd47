package storage

import (
	"context"
	"math"
	"testing"
	"time"
)

// TestConstraintsDecideFeasibility reports trials of an experiment with
// constraints mem <= 40 and latency < 20 and checks each trial's
// feasibility, decided by its last report, and that the best trial and
// experiments_v's best are the best feasible one.
func TestConstraintsDecideFeasibility(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	exp, err := db.CreateExperiment(ctx, "c", "loss", "min", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.SetConstraints(ctx, exp.ID, []Constraint{{"mem", "<=", 40}, {"latency.ms", "<", 20}}); err != nil {
		t.Fatal(err)
	}
	type want int // 1 feasible, 0 infeasible, -1 unknown
	cases := []struct {
		reports []map[string]float64
		want    want
	}{
		{[]map[string]float64{{"loss": 0.5, "mem": 40, "latency.ms": 19.9}}, 1},
		{[]map[string]float64{{"loss": 0.1, "mem": 41, "latency.ms": 10}}, 0},                                           // the best loss, infeasible
		{[]map[string]float64{{"loss": 0.2, "mem": 10, "latency.ms": 20}}, 0},                                           // < is strict
		{[]map[string]float64{{"loss": 0.2, "mem": 10}}, 0},                                                             // latency missing
		{[]map[string]float64{{"loss": 0.2, "mem": math.NaN(), "latency.ms": 1}}, 0},                                    // NaN fails
		{[]map[string]float64{{"loss": 0.2, "mem": math.Inf(-1), "latency.ms": 1}}, 1},                                  // −∞ ≤ 40
		{[]map[string]float64{{"loss": 0.05, "mem": 99, "latency.ms": 1}, {"loss": 0.3, "mem": 1, "latency.ms": 1}}, 1}, // the last report decides
		{[]map[string]float64{{"loss": 0.3, "mem": 1, "latency.ms": 1}, {"loss": 0.4, "mem": math.Inf(1), "latency.ms": 1}}, 0},
		{nil, -1},
	}
	for i, c := range cases {
		tr, err := db.CreateTrial(ctx, exp.ID, i+1, map[string]any{"x": i})
		if err != nil {
			t.Fatal(err)
		}
		for k, m := range c.reports {
			var obj *float64
			if v, ok := m["loss"]; ok {
				obj = &v
			}
			if err := db.AddReport(ctx, tr.ID(), Report{Iteration: k + 1, Time: time.Now(), Metrics: m}, obj); err != nil {
				t.Fatal(err)
			}
		}
	}
	trials, err := db.Trials(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	for i, tr := range trials {
		got := want(-1)
		if tr.Feasible != nil {
			got = 0
			if *tr.Feasible {
				got = 1
			}
		}
		if got != cases[i].want {
			t.Errorf("trial %d (%v): feasible %d, want %d", tr.Number, cases[i].reports, got, cases[i].want)
		}
	}
	best, err := db.BestTrial(ctx, "c")
	if err != nil || best.Number != 7 {
		t.Errorf("best trial: got %+v, %v; want trial 7 (best loss 0.05, feasible at its last report)", best, err)
	}
	e, err := db.Experiment(ctx, "c")
	if err != nil || e.Best == nil || *e.Best != 0.05 {
		t.Errorf("experiments_v best: got %v, %v; want 0.05", e.Best, err)
	}
	rows, err := db.Query(ctx, `SELECT count(*) FROM trial_standing_v WHERE experiment = 'c' AND feasible = 0`)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for rows.Next() {
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	rows.Close()
	if n != 5 {
		t.Errorf("trial_standing_v: %d infeasible trials, want 5", n)
	}

	// An experiment without constraints has no feasibility.
	free, err := db.CreateExperiment(ctx, "free", "loss", "min", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := db.CreateTrial(ctx, free.ID, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	loss := 1.0
	if err := db.AddReport(ctx, tr.ID(), Report{Iteration: 1, Time: time.Now(), Metrics: map[string]float64{"loss": 1}}, &loss); err != nil {
		t.Fatal(err)
	}
	if got, err := db.Trial(ctx, "free", 1); err != nil || got.Feasible != nil {
		t.Errorf("unconstrained trial: feasible %v, %v; want nil", got.Feasible, err)
	}
	if err := db.SetConstraints(ctx, free.ID, []Constraint{{"mem", "=<", 1}}); err == nil {
		t.Error("SetConstraints took the operator =<")
	}
}
