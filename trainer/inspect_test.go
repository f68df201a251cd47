package trainer

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gotune/gotune/workers"
)

func init() {
	Register("stackwait", func(ctx context.Context, w *Worker) error {
		return processWaitsHere(ctx)
	})
}

//go:noinline
func processWaitsHere(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

//go:noinline
func goroutineWaitsHere(ctx context.Context, rank int) {
	<-ctx.Done()
}

// stacksWhenRunning runs spec in the background and returns the stacks of
// every worker once they all run, then stops the group.
func stacksWhenRunning(t *testing.T, spec Spec, rank int) []WorkerStack {
	t.Helper()
	in := &Inspector{}
	spec.Inspector = in
	if _, err := in.Stacks(context.Background(), -1); err != ErrNotRunning {
		t.Errorf("before Run: got %v, want ErrNotRunning", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, spec, &collect{})
		done <- err
	}()
	defer func() {
		cancel()
		<-done
		if _, err := in.Stacks(context.Background(), -1); err != ErrNotRunning {
			t.Errorf("after Run: got %v, want ErrNotRunning", err)
		}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		stacks, err := in.Stacks(context.Background(), rank)
		ok := err == nil
		for _, s := range stacks {
			ok = ok && s.Error == "" && strings.Contains(s.Text, "WaitsHere")
		}
		if ok || time.Now().After(deadline) {
			if err != nil {
				t.Fatal(err)
			}
			return stacks
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestInspectorStacksOfGoroutineWorkers(t *testing.T) {
	spec := Spec{Experiment: uniqueName(t), Trial: 3, Scaling: ScalingConfig{NumWorkers: 2},
		Train: func(ctx context.Context, w *Worker) error {
			goroutineWaitsHere(ctx, w.Rank())
			return nil
		}}
	stacks := stacksWhenRunning(t, spec, -1)
	if len(stacks) != 2 {
		t.Fatalf("got %d stacks, want 2", len(stacks))
	}
	for rank, s := range stacks {
		if s.Rank != rank || s.Method != workers.StackGoroutines || s.PID != 0 {
			t.Errorf("rank %d: got rank %d, method %q, pid %d", rank, s.Rank, s.Method, s.PID)
		}
		// Only the rank's own goroutines: one waiting, labelled with it.
		if n := strings.Count(s.Text, "goroutineWaitsHere"); n != 1 || !strings.Contains(s.Text, `"gotune_rank":"`+string(rune('0'+rank))+`"`) {
			t.Errorf("rank %d: %d goroutines in goroutineWaitsHere, want 1:\n%s", rank, n, s.Text)
		}
	}
	one := stacksWhenRunning(t, spec, 1)
	if len(one) != 1 || one[0].Rank != 1 {
		t.Errorf("rank 1 alone: got %+v", one)
	}
}

func TestInspectorStacksOfProcessWorkers(t *testing.T) {
	spec := processSpec(t, "stackwait", 2, nil)
	stacks := stacksWhenRunning(t, spec, -1)
	for rank, s := range stacks {
		if s.Method != workers.StackDumped || s.PID == 0 || !strings.Contains(s.Text, "goroutine ") ||
			!strings.Contains(s.Text, "processWaitsHere") {
			t.Errorf("rank %d: method %q, pid %d:\n%s", rank, s.Method, s.PID, s.Text)
		}
	}
}

// A hung group's workers' stacks are told to the sink before it restarts.
func TestHungGroupRecordsStacks(t *testing.T) {
	spec := commandSpec(t, 2, "--steps=3", "--hang-at=1", "--lockstep", "--pid-dir="+t.TempDir())
	spec.Failure = FailureConfig{MaxFailures: 0, HeartbeatTimeout: 1}
	sink := &collect{}
	if _, err := Run(context.Background(), spec, sink); err == nil || !strings.Contains(err.Error(), "hung") {
		t.Fatalf("Run: %v, want the group hung", err)
	}
	if len(sink.events) != 1 || sink.events[0].Kind != EventHung || !strings.Contains(sink.events[0].Cause, "hung") {
		t.Fatalf("events %+v, want one %q", sink.events, EventHung)
	}
	stacks := sink.events[0].Stacks
	if len(stacks) != 2 {
		t.Fatalf("got %d stacks, want 2", len(stacks))
	}
	for rank, s := range stacks {
		if s.Rank != rank || s.PID == 0 || s.Error != "" || s.Text == "" {
			t.Errorf("rank %d: %+v", rank, s)
		}
	}
}
