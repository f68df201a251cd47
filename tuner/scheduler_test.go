package tuner

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/gotune/gotune/schedulers"
	"github.com/gotune/gotune/storage"
)

// TestFitWithASHAFromConfig runs the [scheduler] section's ASHA through
// the loop: without pause and resume it runs in its stop mode.
func TestFitWithASHAFromConfig(t *testing.T) {
	cfg := testConfig(t, 8)
	cfg.Search.MaxConcurrent = 1 // one at a time: the decisions are reproducible
	cfg.Scheduler = schedulers.Config{Kind: "asha", TimeAttr: "step", MaxT: 5, GracePeriod: 1, ReductionFactor: 2}
	tu, err := New(cfg, WithTrainFunc(quadratic))
	if err != nil {
		t.Fatal(err)
	}
	res, err := tu.Fit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var early int
	best := res.Trials[0]
	for _, tr := range res.Trials {
		if tr.Iterations < 5 {
			early++
			if tr.Status != storage.TrialStopped {
				t.Errorf("trial %d ended after %d iterations as %s, want STOPPED", tr.Number, tr.Iterations, tr.Status)
			}
		}
		if math.Abs(tr.Params["x"].(float64)) < math.Abs(best.Params["x"].(float64)) {
			best = tr
		}
	}
	if early == 0 {
		t.Error("ASHA stopped no trial early")
	}
	// The trial with the smallest |x| has the lowest loss at every step: no
	// rung stops it.
	if best.Iterations != 5 {
		t.Errorf("the best trial %d ran %d iterations, want 5", best.Number, best.Iterations)
	}
}

func TestNewValidatesScheduler(t *testing.T) {
	cfg := testConfig(t, 1)
	cfg.Scheduler = schedulers.Config{Kind: "asha", ReductionFactor: 0.5}
	var ce *ConfigError
	if _, err := New(cfg, WithTrainFunc(quadratic)); !errors.As(err, &ce) || ce.Key != "scheduler.reduction_factor" {
		t.Errorf("got %v, want a ConfigError on scheduler.reduction_factor", err)
	}
	// Until the loop pauses and resumes trials, the schedulers that need
	// it are refused with a reason.
	cfg.Scheduler = schedulers.Config{Kind: "hyperband"}
	if _, err := New(cfg, WithTrainFunc(quadratic)); !errors.As(err, &ce) || ce.Key != "scheduler.kind" {
		t.Errorf("hyperband: got %v, want a ConfigError on scheduler.kind", err)
	}
}
