package tuner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"sync"
	"testing"

	"github.com/gotune/gotune/search"
	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/trainer"
)

// resumeGate makes a sweep of several trials at a time deterministic:
// trial n reports only once the tuner has ended trial n-1, so trials end
// in trial order and each suggestion sees the same finished trials in
// every run. It outlives the runs of one experiment (an interrupted run
// and the runs that resume it), as the trials' ends do.
//
// An interrupted run's trials report nothing after its moment (halt),
// as if the run had stopped them at once: a run records the reports its
// workers make until they notice the stop, so a trial let through the
// gate then could end, and open the gate for the next, in some runs and
// not others, and the run that resumes would suggest with more trials
// finished than an undisturbed one had.
type resumeGate struct {
	mu    sync.Mutex
	ended map[int]chan struct{}
	// halted is closed at the current run's moment; nil (never closed)
	// for a run without one.
	halted chan struct{}
}

func newResumeGate() *resumeGate { return &resumeGate{ended: map[int]chan struct{}{}} }

func (g *resumeGate) ch(trial int) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.ended[trial]
	if !ok {
		c = make(chan struct{})
		g.ended[trial] = c
	}
	return c
}

func (g *resumeGate) end(trial int) {
	c := g.ch(trial)
	select {
	case <-c:
	default:
		close(c)
	}
}

// startRun begins a run that halt will interrupt.
func (g *resumeGate) startRun() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.halted = make(chan struct{})
}

// halt marks the current run's moment: its trials report no more.
// Halting again is harmless.
func (g *resumeGate) halt() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.halted:
	default:
		close(g.halted)
	}
}

// train reports a score of the configuration three times, the last one
// its value, after the previous trial has ended, unless its run is
// halted first.
func (g *resumeGate) train(ctx context.Context, w *trainer.Worker) error {
	g.mu.Lock()
	halted := g.halted
	g.mu.Unlock()
	// stopped waits for the run's stop once it is halted.
	stopped := func() error {
		select {
		case <-halted:
			<-ctx.Done()
			return ctx.Err()
		default:
			return ctx.Err()
		}
	}
	if n := w.Trial(); n > 1 {
		select {
		case <-g.ch(n - 1):
		case <-halted:
		case <-ctx.Done():
		}
	}
	v, aux := resumeScore(w.Config()), resumeAux(w.Config())
	for step := 1; step <= 3; step++ {
		if err := stopped(); err != nil {
			return err
		}
		if err := w.Report(ctx, map[string]float64{"loss": v * (1 + 1/float64(step)), "aux": aux}); err != nil {
			return err
		}
	}
	return nil
}

// resumeScore is lowest near x = 0.3, lr = 1e-2, n = 3 and c = "b".
func resumeScore(cfg map[string]any) float64 {
	num := func(k string) float64 {
		switch v := cfg[k].(type) {
		case float64:
			return v
		case int64:
			return float64(v)
		}
		return 0
	}
	v := math.Pow(num("x")-0.3, 2) + 0.1*math.Pow(math.Log10(num("lr"))+2, 2) + 0.05*math.Abs(num("n")-3)
	if c, ok := cfg["c"]; ok && c != "b" {
		v += 0.3
	}
	return v
}

// resumeAux is a second objective, at odds with resumeScore: lowest near
// x = -0.5.
func resumeAux(cfg map[string]any) float64 {
	x, _ := cfg["x"].(float64)
	return math.Pow(x+0.5, 2)
}

// interruptAt is a moment to interrupt a run at: when the tuner has
// ended trial end, or when it gets a report of trial report.
type interruptAt struct{ end, report int }

func (p interruptAt) String() string {
	if p.end > 0 {
		return fmt.Sprintf("end of trial %d", p.end)
	}
	return fmt.Sprintf("a report of trial %d", p.report)
}

// interrupter is the observer of one run: it opens the gate as trials
// end and cancels the run at its moment.
type interrupter struct {
	gate   *resumeGate
	at     interruptAt
	cancel context.CancelFunc
}

func (o *interrupter) OnReport(trial int, _ trainer.Result) {
	if trial == o.at.report {
		o.gate.halt()
		o.cancel()
	}
}

func (o *interrupter) OnTrialEnd(trial int, _ string, _ error) {
	if trial == o.at.end {
		o.gate.halt()
		o.cancel()
	}
	o.gate.end(trial)
}

// searcherCase is a searcher to resume, and what a resume must keep.
type searcherCase struct {
	name      string
	algorithm string
	space     *searchspace.Space
	samples   int
	// custom builds a searcher of the test's own; nil for the algorithm's.
	custom func(seed int64) search.Searcher
	// exactWhenConcurrent: the resumed sweep suggests what an undisturbed
	// one does also when trials run 3 at a time, not only one at a time.
	exactWhenConcurrent bool
	// points are the sweep's points_to_evaluate.
	points []map[string]any
	// multi makes the sweep minimise loss and aux.
	multi bool
}

// runSweep runs a sweep to its end through the interruptions and returns
// the configuration of every trial, as recorded.
func runSweep(t *testing.T, sc searcherCase, concurrent int, stops []interruptAt) []map[string]any {
	t.Helper()
	cfg := Config{
		Name:      "resume",
		Storage:   filepath.Join(t.TempDir(), "gotune.db"),
		Seed:      5,
		Objective: Objective{Metric: "loss", Mode: "min"},
		Search: SearchConfig{Algorithm: sc.algorithm, NumSamples: sc.samples, MaxConcurrent: concurrent, Space: sc.space,
			PointsToEvaluate: sc.points},
		Trainer: trainer.Config{Scaling: trainer.ScalingConfig{NumWorkers: 1, CPUsPerWorker: 0.01}},
	}
	if sc.multi {
		cfg.Objective = Objective{Metrics: []string{"loss", "aux"}}
	}
	gate := newResumeGate()
	fit := func(at interruptAt) (*Result, error) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		gate.startRun()
		opts := []Option{WithTrainFunc(gate.train), WithObserver(&interrupter{gate: gate, at: at, cancel: cancel})}
		if sc.custom != nil {
			opts = append(opts, WithSearcher(sc.custom(cfg.Seed)))
		}
		tu, err := New(cfg, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return tu.Fit(ctx)
	}
	var res *Result
	for _, at := range stops {
		r, err := fit(at)
		if err == nil {
			// The moment had passed: an interrupted run records the
			// reports its trials make until they notice, so the last of
			// them may have run out the sweep.
			res = r
			break
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the run interrupted at %s: %v, want it interrupted", at, err)
		}
	}
	if res == nil {
		r, err := fit(interruptAt{})
		if err != nil {
			t.Fatalf("the last run: %v", err)
		}
		res = r
	}
	var cfgs []map[string]any
	for i, tr := range res.Trials {
		if tr.Number != i+1 {
			t.Fatalf("trial %d is numbered %d", i+1, tr.Number)
		}
		cfgs = append(cfgs, tr.Params)
	}
	return cfgs
}

// TestResumedSearchersContinue interrupts a sweep of each searcher at
// many moments, resuming it against the same database each time, and
// compares the configurations it ran with an undisturbed sweep's: no
// configuration twice, and the very same sequence when trials run one at
// a time, and also three at a time for the searchers whose draws do not
// depend on when results arrive (random, grid, TPE, a custom searcher
// that follows the Replayer contract). CMA-ES and a custom searcher
// without Replay must at least never repeat a configuration when trials
// overlap, since the replay tells them the trials' ends in another order
// than the one they arrived in.
func TestResumedSearchersContinue(t *testing.T) {
	mixed := mustSpace(t,
		searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: -1, High: 1}},
		searchspace.Param{Name: "lr", Domain: searchspace.LogUniform{Low: 1e-4, High: 1}},
		searchspace.Param{Name: "n", Domain: searchspace.RandInt{Low: 0, High: 8}},
		searchspace.Param{Name: "c", Domain: searchspace.Choice{Values: []any{"a", "b", "c"}}},
	)
	withGrid := mustSpace(t, append(mixed.Params(),
		searchspace.Param{Name: "g", Domain: searchspace.Grid{Values: []any{int64(1), int64(2)}}})...)
	numeric := mustSpace(t,
		searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: -1, High: 1}},
		searchspace.Param{Name: "lr", Domain: searchspace.LogUniform{Low: 1e-4, High: 1}},
		searchspace.Param{Name: "n", Domain: searchspace.RandInt{Low: 0, High: 8}},
	)
	// Two points give every parameter; the others leave some to be drawn.
	points := []map[string]any{
		{"x": 0.3, "lr": 0.01, "n": int64(3), "c": "b"},
		{"c": "a"},
		{"x": -0.5, "lr": 0.1, "n": int64(7), "c": "c"},
		{"lr": 1e-3},
	}
	numericPoints := []map[string]any{{"x": 0.3, "lr": 0.01, "n": int64(3)}, {"n": int64(1)}}
	// m only with c = "b"; n only with c = "a" or "b".
	conditional := mustSpace(t,
		searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: -1, High: 1}},
		searchspace.Param{Name: "lr", Domain: searchspace.LogUniform{Low: 1e-4, High: 1}},
		searchspace.Param{Name: "c", Domain: searchspace.Choice{Values: []any{"a", "b", "c"}}},
		searchspace.Param{Name: "m", Domain: searchspace.Uniform{Low: 0, High: 1}, When: &searchspace.Condition{Param: "c", Op: "==", Values: []any{"b"}}},
		searchspace.Param{Name: "n", Domain: searchspace.RandInt{Low: 0, High: 8}, When: &searchspace.Condition{Param: "c", Op: "in", Values: []any{"a", "b"}}},
	)
	// m only in the grid's cells with g = 1.
	numericConditional := mustSpace(t, append(numeric.Params(),
		searchspace.Param{Name: "g", Domain: searchspace.Grid{Values: []any{int64(1), int64(2)}}},
		searchspace.Param{Name: "m", Domain: searchspace.Uniform{Low: 0, High: 1}, When: &searchspace.Condition{Param: "g", Op: "==", Values: []any{int64(1)}}})...)
	conditionalPoints := []map[string]any{{"c": "b", "m": 0.5}, {"c": "c"}}
	cases := []searcherCase{
		{name: "random", algorithm: "random", space: mixed, samples: 16, exactWhenConcurrent: true},
		{name: "grid", algorithm: "grid", space: withGrid, samples: 8, exactWhenConcurrent: true},
		{name: "tpe", algorithm: "tpe", space: mixed, samples: search.TPEStartupTrials + 8, exactWhenConcurrent: true},
		{name: "cmaes", algorithm: "cmaes", space: numeric, samples: 18},
		{name: "custom", space: mixed, samples: 16, exactWhenConcurrent: true,
			custom: func(seed int64) search.Searcher { return newPerturbBest(mixed, seed, false) }},
		{name: "custom_without_replay", space: mixed, samples: 16,
			custom: func(seed int64) search.Searcher { return noReplay{newPerturbBest(mixed, seed, true)} }},
		{name: "tpe_points", algorithm: "tpe", space: mixed, samples: search.TPEStartupTrials + 4, exactWhenConcurrent: true, points: points},
		{name: "random_points", algorithm: "random", space: mixed, samples: 8, exactWhenConcurrent: true, points: points},
		{name: "grid_points", algorithm: "grid", space: withGrid, samples: 4, exactWhenConcurrent: true, points: points},
		{name: "cmaes_points", algorithm: "cmaes", space: numeric, samples: 12, points: numericPoints},
		{name: "random_conditional", algorithm: "random", space: conditional, samples: 8, exactWhenConcurrent: true},
		{name: "tpe_conditional", algorithm: "tpe", space: conditional, samples: search.TPEStartupTrials + 6, exactWhenConcurrent: true, points: conditionalPoints},
		{name: "cmaes_conditional", algorithm: "cmaes", space: numericConditional, samples: 8},
		{name: "tpe_conditional_grid", algorithm: "tpe", space: numericConditional, samples: search.TPEStartupTrials/2 + 3, exactWhenConcurrent: true},
		{name: "motpe", algorithm: "tpe", space: conditional, samples: search.TPEStartupTrials + 6, exactWhenConcurrent: true, multi: true},
		{name: "nsga2", algorithm: "nsga2", space: conditional, samples: search.NSGA2PopulationSize + 6, exactWhenConcurrent: true, multi: true},
	}
	for _, sc := range cases {
		for _, concurrent := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/%d", sc.name, concurrent), func(t *testing.T) {
				want := runSweep(t, sc, concurrent, nil)
				// Moments all through the sweep: right after a trial ends and
				// before the next is suggested, and while trials run.
				var stops []interruptAt
				for n := 1; n < sc.samples*sc.space.GridSize(); n += 2 {
					stops = append(stops, interruptAt{end: n}, interruptAt{report: n + 1})
				}
				got := runSweep(t, sc, concurrent, stops)
				if len(got) != len(want) {
					t.Fatalf("%d trials after %d interruptions, an undisturbed sweep %d", len(got), len(stops), len(want))
				}
				seen := map[string]int{}
				for i, cfg := range got {
					b, _ := json.Marshal(cfg)
					if first, ok := seen[string(b)]; ok {
						t.Errorf("trial %d repeats trial %d's configuration %s", i+1, first, b)
					}
					seen[string(b)] = i + 1
				}
				checkPoints(t, sc, want)
				checkConditions(t, sc.space, want)
				if concurrent > 1 && !sc.exactWhenConcurrent {
					return
				}
				for i := range got {
					if !reflect.DeepEqual(got[i], want[i]) {
						t.Errorf("trial %d ran %v after the interruptions, %v in an undisturbed sweep", i+1, got[i], want[i])
					}
				}
			})
		}
	}
}

// perturbBest is a custom searcher: four random configurations, then the
// best finished one with x and lr perturbed. With sequential set, it
// draws from one generator for the whole sequence; otherwise each trial
// draws from TrialRand(seed, trial) and Replay only records the trial,
// as the Replayer contract suggests.
type perturbBest struct {
	space      *searchspace.Space
	seed       int64
	sequential *rand.Rand
	configs    map[int]map[string]any
	best       map[string]any
	bestScore  float64
}

func newPerturbBest(space *searchspace.Space, seed int64, sequential bool) *perturbBest {
	s := &perturbBest{space: space, seed: seed, configs: map[int]map[string]any{}, bestScore: math.Inf(1)}
	if sequential {
		s.sequential = rand.New(rand.NewPCG(uint64(seed), 0x7e57))
	}
	return s
}

func (s *perturbBest) Suggest(trial int) (map[string]any, error) {
	r := s.sequential
	if r == nil {
		r = search.TrialRand(s.seed, trial)
	}
	cfg := s.space.Sample(r)
	if s.best != nil && trial > 4 {
		for k, v := range s.best {
			cfg[k] = v
		}
		cfg["x"] = min(max(s.best["x"].(float64)+0.1*r.NormFloat64(), -1), math.Nextafter(1, 0))
		cfg["lr"] = min(max(s.best["lr"].(float64)*math.Exp(0.3*r.NormFloat64()), 1e-4), math.Nextafter(1, 0))
	}
	s.configs[trial] = cfg
	return cfg, nil
}

func (s *perturbBest) Replay(trial int, config map[string]any) error {
	s.configs[trial] = config
	return nil
}

func (s *perturbBest) OnResult(int, search.Observation) {}

func (s *perturbBest) OnTrialEnd(trial int, end search.TrialEnd) {
	cfg := s.configs[trial]
	delete(s.configs, trial)
	if end.Status != search.TrialFailed && end.Last != nil && end.Last.Score < s.bestScore {
		s.best, s.bestScore = cfg, end.Last.Score
	}
}

// noReplay hides a searcher's Replay, so that a resume takes the
// fallback: Suggest, its answer discarded.
type noReplay struct{ s *perturbBest }

func (n noReplay) Suggest(trial int) (map[string]any, error)  { return n.s.Suggest(trial) }
func (n noReplay) OnResult(trial int, obs search.Observation) { n.s.OnResult(trial, obs) }
func (n noReplay) OnTrialEnd(trial int, end search.TrialEnd)  { n.s.OnTrialEnd(trial, end) }

// checkPoints checks that the first trials of a sweep ran its points, in
// order, each with what the point gives.
func checkPoints(t *testing.T, sc searcherCase, cfgs []map[string]any) {
	t.Helper()
	for i, pt := range sc.points {
		if i >= len(cfgs) {
			t.Fatalf("%d trials for %d points", len(cfgs), len(sc.points))
		}
		cfg := search.RestoreTypes(sc.space, cfgs[i])
		for k, v := range pt {
			if cfg[k] != v {
				t.Errorf("trial %d ran %s = %v, point %d gives %v", i+1, k, cfg[k], i, v)
			}
		}
		if !sc.space.Conditional() && len(cfg) != sc.space.Len() {
			t.Errorf("trial %d ran %v, want a value for each of %d parameters", i+1, cfg, sc.space.Len())
		}
	}
}

// checkConditions checks that each configuration has exactly the
// parameters whose conditions hold in it.
func checkConditions(t *testing.T, space *searchspace.Space, cfgs []map[string]any) {
	t.Helper()
	for i, raw := range cfgs {
		cfg := search.RestoreTypes(space, raw)
		for _, p := range space.Params() {
			_, present := cfg[p.Name]
			if want := p.When == nil || p.When.Holds(cfg); present != want {
				t.Errorf("trial %d ran %v: %s present = %v, want %v", i+1, cfg, p.Name, present, want)
			}
		}
	}
}
