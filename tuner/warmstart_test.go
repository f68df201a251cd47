package tuner

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gotune/gotune/pareto"
	"github.com/gotune/gotune/search"
	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
)

// warmSpace is the space of the warm-start tests.
func warmSpace(t *testing.T, xLow float64, extra ...searchspace.Param) *searchspace.Space {
	return mustSpace(t, append([]searchspace.Param{
		{Name: "x", Domain: searchspace.Uniform{Low: xLow, High: 1}},
		{Name: "lr", Domain: searchspace.LogUniform{Low: 1e-4, High: 1}},
		{Name: "c", Domain: searchspace.Choice{Values: []any{"a", "b", "c"}}},
	}, extra...)...)
}

// fitUntil runs cfg against db with its own gate until the tuner has
// ended trial stop (0: to its end) and returns the recorded trials.
func fitUntil(t *testing.T, db *storage.DB, cfg Config, gate *resumeGate, stop int) []*storage.Trial {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gate.startRun()
	tu, err := New(cfg, WithDB(db), WithTrainFunc(gate.train),
		WithObserver(&interrupter{gate: gate, at: interruptAt{end: stop}, cancel: cancel}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := tu.Fit(ctx)
	if stop > 0 && !errors.Is(err, context.Canceled) || stop == 0 && err != nil {
		t.Fatalf("%s, interrupted after trial %d: %v", cfg.Name, stop, err)
	}
	if res == nil {
		t.Fatalf("%s: no result", cfg.Name)
	}
	return res.Trials
}

func warmConfig(t *testing.T, name, algorithm string, samples int, space *searchspace.Space) Config {
	return Config{
		Name: name, Seed: 3,
		Objective: Objective{Metric: "loss", Mode: "min"},
		Search:    SearchConfig{Algorithm: algorithm, NumSamples: samples, MaxConcurrent: 1, Space: space},
		Trainer:   trainer.Config{Scaling: trainer.ScalingConfig{NumWorkers: 1, CPUsPerWorker: 0.01}},
	}
}

func openDB(t *testing.T) *storage.DB {
	t.Helper()
	db, err := storage.Open(filepath.Join(t.TempDir(), "gotune.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestWarmStartLearnsFromAnotherExperiment runs a random search, then a
// TPE search warm-started from it: TPE models from its first trial (a
// cold TPE draws its first ten at random), its first trials are better
// on average than the source's median, and the warm_start event says it learnt
// from all of the source's trials.
func TestWarmStartLearnsFromAnotherExperiment(t *testing.T) {
	space := warmSpace(t, -1)
	db := openDB(t)
	source := fitUntil(t, db, warmConfig(t, "source", "random", 24, space), newResumeGate(), 0)

	cold := warmConfig(t, "cold", "tpe", 3, space)
	warm := warmConfig(t, "warm", "tpe", 3, space)
	warm.Search.WarmStart = "source"
	coldTrials := fitUntil(t, db, cold, newResumeGate(), 0)
	warmTrials := fitUntil(t, db, warm, newResumeGate(), 0)

	var scores []float64
	for _, tr := range source {
		scores = append(scores, resumeScore(search.RestoreTypes(space, tr.Params)))
	}
	sort.Float64s(scores)
	median, sum := scores[len(scores)/2], 0.0
	for i, tr := range warmTrials {
		if reflect.DeepEqual(tr.Params, coldTrials[i].Params) {
			t.Errorf("trial %d ran %v with and without warm start", i+1, tr.Params)
		}
		sum += resumeScore(search.RestoreTypes(space, tr.Params))
	}
	if mean := sum / float64(len(warmTrials)); mean > median {
		t.Errorf("the warm trials score %.3f on average, worse than the median of the source's trials (%.3f)", mean, median)
	}
	t.Logf("warm trials' mean %.3f; the source's best %.3f, median %.3f", sum/float64(len(warmTrials)), scores[0], median)
	events, err := db.Events(context.Background(), "warm", 0)
	if err != nil {
		t.Fatal(err)
	}
	var data warmStartData
	for _, ev := range events {
		if ev.Kind == eventWarmStart {
			if want := `warm start: the searcher learnt from 24 of the 24 trials of "source"`; ev.Message != want {
				t.Errorf("event: got %q, want %q", ev.Message, want)
			}
			if err := json.Unmarshal(ev.Data, &data); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(data.Trials) != 24 {
		t.Errorf("the warm_start event names %d trials, want 24: %+v", len(data.Trials), data)
	}
}

// TestWarmStartSkipsWhatDoesNotFit warm-starts from an experiment of
// another space: trials whose x is outside this space's range and those
// without a value for a parameter this space adds are skipped, a
// parameter this space lacks is ignored, and the notice says so.
func TestWarmStartSkipsWhatDoesNotFit(t *testing.T) {
	db := openDB(t)
	srcSpace := warmSpace(t, -1, searchspace.Param{Name: "wd", Domain: searchspace.Uniform{Low: 0, High: 1}})
	src := fitUntil(t, db, warmConfig(t, "source", "random", 12, srcSpace), newResumeGate(), 0)
	outside := 0
	for _, tr := range src {
		if tr.Params["x"].(float64) < 0 {
			outside++
		}
	}
	if outside == 0 || outside == len(src) {
		t.Fatalf("%d of the source's %d trials have x < 0: the test needs some of each", outside, len(src))
	}
	// An experiment of a space without b, a parameter the second target adds.
	other := warmSpace(t, 0)
	fitUntil(t, db, warmConfig(t, "source2", "random", 2, other), newResumeGate(), 0)

	notices := &noticeRecorder{}
	for _, c := range []struct {
		source string
		want   string
	}{
		{"source", `warm start: the searcher learnt from ` + strconv.Itoa(12-outside) + ` of the 12 trials of "source"; skipped ` + strconv.Itoa(outside) +
			` x outside { uniform = [0.0, 1.0] }; ignored their parameters this space lacks: wd`},
		{"source2", `warm start: the searcher learnt from 0 of the 2 trials of "source2"; skipped 2 without a value for b`},
	} {
		cfg := warmConfig(t, "to_"+c.source, "tpe", 1, warmSpace(t, 0, searchspace.Param{Name: "b", Domain: searchspace.Choice{Values: []any{true, false}}}))
		if c.source == "source" {
			cfg.Search.Space = other // without b
		}
		cfg.Search.WarmStart = c.source
		gate := newResumeGate()
		tu, err := New(cfg, WithDB(db), WithTrainFunc(gate.train), WithObserver(notices))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tu.Fit(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := notices.last(); got != c.want {
			t.Errorf("warm start from %s:\n got %q\nwant %q", c.source, got, c.want)
		}
	}

	// An experiment the database does not have fails before anything runs.
	cfg := warmConfig(t, "nowhere", "tpe", 1, other)
	cfg.Search.WarmStart = "missing"
	tu, err := New(cfg, WithDB(db), WithTrainFunc(newResumeGate().train))
	if err != nil {
		t.Fatal(err)
	}
	_, err = tu.Fit(context.Background())
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Key != "search.warm_start" || !strings.Contains(err.Error(), `has no experiment "missing"`) {
		t.Errorf("warm start from a missing experiment: got %v", err)
	}
	if _, err := db.Experiment(context.Background(), "nowhere"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("the failed run created its experiment: %v", err)
	}
}

// TestWarmStartResumesWithTheSameTrials interrupts a warm-started TPE
// sweep, lets the source experiment gain trials meanwhile, and resumes
// it: the resumed sweep learns from the trials the first run learnt
// from, so it runs what an undisturbed sweep does.
func TestWarmStartResumesWithTheSameTrials(t *testing.T) {
	space := warmSpace(t, -1)
	sourceCfg := warmConfig(t, "source", "random", 24, space)
	target := warmConfig(t, "target", "tpe", 6, space)
	target.Search.WarmStart = "source"

	// Undisturbed: the source has its first 12 trials when the target runs.
	dbA := openDB(t)
	fitUntil(t, dbA, sourceCfg, newResumeGate(), 12)
	want := fitUntil(t, dbA, target, newResumeGate(), 0)

	dbB := openDB(t)
	srcGate, gate := newResumeGate(), newResumeGate()
	fitUntil(t, dbB, sourceCfg, srcGate, 12)
	fitUntil(t, dbB, target, gate, 2)
	fitUntil(t, dbB, sourceCfg, srcGate, 0) // the source ends with 24 trials
	got := fitUntil(t, dbB, target, gate, 0)
	if len(got) != len(want) {
		t.Fatalf("%d trials after the interruption, %d undisturbed", len(got), len(want))
	}
	for i := range got {
		if !reflect.DeepEqual(got[i].Params, want[i].Params) {
			t.Errorf("trial %d ran %v after the interruption, %v undisturbed", i+1, got[i].Params, want[i].Params)
		}
	}
}

// noticeRecorder keeps the notices a run gives.
type noticeRecorder struct{ notices []string }

func (n *noticeRecorder) OnReport(int, trainer.Result)  {}
func (n *noticeRecorder) OnTrialEnd(int, string, error) {}
func (n *noticeRecorder) OnNotice(msg string)           { n.notices = append(n.notices, msg) }
func (n *noticeRecorder) last() string {
	if len(n.notices) == 0 {
		return ""
	}
	return n.notices[len(n.notices)-1]
}

// TestWarmStartNSGA2 runs a random search of two objectives, then NSGA-II
// sweeps with and without warm start from it. A cold NSGA-II draws its
// first generation at random; warm-started from 150 trials, its first
// trials are already children of the source's best 50, so on average they
// are dominated by fewer of the source's trials than the source's median
// trial is, and the warm_start event names all 150.
func TestWarmStartNSGA2(t *testing.T) {
	space := warmSpace(t, -1)
	db := openDB(t)
	multi := func(cfg Config) Config {
		cfg.Objective = Objective{Metrics: []string{"loss", "aux"}, Modes: []string{"min", "min"}}
		return cfg
	}
	source := fitUntil(t, db, multi(warmConfig(t, "source", "random", 150, space)), newResumeGate(), 0)
	cold := fitUntil(t, db, multi(warmConfig(t, "cold", "nsga2", 6, space)), newResumeGate(), 0)
	warm := multi(warmConfig(t, "warm", "nsga2", 6, space))
	warm.Search.WarmStart = "source"
	warmTrials := fitUntil(t, db, warm, newResumeGate(), 0)

	objectives := func(tr *storage.Trial) []float64 {
		cfg := search.RestoreTypes(space, tr.Params)
		return []float64{resumeScore(cfg), resumeAux(cfg)}
	}
	var points [][]float64
	for _, tr := range source {
		points = append(points, objectives(tr))
	}
	dominatedBy := func(p []float64) int {
		n := 0
		for _, q := range points {
			if pareto.Dominates(q, p) {
				n++
			}
		}
		return n
	}
	var counts []int
	for _, p := range points {
		counts = append(counts, dominatedBy(p))
	}
	sort.Ints(counts)
	median := counts[len(counts)/2]
	mean := func(trials []*storage.Trial) float64 {
		sum := 0
		for _, tr := range trials {
			sum += dominatedBy(objectives(tr))
		}
		return float64(sum) / float64(len(trials))
	}
	for i, tr := range warmTrials {
		if reflect.DeepEqual(tr.Params, cold[i].Params) {
			t.Errorf("trial %d ran %v with and without warm start", i+1, tr.Params)
		}
	}
	t.Logf("source trials dominating a trial: the source's median %d, warm trials %.1f on average, cold %.1f", median, mean(warmTrials), mean(cold))
	if m := mean(warmTrials); m >= float64(median) {
		t.Errorf("the warm trials are dominated by %.1f of the source's trials on average, the source's median trial by %d", m, median)
	}
	events, err := db.Events(context.Background(), "warm", 0)
	if err != nil {
		t.Fatal(err)
	}
	var data warmStartData
	for _, ev := range events {
		if ev.Kind == eventWarmStart {
			if err := json.Unmarshal(ev.Data, &data); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(data.Trials) != 150 {
		t.Errorf("the warm_start event names %d trials, want 150: %+v", len(data.Trials), data)
	}
}

// TestWarmStartCMAES runs a random search of a numeric space whose
// optimum is away from the middle of its domains, then CMA-ES sweeps
// with and without warm start from it: a cold CMA-ES centres its first
// generation on the middle, a warm one on the source's best trials, so
// its first trials score better on average than the cold one's and
// than the source's median.
func TestWarmStartCMAES(t *testing.T) {
	space := mustSpace(t,
		searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: -1, High: 1}},
		searchspace.Param{Name: "lr", Domain: searchspace.LogUniform{Low: 1e-3, High: 10}},
		searchspace.Param{Name: "n", Domain: searchspace.RandInt{Low: 1, High: 16}})
	db := openDB(t)
	source := fitUntil(t, db, warmConfig(t, "source", "random", 60, space), newResumeGate(), 0)
	cold := fitUntil(t, db, warmConfig(t, "cold", "cmaes", 6, space), newResumeGate(), 0)
	warm := warmConfig(t, "warm", "cmaes", 6, space)
	warm.Search.WarmStart = "source"
	warmTrials := fitUntil(t, db, warm, newResumeGate(), 0)

	mean := func(trials []*storage.Trial) float64 {
		sum := 0.0
		for _, tr := range trials {
			sum += resumeScore(search.RestoreTypes(space, tr.Params))
		}
		return sum / float64(len(trials))
	}
	var scores []float64
	for _, tr := range source {
		scores = append(scores, resumeScore(search.RestoreTypes(space, tr.Params)))
	}
	sort.Float64s(scores)
	median := scores[len(scores)/2]
	t.Logf("first trials' mean score: warm %.3f, cold %.3f; the source's median %.3f, best %.3f", mean(warmTrials), mean(cold), median, scores[0])
	if w, c := mean(warmTrials), mean(cold); w >= c || w >= median {
		t.Errorf("the warm trials score %.3f on average, the cold ones %.3f, the source's median trial %.3f: want the warm ones best", w, c, median)
	}
}
