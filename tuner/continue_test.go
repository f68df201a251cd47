package tuner

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
)

// TestExtendingASweepContinuesItsSearch runs a sweep to its end, then runs
// it again with a larger num_samples: the finished trials stay as they
// were, and the new ones are those an undisturbed run of the larger sweep
// suggests, for random search and for TPE. Lowering num_samples is refused
// with the key named.
func TestExtendingASweepContinuesItsSearch(t *testing.T) {
	for _, algorithm := range []string{"random", "tpe"} {
		t.Run(algorithm, func(t *testing.T) {
			small := testConfig(t, 3)
			small.Search.Algorithm, small.Search.MaxConcurrent = algorithm, 1
			mustFit(t, small)
			first := trialsOf(t, small)

			larger := small
			larger.Search.NumSamples = 6
			mustFit(t, larger)
			extended := trialsOf(t, larger)

			undisturbed := larger
			undisturbed.Storage = filepath.Join(t.TempDir(), "undisturbed.db")
			mustFit(t, undisturbed)
			want := trialsOf(t, undisturbed)

			if len(extended) != 6 {
				t.Fatalf("%d trials after raising num_samples to 6", len(extended))
			}
			for i, tr := range extended {
				if i < len(first) && (!reflect.DeepEqual(tr, first[i])) {
					t.Errorf("trial %d changed when the sweep was extended: %+v, was %+v", tr.Number, tr, first[i])
				}
				if !reflect.DeepEqual(tr.Params, want[i].Params) || tr.Status != storage.TrialTerminated {
					t.Errorf("trial %d: %s with %v, an undisturbed run of 6: %v", tr.Number, tr.Status, tr.Params, want[i].Params)
				}
			}
			db := openResults(t, larger)
			exp, err := db.Experiment(context.Background(), larger.Name)
			if err != nil {
				t.Fatal(err)
			}
			if exp.Status != storage.ExperimentFinished {
				t.Errorf("the extended experiment is %s", exp.Status)
			}
			// The stored configuration is the extended one: running the
			// larger sweep again adds nothing, and a smaller one is refused.
			for _, n := range []int{6, 4} {
				again := larger
				again.Search.NumSamples = n
				tu, err := New(again, WithTrainFunc(quadratic))
				if err != nil {
					t.Fatal(err)
				}
				_, err = tu.Fit(context.Background())
				var ee *ExistsError
				if !errors.As(err, &ee) || !errors.Is(err, ErrExperimentExists) {
					t.Fatalf("num_samples %d after 6: %v, want an *ExistsError", n, err)
				}
				wantChanges := []Change(nil)
				if n == 4 {
					wantChanges = []Change{{Key: "search.num_samples", Old: "6", New: "4"}}
				}
				if !reflect.DeepEqual(ee.Changes, wantChanges) {
					t.Errorf("num_samples %d after 6: changes %+v, want %+v", n, ee.Changes, wantChanges)
				}
			}
		})
	}
}

// TestAChangedSweepNamesWhatDiffers changes an interrupted experiment's
// sweep in several keys: the refusal names each with its old and new
// value.
func TestAChangedSweepNamesWhatDiffers(t *testing.T) {
	cfg := testConfig(t, 2)
	mustFit(t, cfg)
	changed := cfg
	changed.Objective.Mode = "max"
	changed.Search.NumSamples = 3
	space, err := searchspace.New(
		searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: -1, High: 2}},
		searchspace.Param{Name: "y", Domain: searchspace.Constant{Value: int64(1)}},
	)
	if err != nil {
		t.Fatal(err)
	}
	changed.Search.Space = space
	tu, err := New(changed, WithTrainFunc(quadratic))
	if err != nil {
		t.Fatal(err)
	}
	_, err = tu.Fit(context.Background())
	var ee *ExistsError
	if !errors.As(err, &ee) {
		t.Fatalf("a changed sweep: %v, want an *ExistsError", err)
	}
	want := []Change{
		{Key: "objective.mode", Old: `"min"`, New: `"max"`},
		{Key: "search.num_samples", Old: "2", New: "3"},
		{Key: "search.space.steps", Old: "5", New: "(none)"},
		{Key: "search.space.x", Old: "{ uniform = [-2.0, 2.0] }", New: "{ uniform = [-1.0, 2.0] }"},
		{Key: "search.space.y", Old: "(none)", New: "1"},
	}
	if !reflect.DeepEqual(ee.Changes, want) {
		t.Errorf("changes:\n%+v\nwant\n%+v", ee.Changes, want)
	}
	for _, s := range []string{"objective.mode: \"min\" → \"max\"", "search.space.y: (none) → 1", "undo these changes"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("the message lacks %q:\n%v", s, err)
		}
	}
}

// TestRerunFailedTrials fails every trial at its third step, which leaves
// the experiment FAILED; a run with WithRerunFailed runs each again from
// its checkpoint of step 2, keeping its number, and the experiment ends
// FINISHED with every step reported once.
func TestRerunFailedTrials(t *testing.T) {
	const steps = 4
	var failing atomic.Bool
	failing.Store(true)
	train := counting(steps, nil)
	flaky := func(ctx context.Context, w *trainer.Worker) error {
		if !failing.Load() {
			return train(ctx, w)
		}
		return counting(2, nil)(ctx, w)
	}
	failAtThree := func(ctx context.Context, w *trainer.Worker) error {
		if err := flaky(ctx, w); err != nil || !failing.Load() {
			return err
		}
		return errors.New("out of memory at step 3")
	}
	cfg := testConfig(t, 3)
	cfg.Trainer.Scaling.NumWorkers = 1
	tu, err := New(cfg, WithTrainFunc(failAtThree))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tu.Fit(context.Background()); !errors.Is(err, ErrAllTrialsFailed) {
		t.Fatalf("the failing run: %v", err)
	}
	db := openResults(t, cfg)
	if exp, _ := db.Experiment(context.Background(), cfg.Name); exp.Status != storage.ExperimentFailed {
		t.Fatalf("after the failing run the experiment is %s", exp.Status)
	}
	before := trialsOf(t, cfg)

	// Without the option the ended experiment is refused, and says so.
	tu, _ = New(cfg, WithTrainFunc(failAtThree))
	if _, err := tu.Fit(context.Background()); !errors.Is(err, ErrExperimentExists) || !strings.Contains(err.Error(), "has already ended (FAILED)") {
		t.Fatalf("a plain run of the failed experiment: %v", err)
	}

	failing.Store(false)
	tu, _ = New(cfg, WithTrainFunc(failAtThree), WithRerunFailed())
	if _, err := tu.Fit(context.Background()); err != nil {
		t.Fatalf("the rerun: %v", err)
	}
	exp, err := db.Experiment(context.Background(), cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	if exp.Status != storage.ExperimentFinished {
		t.Errorf("after the rerun the experiment is %s", exp.Status)
	}
	after := trialsOf(t, cfg)
	if len(after) != len(before) {
		t.Fatalf("%d trials after the rerun, %d before", len(after), len(before))
	}
	for i, tr := range after {
		if tr.ID() != before[i].ID() || tr.Status != storage.TrialTerminated || tr.Restarts != 1 || tr.Error != "" {
			t.Errorf("trial %d after the rerun: %+v", tr.Number, tr)
		}
		reps, err := db.Reports(context.Background(), cfg.Name, tr.Number)
		if err != nil {
			t.Fatal(err)
		}
		var got []float64
		for _, r := range reps {
			got = append(got, r.Metrics["start"])
		}
		if want := []float64{0, 0, 2, 2}; !reflect.DeepEqual(got, want) {
			t.Errorf("trial %d: reports started at steps %v, want %v (the rerun resumes from step 2)", tr.Number, got, want)
		}
	}
	// The scheduler's inputs replay: interrupting nothing, a resume of the
	// finished experiment with the option again has nothing to rerun.
	tu, _ = New(cfg, WithTrainFunc(failAtThree), WithRerunFailed())
	if _, err := tu.Fit(context.Background()); err != nil {
		t.Fatalf("a second rerun: %v", err)
	}
	if again := trialsOf(t, cfg); !reflect.DeepEqual(again, after) {
		t.Errorf("a second rerun with no failed trial changed the trials:\n%+v\n%+v", again, after)
	}
}

// trialsOf reads cfg's experiment's trials.
func trialsOf(t *testing.T, cfg Config) []*storage.Trial {
	t.Helper()
	db, err := storage.OpenReadOnly(cfg.Storage)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ts, err := db.Trials(context.Background(), cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// TestAnInterruptedRunLeavesNoEmptyFolders interrupts a sweep whose
// trials commit nothing into their folders (they only start writing a
// checkpoint) while several run: no trial
// folder stays behind, as none does after a trial that ends.
func TestAnInterruptedRunLeavesNoEmptyFolders(t *testing.T) {
	cfg := testConfig(t, 6)
	ctx, cancel := context.WithCancel(context.Background())
	var reported atomic.Int32
	waiting := func(c context.Context, w *trainer.Worker) error {
		// A folder to write a checkpoint into, which the trial never
		// hands over.
		if _, err := w.CheckpointDir(); err != nil {
			return err
		}
		if err := w.Report(c, map[string]float64{"loss": 1, "step": 1}); err != nil {
			return err
		}
		if w.Rank() == 0 && reported.Add(1) == 3 {
			cancel()
		}
		<-c.Done()
		return c.Err()
	}
	tu, err := New(cfg, WithTrainFunc(waiting))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tu.Fit(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("the interrupted run: %v", err)
	}
	left, err := filepath.Glob(filepath.Join(filepath.Dir(cfg.Storage), "checkpoints", cfg.Name, "*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("the interrupted run left %v", left)
	}
}

// TestCheckpointRootRelative: a checkpoint root given relative to the
// working folder holds the trials' folders, at the path it named when the
// tuner was made, and a restart removes them from there.
func TestCheckpointRootRelative(t *testing.T) {
	ctx := context.Background()
	work := t.TempDir()
	t.Chdir(work)
	cfg := testConfig(t, 2)
	cfg.Storage = "gotune.db"
	tu, err := New(cfg, WithTrainFunc(counting(2, nil)), WithCheckpointRoot("ckpt"))
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir()) // the root stays where it was named
	if _, err := tu.Fit(ctx); err != nil {
		t.Fatal(err)
	}
	step := filepath.Join(work, "ckpt", cfg.Name, "trial_1", "checkpoint_000002", "state.json")
	if _, err := os.Stat(step); err != nil {
		t.Fatalf("trial 1's last checkpoint under the root: %v", err)
	}
	if _, err := os.Stat(filepath.Join(work, "checkpoints")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a checkpoints folder beside the database, with a root of its own given: %v", err)
	}

	cfg.Storage = filepath.Join(work, "gotune.db")
	again, err := New(cfg, WithTrainFunc(counting(1, nil)), WithCheckpointRoot(filepath.Join(work, "ckpt")), WithRestart())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := again.Fit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(step); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the restart left the first run's checkpoint of step 2: %v", err)
	}
}

// TestRemoveAndRestartAnExperiment removes a finished experiment with its
// folders, which frees its name; a run WithRestart starts one over; and
// an experiment that a run holds is not removed.
func TestRemoveAndRestartAnExperiment(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t, 2)
	tu, err := New(cfg, WithTrainFunc(counting(2, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tu.Fit(ctx); err != nil {
		t.Fatal(err)
	}
	folder := filepath.Join(filepath.Dir(cfg.Storage), "checkpoints", cfg.Name)
	if _, err := os.Stat(filepath.Join(folder, "trial_1")); err != nil {
		t.Fatalf("the trial's checkpoints: %v", err)
	}
	db, err := storage.Open(cfg.Storage)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	held, err := db.LockExperiment(cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := RemoveExperiment(ctx, db, cfg.Name); !errors.Is(err, storage.ErrExperimentRunning) {
		t.Errorf("removing a held experiment: %v", err)
	}
	held.Release()
	if err := RemoveExperiment(ctx, db, cfg.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Experiment(ctx, cfg.Name); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("the removed experiment: %v", err)
	}
	if entries, err := os.ReadDir(filepath.Dir(folder)); err != nil || len(entries) != 0 {
		t.Errorf("left in the checkpoints folder: %v %v", entries, err)
	}
	if err := RemoveExperiment(ctx, db, cfg.Name); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("removing it again: %v", err)
	}

	// The name is free again; WithRestart starts the new one over, its
	// trials with nothing of the old ones.
	tu, err = New(cfg, WithTrainFunc(counting(2, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tu.Fit(ctx); err != nil {
		t.Fatalf("a run of the freed name: %v", err)
	}
	tu, err = New(cfg, WithTrainFunc(quadratic), WithRestart())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tu.Fit(ctx); err != nil {
		t.Fatalf("a restart: %v", err)
	}
	reps, err := db.Reports(ctx, cfg.Name, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 5 || reps[0].Metrics["origin"] != 0 {
		t.Errorf("trial 1 after the restart: %+v, want quadratic's 5 reports only", reps)
	}
	if _, err := os.Stat(folder); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the checkpoints of the run before the restart: %v", err)
	}
}
