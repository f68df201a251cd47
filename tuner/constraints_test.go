package tuner

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/trainer"
)

func TestParseConstraint(t *testing.T) {
	for _, c := range []struct {
		text string
		want Constraint
		err  string
	}{
		{"mem <= 40", Constraint{Metric: "mem", Op: "<=", Bound: 40}, ""},
		{"latency_ms<2e1", Constraint{Metric: "latency_ms", Op: "<", Bound: 20}, ""},
		{" val/acc >= -0.5 ", Constraint{Metric: "val/acc", Op: ">=", Bound: -0.5}, ""},
		{"x > 1", Constraint{Metric: "x", Op: ">", Bound: 1}, ""},
		{"mem == 40", Constraint{}, "is not a constraint"},
		{"mem <= forty", Constraint{}, "not a finite number"},
		{"mem <= inf", Constraint{}, "not a finite number"},
		{"<= 3", Constraint{}, "is not a constraint"},
	} {
		got, err := ParseConstraint(c.text)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseConstraint(%q): got %v, %v; want an error with %q", c.text, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseConstraint(%q): got %+v, %v; want %+v", c.text, got, err, c.want)
		}
	}
}

// TestFitWithConstraints runs a sweep whose best loss is infeasible: the
// result's best trial is the best feasible one, each trial records its
// feasibility, and a sweep none of whose trials is feasible fails with
// ErrNoFeasibleTrial.
func TestFitWithConstraints(t *testing.T) {
	train := func(ctx context.Context, w *trainer.Worker) error {
		x := w.Config()["x"].(float64)
		return w.Report(ctx, map[string]float64{"loss": math.Pow(x-0.8, 2), "mem": 100 * x})
	}
	cfg := testConfig(t, 12)
	cfg.Search.Space = mustSpace(t, searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: 0, High: 1}})
	cfg.Objective.Constraints = []string{"mem <= 40"}
	res := mustFit(t, cfg, WithTrainFunc(train))
	var bestFeasible *float64
	infeasible := 0
	for _, tr := range res.Trials {
		x := tr.Params["x"].(float64)
		if tr.Feasible == nil || *tr.Feasible != (x <= 0.4) {
			t.Errorf("trial %d with x = %.3f: feasible %v", tr.Number, x, tr.Feasible)
			continue
		}
		if !*tr.Feasible {
			infeasible++
		} else if bestFeasible == nil || *tr.BestMetric < *bestFeasible {
			bestFeasible = tr.BestMetric
		}
	}
	if infeasible == 0 || bestFeasible == nil {
		t.Fatalf("%d infeasible trials: the test needs both kinds", infeasible)
	}
	if res.Best == nil || *res.Best.BestMetric != *bestFeasible {
		t.Errorf("best trial %+v, want the best feasible loss %g", res.Best, *bestFeasible)
	}

	cfg = testConfig(t, 3)
	cfg.Search.Space = mustSpace(t, searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: 0.5, High: 1}})
	cfg.Objective.Constraints = []string{"mem <= 40"}
	tu, err := New(cfg, WithTrainFunc(train))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tu.Fit(context.Background()); !errors.Is(err, ErrNoFeasibleTrial) || !strings.Contains(err.Error(), "mem <= 40") {
		t.Errorf("no feasible trial: got %v", err)
	}
}
