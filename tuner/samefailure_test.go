package tuner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
)

// Without fail_fast set, a sweep whose first trials (as many as run at
// once, at least 5) all failed the same way, none completed, stops there,
// INTERRUPTED; failures that differ, a trial that completed, an explicit
// fail_fast = false or no trial left to start let it run on.
func TestSameFailuresEndTheSweep(t *testing.T) {
	off := false
	// alternate fails its odd calls one way and its even ones another.
	alternate := func() trainer.TrainFunc {
		var calls atomic.Int64
		return func(context.Context, *trainer.Worker) error {
			if calls.Add(1)%2 == 0 {
				return errors.New("bang")
			}
			return errors.New("boom")
		}
	}
	// firstCompletes completes its first call and fails the others.
	firstCompletes := func() trainer.TrainFunc {
		var calls atomic.Int64
		return func(ctx context.Context, w *trainer.Worker) error {
			if calls.Add(1) == 1 {
				return quadratic(ctx, w)
			}
			return errors.New("boom")
		}
	}
	boom := func() trainer.TrainFunc {
		return func(context.Context, *trainer.Worker) error { return errors.New("boom") }
	}
	tests := []struct {
		name       string
		train      func() trainer.TrainFunc
		samples    int
		concurrent int
		failFast   *bool
		// stopsAfter is how many failures end the sweep; 0 when it runs
		// every trial.
		stopsAfter int
		wantErr    error
	}{
		{name: "the same failure", train: boom, samples: 10, concurrent: 1, stopsAfter: 5},
		// More trials than the first 6 may start and end before the 6th
		// ends: 50 leave the sweep trials to come.
		{name: "as many as run at once", train: boom, samples: 50, concurrent: 6, stopsAfter: 6},
		{name: "failures that differ in numbers only", samples: 10, concurrent: 1, stopsAfter: 5,
			train: func() trainer.TrainFunc {
				return func(_ context.Context, w *trainer.Worker) error {
					return fmt.Errorf("out of memory: %g GiB asked at line 12", 10+w.Float("x", 0))
				}
			}},
		{name: "different failures", train: alternate, samples: 10, concurrent: 1, wantErr: ErrAllTrialsFailed},
		{name: "a trial completed first", train: firstCompletes, samples: 10, concurrent: 1},
		// Half the space fails at once, the rest takes a while: the first
		// trials to end all fail alike, the first launched do not.
		{name: "configurations that fail at once among slow ones", samples: 16, concurrent: 4,
			train: func() trainer.TrainFunc {
				return func(ctx context.Context, w *trainer.Worker) error {
					if w.Float("x", 0) < 0 {
						return errors.New("loss diverged")
					}
					time.Sleep(300 * time.Millisecond)
					return quadratic(ctx, w)
				}
			}},
		{name: "fail_fast = false", train: boom, samples: 10, concurrent: 1, failFast: &off, wantErr: ErrAllTrialsFailed},
		{name: "no trial left to start", train: boom, samples: 5, concurrent: 1, wantErr: ErrAllTrialsFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t, tt.samples)
			cfg.Search.MaxConcurrent = tt.concurrent
			cfg.Trainer.Scaling.NumWorkers = 1
			cfg.Trainer.Failure.FailFast = tt.failFast
			tu, err := New(cfg, WithTrainFunc(tt.train()))
			if err != nil {
				t.Fatal(err)
			}
			res, err := tu.Fit(context.Background())
			var same *SameFailureError
			if tt.stopsAfter > 0 {
				if !errors.As(err, &same) || same.Trials != tt.stopsAfter {
					t.Fatalf("Fit: %v, want a SameFailureError after %d trials", err, tt.stopsAfter)
				}
				if len(res.Trials) >= tt.samples {
					t.Errorf("%d trials started, want the sweep stopped before its %d", len(res.Trials), tt.samples)
				}
				db := openResults(t, cfg)
				if exp, _ := db.Experiment(context.Background(), cfg.Name); exp.Status != storage.ExperimentInterrupted {
					t.Errorf("experiment %s, want INTERRUPTED, for a rerun to go on", exp.Status)
				}
				if !slices.ContainsFunc(experimentEvents(t, cfg), func(ev storage.Event) bool {
					return ev.Kind == EventSweepStopped && ev.Message == err.Error()
				}) {
					t.Errorf("no %s event with the reason %q", EventSweepStopped, err)
				}
				return
			}
			if errors.As(err, &same) || !errors.Is(err, tt.wantErr) && (tt.wantErr != nil || err != nil) {
				t.Fatalf("Fit: %v, want %v", err, tt.wantErr)
			}
			if len(res.Trials) != tt.samples {
				t.Errorf("%d trials, want all %d", len(res.Trials), tt.samples)
			}
		})
	}
}
