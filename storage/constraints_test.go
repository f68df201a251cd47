package storage

import (
	"context"
	"math"
	"slices"
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

// TestParetoFront records trials of an experiment that minimises f1 and
// maximises f2, and checks which are on the front: the dominated, the
// infeasible and those missing an objective are not; equal points both are.
func TestParetoFront(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	exp, err := db.CreateExperiment(ctx, "mo", "f1", "min", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.SetObjectives(ctx, exp.ID, []Objective{{"f1", "min"}, {"f2", "max"}}); err != nil {
		t.Fatal(err)
	}
	if err := db.SetConstraints(ctx, exp.ID, []Constraint{{"mem", "<=", 10}}); err != nil {
		t.Fatal(err)
	}
	reports := []map[string]float64{
		{"f1": 1, "f2": 1, "mem": 0},           // 1: front
		{"f1": 2, "f2": 3, "mem": 0},           // 2: front
		{"f1": 2, "f2": 2, "mem": 0},           // 3: dominated by 2
		{"f1": 3, "f2": 3, "mem": 0},           // 4: dominated by 2
		{"f1": 0, "f2": 9, "mem": 11},          // 5: would dominate all, infeasible
		{"f1": 0.5, "mem": 0},                  // 6: no f2
		{"f1": 2, "f2": 3, "mem": 0},           // 7: equal to 2: front
		{"f1": math.NaN(), "f2": 99, "mem": 0}, // 8: NaN objective
		{"f1": 5, "f2": 4, "mem": 0},           // 9: front (best f2)
	}
	for i, m := range reports {
		tr, err := db.CreateTrial(ctx, exp.ID, i+1, nil)
		if err != nil {
			t.Fatal(err)
		}
		f1 := m["f1"]
		if err := db.AddReport(ctx, tr.ID(), Report{Iteration: 1, Time: time.Now(), Metrics: m}, &f1); err != nil {
			t.Fatal(err)
		}
	}
	front, err := db.ParetoFront(ctx, "mo")
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, tr := range front {
		got = append(got, tr.Number)
	}
	if want := []int{1, 2, 7, 9}; !slices.Equal(got, want) {
		t.Errorf("front: got trials %v, want %v", got, want)
	}
	// A single-objective experiment has no front.
	if _, err := db.CreateExperiment(ctx, "so", "f1", "min", map[string]any{}); err != nil {
		t.Fatal(err)
	}
	if front, err := db.ParetoFront(ctx, "so"); err != nil || len(front) != 0 {
		t.Errorf("single objective: front %v, %v", front, err)
	}
}
