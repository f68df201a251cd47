package storage

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

func TestReportsUpdateTrialSummary(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []string{"min", "max"} {
		t.Run(mode, func(t *testing.T) {
			db := mustOpen(t)
			exp, err := db.CreateExperiment(ctx, "e", "loss", mode, map[string]any{"k": 1})
			if err != nil {
				t.Fatal(err)
			}
			tr, err := db.CreateTrial(ctx, exp.ID, 1, map[string]any{"lr": 0.1})
			if err != nil {
				t.Fatal(err)
			}
			values := []*float64{ptr(3), ptr(1), nil, ptr(2)}
			for i, v := range values {
				m := map[string]float64{"epoch": float64(i + 1)}
				if v != nil {
					m["loss"] = *v
				}
				if err := db.AddReport(ctx, tr.ID(), Report{Iteration: i + 1, Time: time.Now(), Metrics: m}, v); err != nil {
					t.Fatal(err)
				}
			}
			got, err := db.Trials(ctx, "e")
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 {
				t.Fatalf("got %d trials, want 1", len(got))
			}
			wantBest := 1.0
			if mode == "max" {
				wantBest = 3
			}
			g := got[0]
			if g.Iterations != 4 || *g.LastMetric != 2 || *g.BestMetric != wantBest {
				t.Errorf("trial summary: iterations %d last %v best %v, want 4, 2, %v", g.Iterations, *g.LastMetric, *g.BestMetric, wantBest)
			}
			reps, err := db.Reports(ctx, "e", 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(reps) != 4 || reps[3].Metrics["loss"] != 2 {
				t.Errorf("reports: got %+v", reps)
			}
		})
	}
}

func TestReportIterationsMustIncrease(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	f := newFixture(t, db, "min", 1)
	f.report(t, 1, 1, 0.5)
	f.report(t, 1, 3, 0.4)
	for _, it := range []int{3, 2, 1} {
		loss := 0.1
		err := db.AddReport(ctx, f.trials[0].ID(), Report{Iteration: it, Metrics: map[string]float64{"loss": loss}}, &loss)
		if err == nil || !strings.Contains(err.Error(), "already reported") {
			t.Errorf("iteration %d after 3: got %v", it, err)
		}
	}
	loss := 0.1
	if err := db.AddReport(ctx, 99, Report{Iteration: 1}, &loss); err == nil {
		t.Error("a report of a missing trial was accepted")
	}
	reps, err := db.Reports(ctx, "e", 1)
	if err != nil || len(reps) != 2 || reps[1].Iteration != 3 {
		t.Errorf("reports: %+v %v", reps, err)
	}
	tr, _ := db.Trial(ctx, "e", 1)
	if tr.Iterations != 3 || *tr.BestMetric != 0.4 {
		t.Errorf("trial: %+v", tr)
	}
}

func TestBestTrialAndViews(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	exp, _ := db.CreateExperiment(ctx, "e", "acc", "max", nil)
	for n, acc := range []float64{0.5, 0.9, 0.7} {
		tr, err := db.CreateTrial(ctx, exp.ID, n+1, map[string]any{"n": n})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.AddReport(ctx, tr.ID(), Report{Iteration: 1, Time: time.Now(), Metrics: map[string]float64{"acc": acc}}, &acc); err != nil {
			t.Fatal(err)
		}
		if err := db.FinishTrial(ctx, tr.ID(), TrialTerminated, ""); err != nil {
			t.Fatal(err)
		}
	}
	best, err := db.BestTrial(ctx, "e")
	if err != nil {
		t.Fatal(err)
	}
	if best.Number != 2 {
		t.Errorf("best trial: got %d, want 2", best.Number)
	}
	var n int
	if err := db.r.QueryRow(`SELECT count(*) FROM reports_v WHERE experiment = 'e'`).Scan(&n); err != nil || n != 3 {
		t.Errorf("reports_v: %d rows, err %v; want 3", n, err)
	}
	var status string
	var bestMetric float64
	err = db.r.QueryRow(`SELECT status, best_metric FROM trials_v WHERE experiment = 'e' AND trial_id = 3`).Scan(&status, &bestMetric)
	if err != nil || status != TrialTerminated || bestMetric != 0.7 {
		t.Errorf("trials_v: %s %v %v", status, bestMetric, err)
	}
	exps, err := db.Experiments(ctx)
	if err != nil || len(exps) != 1 || exps[0].Trials != 3 || *exps[0].Best != 0.9 {
		t.Errorf("experiments: %+v %v", exps, err)
	}
}

func TestLookupsOfMissingThings(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	if _, err := db.Experiment(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Experiment: got %v, want ErrNotFound", err)
	}
	if _, err := db.Trials(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Trials: got %v, want ErrNotFound", err)
	}
	exp, _ := db.CreateExperiment(ctx, "e", "m", "min", nil)
	if _, err := db.BestTrial(ctx, "e"); !errors.Is(err, ErrNotFound) {
		t.Errorf("BestTrial with no trials: got %v, want ErrNotFound", err)
	}
	if _, err := db.CreateExperiment(ctx, "e", "m", "min", nil); err == nil {
		t.Error("a second experiment of the same name was accepted")
	}
	if _, err := db.CreateTrial(ctx, exp.ID, 1, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateTrial(ctx, exp.ID, 1, nil); err == nil {
		t.Error("a duplicate trial number was accepted")
	}
}

func TestOpenRejectsForeignAndNewerFiles(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.db")
	if err := os.WriteFile(junk, []byte(strings.Repeat("not a database ", 100)), 0o644); err != nil {
		t.Fatal(err)
	}
	opens := map[string]func(string) (*DB, error){
		"Open":         func(p string) (*DB, error) { return Open(p) },
		"OpenReadOnly": OpenReadOnly,
	}
	for name, open := range opens {
		if _, err := open(junk); err == nil || !strings.Contains(err.Error(), "not a gotune results database") {
			t.Errorf("%s(junk): got %v", name, err)
		}
	}
	if _, err := OpenReadOnly(filepath.Join(dir, "missing.db")); err == nil {
		t.Error("OpenReadOnly of a missing file succeeded")
	}

	newer := filepath.Join(dir, "newer.db")
	db, err := Open(newer)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	rawExec(t, newer, "PRAGMA user_version = 999")
	for name, open := range opens {
		if _, err := open(newer); err == nil || !strings.Contains(err.Error(), "newer than this gotune") {
			t.Errorf("%s(newer): got %v", name, err)
		}
	}
}

func TestReadOnlyRefusesWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gotune.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	ro, err := OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if _, err := ro.r.Exec(`INSERT INTO experiments (name, status, metric, mode, config_json, created_at) VALUES ('x','RUNNING','m','min','{}',0)`); err == nil {
		t.Error("a read-only connection accepted an INSERT")
	}
}

// TestCloseLeavesEveryResultInTheFile closes a writer while a reader
// still has the database open, as `gotune run` with its live view does, and
// then reads a copy of the database file alone: every committed report must
// be in it, none left behind in the write-ahead log.
func TestCloseLeavesEveryResultInTheFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "gotune.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	exp, _ := db.CreateExperiment(ctx, "e", "loss", "min", nil)
	tr, _ := db.CreateTrial(ctx, exp.ID, 1, nil)
	ro, err := OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	const n = 50
	for i := 1; i <= n; i++ {
		v := float64(i)
		if err := db.AddReport(ctx, tr.ID(), Report{Iteration: i, Time: time.Now(), Metrics: map[string]float64{"loss": v}}, &v); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ro.Trials(ctx, "e"); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(t.TempDir(), "copy.db")
	if err := os.WriteFile(copied, data, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := OpenReadOnly(copied)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reps, err := c.Reports(ctx, "e", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != n {
		t.Errorf("the database file alone holds %d reports, want %d", len(reps), n)
	}
}

// TestReadersDuringWrites reads through a second, read-only handle while a
// writer commits reports, as `gotune trials` does during a sweep.
func TestReadersDuringWrites(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gotune.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exp, _ := db.CreateExperiment(ctx, "e", "loss", "min", nil)
	tr, _ := db.CreateTrial(ctx, exp.ID, 1, nil)
	ro, err := OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()

	const n = 300
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; i <= n; i++ {
			v := float64(i)
			if err := db.AddReport(ctx, tr.ID(), Report{Iteration: i, Time: time.Now(), Metrics: map[string]float64{"loss": v}}, &v); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	last := 0
	for last < n {
		ts, err := ro.Trials(ctx, "e")
		if err != nil {
			t.Fatal(err)
		}
		if ts[0].Iterations < last {
			t.Fatalf("iterations went backwards: %d after %d", ts[0].Iterations, last)
		}
		last = ts[0].Iterations
	}
	wg.Wait()
}

func TestMetricsKeepNaNAndInfinities(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	f := newFixture(t, db, "min", 1)
	m := map[string]float64{"loss": math.NaN(), "grad": math.Inf(1), "neg": math.Inf(-1), "tiny": 1e-9, "big": 1e300, `we"ird<key>`: 2}
	nan := math.NaN()
	if err := db.AddReport(ctx, f.trials[0].ID(), Report{Iteration: 1, Metrics: m}, &nan); err != nil {
		t.Fatal(err)
	}
	reps, err := db.Reports(ctx, "e", 1)
	if err != nil {
		t.Fatal(err)
	}
	got := reps[0].Metrics
	if !math.IsNaN(got["loss"]) || !math.IsInf(got["grad"], 1) || !math.IsInf(got["neg"], -1) || got["tiny"] != 1e-9 || got["big"] != 1e300 || got[`we"ird<key>`] != 2 {
		t.Errorf("metrics came back as %v", got)
	}
	tr, _ := db.Trial(ctx, "e", 1)
	if tr.BestMetric != nil || tr.LastMetric != nil || tr.Iterations != 1 {
		t.Errorf("a NaN objective counted: %+v", tr)
	}
	var tiny float64
	var grad string
	if err := db.r.QueryRow(`SELECT json_extract(metrics_json, '$.tiny'), json_extract(metrics_json, '$.grad') FROM reports`).Scan(&tiny, &grad); err != nil || tiny != 1e-9 || grad != "Infinity" {
		t.Errorf("metrics_json as SQL sees it: %v %q %v", tiny, grad, err)
	}
}

func TestEncodeMetricsMatchesEncodingJSON(t *testing.T) {
	m := map[string]float64{"a": 0, "b": -1.5, "c": 1e-7, "d": 1e21, "e": 123456789, "f": 0.1, "g": -2e-300, "h\n": 1}
	want, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if got := encodeMetrics(m); got != string(want) {
		t.Errorf("encodeMetrics:\n got %s\nwant %s", got, want)
	}
	if got := encodeMetrics(nil); got != "{}" {
		t.Errorf("encodeMetrics(nil) = %s", got)
	}
}

// FuzzMetricsRoundTrip checks that whatever metrics a trial reports come
// back from the database's JSON as they went in.
func FuzzMetricsRoundTrip(f *testing.F) {
	f.Add("loss", 0.5, "acc", math.Inf(1))
	f.Add("", math.NaN(), "\x00\"<\u2028", -1e-300)
	f.Add("a", 1e21, "b", math.Copysign(0, -1))
	f.Fuzz(func(t *testing.T, k1 string, v1 float64, k2 string, v2 float64) {
		if !utf8.ValidString(k1) || !utf8.ValidString(k2) {
			t.Skip("JSON keys are UTF-8; invalid bytes become U+FFFD, as with encoding/json")
		}
		m := map[string]float64{k1: v1, k2: v2}
		s := encodeMetrics(m)
		if !json.Valid([]byte(s)) {
			t.Fatalf("not JSON: %s", s)
		}
		got, err := decodeMetrics(s)
		if err != nil {
			t.Fatalf("decode %s: %v", s, err)
		}
		for k, v := range m {
			g, ok := got[k]
			if !ok || !(g == v || math.IsNaN(g) && math.IsNaN(v)) {
				t.Fatalf("%q: %v came back as %v (%s)", k, v, g, s)
			}
		}
	})
}
