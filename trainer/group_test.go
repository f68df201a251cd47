package trainer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gotune/gotune/allreduce"
)

// recordingSink keeps every result and answers Stop from iteration stopAt on.
type recordingSink struct {
	mu      sync.Mutex
	results []Result
	stopAt  int
}

func (s *recordingSink) Report(_ context.Context, r Result) (Action, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.results = append(s.results, r)
	if s.stopAt > 0 && r.Iteration >= s.stopAt {
		return Stop, nil
	}
	return Continue, nil
}

// steps is a training function that averages its rank across the group and
// reports the step count, n times.
func steps(n int) TrainFunc {
	return func(ctx context.Context, w *Worker) error {
		for i := 1; i <= n; i++ {
			buf := []float64{float64(w.Rank())}
			if err := w.Comm().AllReduceFloat64(ctx, buf, allreduce.Mean); err != nil {
				return err
			}
			if err := w.Report(ctx, map[string]float64{"step": float64(i), "mean_rank": buf[0]}); err != nil {
				return err
			}
		}
		return nil
	}
}

func TestRunCompletes(t *testing.T) {
	sink := &recordingSink{}
	sum, err := Run(context.Background(), Spec{Train: steps(5), Scaling: ScalingConfig{NumWorkers: 4}}, sink)
	if err != nil || sum.Outcome != Completed {
		t.Fatalf("Run: %v, %v", sum.Outcome, err)
	}
	if len(sink.results) != 5 {
		t.Fatalf("got %d results, want 5 (rank 0's only)", len(sink.results))
	}
	for i, r := range sink.results {
		if r.Iteration != i+1 || r.Metrics["mean_rank"] != 1.5 {
			t.Errorf("result %d: %+v", i, r)
		}
	}
}

func TestRunStopsOnDecision(t *testing.T) {
	sink := &recordingSink{stopAt: 3}
	sum, err := Run(context.Background(), Spec{Train: steps(100), Scaling: ScalingConfig{NumWorkers: 3}}, sink)
	if err != nil || sum.Outcome != Stopped {
		t.Fatalf("Run: %v, %v; want Stopped", sum.Outcome, err)
	}
	if len(sink.results) != 3 {
		t.Errorf("got %d results after a stop at 3", len(sink.results))
	}
}

func TestRunFailures(t *testing.T) {
	tests := []struct {
		name  string
		train TrainFunc
		want  string
	}{
		{"error in one rank", func(ctx context.Context, w *Worker) error {
			if w.Rank() == 1 {
				return errors.New("out of memory")
			}
			return steps(1000)(ctx, w)
		}, "worker 1: out of memory"},
		{"panic", func(ctx context.Context, w *Worker) error {
			if w.Rank() == 0 {
				panic("deliberate")
			}
			return steps(1000)(ctx, w)
		}, "worker 0: panic: deliberate"},
		{"wrong config type", func(ctx context.Context, w *Worker) error {
			w.Int("lr", 1)
			return nil
		}, `hyperparameter "lr" is 0.5 (float64), want an integer`},
		{"non-finite metric", func(ctx context.Context, w *Worker) error {
			return w.Report(ctx, map[string]float64{"loss": 1 / zero()})
		}, `metric "loss" is +Inf`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := Spec{Train: tt.train, Scaling: ScalingConfig{NumWorkers: 3}, Config: map[string]any{"lr": 0.5}}
			_, err := Run(context.Background(), spec, &recordingSink{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func zero() float64 { return 0 }

func TestRunCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	sink := &recordingSink{}
	train := func(c context.Context, w *Worker) error {
		if w.Rank() == 0 {
			cancel()
		}
		<-c.Done()
		return c.Err()
	}
	if _, err := Run(ctx, Spec{Train: train, Scaling: ScalingConfig{NumWorkers: 2}}, sink); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
}

func TestWorkerGetters(t *testing.T) {
	w := &Worker{config: map[string]any{"f": 0.5, "i": int64(3), "s": "relu", "b": true, "fi": 4.0}}
	if w.Float("f", 0) != 0.5 || w.Float("i", 0) != 3 || w.Float("missing", 9) != 9 {
		t.Error("Float")
	}
	if w.Int("i", 0) != 3 || w.Int("fi", 0) != 4 || w.Int("missing", 7) != 7 {
		t.Error("Int")
	}
	if w.String("s", "") != "relu" || w.String("i", "") != "3" || w.String("missing", "x") != "x" {
		t.Error("String")
	}
	if !w.Bool("b", false) || w.Bool("missing", false) {
		t.Error("Bool")
	}
	defer func() {
		if _, ok := recover().(*ConfigError); !ok {
			t.Error("Int of a fractional float did not panic with a *ConfigError")
		}
	}()
	w.Int("f", 0)
}

func TestReportGathersCheckpointsOfEveryRank(t *testing.T) {
	var got [][]string
	sink := sinkFunc(func(r Result) Action {
		for _, dir := range r.Checkpoint {
			data, err := os.ReadFile(filepath.Join(dir, "weights"))
			if err != nil {
				t.Errorf("report %d: shard %s: %v", r.Iteration, dir, err)
			}
			if !strings.HasPrefix(string(data), "rank") {
				t.Errorf("shard content %q", data)
			}
		}
		got = append(got, r.Checkpoint)
		return Continue
	})
	train := func(ctx context.Context, w *Worker) error {
		for step := range 3 {
			var opts []ReportOption
			if step != 1 { // no checkpoint with the second report
				dir, err := w.CheckpointDir()
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, "weights"), fmt.Appendf(nil, "rank%d", w.Rank()), 0o644); err != nil {
					return err
				}
				opts = append(opts, WithCheckpoint(dir))
			}
			if err := w.Report(ctx, map[string]float64{"step": float64(step)}, opts...); err != nil {
				return err
			}
		}
		return nil
	}
	if _, err := Run(context.Background(), Spec{Train: train, Scaling: ScalingConfig{NumWorkers: 3}}, sink); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || len(got[0]) != 3 || len(got[1]) != 0 || len(got[2]) != 3 {
		t.Errorf("checkpoint shards per report: %v, want 3, 0, 3", got)
	}
}

// sinkFunc adapts a function to Sink.
type sinkFunc func(Result) Action

func (f sinkFunc) Report(_ context.Context, r Result) (Action, error) { return f(r), nil }
