package tuner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotune/gotune/schedulers"
	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/workers"
)

// trialState is what the counting trainable keeps in its checkpoint: the
// last step it ran, the value it accumulated, and which trial started the
// lineage (another trial's number after a PBT exploit).
type countState struct {
	Step   int     `json:"step"`
	Value  float64 `json:"value"`
	Origin int     `json:"origin"`
}

// counting runs steps 1..n, adding gain(x) to a value each step, and
// reports loss = 1/(1+value) with a checkpoint of its state every step. It
// resumes from its checkpoint, and reports where it resumed ("start") and
// whose state it carries ("origin"). after, if not nil, runs after each
// report of rank 0, with the worker's context and the step reported.
func counting(n int, after func(ctx context.Context, w *trainer.Worker, step int)) trainer.TrainFunc {
	return func(ctx context.Context, w *trainer.Worker) error {
		st := countState{Origin: w.Trial()}
		if rd := w.ResumeDir(); rd != "" {
			data, err := os.ReadFile(filepath.Join(rd, "state.json"))
			if err != nil {
				return err
			}
			if err := json.Unmarshal(data, &st); err != nil {
				return err
			}
		}
		start := st.Step
		gain := 1 / (1 + w.Float("x", 0)*w.Float("x", 0))
		for st.Step < n {
			st.Step++
			st.Value += gain
			dir, err := w.CheckpointDir()
			if err != nil {
				return err
			}
			data, _ := json.Marshal(st)
			if err := os.WriteFile(filepath.Join(dir, "state.json"), data, 0o644); err != nil {
				return err
			}
			metrics := map[string]float64{"loss": 1 / (1 + st.Value), "step": float64(st.Step),
				"start": float64(start), "origin": float64(st.Origin)}
			if err := w.Report(ctx, metrics, trainer.WithCheckpoint(dir)); err != nil {
				return err
			}
			if after != nil && w.Rank() == 0 {
				after(ctx, w, st.Step)
			}
		}
		return nil
	}
}

func openResults(t *testing.T, cfg Config) *storage.DB {
	t.Helper()
	db, err := storage.OpenReadOnly(cfg.Storage)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestResumeContinuesAnInterruptedExperiment interrupts a sweep mid-way,
// then runs it again: finished trials are kept, interrupted ones resume
// from their checkpoints, and the searcher hands out exactly the
// configurations an uninterrupted run would have, num_samples in all.
func TestResumeContinuesAnInterruptedExperiment(t *testing.T) {
	const samples, steps = 6, 5
	cfg := testConfig(t, samples)
	cfg.Search.MaxConcurrent = 2
	cfg.Trainer.Checkpoint.NumToKeep = 2

	ctx, cancel := context.WithCancel(context.Background())
	// The run is interrupted at trial 3's second report, and trial 3 waits
	// there until its group hears: on a busy machine it would otherwise
	// report to its end meanwhile and leave nothing to resume.
	var once sync.Once
	interrupt := counting(steps, func(wctx context.Context, w *trainer.Worker, step int) {
		if w.Trial() == 3 && step == 2 {
			once.Do(cancel)
			<-wctx.Done()
		}
	})
	tu, err := New(cfg, WithTrainFunc(interrupt))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tu.Fit(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted Fit: %v, want context.Canceled", err)
	}

	tu, err = New(cfg, WithTrainFunc(counting(steps, nil)), WithResumeOnly())
	if err != nil {
		t.Fatal(err)
	}
	res, err := tu.Fit(context.Background())
	if err != nil {
		t.Fatalf("resumed Fit: %v", err)
	}

	// An uninterrupted run with the same seed, for the configurations.
	fresh := cfg
	fresh.Storage = filepath.Join(t.TempDir(), "fresh.db")
	tu, _ = New(fresh, WithTrainFunc(counting(steps, nil)))
	want, err := tu.Fit(context.Background())
	if err != nil {
		t.Fatal(err)
	}

	if len(res.Trials) != samples {
		t.Fatalf("%d trials after the resume, want exactly %d", len(res.Trials), samples)
	}
	db := openResults(t, cfg)
	resumed := 0
	for i, tr := range res.Trials {
		if tr.Number != i+1 || tr.Status != storage.TrialTerminated || tr.Iterations != steps {
			t.Errorf("trial %d: number %d, %s, %d iterations; want %d, TERMINATED, %d", i+1, tr.Number, tr.Status, tr.Iterations, i+1, steps)
		}
		if !reflect.DeepEqual(tr.Params, want.Trials[i].Params) {
			t.Errorf("trial %d ran %v, an uninterrupted run %v", tr.Number, tr.Params, want.Trials[i].Params)
		}
		reps, err := db.Reports(context.Background(), cfg.Name, tr.Number)
		if err != nil {
			t.Fatal(err)
		}
		for j, r := range reps {
			if r.Iteration != j+1 || r.Metrics["step"] != float64(j+1) {
				t.Errorf("trial %d report %d: iteration %d, step %v", tr.Number, j+1, r.Iteration, r.Metrics["step"])
			}
			if r.Metrics["start"] > 0 {
				resumed++
			}
		}
		if last := reps[len(reps)-1].Metrics["loss"]; last != *want.Trials[i].LastMetric {
			t.Errorf("trial %d ends with loss %v, an uninterrupted run with %v", tr.Number, last, *want.Trials[i].LastMetric)
		}
	}
	if resumed == 0 {
		t.Error("no trial resumed from a checkpoint")
	}
}

func TestResumeRefusals(t *testing.T) {
	cfg := testConfig(t, 1)
	tu, _ := New(cfg, WithTrainFunc(quadratic), WithResumeOnly())
	if _, err := tu.Fit(context.Background()); !errors.Is(err, ErrNothingToResume) {
		t.Errorf("resume of a missing experiment: %v, want ErrNothingToResume", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancelling := func(c context.Context, w *trainer.Worker) error {
		cancel()
		<-c.Done()
		return c.Err()
	}
	tu, _ = New(cfg, WithTrainFunc(cancelling))
	if _, err := tu.Fit(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted Fit: %v", err)
	}
	changed := cfg
	changed.Objective.Mode = "max"
	tu, _ = New(changed, WithTrainFunc(quadratic))
	if _, err := tu.Fit(context.Background()); !errors.Is(err, ErrExperimentExists) {
		t.Errorf("resume with a changed objective: %v, want ErrExperimentExists", err)
	}
	// Where results go, and how many trials run at once, may change.
	moved := cfg
	moved.Search.MaxConcurrent = 1
	tu, _ = New(moved, WithTrainFunc(quadratic))
	if _, err := tu.Fit(context.Background()); err != nil {
		t.Errorf("resume with another max_concurrent: %v", err)
	}
}

// TestASHAPromotesFromCheckpoints runs ASHA in promote mode: trials pause
// at rungs, the best are promoted and resume from their checkpoints, and
// every decision is in the trials' history with its rung and cutoff.
func TestASHAPromotesFromCheckpoints(t *testing.T) {
	cfg := testConfig(t, 9)
	cfg.Search.MaxConcurrent = 3
	cfg.Trainer.Scaling.NumWorkers = 1
	cfg.Trainer.Checkpoint.NumToKeep = 1
	cfg.Scheduler = schedulers.Config{Kind: "asha", Mode: "promote", MaxT: 9, GracePeriod: 1, ReductionFactor: 3}
	tu, err := New(cfg, WithTrainFunc(counting(9, nil)))
	if err != nil {
		t.Fatal(err)
	}
	res, err := tu.Fit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	db := openResults(t, cfg)
	spent, promoted, reachedMax := 0, 0, 0
	for _, tr := range res.Trials {
		spent += tr.Iterations
		if tr.Status == storage.TrialPaused || tr.Status == storage.TrialRunning {
			t.Errorf("trial %d ended %s", tr.Number, tr.Status)
		}
		if tr.Iterations == 9 {
			reachedMax++
			if tr.Status != storage.TrialTerminated {
				t.Errorf("trial %d reached max_t but is %s, want TERMINATED", tr.Number, tr.Status)
			}
		}
		evs, err := db.Events(context.Background(), cfg.Name, tr.Number)
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]int{}
		for _, e := range evs {
			kinds[e.Kind]++
			if e.Kind == storage.EventDecision && e.Message == "" {
				t.Errorf("trial %d: a decision event without a reason", tr.Number)
			}
		}
		if kinds[storage.EventPromotion] > 0 {
			promoted++
			reps, _ := db.Reports(context.Background(), cfg.Name, tr.Number)
			for j, r := range reps {
				if r.Iteration != j+1 || r.Metrics["step"] != float64(j+1) {
					t.Errorf("promoted trial %d: report %d is iteration %d at step %v", tr.Number, j+1, r.Iteration, r.Metrics["step"])
				}
			}
			if reps[len(reps)-1].Metrics["start"] == 0 {
				t.Errorf("promoted trial %d did not resume from its checkpoint", tr.Number)
			}
			// Each start of its group keeps its own worker record.
			ws, err := db.Workers(context.Background(), cfg.Name, tr.Number)
			if err != nil {
				t.Fatal(err)
			}
			var attempts, want []int
			for _, w := range ws {
				attempts = append(attempts, w.Attempt)
			}
			for i := range kinds[storage.EventPromotion] + 1 {
				want = append(want, i)
			}
			if !slices.Equal(attempts, want) {
				t.Errorf("promoted trial %d: workers of attempts %v, want one of each of its %d starts", tr.Number, attempts, len(want))
			}
		}
		if kinds[storage.EventPromotion] > kinds[storage.EventPause] {
			t.Errorf("trial %d promoted %d times after %d pauses", tr.Number, kinds[storage.EventPromotion], kinds[storage.EventPause])
		}
	}
	if promoted == 0 || reachedMax == 0 {
		t.Errorf("%d trials promoted, %d reached max_t; want some of each", promoted, reachedMax)
	}
	if spent >= 9*9 {
		t.Errorf("ASHA spent %d iterations, as many as FIFO's %d", spent, 9*9)
	}
	var data map[string]any
	rows, err := db.Query(context.Background(), `SELECT data_json FROM events WHERE kind = 'decision' AND data_json LIKE '%cutoff%' LIMIT 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		rows.Scan(&s)
		json.Unmarshal([]byte(s), &data)
	}
	rows.Close()
	if data["rung"] == nil || data["cutoff"] == nil {
		t.Errorf("no decision event records a rung and a cutoff: %v", data)
	}
}

// TestPBTExploitCopiesTheCheckpoint runs Population Based Training where
// only exploiting reaches the target: trials with a poor x gain little each
// step, so a bottom trial must take over a top trial's accumulated value.
// The copied checkpoint is checked by its content: the state a trial
// resumes with after an exploit is a state the population reported, not
// its own.
func TestPBTExploitCopiesTheCheckpoint(t *testing.T) {
	cfg := testConfig(t, 4)
	cfg.Search.MaxConcurrent = 4 // the whole population at once
	cfg.Trainer.Scaling.NumWorkers = 1
	cfg.Trainer.Checkpoint.NumToKeep = 2
	cfg.Scheduler = schedulers.Config{Kind: "pbt", PerturbationInterval: 2, QuantileFraction: 0.5}
	// Paced steps keep the four trials running side by side, as PBT's
	// population must be.
	paced := counting(8, func(context.Context, *trainer.Worker, int) { time.Sleep(15 * time.Millisecond) })
	tu, err := New(cfg, WithTrainFunc(paced), WithSearcher(fixedSearcher{
		{"x": 0.0, "steps": int64(8)}, {"x": 3.0, "steps": int64(8)}, {"x": 0.1, "steps": int64(8)}, {"x": 3.0, "steps": int64(8)},
	}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := tu.Fit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	db := openResults(t, cfg)
	ctx := context.Background()
	reports := map[int][]storage.Report{}
	for _, tr := range res.Trials {
		reports[tr.Number], _ = db.Reports(ctx, cfg.Name, tr.Number)
	}
	exploited := 0
	for _, tr := range res.Trials {
		evs, _ := db.Events(ctx, cfg.Name, tr.Number)
		var donors []int
		for _, e := range evs {
			var d map[string]any
			json.Unmarshal(e.Data, &d)
			if f, ok := d["exploit_from"].(float64); ok {
				donors = append(donors, int(f))
			}
		}
		// An exploit takes an iteration number: the first report after
		// each gap resumes from the copied state.
		reps := reports[tr.Number]
		var resumed []storage.Report
		for k := 1; k < len(reps); k++ {
			if reps[k].Iteration == reps[k-1].Iteration+2 {
				resumed = append(resumed, reps[k])
			}
		}
		// The last exploit may copy a donor that had run all its steps:
		// the trial then has nothing left to report.
		if len(resumed) != len(donors) && len(resumed) != len(donors)-1 {
			t.Errorf("trial %d: %d exploits decided, %d resumed after one", tr.Number, len(donors), len(resumed))
			continue
		}
		for k, r := range resumed {
			exploited++
			start, origin := r.Metrics["start"], r.Metrics["origin"]
			// The donor's latest checkpoint may itself be a copy it took
			// over, so the state is one some trial of the lineage reported.
			found := false
			for _, reps := range reports {
				for _, d := range reps {
					found = found || d.Metrics["step"] == start && d.Metrics["origin"] == origin
				}
			}
			if !found || start == 0 {
				t.Errorf("trial %d resumed after exploiting trial %d from step %v of trial %v's lineage, a state no trial reported", tr.Number, donors[k], start, origin)
			}
		}
		if len(donors) > 0 && tr.Params["x"] == 3.0 {
			t.Errorf("trial %d exploited trials %v but kept its config %v", tr.Number, donors, tr.Params)
		}
	}
	if exploited == 0 {
		t.Error("no trial exploited another")
	}
	// x = 3 alone gains 0.1 a step, 0.8 in 8 steps: a loss of 1/1.8 at
	// best. Trials 2 and 4 start with x = 3; in the bottom half, they must
	// reach a better loss by exploiting.
	for _, n := range []int{2, 4} {
		if best := *res.Trials[n-1].BestMetric; best >= 1/1.8 {
			t.Errorf("trial %d (x = 3 at first): best loss %v, no better than it can do alone", n, best)
		}
	}
}

func TestWorkersAreRecorded(t *testing.T) {
	cfg := testConfig(t, 2)
	tu, _ := New(cfg, WithTrainFunc(quadratic))
	if _, err := tu.Fit(context.Background()); err != nil {
		t.Fatal(err)
	}
	db := openResults(t, cfg)
	ws, err := db.Workers(context.Background(), cfg.Name, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 2 {
		t.Fatalf("trial 1 has %d worker records, want 2: %+v", len(ws), ws)
	}
	for _, w := range ws {
		if w.Status != trainer.WorkerExited || w.StepRate <= 0 || w.Node == "" {
			t.Errorf("worker %+v: want EXITED with a step rate on a named node", w)
		}
	}
}

// fakeGPUs reads the same utilisation of every declared GPU.
// fakeGPUs reads three GPUs of one node, GPU i at 40+i % utilisation.
type fakeGPUs struct{ node string }

func (f fakeGPUs) ReadGPUs() ([]workers.GPUSample, error) {
	now := time.Now()
	var out []workers.GPUSample
	for i := range 3 {
		out = append(out, workers.GPUSample{Time: now, Node: f.node, GPU: fmt.Sprint(i), Utilization: 40 + float64(i),
			HasUtilization: true, MemoryUsed: 1 << 30, MemoryTotal: 8 << 30})
	}
	return out, nil
}

func TestGPUSamplesAreTiedToWorkers(t *testing.T) {
	cfg := testConfig(t, 1)
	cfg.Resources = workers.Declared{CPUs: 4, GPUs: 3}
	cfg.Trainer.Scaling.GPUsPerWorker = 0.5
	slow := func(ctx context.Context, w *trainer.Worker) error {
		for s := 1; s <= 6; s++ {
			time.Sleep(40 * time.Millisecond)
			if err := w.Report(ctx, map[string]float64{"loss": 1 / float64(s)}); err != nil {
				return err
			}
		}
		return nil
	}
	tu, err := New(cfg, WithTrainFunc(slow), WithGPUSampling(fakeGPUs{node: "node0"}, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tu.Fit(context.Background()); err != nil {
		t.Fatal(err)
	}
	db := openResults(t, cfg)
	samples, err := db.ResourceSamples(context.Background(), cfg.Name, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	ws, _ := db.Workers(context.Background(), cfg.Name, 1)
	ids := map[int64]bool{}
	for _, w := range ws {
		ids[w.ID] = true
	}
	// The two workers hold half of a device each, on two distinct devices
	// (a group's workers take devices none of the others use while there
	// are enough); the third GPU is idle and never sampled. Each sampled
	// GPU belongs to one worker, and no worker to two GPUs.
	tied := 0
	workerOf, gpuOf := map[int]int64{}, map[int64]int{}
	for _, s := range samples {
		if s.Util != 40+float64(s.GPU) {
			t.Errorf("sample %+v: want GPU %d's own utilisation %d%%", s, s.GPU, 40+s.GPU)
		}
		if !ids[s.WorkerID] {
			continue
		}
		tied++
		if w, ok := workerOf[s.GPU]; ok && w != s.WorkerID {
			t.Errorf("GPU %d sampled for workers %d and %d", s.GPU, w, s.WorkerID)
		}
		if g, ok := gpuOf[s.WorkerID]; ok && g != s.GPU {
			t.Errorf("worker %d sampled on GPUs %d and %d", s.WorkerID, g, s.GPU)
		}
		workerOf[s.GPU], gpuOf[s.WorkerID] = s.WorkerID, s.GPU
	}
	if len(samples) == 0 || tied == 0 {
		t.Errorf("%d samples, %d tied to a recorded worker", len(samples), tied)
	}
	if len(workerOf) != 2 {
		t.Errorf("samples of GPUs %v, want two (one a worker; the idle one never)", workerOf)
	}
}

// TestNewExperimentSetsAsideFoldersItDoesNotOwn runs an experiment, then
// runs one of the same name against a new database in the same folder (as
// after deleting the first database): the new one runs from scratch, and
// the first one's checkpoints are kept under another name. A run of the
// name with a third database while a run holds the folders is refused.
func TestNewExperimentSetsAsideFoldersItDoesNotOwn(t *testing.T) {
	const samples, steps = 2, 3
	first := testConfig(t, samples)
	first.Trainer.Checkpoint.NumToKeep = 1
	mustFit(t, first, WithTrainFunc(counting(steps, nil)))

	second := first
	second.Storage = filepath.Join(filepath.Dir(first.Storage), "second.db")
	res := mustFit(t, second, WithTrainFunc(counting(steps, nil)))
	for _, tr := range res.Trials {
		if tr.Status != storage.TrialTerminated || tr.Iterations != steps {
			t.Errorf("trial %d of the new experiment: %s after %d iterations (%s), want %s after %d",
				tr.Number, tr.Status, tr.Iterations, tr.Error, storage.TrialTerminated, steps)
		}
	}
	root := filepath.Join(filepath.Dir(first.Storage), "checkpoints")
	aside, err := filepath.Glob(filepath.Join(root, first.Name+".old-*", "trial_1", "checkpoint_*.json"))
	if err != nil || len(aside) == 0 {
		t.Errorf("the first experiment's checkpoints were not kept aside: %v, %v", aside, err)
	}
	db := openResults(t, second)
	evs, err := db.Events(context.Background(), second.Name, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 || evs[0].Kind != "set_aside" || !strings.Contains(evs[0].Message, ".old-") {
		t.Errorf("the new experiment's first event: got %+v, want set_aside naming where the folders went", evs)
	}

	lock, err := storage.LockFolder(filepath.Join(root, first.Name))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	third := first
	third.Storage = filepath.Join(filepath.Dir(first.Storage), "third.db")
	tu, err := New(third, WithTrainFunc(counting(steps, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tu.Fit(context.Background()); !errors.Is(err, storage.ErrExperimentRunning) {
		t.Errorf("a run while another database's run holds the folders: got %v, want ErrExperimentRunning", err)
	}
}
