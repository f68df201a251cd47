package trialfiles

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/tfevents"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/tuner"
)

var t0 = time.Unix(1700000000, 0)

func result(it int, metrics map[string]float64) trainer.Result {
	return trainer.Result{Iteration: it, Time: t0.Add(time.Duration(it) * time.Second), Metrics: metrics}
}

func trialDirs(root string) func(int) string {
	return func(n int) string { return filepath.Join(root, fmt.Sprintf("trial_%d", n)) }
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// eventFiles reads every event file of a trial's folder, oldest first.
func eventFiles(t *testing.T, dir string) [][]tfevents.Event {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if tfevents.IsEventFile(e.Name()) {
			names = append(names, e.Name())
		}
	}
	// Names end in a per-process sequence number; within this test they
	// were made in order.
	slices.SortFunc(names, func(a, b string) int { return len(a) - len(b) })
	var out [][]tfevents.Event
	for _, n := range names {
		f, err := os.Open(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		evs, err := tfevents.ReadEvents(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		out = append(out, evs)
	}
	return out
}

// TestFiles writes two trials' reports, one of which gains a metric
// halfway, and reads both files back.
func TestFiles(t *testing.T) {
	root := t.TempDir()
	f := New(trialDirs(root), func(trial int, err error) { t.Errorf("trial %d: %v", trial, err) })
	f.OnReport(1, result(1, map[string]float64{"loss": 0.5, "acc": 0.25}))
	f.OnReport(2, result(1, map[string]float64{"loss": math.NaN()}))
	f.OnReport(1, result(2, map[string]float64{"loss": 0.25, "acc": 0.5, "lr": 1e-3}))
	f.OnReport(1, result(3, map[string]float64{"loss": math.Inf(1)}))
	f.OnTrialEnd(1, storage.TrialTerminated, nil)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	want1 := `iteration,time,acc,loss,lr
1,1700000001,0.25,0.5,
2,1700000002,0.5,0.25,0.001
3,1700000003,,+Inf,
`
	if got := readFile(t, filepath.Join(root, "trial_1", CSVName)); got != want1 {
		t.Errorf("trial 1 CSV:\n%s\nwant:\n%s", got, want1)
	}
	want2 := "iteration,time,loss\n1,1700000001,NaN\n"
	if got := readFile(t, filepath.Join(root, "trial_2", CSVName)); got != want2 {
		t.Errorf("trial 2 CSV:\n%s\nwant:\n%s", got, want2)
	}

	files := eventFiles(t, filepath.Join(root, "trial_1"))
	if len(files) != 1 {
		t.Fatalf("trial 1 has %d event files, want 1", len(files))
	}
	evs := files[0]
	if len(evs) != 4 || evs[0].FileVersion != tfevents.FileVersion {
		t.Fatalf("trial 1 events: %+v", evs)
	}
	want := []tfevents.Event{
		{WallTime: 1700000001, Step: 1, Scalars: []tfevents.Scalar{{Tag: "acc", Value: 0.25}, {Tag: "loss", Value: 0.5}}},
		{WallTime: 1700000002, Step: 2, Scalars: []tfevents.Scalar{{Tag: "acc", Value: 0.5}, {Tag: "loss", Value: 0.25}, {Tag: "lr", Value: 1e-3}}},
		{WallTime: 1700000003, Step: 3, Scalars: []tfevents.Scalar{{Tag: "loss", Value: float32(math.Inf(1))}}},
	}
	for i, w := range want {
		if got := fmt.Sprint(evs[i+1]); got != fmt.Sprint(w) {
			t.Errorf("event %d: got %s, want %+v", i+1, got, w)
		}
	}
}

// TestFilesAfterResume writes a trial's files, then reports again from
// iteration 3 in a new observer, as a resumed experiment does.
func TestFilesAfterResume(t *testing.T) {
	root := t.TempDir()
	dirs := trialDirs(root)
	f := New(dirs, func(trial int, err error) { t.Errorf("trial %d: %v", trial, err) })
	for it := 1; it <= 4; it++ {
		f.OnReport(1, result(it, map[string]float64{"loss": float64(10 - it)}))
	}
	f.Close() // interrupted: the trial never ended

	f = New(dirs, func(trial int, err error) { t.Errorf("trial %d: %v", trial, err) })
	f.OnReport(1, result(3, map[string]float64{"loss": 3.5, "acc": 1}))
	f.OnTrialEnd(1, storage.TrialTerminated, nil)

	want := `iteration,time,acc,loss
1,1700000001,,9
2,1700000002,,8
3,1700000003,1,3.5
`
	if got := readFile(t, filepath.Join(dirs(1), CSVName)); got != want {
		t.Errorf("CSV after resume:\n%s\nwant:\n%s", got, want)
	}
	files := eventFiles(t, dirs(1))
	if len(files) != 2 {
		t.Fatalf("%d event files, want 2", len(files))
	}
	second := files[1]
	if len(second) != 3 || second[1].SessionStatus != tfevents.SessionStart || second[1].Step != 3 || second[2].Step != 3 {
		t.Errorf("the resumed run's events should start a session at step 3, then report it: %+v", second)
	}
}

// TestFilesRestartInProcess reports an earlier iteration again within one
// run, as after a scheduler's restart from an older checkpoint.
func TestFilesRestartInProcess(t *testing.T) {
	root := t.TempDir()
	dirs := trialDirs(root)
	f := New(dirs, func(trial int, err error) { t.Errorf("trial %d: %v", trial, err) })
	for i, it := range []int{1, 2, 3, 2, 3} {
		f.OnReport(1, result(it, map[string]float64{"loss": float64(it*10 + i/3)}))
	}
	f.OnTrialEnd(1, storage.TrialTerminated, nil)
	want := "iteration,time,loss\n1,1700000001,10\n2,1700000002,21\n3,1700000003,31\n"
	if got := readFile(t, filepath.Join(dirs(1), CSVName)); got != want {
		t.Errorf("CSV:\n%s\nwant:\n%s", got, want)
	}
	if files := eventFiles(t, dirs(1)); len(files) != 2 || files[1][1].SessionStatus != tfevents.SessionStart || files[1][1].Step != 2 {
		t.Errorf("event files after the restart: %+v", files)
	}
}

// TestFilesError makes one trial's folder impossible to create: the error
// is reported once, and the other trials' files are written.
func TestFilesError(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "trial_1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var errs []string
	f := New(trialDirs(root), func(trial int, err error) { errs = append(errs, err.Error()) })
	for it := 1; it <= 3; it++ {
		f.OnReport(1, result(it, map[string]float64{"loss": 1}))
		f.OnReport(2, result(it, map[string]float64{"loss": 1}))
	}
	f.OnTrialEnd(1, storage.TrialTerminated, nil)
	f.OnTrialEnd(2, storage.TrialTerminated, nil)
	if len(errs) != 1 || !strings.HasPrefix(errs[0], "trial 1: ") {
		t.Errorf("errors: %q, want one about trial 1", errs)
	}
	if got := readFile(t, filepath.Join(root, "trial_2", CSVName)); strings.Count(got, "\n") != 4 {
		t.Errorf("trial 2 CSV:\n%s", got)
	}
}

// TestFilesOfASweep runs a real sweep with the observer on the tuner's
// trial folders: every trial's CSV holds exactly the reports the database
// holds.
func TestFilesOfASweep(t *testing.T) {
	space, err := searchspace.New(searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: -2, High: 2}})
	if err != nil {
		t.Fatal(err)
	}
	dbPath := filepath.Join(t.TempDir(), "gotune.db")
	cfg := tuner.Config{
		Name:      "files",
		Storage:   dbPath,
		Objective: tuner.Objective{Metric: "loss", Mode: "min"},
		Search:    tuner.SearchConfig{NumSamples: 3, MaxConcurrent: 2, Space: space},
		Trainer:   trainer.Config{Scaling: trainer.ScalingConfig{NumWorkers: 1, CPUsPerWorker: 0.01}},
	}
	train := func(ctx context.Context, w *trainer.Worker) error {
		x := w.Float("x", 0)
		for s := 1; s <= 4; s++ {
			if err := w.Report(ctx, map[string]float64{"loss": x * x / float64(s)}); err != nil {
				return err
			}
		}
		return nil
	}
	var tu *tuner.Tuner
	files := New(func(n int) string { return tu.TrialDir(n) }, func(trial int, err error) { t.Error(err) })
	tu, err = tuner.New(cfg, tuner.WithTrainFunc(train), tuner.WithObserver(files))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tu.Fit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := files.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := storage.OpenReadOnly(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for n := 1; n <= 3; n++ {
		reps, err := db.Reports(t.Context(), "files", n)
		if err != nil {
			t.Fatal(err)
		}
		var want strings.Builder
		want.WriteString("iteration,time,loss\n")
		for _, r := range reps {
			fmt.Fprintf(&want, "%d,%s,%s\n", r.Iteration, fmtSeconds(r.Time), fmtFloat(r.Metrics["loss"]))
		}
		if got := readFile(t, filepath.Join(tu.TrialDir(n), CSVName)); got != want.String() {
			t.Errorf("trial %d CSV:\n%s\nwant (from the database):\n%s", n, got, want.String())
		}
		if files := eventFiles(t, tu.TrialDir(n)); len(files) != 1 || len(files[0]) != 1+len(reps) {
			t.Errorf("trial %d: event files %v, want one with %d reports", n, files, len(reps))
		}
	}
}

func fmtSeconds(t time.Time) string { return strconv.FormatFloat(tfevents.Seconds(t), 'f', -1, 64) }
func fmtFloat(v float64) string     { return fmt.Sprint(v) }
