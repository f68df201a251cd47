package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gotune/gotune/storage"
)

var update = flag.Bool("update", false, "rewrite the golden files of the results commands")

// resultsFixture writes a database with two experiments whose trials cover
// every status, restarts, NaN metrics, events, workers and checkpoints,
// with fixed times, and returns its path.
func resultsFixture(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "results.db")
	clock := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tick := func() time.Time { clock = clock.Add(time.Second); return clock }
	db, err := storage.Open(path, storage.WithClock(tick))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	exp, err := db.CreateExperiment(ctx, "digits", "val_loss", "min", map[string]any{"seed": 7})
	must(err)
	report := func(tr *storage.Trial, it int, loss, acc float64) {
		t.Helper()
		m := map[string]float64{"epoch": float64(it), "val_loss": loss, "val_acc": acc}
		must(db.AddReport(ctx, tr.ID(), storage.Report{Iteration: it, Time: tick(), Metrics: m}, &loss))
	}
	t1, err := db.CreateTrial(ctx, exp.ID, 1, map[string]any{"lr": 0.01, "hidden": 64, "act": "relu"})
	must(err)
	var workerIDs []int64
	for w := range 2 {
		id, err := db.SetWorker(ctx, t1.ID(), storage.WorkerRecord{Rank: w, Node: "node-a", PID: 4100 + w, Status: "EXITED", LogPath: "/logs/1/" + string(rune('0'+w)), StepRate: 250})
		must(err)
		workerIDs = append(workerIDs, id)
	}
	// Rank 0's usage, sampled twice: the later sample is the one shown.
	for i, cpu := range []float64{50, 97.5} {
		at := clock.Add(time.Duration(i) * time.Second)
		must(db.AddResourceSamples(ctx, exp.ID, []storage.ResourceSample{
			{Time: at, Node: "node-a", WorkerID: workerIDs[0], GPU: storage.NoGPU, Util: cpu, MemoryUsed: int64(i+1) << 30},
			{Time: at, Node: "node-a", WorkerID: workerIDs[0], GPU: 0, Util: 80 + float64(i), MemoryUsed: 3 << 30, MemoryTotal: 16 << 30},
		}))
	}
	report(t1, 1, 0.9, 0.7)
	report(t1, 2, 0.5, 0.85)
	c2, err := db.RecordCheckpoint(ctx, t1.ID(), 2, "/ckpt/digits/1/2", map[string]float64{"val_loss": 0.5})
	must(err)
	report(t1, 3, 0.3, 0.91)
	_, err = db.RecordCheckpoint(ctx, t1.ID(), 3, "/ckpt/digits/1/3", map[string]float64{"val_loss": 0.3})
	must(err)
	must(db.MarkCheckpointDeleted(ctx, c2))
	must(db.FinishTrial(ctx, t1.ID(), storage.TrialTerminated, ""))

	t2, err := db.CreateTrial(ctx, exp.ID, 2, map[string]any{"lr": 0.5, "hidden": 32, "act": "tanh"})
	must(err)
	report(t2, 1, 1.2, 0.4)
	must(db.RestartTrial(ctx, t2.ID(), 0, "worker 1 exited with status 137"))
	report(t2, 1, 1.1, 0.45)
	report(t2, 2, math.NaN(), 0.1)
	must(db.AddEvent(ctx, 0, t2.ID(), storage.EventDecision, "below the rung's cutoff", map[string]any{"action": "STOP", "rung": 2, "cutoff": 0.6}))
	must(db.FinishTrial(ctx, t2.ID(), storage.TrialStopped, ""))

	t3, err := db.CreateTrial(ctx, exp.ID, 3, map[string]any{"lr": 0.001, "hidden": 128, "act": "relu"})
	must(err)
	must(db.FinishTrial(ctx, t3.ID(), storage.TrialError, "worker 0 exited with status 1"))
	_, err = db.CreateTrial(ctx, exp.ID, 4, map[string]any{"lr": 0.05, "hidden": 64, "act": "tanh"})
	must(err)
	must(db.AddEvent(ctx, exp.ID, 0, "config_notice", "objective val_acc reads like a metric to maximise", nil))

	other, err := db.CreateExperiment(ctx, "other", "acc", "max", nil)
	must(err)
	o1, err := db.CreateTrial(ctx, other.ID, 1, map[string]any{"x": 1})
	must(err)
	acc := 0.75
	must(db.AddReport(ctx, o1.ID(), storage.Report{Iteration: 1, Time: tick(), Metrics: map[string]float64{"acc": acc}}, &acc))
	must(db.FinishTrial(ctx, o1.ID(), storage.TrialTerminated, ""))
	must(db.FinishExperiment(ctx, other.ID, storage.ExperimentFinished))
	return path
}

// TestResultsGolden runs each results command on the fixture and compares
// its output with testdata/golden; go test -run TestResultsGolden -update
// rewrites them.
func TestResultsGolden(t *testing.T) {
	local := time.Local
	time.Local = time.UTC
	defer func() { time.Local = local }()
	db := resultsFixture(t)
	tests := []struct {
		golden string
		args   []string
	}{
		{"ls.txt", []string{"ls"}},
		{"ls.json", []string{"ls", "--json"}},
		{"trials.txt", []string{"trials", "digits"}},
		{"trials_sorted.txt", []string{"trials", "digits", "--sort", "val_loss"}},
		{"trials_sort_other_metric.txt", []string{"trials", "digits", "--sort", "-val_acc", "--limit", "2"}},
		{"trials_status.json", []string{"trials", "digits", "--status", "interrupted,error", "--json"}},
		{"trials_page.json", []string{"trials", "digits", "--sort", "val_loss", "--offset", "1", "--limit", "2", "--json"}},
		{"trials_past_the_end.json", []string{"trials", "digits", "--offset", "100", "--json"}},
		{"best.txt", []string{"best", "digits"}},
		{"best.json", []string{"best", "digits", "--json"}},
		{"show.txt", []string{"show", "digits", "1"}},
		{"show_restarted.txt", []string{"show", "digits", "2"}},
		{"show.json", []string{"show", "digits", "2", "--json"}},
		{"show_experiment.txt", []string{"show", "digits"}},
		{"show_experiment.json", []string{"show", "other", "--json"}},
		{"query.txt", []string{"query", "SELECT experiment, trial_id, status, iterations, best_metric, error FROM trials_v ORDER BY experiment, trial_id"}},
		{"query.json", []string{"query", "--json", "SELECT name, trials, best FROM experiments_v ORDER BY name"}},
		{"query.csv", []string{"query", "--csv", "SELECT trial_id, iteration, json_extract(metrics_json, '$.val_loss') AS val_loss FROM reports_v WHERE experiment = 'digits' ORDER BY trial_id, iteration"}},
		{"export.csv", []string{"export", "digits", "--format", "csv"}},
		{"export.json", []string{"export", "digits", "--format", "json"}},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			code, stdout, stderr := runCLI(append(tt.args, "--db", db)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			path := filepath.Join("testdata", "golden", tt.golden)
			if *update {
				if err := os.WriteFile(path, []byte(stdout), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if stdout != string(want) {
				t.Errorf("gotune %s: output differs from %s:\n--- got\n%s\n--- want\n%s", strings.Join(tt.args, " "), path, stdout, want)
			}
			switch filepath.Ext(tt.golden) {
			case ".json":
				if !json.Valid([]byte(stdout)) {
					t.Errorf("not one JSON document:\n%s", stdout)
				}
			case ".csv":
				if _, err := csv.NewReader(strings.NewReader(stdout)).ReadAll(); err != nil {
					t.Errorf("not CSV: %v", err)
				}
			}
		})
	}
}

func TestResultsCommandErrors(t *testing.T) {
	db := resultsFixture(t)
	tests := []struct {
		name     string
		args     []string
		code     int
		inStderr []string
	}{
		{"query that writes", []string{"query", "DELETE FROM reports"}, 1, []string{"readonly"}},
		{"query that writes in a CTE", []string{"query", "WITH x AS (SELECT 1) UPDATE trials SET status = 'X'"}, 1, []string{"readonly"}},
		{"query that attaches", []string{"query", "ATTACH 'x.db' AS x"}, 1, []string{"attached"}},
		{"query that changes the schema version", []string{"query", "PRAGMA user_version = 99"}, 1, []string{"readonly"}},
		{"query that changes the journal mode", []string{"query", "PRAGMA journal_mode = DELETE"}, 1, []string{"queries are read-only"}},
		{"query that vacuums", []string{"query", "VACUUM"}, 1, []string{"queries are read-only"}},
		{"bad SQL", []string{"query", "SELEC 1"}, 1, []string{"syntax error"}},
		{"unknown table", []string{"query", "SELECT * FROM nope"}, 1, []string{"no such table"}},
		{"query with two formats", []string{"query", "--json", "--csv", "SELECT 1"}, 2, []string{"--json and --csv"}},
		{"query without SQL", []string{"query"}, 2, []string{"takes one argument"}},
		{"show of a missing trial", []string{"show", "digits", "9"}, 2, []string{"trial 9", "not found"}},
		{"show of a trial that is no number", []string{"show", "digits", "x"}, 2, []string{"trial number"}},
		{"show with three arguments", []string{"show", "digits", "1", "2"}, 2, []string{"two arguments"}},
		{"trials with an unknown status", []string{"trials", "digits", "--status", "done"}, 2, []string{"DONE", "TERMINATED"}},
		{"trials with a negative limit", []string{"trials", "digits", "--limit", "-1"}, 2, []string{"--limit"}},
		{"trials with a negative offset", []string{"trials", "digits", "--offset", "-1"}, 2, []string{"--offset"}},
		{"export without a format", []string{"export", "digits"}, 2, []string{"--format csv"}},
		{"export of a missing experiment", []string{"export", "nope", "--format", "json"}, 2, []string{`"nope"`, "not found"}},
		{"best before any report", []string{"best", "empty"}, 2, []string{"no trial has reported"}},
		{"ls with an argument", []string{"ls", "x"}, 2, []string{"no arguments"}},
	}
	ctx := context.Background()
	w, err := storage.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.CreateExperiment(ctx, "empty", "m", "min", nil); err != nil {
		t.Fatal(err)
	}
	w.Close()
	before := fileSum(t, db)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(append(tt.args, "--db", db)...)
			if code != tt.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.code, stderr)
			}
			if tt.code == 1 && stdout != "" {
				t.Errorf("a failed query printed:\n%s", stdout)
			}
			for _, s := range tt.inStderr {
				if !strings.Contains(stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, stderr)
				}
			}
		})
	}
	if after := fileSum(t, db); after != before {
		t.Error("the results commands changed the database file")
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(db), "x.db")); err == nil {
		t.Error("query ATTACH created a file")
	}
}

// fileSum is the database file's content with its WAL, for comparison.
func fileSum(t *testing.T, path string) string {
	t.Helper()
	var b bytes.Buffer
	for _, p := range []string{path, path + "-wal"} {
		data, err := os.ReadFile(p)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		b.Write(data)
	}
	return b.String()
}
