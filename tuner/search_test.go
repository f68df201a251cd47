package tuner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/gotune/gotune/pareto"
	"github.com/gotune/gotune/schedulers"
	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/trainer"
)

// TestBOHBNeedsHyperBand: the sweep file's "bohb" refuses another
// scheduler, naming the setting.
// TestBOHBNeedsHyperBand: the sweep file's "bohb" refuses another
// scheduler, naming the setting.
func TestBOHBNeedsHyperBand(t *testing.T) {
	cfg := testConfig(t, 4)
	cfg.Search.Algorithm = "bohb"
	cfg.Scheduler = schedulers.Config{Kind: "asha"}
	var ce *ConfigError
	if err := cfg.Validate(); !errors.As(err, &ce) || ce.Key != "search.algorithm" {
		t.Fatalf("bohb under ASHA: %v, want a ConfigError on search.algorithm", err)
	}
}

// TestFitSeveralObjectives runs sweeps that minimise loss and maximise
// score, which pull x apart, with a constraint: the result has no best
// trial but a front, and each front member is feasible and dominated by
// no feasible trial, while every feasible trial off the front is.
func TestFitSeveralObjectives(t *testing.T) {
	train := func(ctx context.Context, w *trainer.Worker) error {
		x, y := w.Config()["x"].(float64), w.Config()["y"].(float64)
		return w.Report(ctx, map[string]float64{"loss": x*x + y*y, "score": -math.Pow(x-1, 2) - y*y, "mem": 10 * y})
	}
	for _, algorithm := range []string{"random", "tpe", "nsga2"} {
		t.Run(algorithm, func(t *testing.T) {
			cfg := testConfig(t, 24)
			cfg.Search.Algorithm = algorithm
			cfg.Search.Space = mustSpace(t,
				searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: -1, High: 2}},
				searchspace.Param{Name: "y", Domain: searchspace.Uniform{Low: -1, High: 1}})
			cfg.Objective = Objective{Metrics: []string{"loss", "score"}, Modes: []string{"min", "max"}, Constraints: []string{"mem <= 5"}}
			res := mustFit(t, cfg, WithTrainFunc(train))
			if res.Best != nil || len(res.Front) == 0 {
				t.Fatalf("best %v, front of %d", res.Best, len(res.Front))
			}
			vec := func(p map[string]any) []float64 {
				x, y := p["x"].(float64), p["y"].(float64)
				return []float64{x*x + y*y, math.Pow(x-1, 2) + y*y}
			}
			onFront := map[int]bool{}
			for _, f := range res.Front {
				onFront[f.Number] = true
			}
			for _, a := range res.Trials {
				feasible := 10*a.Params["y"].(float64) <= 5
				if a.Feasible == nil || *a.Feasible != feasible {
					t.Errorf("trial %d: feasible %v, want %v", a.Number, a.Feasible, feasible)
				}
				dominated := false
				for _, b := range res.Trials {
					if b != a && 10*b.Params["y"].(float64) <= 5 && pareto.Dominates(vec(b.Params), vec(a.Params)) {
						dominated = true
					}
				}
				if want := feasible && !dominated; onFront[a.Number] != want {
					t.Errorf("trial %d (%v, feasible %v, dominated %v): on the front %v", a.Number, vec(a.Params), feasible, dominated, onFront[a.Number])
				}
			}
		})
	}
}

// TestFitEndsAnExhaustedSpace runs a sweep of 10 trials over a space of 6
// configurations: it runs 6 trials, each configuration once, and records
// that the space was exhausted.
func TestFitEndsAnExhaustedSpace(t *testing.T) {
	train := func(ctx context.Context, w *trainer.Worker) error {
		cfg := w.Config()
		b, _ := cfg["b"].(float64) // a choice; an integer for CMA-ES, which 0 stands for
		return w.Report(ctx, map[string]float64{"loss": float64(cfg["a"].(int64)) + b})
	}
	for _, algorithm := range []string{"random", "tpe", "nsga2", "cmaes"} {
		t.Run(algorithm, func(t *testing.T) {
			cfg := testConfig(t, 10)
			cfg.Search.Algorithm = algorithm
			var b searchspace.Domain = searchspace.Choice{Values: []any{0.5, 1.5}}
			if algorithm == "cmaes" { // numeric spaces only
				b = searchspace.RandInt{Low: 0, High: 2}
			}
			cfg.Search.Space = mustSpace(t,
				searchspace.Param{Name: "a", Domain: searchspace.RandInt{Low: 0, High: 3}},
				searchspace.Param{Name: "b", Domain: b})
			res := mustFit(t, cfg, WithTrainFunc(train))
			seen := map[string]int{}
			for _, tr := range res.Trials {
				if first, dup := seen[fmt.Sprint(tr.Params)]; dup {
					t.Errorf("trial %d repeats trial %d's %v", tr.Number, first, tr.Params)
				}
				seen[fmt.Sprint(tr.Params)] = tr.Number
			}
			if len(res.Trials) != 6 {
				t.Errorf("%d trials, want the space's 6", len(res.Trials))
			}
			evs := experimentEvents(t, cfg)
			found := false
			for _, ev := range evs {
				found = found || ev.Kind == EventSearchExhausted
			}
			if !found {
				t.Errorf("no %s event among %d", EventSearchExhausted, len(evs))
			}
		})
	}
}

func mustSpace(t testing.TB, params ...searchspace.Param) *searchspace.Space {
	t.Helper()
	s, err := searchspace.New(params...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
