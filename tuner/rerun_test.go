package tuner

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/gotune/gotune/schedulers"
	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
)

// failingCurve is curveTrain with a checkpoint at even epochs only, whose
// trial 1 fails after its report of epoch 5 while failing is set: a rerun
// restarts it from its checkpoint of epoch 4 and reports epoch 5 again.
func failingCurve(failing *atomic.Bool) trainer.TrainFunc {
	return func(ctx context.Context, w *trainer.Worker) error {
		start, err := resumedEpoch(w)
		if err != nil {
			return err
		}
		x := w.Float("x", 0)
		for e := start + 1; e <= 9; e++ {
			metrics := map[string]float64{"epoch": float64(e), "loss": (x-0.3)*(x-0.3) + 1/float64(e)}
			var opts []trainer.ReportOption
			if e%2 == 0 {
				dir, err := w.CheckpointDir()
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, "epoch"), []byte(strconv.Itoa(e)), 0o644); err != nil {
					return err
				}
				opts = append(opts, trainer.WithCheckpoint(dir))
			}
			if err := w.Report(ctx, metrics, opts...); err != nil {
				return err
			}
			if e == 5 && w.Trial() == 1 && failing.Load() {
				return errors.New("out of memory at epoch 5")
			}
		}
		return nil
	}
}

// TestRerunFailedTrialKeepsItsPlaceInTheScheduler fails trial 1 (the
// best, being the optimum's point to evaluate) after epoch 5 of a sweep
// of each scheduler that keeps results, then reruns it from its
// checkpoint of epoch 4 with WithRerunFailed. The scheduler must take the
// rerun as the same trial going on from there, as it takes a trial
// restarted after an interruption: ASHA keeps one record of it per rung,
// in its own bracket; HyperBand keeps it a member of its own bracket
// only; the median rule and the pruners keep its history, each epoch
// once. A third run resumes the experiment with the option again,
// replaying the scheduler's inputs, and must find the scheduler as the
// rerun left it.
func TestRerunFailedTrialKeepsItsPlaceInTheScheduler(t *testing.T) {
	cases := []struct {
		name  string
		cfg   schedulers.Config
		check func(t *testing.T, snapshot []byte)
	}{
		{"asha-stop", schedulers.Config{Kind: "asha", Mode: "stop", TimeAttr: "epoch", MaxT: 9, GracePeriod: 1, ReductionFactor: 3}, checkASHA},
		{"asha-promote-2-brackets", schedulers.Config{Kind: "asha", Mode: "promote", TimeAttr: "epoch", MaxT: 9, GracePeriod: 1, ReductionFactor: 3, Brackets: 2}, checkASHA},
		{"hyperband", schedulers.Config{Kind: "hyperband", TimeAttr: "epoch", MaxT: 9, ReductionFactor: 3}, checkHyperBand},
		{"median", schedulers.Config{Kind: "median", TimeAttr: "epoch", GracePeriod: 2, MinSamplesRequired: 2}, checkHistory},
		{"percentile", schedulers.Config{Kind: "percentile", TimeAttr: "epoch", Percentile: 50, StartupTrials: 1}, checkPrunerHistory},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := curveSweep(t, "rerun", c.cfg)
			cfg.Search.PointsToEvaluate = []map[string]any{{"x": 0.3}}
			var failing atomic.Bool
			failing.Store(true)
			tu, err := New(cfg, WithTrainFunc(failingCurve(&failing)))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tu.Fit(context.Background()); err != nil {
				t.Fatalf("the failing run: %v", err)
			}
			if tr := trialsOf(t, cfg)[0]; tr.Status != storage.TrialError || tr.Iterations != 5 {
				t.Fatalf("after the failing run trial 1 is %s at iteration %d, want ERROR at 5", tr.Status, tr.Iterations)
			}
			failing.Store(false)
			snapshots := make([][]byte, 2)
			for run := range snapshots {
				tu, err := New(cfg, WithTrainFunc(failingCurve(&failing)), WithRerunFailed())
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tu.Fit(context.Background()); err != nil {
					t.Fatalf("run %d with WithRerunFailed: %v", run+1, err)
				}
				if snapshots[run], err = tu.scheduler.(schedulers.Snapshotter).Snapshot(); err != nil {
					t.Fatal(err)
				}
			}
			tr := trialsOf(t, cfg)[0]
			if tr.Status != storage.TrialTerminated || tr.Iterations != 9 {
				t.Errorf("after the rerun trial 1 is %s at iteration %d, want TERMINATED at 9", tr.Status, tr.Iterations)
			}
			c.check(t, snapshots[0])
			if string(snapshots[1]) != string(snapshots[0]) {
				t.Errorf("a resume after the rerun rebuilt another scheduler:\n%s\nthe rerun's:\n%s", snapshots[1], snapshots[0])
			}
		})
	}
}

// checkASHA checks an ASHA snapshot: no trial has two records at a rung,
// and trial 1, dealt to the first bracket, has records there only, at
// rungs 1 and 3.
func checkASHA(t *testing.T, snapshot []byte) {
	t.Helper()
	var st struct {
		Brackets [][]struct {
			Milestone float64
			Records   []struct{ Trial int }
		}
		Trials map[int]struct{ Bracket, Rung int }
		Added  int
	}
	if err := json.Unmarshal(snapshot, &st); err != nil {
		t.Fatal(err)
	}
	var ones []float64
	for b, rungs := range st.Brackets {
		for _, rg := range rungs {
			seen := map[int]bool{}
			for _, rec := range rg.Records {
				if seen[rec.Trial] {
					t.Errorf("bracket %d, rung %g: trial %d has two records", b, rg.Milestone, rec.Trial)
				}
				seen[rec.Trial] = true
			}
			if seen[1] {
				if b != 0 {
					t.Errorf("trial 1 has a record in bracket %d, rung %g; it was dealt to the first", b, rg.Milestone)
				}
				ones = append(ones, rg.Milestone)
			}
		}
	}
	if want := []float64{1, 3}; !reflect.DeepEqual(ones, want) {
		t.Errorf("trial 1 has records at rungs %v, want %v", ones, want)
	}
	if st.Added != 7 || st.Trials[1].Bracket != 0 {
		t.Errorf("%d trials dealt, trial 1 to bracket %d; want 7 and the first", st.Added, st.Trials[1].Bracket)
	}
}

// checkHyperBand checks a HyperBand snapshot: every trial is a member of
// one bracket, and the seven trials filled only the first.
func checkHyperBand(t *testing.T, snapshot []byte) {
	t.Helper()
	var st struct {
		Brackets []struct{ Members []int }
		Trials   map[int]struct{ Bracket int }
	}
	if err := json.Unmarshal(snapshot, &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Brackets) != 1 {
		t.Errorf("%d brackets, want 1: %s", len(st.Brackets), snapshot)
	}
	member := map[int]int{}
	for b, br := range st.Brackets {
		for _, n := range br.Members {
			if _, ok := member[n]; ok {
				t.Errorf("trial %d is a member of brackets %d and %d", n, member[n], b)
			}
			member[n] = b
			if st.Trials[n].Bracket != b {
				t.Errorf("trial %d is a member of bracket %d and says it is in %d", n, b, st.Trials[n].Bracket)
			}
		}
	}
}

// checkHistory checks a median rule's or a pruner's snapshot: trial 1's
// history is every epoch once, the epochs before its restart included.
func checkHistory(t *testing.T, snapshot []byte) {
	t.Helper()
	var st struct {
		Trials map[int]struct{ Times []float64 }
	}
	if err := json.Unmarshal(snapshot, &st); err != nil {
		t.Fatal(err)
	}
	if got, want := st.Trials[1].Times, []float64{1, 2, 3, 4, 5, 6, 7, 8, 9}; !reflect.DeepEqual(got, want) {
		t.Errorf("trial 1's history has times %v, want %v", got, want)
	}
}

// checkPrunerHistory checks a pruner's snapshot as checkHistory does,
// and that trial 1, which failed, then completed once rerun, counts as
// completed once.
func checkPrunerHistory(t *testing.T, snapshot []byte) {
	t.Helper()
	checkHistory(t, snapshot)
	var st struct {
		Trials    map[int]struct{ Failed bool }
		Completed []int
	}
	if err := json.Unmarshal(snapshot, &st); err != nil {
		t.Fatal(err)
	}
	ones := 0
	for _, n := range st.Completed {
		if n == 1 {
			ones++
		}
	}
	if ones != 1 || st.Trials[1].Failed {
		t.Errorf("trial 1 is completed %d times, failed %v; want once, not failed: %s", ones, st.Trials[1].Failed, snapshot)
	}
}

// TestAFailedTrialIsNotCompletedForThePruner fails trial 1, the optimum,
// after epoch 5 of a sweep under the percentile pruner with one startup
// trial. As in Optuna, a failed trial has not completed: trial 2 has no
// completed trial to be measured against and runs to the end, where
// counting trial 1 would stop it at its first epoch against trial 1's
// partial curve. A second sweep, interrupted once trial 2 has reported
// twice and resumed, replays the scheduler's inputs and must decide alike
// and rebuild the same pruner.
func TestAFailedTrialIsNotCompletedForThePruner(t *testing.T) {
	sweep := func(t *testing.T, cfg Config, reports int64) ([]byte, *Result) {
		t.Helper()
		var failing atomic.Bool
		failing.Store(true)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		obs := &cancelAfter{cancel: cancel}
		obs.n.Store(reports)
		tu, err := New(cfg, WithTrainFunc(failingCurve(&failing)), WithObserver(obs))
		if err != nil {
			t.Fatal(err)
		}
		res, err := tu.Fit(ctx)
		if reports > 0 {
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("a run cancelled after %d reports: %v", reports, err)
			}
			return nil, nil
		}
		if err != nil {
			t.Fatal(err)
		}
		snapshot, err := tu.scheduler.(schedulers.Snapshotter).Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		return snapshot, res
	}
	newConfig := func(t *testing.T) Config {
		cfg := curveSweep(t, "failed", schedulers.Config{Kind: "percentile", TimeAttr: "epoch", Percentile: 50, StartupTrials: 1})
		cfg.Search.PointsToEvaluate = []map[string]any{{"x": 0.3}}
		return cfg
	}

	want, wantResult := sweep(t, newConfig(t), 0)
	trials := wantResult.Trials
	if trials[0].Status != storage.TrialError || trials[0].Iterations != 5 {
		t.Fatalf("trial 1 is %s at iteration %d, want ERROR at 5", trials[0].Status, trials[0].Iterations)
	}
	if trials[1].Status != storage.TrialTerminated || trials[1].Iterations != 9 {
		t.Errorf("trial 2 is %s at iteration %d, want TERMINATED at 9: no trial had completed before it", trials[1].Status, trials[1].Iterations)
	}
	var st struct {
		Trials    map[int]struct{ Failed bool }
		Completed []int
	}
	if err := json.Unmarshal(want, &st); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(st.Completed, 1) || !st.Trials[1].Failed {
		t.Errorf("the pruner counts trial 1 completed (%v) or not failed (%v): %s", st.Completed, st.Trials[1].Failed, want)
	}

	resumed := newConfig(t)
	sweep(t, resumed, 7)
	got, gotResult := sweep(t, resumed, 0)
	if g, w := outcomes(gotResult), outcomes(wantResult); g != w {
		t.Errorf("interrupted and resumed:\n%s\nan undisturbed sweep:\n%s", g, w)
	}
	if string(got) != string(want) {
		t.Errorf("the resumed sweep rebuilt another pruner:\n%s\nthe undisturbed sweep's:\n%s", got, want)
	}
}
