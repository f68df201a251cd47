package tuner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotune/gotune/search"
	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
)

// TestMain lets the test binary run the process workers it starts.
func TestMain(m *testing.M) {
	trainer.WorkerMain()
	os.Exit(m.Run())
}

func init() {
	// crashOnce exits the worker process at its second step the first
	// time a trial runs (a marker file in "dir" remembers), and otherwise
	// reports loss = x² / step with a checkpoint.
	trainer.Register("crashOnce", func(ctx context.Context, w *trainer.Worker) error {
		x := w.Float("x", 0)
		start := 0
		if rd := w.ResumeDir(); rd != "" {
			data, err := os.ReadFile(filepath.Join(rd, "step"))
			if err != nil {
				return err
			}
			start = len(data)
		}
		marker := filepath.Join(w.String("dir", ""), "crashed")
		for s := start + 1; s <= 3; s++ {
			if _, err := os.Stat(marker); s == 2 && err != nil {
				os.WriteFile(marker, nil, 0o644)
				os.Exit(7)
			}
			dir, err := w.CheckpointDir()
			if err != nil {
				return err
			}
			os.WriteFile(filepath.Join(dir, "step"), []byte(strings.Repeat("x", s)), 0o644)
			if err := w.Report(ctx, map[string]float64{"loss": x * x / float64(s)}, trainer.WithCheckpoint(dir)); err != nil {
				return err
			}
		}
		return nil
	})
}

// fixedSearcher hands out the given configurations in order.
type fixedSearcher []map[string]any

func (s fixedSearcher) Suggest(trial int) (map[string]any, error) { return s[trial-1], nil }
func (s fixedSearcher) OnResult(int, search.Observation)          {}
func (s fixedSearcher) OnTrialEnd(int, search.TrialEnd)           {}

func TestCommandSweepFailedTrialsDoNotStopIt(t *testing.T) {
	space, _ := searchspace.New(
		searchspace.Param{Name: "prog", Domain: searchspace.Choice{Values: []any{"sh"}}},
		searchspace.Param{Name: "script", Domain: searchspace.Choice{Values: []any{"true"}}},
	)
	cfg := testConfig(t, 3)
	cfg.Search.Space = space
	cfg.Trainer = trainer.Config{
		Command: []string{"{prog}", "-c", "{script}"},
		Scaling: trainer.ScalingConfig{NumWorkers: 2, CPUsPerWorker: 0.01},
	}
	searcher := fixedSearcher{
		{"prog": "gotune-no-such-program", "script": ""},
		{"prog": "sh", "script": "echo 'bad --lr' >&2; exit 2"},
		{"prog": "sh", "script": `for i in 1 2 3; do echo "@gotune {\"loss\": $i}"; done`},
	}
	tu, err := New(cfg, WithSearcher(searcher))
	if err != nil {
		t.Fatal(err)
	}
	res, err := tu.Fit(context.Background())
	if err != nil {
		t.Fatalf("Fit: %v", err)
	}
	want := []struct{ status, err string }{
		{storage.TrialError, "gotune-no-such-program: executable file not found"},
		{storage.TrialError, "exited with status 2"},
		{storage.TrialTerminated, ""},
	}
	for i, tr := range res.Trials {
		if tr.Status != want[i].status || !strings.Contains(tr.Error, want[i].err) {
			t.Errorf("trial %d: %s %q, want %s %q", tr.Number, tr.Status, tr.Error, want[i].status, want[i].err)
		}
	}
	if res.Trials[1].Error != "" && !strings.Contains(res.Trials[1].Error, "bad --lr") {
		t.Errorf("trial 2's error does not quote its log: %q", res.Trials[1].Error)
	}
	if res.Trials[2].Iterations != 3 {
		t.Errorf("trial 3 made %d reports, want 3", res.Trials[2].Iterations)
	}
	// Both workers run the failing script; the first to fail has the other
	// killed, perhaps before it writes anything, so one log must quote it.
	logs, _ := filepath.Glob(filepath.Join(filepath.Dir(cfg.Storage), "checkpoints", cfg.Name, "trial_2", "logs", "worker_*.log"))
	quoted := false
	for _, path := range logs {
		data, _ := os.ReadFile(path)
		quoted = quoted || strings.Contains(string(data), "bad --lr")
	}
	if !quoted {
		t.Errorf("no worker log of trial 2 (%v) quotes its error", logs)
	}
}

func TestCommandPlaceholdersAreValidated(t *testing.T) {
	cfg := testConfig(t, 1)
	cfg.Trainer = trainer.Config{Command: []string{"python3", "train.py", "--lr={lr}"}}
	var ce *ConfigError
	if err := cfg.Validate(); !errors.As(err, &ce) || ce.Key != "trainer.command" || !strings.Contains(err.Error(), "{lr}") {
		t.Errorf("got %v, want a ConfigError on trainer.command naming {lr}", err)
	}
	cfg.Trainer.Command = []string{"echo", "{{lr}}", "{x}"}
	if err := cfg.Validate(); err != nil {
		t.Errorf("escaped placeholder: %v", err)
	}
	if _, err := New(cfg, WithTrainFunc(quadratic)); !errors.As(err, &ce) {
		t.Errorf("a command and a training function: got %v", err)
	}
}

// events is an observer that records restarts.
type events struct {
	nopObserver
	// slow is how long OnEvent takes, as a slow observer's might.
	slow time.Duration
	mu   sync.Mutex
	got  []trainer.Event
}

func (e *events) OnEvent(_ int, ev trainer.Event) {
	time.Sleep(e.slow)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, ev)
}

func TestProcessWorkersRestartFromCommittedCheckpoints(t *testing.T) {
	cfg := testConfig(t, 1)
	space, _ := searchspace.New(
		searchspace.Param{Name: "x", Domain: searchspace.Constant{Value: 3.0}},
		searchspace.Param{Name: "dir", Domain: searchspace.Constant{Value: t.TempDir()}},
	)
	cfg.Search.Space = space
	cfg.Trainer.Failure.MaxFailures = 1
	cfg.Trainer.Checkpoint = trainer.CheckpointConfig{NumToKeep: 1, ScoreAttribute: "loss"}
	// An observer slow to take the restart: the restarted group's workers
	// are recorded as its attempt's all the same.
	obs := &events{slow: 300 * time.Millisecond}
	tu, err := New(cfg, WithWorkerProcess("crashOnce"), WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	res, err := tu.Fit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if tr := res.Trials[0]; tr.Status != storage.TrialTerminated || tr.Iterations != 3 || *tr.LastMetric != 3 {
		t.Errorf("trial: %s, %d iterations, last %v", tr.Status, tr.Iterations, *tr.LastMetric)
	}
	if len(obs.got) != 1 || obs.got[0].Kind != trainer.EventRestart || !strings.Contains(obs.got[0].Cause, "exited with status 7") {
		t.Errorf("events %+v", obs.got)
	}
	// Each attempt's workers are recorded as its own: the failed one's
	// ended, the restarted one's other processes.
	ws, err := openResults(t, cfg).Workers(context.Background(), cfg.Name, 1)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range ws {
		got = append(got, fmt.Sprintf("attempt %d rank %d", w.Attempt, w.Rank))
	}
	if strings.Join(got, ", ") != "attempt 0 rank 0, attempt 0 rank 1, attempt 1 rank 0, attempt 1 rank 1" {
		t.Fatalf("workers recorded: %s; want both ranks of the failed attempt and of the restarted one", strings.Join(got, ", "))
	}
	for rank := range 2 {
		failed, restarted := ws[rank], ws[2+rank]
		if failed.Status == trainer.WorkerRunning || failed.PID == restarted.PID {
			t.Errorf("rank %d: the failed attempt's worker is %s with pid %d, the restarted one's pid %d", rank, failed.Status, failed.PID, restarted.PID)
		}
	}
	// The checkpoints are committed beside the database, in the trial's
	// folder with its logs; loss is the objective (min), so the retention
	// keeps the best (the latest here).
	dir := filepath.Join(filepath.Dir(cfg.Storage), "checkpoints", cfg.Name, "trial_1")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, " "); got != "checkpoint_000002 checkpoint_000002.json checkpoint_000003 checkpoint_000003.json logs" {
		t.Errorf("checkpoint folder holds %s", got)
	}
}

// TestBuiltinModelInProcesses trains the built-in mlp with its workers in
// child processes, collectives over TCP, and gets the very metrics of the
// same trials with goroutine workers.
func TestBuiltinModelInProcesses(t *testing.T) {
	run := func(isolation string) []*storage.Trial {
		cfg := testConfig(t, 2)
		cfg.Search.Space = nil
		cfg.Objective = Objective{Metric: "val_loss", Mode: "min"}
		cfg.Trainer = trainer.Config{Model: "mlp", Dataset: "../examples/data/digits.csv", Isolation: isolation,
			Scaling: trainer.ScalingConfig{NumWorkers: 2, CPUsPerWorker: 0.01}}
		space, _ := searchspace.New(searchspace.Param{Name: "epochs", Domain: searchspace.Constant{Value: int64(3)}},
			searchspace.Param{Name: "lr", Domain: searchspace.LogUniform{Low: 0.01, High: 0.1}})
		cfg.Search.Space = space
		tu, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		res, err := tu.Fit(context.Background())
		if err != nil {
			t.Fatalf("%s workers: %v", isolation, err)
		}
		ws, err := openResults(t, cfg).Workers(context.Background(), cfg.Name, 1)
		if err != nil || len(ws) != 2 {
			t.Fatalf("%s workers: recorded %+v, %v", isolation, ws, err)
		}
		for _, w := range ws {
			if (w.PID != 0) != (isolation == trainer.IsolationProcess) {
				t.Errorf("%s isolation ran worker %d with pid %d", isolation, w.Rank, w.PID)
			}
		}
		return res.Trials
	}
	procs, gor := run(trainer.IsolationProcess), run(trainer.IsolationGoroutine)
	for i := range procs {
		if procs[i].Iterations != 3 || *procs[i].LastMetric != *gor[i].LastMetric {
			t.Errorf("trial %d: %d iterations, val_loss %v in processes, %v in goroutines", i+1, procs[i].Iterations, *procs[i].LastMetric, *gor[i].LastMetric)
		}
	}
}

// TestReportOnlyTrialsLeaveNoFolders: a trial whose command only reports
// leaves nothing on disk but its rows; one that writes a log line keeps its
// folder with the log, and a failed one its log with the command.
func TestReportOnlyTrialsLeaveNoFolders(t *testing.T) {
	space, _ := searchspace.New(searchspace.Param{Name: "script", Domain: searchspace.Choice{Values: []any{"true"}}})
	cfg := testConfig(t, 4)
	cfg.Search.Space = space
	cfg.Trainer = trainer.Config{
		Command: []string{"sh", "-c", "{script}"},
		Scaling: trainer.ScalingConfig{NumWorkers: 1, CPUsPerWorker: 0.01},
	}
	report := `echo '@gotune {"loss": 1}'`
	searcher := fixedSearcher{
		{"script": report},
		{"script": report + "; echo hello"},
		{"script": report},
		{"script": "exit 3"},
	}
	tu, err := New(cfg, WithSearcher(searcher))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tu.Fit(context.Background()); err != nil {
		t.Fatalf("Fit: %v", err)
	}
	root := filepath.Dir(tu.TrialDir(1))
	var left []string
	filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err == nil && path != root {
			rel, _ := filepath.Rel(root, path)
			left = append(left, rel)
		}
		return err
	})
	want := []string{"trial_2", "trial_2/logs", "trial_2/logs/worker_0.log", "trial_4", "trial_4/logs", "trial_4/logs/worker_0.log"}
	if strings.Join(left, " ") != strings.Join(want, " ") {
		t.Errorf("left on disk: %v, want %v", left, want)
	}
	for _, c := range []struct {
		trial int
		want  string
	}{{2, "hello"}, {4, "exit 3"}} {
		data, err := os.ReadFile(filepath.Join(tu.TrialDir(c.trial), "logs", "worker_0.log"))
		if err != nil || !strings.Contains(string(data), "gotune: attempt 1: worker 0 of 1") || !strings.Contains(string(data), c.want) {
			t.Errorf("trial %d's log: %q, %v", c.trial, data, err)
		}
	}
}

// TestRelativeDatabaseKeepsCheckpoints: with a relative database path (the
// CLI's default, gotune.db) a command running in another folder hands
// over checkpoints from its GOTUNE_CHECKPOINT_DIR and they are kept, with
// no refusal; the trial's folders it is told of are absolute.
func TestRelativeDatabaseKeepsCheckpoints(t *testing.T) {
	here := t.TempDir()
	t.Chdir(here)
	cfg := testConfig(t, 1)
	cfg.Storage = "gotune.db"
	cfg.Trainer = trainer.Config{
		Command: []string{"sh", "-c", `for v in "$GOTUNE_TRIAL_DIR" "$TORCHELASTIC_ERROR_FILE"; do case "$v" in /*) ;; *) echo "relative: $v"; exit 3 ;; esac; done
for i in 1 2; do d="$GOTUNE_CHECKPOINT_DIR/c$i"; mkdir -p "$d"; echo $i > "$d/state"; echo "@gotune {\"loss\": $i, \"checkpoint\": \"$d\"}"; done`},
		Workdir: t.TempDir(),
		Scaling: trainer.ScalingConfig{NumWorkers: 1, CPUsPerWorker: 0.01},
	}
	tu, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tu.Fit(context.Background()); err != nil {
		t.Fatalf("Fit: %v", err)
	}
	if want := filepath.Join(here, "gotune.db"); tu.Config().Storage != want {
		t.Errorf("storage %q, want %q", tu.Config().Storage, want)
	}
	db, err := storage.Open(filepath.Join(here, "gotune.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	evs, err := db.Events(context.Background(), cfg.Name, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Kind == "checkpoint_refused" {
			t.Errorf("event %s: %s", e.Kind, e.Message)
		}
	}
	recs, err := db.CheckpointRecords(context.Background(), cfg.Name, 1)
	if err != nil || len(recs) != 2 {
		t.Errorf("%d checkpoints recorded (%v), want 2", len(recs), err)
	}
}
