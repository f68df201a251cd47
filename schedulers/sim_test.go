package schedulers_test

import (
	"cmp"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/gotune/gotune/schedulers"
	"github.com/gotune/gotune/schedulers/sim"
	"github.com/gotune/gotune/searchspace"
)

// curveConfigs draws n configurations of the synthetic curve with seed.
func curveConfigs(n int, seed uint64) func(int) map[string]any {
	space := sim.CurveSpace()
	rng := rand.New(rand.NewPCG(seed, 1))
	cfgs := make([]map[string]any, n)
	for i := range cfgs {
		cfgs[i] = space.Sample(rng)
	}
	return func(trial int) map[string]any { return cfgs[trial-1] }
}

func simulate(t *testing.T, s schedulers.Scheduler, o sim.Options) *sim.Run {
	t.Helper()
	run, err := sim.Simulate(s, o)
	if err != nil {
		t.Fatal(err)
	}
	// A trial's state counts the iterations it trained: a trial resumed
	// from the wrong checkpoint reports out of step.
	if _, isCurve := o.Model.(sim.Curve); isCurve {
		for _, r := range run.Reports {
			if r.State[0] != float64(r.Iter) {
				t.Fatalf("trial %d reported iteration %d from a state that trained %g", r.Trial, r.Iter, r.State[0])
			}
		}
	}
	return run
}

func newScheduler(t *testing.T, c schedulers.Config, env schedulers.Env) schedulers.Scheduler {
	t.Helper()
	s, err := schedulers.New(c, env)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSimFIFORunsEverything(t *testing.T) {
	run := simulate(t, schedulers.FIFO{}, sim.Options{Workers: 3, NumSamples: 10, MaxIter: 27, Config: curveConfigs(10, 1), Model: sim.Curve{}})
	if run.Compute != 270 || len(run.Events) != 0 {
		t.Errorf("FIFO: compute %d with %d events, want 270 and none", run.Compute, len(run.Events))
	}
}

// ASHA's promote mode on 27 trials (rungs at 1, 3, 9; max_t 27), checked
// against the paper's rules: a trial trains past a rung only once promoted
// there, every promotion is within the rung's cutoff, the best result at
// the top rung reaches max_t once no trials are left, and the compute is a
// fraction of FIFO's. (Promotions may exceed 1/η of a rung: a promoted
// trial that later falls out of the rung's top leaves its place to
// another, as in the paper's Algorithm 2.)
func TestSimASHAPromote(t *testing.T) {
	for _, workers := range []int{1, 4, 27} {
		s := newScheduler(t, schedulers.Config{Kind: "asha", MaxT: 27, GracePeriod: 1, ReductionFactor: 3}, schedulers.Env{Metric: "loss", Checkpoints: true})
		run := simulate(t, s, sim.Options{Workers: workers, NumSamples: 27, MaxIter: 27, Config: curveConfigs(27, 2), Model: sim.Curve{}})
		score := map[[2]int]float64{} // trial, iteration → first score reported there
		for _, r := range run.Reports {
			if _, seen := score[[2]int{r.Trial, r.Iter}]; !seen {
				score[[2]int{r.Trial, r.Iter}] = r.Score
			}
		}
		promoted := map[[2]int]bool{}
		for _, e := range run.Events {
			if e.Action != schedulers.Continue || e.Rung == 0 {
				continue
			}
			promoted[[2]int{e.Trial, int(e.Rung)}] = true
			if x := score[[2]int{e.Trial, int(e.Rung)}]; !e.HasCutoff || x > e.Cutoff {
				t.Errorf("%d workers: trial %d promoted at %g with %g against cutoff %g", workers, e.Trial, e.Rung, x, e.Cutoff)
			}
		}
		bestAt9, bestTrial := math.Inf(1), 0
		for _, tr := range run.Trials {
			for _, m := range []int{1, 3, 9} {
				if tr.Iter > m && !promoted[[2]int{tr.Number, m}] {
					t.Errorf("%d workers: trial %d trained to %d without a promotion at %d", workers, tr.Number, tr.Iter, m)
				}
			}
			if x, ok := score[[2]int{tr.Number, 9}]; ok && x < bestAt9 {
				bestAt9, bestTrial = x, tr.Number
			}
		}
		if got := run.Trials[bestTrial-1].Iter; got != 27 {
			t.Errorf("%d workers: trial %d, the best at the top rung, ended at %d, want max_t", workers, bestTrial, got)
		}
		if run.Compute > 27*27/3 {
			t.Errorf("%d workers: compute %d, want at most a third of FIFO's %d", workers, run.Compute, 27*27)
		}
	}
}

// A checkpoint every other iteration: a trial paused at an odd rung goes
// back to the even iteration before it and trains it again.
func TestSimASHAPromoteSparseCheckpoints(t *testing.T) {
	s := newScheduler(t, schedulers.Config{Kind: "asha", MaxT: 27, GracePeriod: 1, ReductionFactor: 3}, schedulers.Env{Checkpoints: true})
	run := simulate(t, s, sim.Options{Workers: 4, NumSamples: 27, MaxIter: 27, CheckpointEvery: 2, Config: curveConfigs(27, 2), Model: sim.Curve{}})
	dense := newScheduler(t, schedulers.Config{Kind: "asha", MaxT: 27, GracePeriod: 1, ReductionFactor: 3}, schedulers.Env{Checkpoints: true})
	every := simulate(t, dense, sim.Options{Workers: 4, NumSamples: 27, MaxIter: 27, Config: curveConfigs(27, 2), Model: sim.Curve{}})
	if run.Compute <= every.Compute {
		t.Errorf("compute %d, want more than %d with a checkpoint every iteration: paused trials resume from older checkpoints", run.Compute, every.Compute)
	}
}

func TestSimASHAStopMode(t *testing.T) {
	s := newScheduler(t, schedulers.Config{Kind: "asha", MaxT: 27, GracePeriod: 1, ReductionFactor: 3}, schedulers.Env{})
	run := simulate(t, s, sim.Options{Workers: 4, NumSamples: 40, MaxIter: 27, Config: curveConfigs(40, 3), Model: sim.Curve{}})
	for _, e := range run.Events {
		if e.Action == schedulers.Stop && !slices.Contains([]float64{1, 3, 9, 27}, e.Rung) {
			t.Errorf("trial %d stopped at %g, not at a rung", e.Trial, e.Rung)
		}
		if e.Action == schedulers.Stop && float64(e.Iter) != e.Rung {
			t.Errorf("trial %d stopped at iteration %d for rung %g", e.Trial, e.Iter, e.Rung)
		}
		if e.Action == schedulers.Pause || e.Order {
			t.Errorf("stop mode paused or ordered: %+v", e)
		}
	}
	if run.Compute >= 40*27/2 {
		t.Errorf("compute %d: stop mode saved less than half of FIFO's %d", run.Compute, 40*27)
	}
}

// HyperBand with max_t 9, η 3: brackets of 9 (rungs 1, 3, 9), 5 (3, 9) and
// 3 (9) trials; 9 → 3 → 1 and 5 → 1 survive.
func TestSimHyperBandBrackets(t *testing.T) {
	s := newScheduler(t, schedulers.Config{Kind: "hyperband", MaxT: 9, GracePeriod: 1, ReductionFactor: 3}, schedulers.Env{Checkpoints: true})
	configs := curveConfigs(17, 4)
	run := simulate(t, s, sim.Options{Workers: 3, NumSamples: 17, MaxIter: 9, Config: configs, Model: sim.Curve{}})
	if want := 9*1 + 3*2 + 1*6 + 5*3 + 1*6 + 3*9; run.Compute != want {
		t.Errorf("compute %d, want %d", run.Compute, want)
	}
	value := func(trial int, step float64) float64 {
		c := configs(trial)
		return sim.CurveValue(c["lr"].(float64), c["width"].(int64), c["dropout"].(float64), step)
	}
	// best returns the k trials of ts with the lowest value at step.
	best := func(ts []int, step float64, k int) []int {
		ts = slices.Clone(ts)
		slices.SortStableFunc(ts, func(a, b int) int { return cmp.Compare(value(a, step), value(b, step)) })
		return ts[:k]
	}
	first := []int{1, 2, 3, 4, 5, 6, 7, 8, 9}
	winners := map[int]bool{}
	for _, w := range best(best(first, 1, 3), 3, 1) {
		winners[w] = true
	}
	winners[best([]int{10, 11, 12, 13, 14}, 3, 1)[0]] = true
	winners[15], winners[16], winners[17] = true, true, true
	for _, tr := range run.Trials {
		if got := tr.Iter == 9; got != winners[tr.Number] {
			t.Errorf("trial %d trained %d iterations; reaching max_t: got %v, want %v", tr.Number, tr.Iter, got, winners[tr.Number])
		}
		if tr.Status == sim.EndedPaused {
			t.Errorf("trial %d was left paused: HyperBand stops the trials it drops", tr.Number)
		}
	}
}

// toy is after the toy problem of Jaderberg et al. (2017), section 4.1: θ
// starts at (0.9, 0.9) and the score is θ0² + θ1², but each trial descends
// along one coordinate only — odd trials θ0, even trials θ1, whatever
// their configuration — at the rate its "lr" sets. On its own a trial
// never gets below 0.81; it gets to 0 only by copying a checkpoint of a
// trial of the other parity.
type toy struct{}

func (toy) Init(int, map[string]any) []float64 { return []float64{0.9, 0.9} }

func (toy) Step(trial int, cfg map[string]any, st []float64, _ int) ([]float64, float64) {
	axis, lr := (trial+1)%2, cfg["lr"].(float64)
	st[axis] -= lr * 2 * st[axis]
	return st, st[0]*st[0] + st[1]*st[1]
}

func toyOptions() sim.Options {
	configs := []map[string]any{{"lr": 0.1}, {"lr": 0.08}, {"lr": 0.06}, {"lr": 0.04}}
	return sim.Options{Workers: 4, NumSamples: 4, MaxIter: 40, Config: func(n int) map[string]any { return configs[n-1] }, Model: toy{}}
}

func toyPBT() (schedulers.Config, schedulers.Env) {
	space, _ := searchspace.New(searchspace.Param{Name: "lr", Domain: searchspace.Uniform{Low: 0.01, High: 0.1}})
	return schedulers.Config{Kind: "pbt", PerturbationInterval: 4},
		schedulers.Env{Metric: "loss", Checkpoints: true, Space: space, Seed: 7}
}

func bestFinal(run *sim.Run) (int, float64) {
	trial, best := 0, math.Inf(1)
	for _, tr := range run.Trials {
		last := 0.0
		for _, r := range run.Reports {
			if r.Trial == tr.Number {
				last = r.Score
			}
		}
		if last < best {
			trial, best = tr.Number, last
		}
	}
	return trial, best
}

func TestSimPBTExploitIsTheOnlyWay(t *testing.T) {
	const target = 0.01
	fifo := simulate(t, schedulers.FIFO{}, toyOptions())
	if _, best := bestFinal(fifo); best < 0.81 {
		t.Fatalf("FIFO reached %g: the toy must be unsolvable without exploiting", best)
	}
	cfg, env := toyPBT()
	run := simulate(t, newScheduler(t, cfg, env), toyOptions())
	winner, best := bestFinal(run)
	if best >= target {
		t.Fatalf("PBT's best is %g, want below %g", best, target)
	}
	if run.Trials[winner-1].Restarts == 0 {
		t.Errorf("trial %d reached %g without ever restarting from another's checkpoint", winner, best)
	}
	if len(run.Copies) == 0 {
		t.Fatal("no checkpoint was copied")
	}
	checkCopies(t, run)
	t.Logf("PBT: trial %d reached %.3g after %d checkpoint copies in all", winner, best, len(run.Copies))
}

// checkCopies replays the run's reports and copies in the order they
// happened and checks each copied checkpoint by content: it is the donor's
// latest checkpoint, and the restarted trial trains on from it with its
// new configuration.
func checkCopies(t *testing.T, run *sim.Run) {
	t.Helper()
	type entry struct {
		clock, trial, kind int // kind 0: report, 1: copy
		rep                sim.Report
		cp                 sim.Copy
	}
	var log []entry
	for _, r := range run.Reports {
		log = append(log, entry{clock: r.Clock, trial: r.Trial, rep: r})
	}
	for _, c := range run.Copies {
		log = append(log, entry{clock: c.Clock, trial: c.To, kind: 1, cp: c})
	}
	slices.SortStableFunc(log, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.clock, b.clock), cmp.Compare(a.trial, b.trial), cmp.Compare(a.kind, b.kind))
	})
	type ckpt struct {
		iter  int
		state []float64
	}
	latest := map[int]ckpt{}
	pending := map[int]sim.Copy{} // restarted trials awaiting their next report
	configs := map[int]map[string]any{}
	for _, e := range run.Events {
		if e.Action == schedulers.Restart {
			configs[e.Trial] = e.Exploit.Config // at most one restart per trial and clock
		}
	}
	for _, e := range log {
		if e.kind == 1 {
			c := e.cp
			want := latest[c.From]
			if c.Iter != want.iter || !slices.Equal(c.State, want.state) {
				t.Errorf("clock %d: trial %d got %v at iteration %d from trial %d, whose latest checkpoint is %v at %d",
					c.Clock, c.To, c.State, c.Iter, c.From, want.state, want.iter)
			}
			latest[c.To] = ckpt{c.Iter, c.State}
			pending[c.To] = c
			continue
		}
		r := e.rep
		if c, ok := pending[r.Trial]; ok {
			delete(pending, r.Trial)
			var cfg map[string]any
			for _, ev := range run.Events {
				if ev.Trial == r.Trial && ev.Clock == c.Clock && ev.Action == schedulers.Restart {
					cfg = ev.Exploit.Config
				}
			}
			wantState, _ := toy{}.Step(r.Trial, cfg, slices.Clone(c.State), r.Iter)
			if r.Iter != c.Iter+1 || !slices.Equal(r.State, wantState) {
				t.Errorf("trial %d after its restart: reported %v at %d, want %v at %d", r.Trial, r.State, r.Iter, wantState, c.Iter+1)
			}
		}
		latest[r.Trial] = ckpt{r.Iter, r.State}
	}
}

// reloading snapshots its scheduler before every call (or every
// every-th, when every > 1) and continues with a freshly built one restored
// from the snapshot, as a resumed experiment would.
type reloading struct {
	t     *testing.T
	cfg   schedulers.Config
	env   schedulers.Env
	s     schedulers.Scheduler
	every int
	calls int
}

func (r *reloading) reload() {
	if r.calls++; r.every > 1 && r.calls%r.every != 0 {
		return
	}
	data, err := r.s.(schedulers.Snapshotter).Snapshot()
	if err != nil {
		r.t.Fatalf("snapshot: %v", err)
	}
	fresh := newScheduler(r.t, r.cfg, r.env)
	if err := fresh.(schedulers.Snapshotter).Restore(data); err != nil {
		r.t.Fatalf("restore: %v", err)
	}
	r.s = fresh
}

func (r *reloading) OnTrialAdd(n int, c map[string]any) { r.reload(); r.s.OnTrialAdd(n, c) }
func (r *reloading) OnResult(res schedulers.Result) schedulers.Decision {
	r.reload()
	return r.s.OnResult(res)
}
func (r *reloading) OnTrialEnd(n int) { r.reload(); r.s.OnTrialEnd(n) }

// OnTrialFailed forwards to a scheduler that tells failures apart, so
// that a snapshot falls between it and OnTrialEnd too.
func (r *reloading) OnTrialFailed(n int) {
	r.reload()
	if f, ok := r.s.(schedulers.FailureObserver); ok {
		f.OnTrialFailed(n)
	}
}
func (r *reloading) Next(c schedulers.Capacity) (schedulers.Order, bool) {
	r.reload()
	return r.s.Next(c)
}

func TestSnapshotsResumeTheSameDecisions(t *testing.T) {
	curve := sim.Options{Workers: 4, NumSamples: 20, MaxIter: 27, Config: curveConfigs(20, 5), Model: sim.Curve{}}
	// The median rule keeps every result: a shorter run keeps this fast.
	short := sim.Options{Workers: 4, NumSamples: 10, MaxIter: 9, Config: curveConfigs(10, 5), Model: sim.Curve{}}
	pbtCfg, pbtEnv := toyPBT()
	tests := []struct {
		name string
		cfg  schedulers.Config
		env  schedulers.Env
		o    sim.Options
	}{
		{"fifo", schedulers.Config{}, schedulers.Env{}, curve},
		{"asha stop", schedulers.Config{Kind: "asha", MaxT: 27, Brackets: 2}, schedulers.Env{}, curve},
		{"asha promote", schedulers.Config{Kind: "asha", MaxT: 27, Brackets: 2}, schedulers.Env{Checkpoints: true}, curve},
		{"hyperband", schedulers.Config{Kind: "hyperband", MaxT: 27}, schedulers.Env{Checkpoints: true}, curve},
		{"median", schedulers.Config{Kind: "median", GracePeriod: 3}, schedulers.Env{}, short},
		{"pbt", pbtCfg, pbtEnv, toyOptions()},
		{"percentile", schedulers.Config{Kind: "percentile", Percentile: 50, StartupTrials: 2}, schedulers.Env{}, curve},
		{"wilcoxon", schedulers.Config{Kind: "wilcoxon"}, schedulers.Env{}, curve},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plain := simulate(t, newScheduler(t, tt.cfg, tt.env), tt.o)
			reloaded := simulate(t, &reloading{t: t, cfg: tt.cfg, env: tt.env, s: newScheduler(t, tt.cfg, tt.env)}, tt.o)
			if !reflect.DeepEqual(plain.Events, reloaded.Events) || !reflect.DeepEqual(plain.Reports, reloaded.Reports) || !reflect.DeepEqual(plain.Copies, reloaded.Copies) {
				t.Errorf("a scheduler restored from snapshots decided differently: %d vs %d events, compute %d vs %d",
					len(plain.Events), len(reloaded.Events), plain.Compute, reloaded.Compute)
			}
			if tt.name != "fifo" && len(plain.Events) == 0 {
				t.Error("the run made no decision worth recording: the comparison proves nothing")
			}
		})
	}
}

// resumesRunning orders a resumption of trial 1 while it runs.
type resumesRunning struct{ schedulers.FIFO }

func (resumesRunning) Next(c schedulers.Capacity) (schedulers.Order, bool) {
	return schedulers.Order{Trial: 1, Decision: schedulers.Decision{Action: schedulers.Continue}}, true
}

func TestSimCatchesContractBreaches(t *testing.T) {
	_, err := sim.Simulate(resumesRunning{}, sim.Options{NumSamples: 1, MaxIter: 3, Config: curveConfigs(1, 1), Model: sim.Curve{}})
	if !errors.Is(err, sim.ErrContract) {
		t.Errorf("resuming a running trial: got %v, want ErrContract", err)
	}
}

// TestSimChaos runs every scheduler through random experiments — worker
// counts, sample counts, checkpoint intervals, trials that fail — under
// the sim's contract checks, with a snapshot and restore before every
// call.
func TestSimChaos(t *testing.T) {
	space, _ := searchspace.New(searchspace.Param{Name: "lr", Domain: searchspace.LogUniform{Low: 1e-4, High: 1e-1}},
		searchspace.Param{Name: "width", Domain: searchspace.Choice{Values: []any{int64(32), int64(64), int64(128), int64(256)}}},
		searchspace.Param{Name: "dropout", Domain: searchspace.Uniform{Low: 0, High: 0.5}})
	no, upper, patience := false, 0.5, 1
	kinds := []schedulers.Config{
		{}, {Kind: "asha", MaxT: 9, Mode: "stop", Brackets: 2}, {Kind: "asha", MaxT: 9, Brackets: 2, ReductionFactor: 2},
		{Kind: "hyperband", MaxT: 9, ReductionFactor: 2}, {Kind: "median", MinSamplesRequired: 1},
		{Kind: "pbt", PerturbationInterval: 2, QuantileFraction: 0.5},
		{Kind: "median", MinSamplesRequired: 1, HardStop: &no},
		{Kind: "asha", MaxT: 5, Mode: "stop", StopLastTrials: &no}, {Kind: "hyperband", MaxT: 4, ReductionFactor: 2, StopLastTrials: &no},
		{Kind: "percentile", Percentile: 50, StartupTrials: 1}, {Kind: "threshold", Upper: &upper},
		{Kind: "patient", Patience: &patience}, {Kind: "wilcoxon", StartupSteps: 1},
	}
	rng := rand.New(rand.NewPCG(42, 42))
	for round := range 6 {
		for _, cfg := range kinds {
			env := schedulers.Env{Metric: "loss", Checkpoints: true, Space: space, Seed: int64(round)}
			samples, fails := 1+rng.IntN(25), rng.Float64()*0.1
			failRng := rand.New(rand.NewPCG(uint64(round), 7))
			failAt := map[[2]int]bool{}
			o := sim.Options{
				Workers: 1 + rng.IntN(6), NumSamples: samples, MaxIter: 1 + rng.IntN(12), CheckpointEvery: rng.IntN(4) - 1,
				Config: curveConfigs(samples, uint64(round)), Model: sim.Curve{},
				Fail: func(trial, iter int) bool {
					k := [2]int{trial, iter}
					if _, seen := failAt[k]; !seen {
						failAt[k] = failRng.Float64() < fails
					}
					return failAt[k]
				},
			}
			r := &reloading{t: t, cfg: cfg, env: env, s: newScheduler(t, cfg, env), every: 5}
			run, err := sim.Simulate(r, o)
			if err != nil {
				t.Fatalf("round %d, %+v, options %+v: %v", round, cfg, o, err)
			}
			if len(run.Trials) != samples {
				t.Errorf("round %d, %s: %d trials ran, want %d", round, cfg.Kind, len(run.Trials), samples)
			}
			for _, tr := range run.Trials {
				if tr.Status == "" {
					t.Errorf("round %d, %s: trial %d never ended", round, cfg.Kind, tr.Number)
				}
			}
		}
	}
}
