package tuner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/gotune/gotune/schedulers"
	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/trainer"
)

// curveTrain reports the deterministic curve (x-0.3)² + 1/epoch for epochs
// up to 9, with a checkpoint holding the epoch after each, and goes on from
// its resume checkpoint's epoch.
func curveTrain(ctx context.Context, w *trainer.Worker) error {
	start, err := resumedEpoch(w)
	if err != nil {
		return err
	}
	x := w.Float("x", 0)
	for e := start + 1; e <= 9; e++ {
		dir, err := w.CheckpointDir()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "epoch"), []byte(strconv.Itoa(e)), 0o644); err != nil {
			return err
		}
		loss := (x-0.3)*(x-0.3) + 1/float64(e)
		if err := w.Report(ctx, map[string]float64{"epoch": float64(e), "loss": loss}, trainer.WithCheckpoint(dir)); err != nil {
			return err
		}
	}
	return nil
}

// resumedEpoch is the epoch a worker's resume checkpoint holds (see
// curveTrain), 0 when it starts afresh.
func resumedEpoch(w *trainer.Worker) (int, error) {
	rd := w.ResumeDir()
	if rd == "" {
		return 0, nil
	}
	b, err := os.ReadFile(filepath.Join(rd, "epoch"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(string(b))
}

// curveSweep is a sweep of 7 trials of curveTrain's x, at random, one at
// a time, under the scheduler sched, against a database of its own.
func curveSweep(t *testing.T, name string, sched schedulers.Config) Config {
	t.Helper()
	space, err := searchspace.New(searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: 0, High: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return Config{
		Name:      name,
		Storage:   filepath.Join(t.TempDir(), "gotune.db"),
		Seed:      11,
		Objective: Objective{Metric: "loss", Mode: "min"},
		Search:    SearchConfig{Algorithm: "random", NumSamples: 7, MaxConcurrent: 1, Space: space},
		Scheduler: sched,
		Trainer: trainer.Config{Scaling: trainer.ScalingConfig{NumWorkers: 1, CPUsPerWorker: 0.01},
			Checkpoint: trainer.CheckpointConfig{NumToKeep: 2}},
	}
}

// cancelAfter is the observer of one run: it cancels the run once it has
// seen n reports.
type cancelAfter struct {
	n, seen atomic.Int64
	cancel  context.CancelFunc
}

func (c *cancelAfter) OnReport(int, trainer.Result) {
	if c.seen.Add(1) == c.n.Load() {
		c.cancel()
	}
}

func (c *cancelAfter) OnTrialEnd(int, string, error) {}

// TestResumedSchedulersDecideAlike interrupts a sweep of each scheduler
// after one, two, then three reports of each run, again and again, resuming
// it against the same database each time, so that it is cut at nearly every
// moment; every trial must end with the status, the last iteration and the
// last value of an undisturbed sweep.
func TestResumedSchedulersDecideAlike(t *testing.T) {
	cases := []struct {
		name string
		cfg  schedulers.Config
	}{
		{"fifo", schedulers.Config{Kind: "fifo"}},
		{"asha-stop", schedulers.Config{Kind: "asha", Mode: "stop", TimeAttr: "epoch", MaxT: 9, GracePeriod: 1, ReductionFactor: 3}},
		{"asha-promote", schedulers.Config{Kind: "asha", Mode: "promote", TimeAttr: "epoch", MaxT: 9, GracePeriod: 1, ReductionFactor: 3}},
		{"asha-promote-2-brackets", schedulers.Config{Kind: "asha", Mode: "promote", TimeAttr: "epoch", MaxT: 9, GracePeriod: 1, ReductionFactor: 3, Brackets: 2}},
		{"hyperband", schedulers.Config{Kind: "hyperband", TimeAttr: "epoch", MaxT: 9, ReductionFactor: 3}},
		{"median", schedulers.Config{Kind: "median", TimeAttr: "epoch", GracePeriod: 2, MinSamplesRequired: 2}},
		{"pbt", schedulers.Config{Kind: "pbt", TimeAttr: "epoch", PerturbationInterval: 3,
			HyperparamMutations: map[string]any{"x": map[string]any{"uniform": []any{0.0, 1.0}}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := curveSweep(t, "resume", c.cfg)
			fit := func(cfg Config, after int) (*Result, error) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				obs := &cancelAfter{cancel: cancel}
				obs.n.Store(int64(after))
				tu, err := New(cfg, WithTrainFunc(curveTrain), WithObserver(obs))
				if err != nil {
					t.Fatal(err)
				}
				return tu.Fit(ctx)
			}
			want, err := fit(cfg, 0)
			if err != nil {
				t.Fatal(err)
			}
			disturbed := cfg
			disturbed.Storage = filepath.Join(t.TempDir(), "gotune.db")
			var got *Result
			runs := 0
			for ; ; runs++ {
				if runs > 300 {
					t.Fatal("the sweep did not finish after 300 runs")
				}
				got, err = fit(disturbed, 1+runs%3)
				if !errors.Is(err, context.Canceled) {
					break
				}
			}
			if err != nil {
				t.Fatalf("after %d interrupted runs: %v", runs, err)
			}
			if g, w := outcomes(got), outcomes(want); g != w {
				t.Errorf("after %d interrupted runs:\n%s\nan undisturbed sweep:\n%s", runs, g, w)
			}
		})
	}
}

// outcomes renders each trial's status, last iteration and last value.
func outcomes(r *Result) string {
	s := ""
	for _, tr := range r.Trials {
		last := math.NaN()
		if tr.LastMetric != nil {
			last = *tr.LastMetric
		}
		s += fmt.Sprintf("trial %d: %s at %d, %.6g\n", tr.Number, tr.Status, tr.Iterations, last)
	}
	return s
}
