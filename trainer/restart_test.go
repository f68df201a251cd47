package trainer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testPlacer is a pool of worker slots. A hog can claim slots: it takes
// them as soon as they are free, before any group.
type testPlacer struct {
	mu     sync.Mutex
	cond   *sync.Cond
	free   int
	hog    int // slots the hog still wants
	placed []int
}

func newTestPlacer(free int) *testPlacer {
	p := &testPlacer{free: free}
	p.cond = sync.NewCond(&p.mu)
	return p
}

func (p *testPlacer) Place(_ context.Context, lo, hi int) (Placement, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.free < lo {
		p.cond.Wait()
	}
	n := min(p.free, hi)
	p.free -= n
	p.placed = append(p.placed, n)
	return &testPlacement{p: p, n: n}, nil
}

// claim makes the hog want n slots; give returns n of its slots.
func (p *testPlacer) claim(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hog += n
	p.feedHog()
}

func (p *testPlacer) give(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free += n
	p.cond.Broadcast()
}

func (p *testPlacer) feedHog() {
	k := min(p.hog, p.free)
	p.hog -= k
	p.free -= k
}

type testPlacement struct {
	p        *testPlacer
	n        int
	released bool
}

func (pl *testPlacement) Slots() []Slot { return make([]Slot, pl.n) }

func (pl *testPlacement) Grow(k int) int {
	pl.p.mu.Lock()
	defer pl.p.mu.Unlock()
	add := min(k, pl.p.free)
	pl.p.free -= add
	pl.n += add
	return add
}

func (pl *testPlacement) Release() {
	pl.p.mu.Lock()
	defer pl.p.mu.Unlock()
	if !pl.released {
		pl.released = true
		pl.p.free += pl.n
		pl.p.feedHog()
		pl.p.cond.Broadcast()
	}
}

// elasticTrain trains a counter whose state rank 0 checkpoints every step
// ("state"), so any group size can resume it. It reports the group size.
// fail, when set, may fail a rank at a step.
func elasticTrain(steps int, fail func(w *Worker, step int) error) TrainFunc {
	return func(ctx context.Context, w *Worker) error {
		start, v := 0, 1.0
		if rd := w.ResumeDir(); rd != "" {
			var err error
			if start, v, err = readState(filepath.Join(rd, "state")); err != nil {
				return err
			}
		}
		for s := start + 1; s <= steps; s++ {
			v = step(v, s, w.Seed(), 0)
			if fail != nil {
				if err := fail(w, s); err != nil {
					return err
				}
			}
			var opts []ReportOption
			if w.Rank() == 0 {
				dir, err := w.CheckpointDir()
				if err != nil {
					return err
				}
				if err := writeState(filepath.Join(dir, "state"), s, v); err != nil {
					return err
				}
				opts = append(opts, WithCheckpoint(dir))
			}
			if err := w.Report(ctx, map[string]float64{"step": float64(s), "value": v, "size": float64(w.WorldSize())}, opts...); err != nil {
				return err
			}
		}
		return nil
	}
}

// workersSeen is a collect that is also told the group's workers, and
// keeps the ranks it was told of per attempt.
type workersSeen struct {
	*collect
	ranks map[int]map[int]bool
}

func (s *workersSeen) Workers(_ context.Context, ws []WorkerStatus) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range ws {
		if s.ranks[w.Attempt] == nil {
			s.ranks[w.Attempt] = map[int]bool{}
		}
		s.ranks[w.Attempt][w.Rank] = true
	}
	return nil
}

// attempts renders how many workers each attempt had, by attempt.
func (s *workersSeen) attempts() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var parts []string
	for _, a := range slices.Sorted(maps.Keys(s.ranks)) {
		parts = append(parts, fmt.Sprintf("%d:%d", a, len(s.ranks[a])))
	}
	return strings.Join(parts, " ")
}

// sizes renders the group size of every result.
func (c *collect) sizes() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var parts []string
	for _, r := range c.results {
		parts = append(parts, fmt.Sprintf("%d:%v", r.Iteration, r.Metrics["size"]))
	}
	return strings.Join(parts, " ")
}

func TestElasticGroupGrowsWhenResourcesFreeUp(t *testing.T) {
	placer := newTestPlacer(2)
	spec := Spec{
		Train: elasticTrain(6, nil), Scaling: ScalingConfig{MinWorkers: 1, MaxWorkers: 4},
		Placer: placer, Checkpoints: &testStore{dir: t.TempDir()},
		Attempts: 3, // an earlier Run's
	}
	sink := &collect{}
	sink.on = func(r Result) Action {
		if r.Iteration == 2 {
			placer.give(2) // another trial ends
		}
		return Continue
	}
	seen := &workersSeen{collect: sink, ranks: map[int]map[int]bool{}}
	sum, err := Run(context.Background(), spec, seen)
	if err != nil || sum.Outcome != Completed || sum.Restarts != 0 || sum.Attempts != 2 {
		t.Fatalf("Run: %+v, %v", sum, err)
	}
	// The workers of the grown group are those of a new attempt.
	if got, want := seen.attempts(), "3:2 4:4"; got != want {
		t.Errorf("workers by attempt %s, want %s", got, want)
	}
	if got, want := sink.sizes(), "1:2 2:2 3:4 4:4 5:4 6:4"; got != want {
		t.Errorf("group sizes %s, want %s", got, want)
	}
	if len(sink.events) != 1 || sink.events[0].Kind != EventResize || sink.events[0].Workers != 4 || sink.events[0].Iteration != 2 || sink.events[0].Attempt != 4 {
		t.Errorf("events %+v", sink.events)
	}
	same := &collect{}
	if _, err := Run(context.Background(), Spec{Train: elasticTrain(6, nil), Scaling: ScalingConfig{NumWorkers: 4}}, same); err != nil {
		t.Fatal(err)
	}
	if sink.series() != same.series() {
		t.Errorf("resized run %s\nfixed run   %s", sink.series(), same.series())
	}
	if placer.free != 4 {
		t.Errorf("%d slots free after the run, want all 4 back", placer.free)
	}
}

func TestElasticGroupRestartsWithWhatFits(t *testing.T) {
	placer := newTestPlacer(3)
	var failed atomic.Bool
	fail := func(w *Worker, s int) error {
		if s == 3 && w.Rank() == 2 && failed.CompareAndSwap(false, true) {
			return errors.New("node lost")
		}
		return nil
	}
	spec := Spec{
		Train: elasticTrain(6, fail), Scaling: ScalingConfig{MinWorkers: 1, MaxWorkers: 3},
		Failure: FailureConfig{MaxFailures: 1}, Placer: placer, Checkpoints: &testStore{dir: t.TempDir()},
	}
	sink := &collect{}
	sink.on = func(r Result) Action {
		switch r.Iteration {
		case 2:
			placer.claim(2) // another trial wants 2 slots as soon as they free up
		case 4:
			placer.give(2) // and is done with them
		}
		return Continue
	}
	seen := &workersSeen{collect: sink, ranks: map[int]map[int]bool{}}
	sum, err := Run(context.Background(), spec, seen)
	if err != nil || sum.Restarts != 1 || sum.Attempts != 3 {
		t.Fatalf("Run: %+v, %v", sum, err)
	}
	if got, want := sink.sizes(), "1:3 2:3 3:1 4:1 5:3 6:3"; got != want {
		t.Errorf("group sizes %s, want %s", got, want)
	}
	if got, want := seen.attempts(), "0:3 1:1 2:3"; got != want {
		t.Errorf("workers by attempt %s, want %s", got, want)
	}
	if len(sink.events) != 2 || sink.events[0].Kind != EventRestart || sink.events[0].Workers != 1 || sink.events[0].Attempt != 1 ||
		!strings.Contains(sink.events[0].Cause, "worker 2: node lost") || sink.events[1].Kind != EventResize || sink.events[1].Workers != 3 || sink.events[1].Attempt != 2 {
		t.Errorf("events %+v", sink.events)
	}
}

func TestGoroutineFailuresRestartUpToTheLimit(t *testing.T) {
	var failures atomic.Int32
	flaky := func(n int32) func(*Worker, int) error {
		return func(w *Worker, s int) error {
			if s == 2 && w.Rank() == 1 && failures.Add(1) <= n {
				return errors.New("flaky")
			}
			return nil
		}
	}
	tests := []struct {
		name      string
		max       int
		flakes    int32
		wantErr   string
		restarts  int
		delivered int
	}{
		{"no restarts by default", 0, 1, "worker 1: flaky", 0, 1},
		{"within the limit", 2, 2, "", 2, 4},
		{"over the limit", 2, 5, "after 2 restarts, failure.max_failures = 2", 2, 1},
		{"unlimited", -1, 5, "", 5, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			failures.Store(0)
			spec := Spec{Train: elasticTrain(4, flaky(tt.flakes)), Scaling: ScalingConfig{NumWorkers: 2},
				Failure: FailureConfig{MaxFailures: tt.max}, Checkpoints: &testStore{dir: t.TempDir()}}
			sink := &collect{}
			sum, err := Run(context.Background(), spec, sink)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && !errorContains(err, tt.wantErr) {
				t.Errorf("error %v, want %q", err, tt.wantErr)
			}
			if sum.Restarts != tt.restarts || len(sink.events) != tt.restarts || len(sink.results) != tt.delivered {
				t.Errorf("restarts %d, events %d, results %d; want %d, %d, %d",
					sum.Restarts, len(sink.events), len(sink.results), tt.restarts, tt.restarts, tt.delivered)
			}
		})
	}
}

func TestHungGoroutineIsRestarted(t *testing.T) {
	var hung atomic.Bool
	train := func(ctx context.Context, w *Worker) error {
		return elasticTrain(5, func(w *Worker, s int) error {
			if s == 3 && w.Rank() == 0 && hung.CompareAndSwap(false, true) {
				<-ctx.Done() // stuck until the group is torn down
				return ctx.Err()
			}
			return nil
		})(ctx, w)
	}
	spec := Spec{Train: train, Scaling: ScalingConfig{NumWorkers: 2},
		Failure: FailureConfig{MaxFailures: 1, HeartbeatTimeout: 1}, Checkpoints: &testStore{dir: t.TempDir()}}
	sink := &collect{}
	sum, err := Run(context.Background(), spec, sink)
	if err != nil || sum.Restarts != 1 || !strings.Contains(sink.events[0].Cause, "hung") {
		t.Fatalf("Run: %+v, %v, events %+v", sum, err, sink.events)
	}
	if len(sink.results) != 5 {
		t.Errorf("results %s", sink.series())
	}
}

func TestUnequalReportCountsFail(t *testing.T) {
	train := func(ctx context.Context, w *Worker) error {
		n := 3
		if w.Rank() == 1 {
			n = 1
		}
		for i := range n {
			if err := w.Report(ctx, map[string]float64{"i": float64(i)}); err != nil {
				return err
			}
		}
		return nil
	}
	spec := Spec{Train: train, Scaling: ScalingConfig{NumWorkers: 2}, Failure: FailureConfig{MaxFailures: 3}}
	sum, err := Run(context.Background(), spec, &collect{})
	if !errorContains(err, "every worker must call Report the same number of times") || sum.Restarts != 0 {
		t.Errorf("got %+v, %v", sum, err)
	}
}

func TestResultsWithoutStoreHandShardsToTheSink(t *testing.T) {
	sink := &collect{}
	spec := Spec{Train: elasticTrain(2, nil), Scaling: ScalingConfig{NumWorkers: 2}}
	sink.on = func(r Result) Action {
		if len(r.Checkpoint) != 1 || r.CheckpointPath != "" {
			t.Errorf("result %d: shards %v, path %q", r.Iteration, r.Checkpoint, r.CheckpointPath)
		}
		if _, err := os.Stat(filepath.Join(r.Checkpoint[0], "state")); err != nil {
			t.Error(err)
		}
		return Continue
	}
	if _, err := Run(context.Background(), spec, sink); err != nil {
		t.Fatal(err)
	}
}

func TestSpecNeedsExactlyOneKind(t *testing.T) {
	for _, spec := range []Spec{
		{},
		{Train: elasticTrain(1, nil), Command: []string{"true"}},
		{Command: []string{"echo", "{missing}"}},
	} {
		if _, err := Run(context.Background(), spec, &collect{}); err == nil {
			t.Errorf("spec %+v ran", spec)
		}
	}
}

// slowDecision answers every report with act after a pause long enough
// for a failing worker to end the attempt meanwhile.
type slowDecision struct {
	act     Action
	mu      sync.Mutex
	results []Result
}

func (s *slowDecision) Report(_ context.Context, r Result) (Action, error) {
	s.mu.Lock()
	s.results = append(s.results, r)
	s.mu.Unlock()
	time.Sleep(1500 * time.Millisecond)
	return s.act, nil
}

// TestDecisionDuringAFailureStands has a worker crash while the tuner
// decides to stop or pause the trial on rank 0's report: the decision,
// recorded with the report, must stand instead of the group restarting as
// after the failure (and the scheduler's word being lost).
func TestDecisionDuringAFailureStands(t *testing.T) {
	script := `if [ "$RANK" = 0 ]; then echo '@gotune {"step": 1}'; sleep 30; else sleep 0.3; exit 3; fi`
	for _, tt := range []struct {
		act  Action
		want Outcome
	}{{Stop, Stopped}, {Pause, Paused}} {
		t.Run(tt.act.String(), func(t *testing.T) {
			sink := &slowDecision{act: tt.act}
			spec := Spec{Command: []string{"sh", "-c", script}, Scaling: ScalingConfig{NumWorkers: 2},
				Failure: FailureConfig{MaxFailures: 3}, Checkpoints: &testStore{dir: t.TempDir()}, KillTimeout: time.Second}
			sum, err := Run(context.Background(), spec, sink)
			if err != nil || sum.Outcome != tt.want || sum.Restarts != 0 || len(sink.results) != 1 {
				t.Errorf("Run: %v, %v after %d restarts and %d reports; want %v, no restart, 1 report",
					sum.Outcome, err, sum.Restarts, len(sink.results), tt.want)
			}
		})
	}
}
