package trainer

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// processSpec is a spec for the registered function name with n workers.
func processSpec(t *testing.T, name string, n int, config map[string]any) Spec {
	return Spec{
		Experiment: uniqueName(t), Trial: 1, Seed: 77, Config: config,
		Process:     name,
		Scaling:     ScalingConfig{NumWorkers: n},
		KillTimeout: 2 * time.Second,
		ScratchDir:  filepath.Join(t.TempDir(), "scratch"),
		LogDir:      filepath.Join(t.TempDir(), "logs"),
	}
}

func TestProcessWorkersSeeTheirPlaceAndConfig(t *testing.T) {
	spec := processSpec(t, "whoami", 3, map[string]any{"lr": 0.25, "layers": int64(2), "act": "relu"})
	spec.Trial = 9
	sink := &collect{}
	sum, err := Run(context.Background(), spec, sink)
	if err != nil || sum.Outcome != Completed {
		t.Fatalf("Run: %+v, %v", sum, err)
	}
	if len(sink.results) != 1 {
		t.Fatalf("got %d results, want 1", len(sink.results))
	}
	m := sink.results[0].Metrics
	want := map[string]float64{"rank": 0, "size": 3, "trial": 9, "seed_ok": 1, "lr": 0.25, "layers": 2, "act_ok": 1, "resumed": 0}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	if left := leftovers(t, spec.Experiment); len(left) > 0 {
		t.Errorf("processes left behind: %v", left)
	}
}

func TestProcessWorkerFailuresDoNotReachTheCaller(t *testing.T) {
	tests := []struct {
		name, fn string
		want     string
	}{
		{"os.Exit", "exit3", "worker 1 (pid"},
		{"panic", "panic", "panic: deliberate"},
		{"config error", "badconfig", `hyperparameter "lr" is 0.5`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := processSpec(t, tt.fn, 2, map[string]any{"lr": 0.5})
			spec.Failure.MaxFailures = 1
			sink := &collect{}
			sum, err := Run(context.Background(), spec, sink)
			if !errorContains(err, tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
			wantRestarts := 1
			if tt.fn == "badconfig" {
				wantRestarts = 0 // permanent: a restart would fail alike
			}
			if sum.Restarts != wantRestarts || len(sink.events) != wantRestarts {
				t.Errorf("restarts %d, events %d, want %d", sum.Restarts, len(sink.events), wantRestarts)
			}
			if tt.fn == "exit3" && !strings.Contains(err.Error(), "exited with status 3") {
				t.Errorf("error does not say how the worker ended: %v", err)
			}
			if left := leftovers(t, spec.Experiment); len(left) > 0 {
				t.Errorf("processes left behind: %v", left)
			}
		})
	}
}

func TestProcessNotRegistered(t *testing.T) {
	_, err := Run(context.Background(), processSpec(t, "nobody", 1, nil), &collect{})
	if !errorContains(err, `no function registered as "nobody"`) {
		t.Errorf("got %v", err)
	}
}

func TestProcessStopAndPause(t *testing.T) {
	spec := processSpec(t, "counter", 2, map[string]any{"steps": int64(50), "ckpt_every": int64(2)})
	spec.Checkpoints = &testStore{dir: t.TempDir()}
	sink := &collect{on: func(r Result) Action {
		if r.Iteration == 3 {
			return Stop
		}
		return Continue
	}}
	sum, err := Run(context.Background(), spec, sink)
	if err != nil || sum.Outcome != Stopped || len(sink.results) != 3 {
		t.Fatalf("stop: %+v, %v, %d results", sum, err, len(sink.results))
	}

	// Pause at a report without a checkpoint: the summary names the
	// latest one, and resuming from it with a changed config goes on from
	// there without delivering the redone report again.
	sink = &collect{on: func(r Result) Action {
		if r.Iteration == 5 {
			return Pause
		}
		return Continue
	}}
	spec.Experiment = uniqueName(t)
	spec.Checkpoints = &testStore{dir: t.TempDir()}
	sum, err = Run(context.Background(), spec, sink)
	if err != nil || sum.Outcome != Paused || sum.CheckpointIteration != 4 || sum.Iterations != 5 || sum.Checkpoint == "" {
		t.Fatalf("pause: %+v, %v", sum, err)
	}
	paused := sink.series()
	spec.ResumeDir, spec.ResumeIteration, spec.Delivered = sum.Checkpoint, sum.CheckpointIteration, sum.Iterations
	spec.Config = map[string]any{"steps": int64(8), "ckpt_every": int64(2)}
	sink2 := &collect{}
	sum, err = Run(context.Background(), spec, sink2)
	if err != nil || sum.Outcome != Completed {
		t.Fatalf("resume: %+v, %v", sum, err)
	}
	if first := sink2.results[0].Iteration; first != 6 || len(sink2.results) != 3 {
		t.Errorf("resumed run delivered %s, want iterations 6 to 8", sink2.series())
	}
	// The same as a run that was never paused.
	whole := &collect{}
	spec2 := processSpec(t, "counter", 2, spec.Config)
	if _, err := Run(context.Background(), spec2, whole); err != nil {
		t.Fatal(err)
	}
	if got := paused + sink2.series(); got != whole.series() {
		t.Errorf("paused and resumed: %s\nuninterrupted:        %s", got, whole.series())
	}
}

// TestKilledWorkerResumesFromCheckpoint kills one worker process with
// SIGKILL mid-trial: the group restarts from the latest checkpoint and ends
// with the results of an undisturbed run.
func TestKilledWorkerResumesFromCheckpoint(t *testing.T) {
	pids := t.TempDir()
	config := map[string]any{"steps": int64(8), "ckpt_every": int64(2), "pid_dir": pids, "sleep_ms": int64(20)}
	spec := processSpec(t, "counter", 2, config)
	spec.Failure.MaxFailures = 2
	spec.Checkpoints = &testStore{dir: t.TempDir()}
	killed := false
	sink := &collect{}
	sink.on = func(r Result) Action {
		if r.Iteration == 3 && !killed {
			killed = true
			killWorker(t, filepath.Join(pids, "rank1"))
		}
		return Continue
	}
	sum, err := Run(context.Background(), spec, sink)
	if err != nil || sum.Outcome != Completed {
		t.Fatalf("Run: %+v, %v", sum, err)
	}
	// The restart, then the restarted group's step 3, redone from the
	// checkpoint of step 2, told as skipped (a report of the survivor that
	// raced the kill is told as skipped too: it came after the failure).
	restarts := sink.restarts()
	redone := slices.ContainsFunc(sink.events, func(e Event) bool {
		return e.Kind == EventReportsSkipped && strings.HasPrefix(e.Cause, "skipped 1 reports with step 3 to 3")
	})
	if sum.Restarts != 1 || len(restarts) != 1 || !redone {
		t.Fatalf("restarts %d, events %+v", sum.Restarts, sink.events)
	}
	ev := restarts[0]
	if !strings.Contains(ev.Cause, "worker 1") || !strings.Contains(ev.Cause, "killed by signal 9") || ev.Iteration != 2 || ev.Workers != 2 {
		t.Errorf("restart event %+v", ev)
	}

	undisturbed := &collect{}
	config2 := map[string]any{"steps": int64(8), "ckpt_every": int64(2)}
	if _, err := Run(context.Background(), processSpec(t, "counter", 2, config2), undisturbed); err != nil {
		t.Fatal(err)
	}
	if sink.series() != undisturbed.series() {
		t.Errorf("after a kill:  %s\nundisturbed:   %s", sink.series(), undisturbed.series())
	}
	if left := leftovers(t, spec.Experiment); len(left) > 0 {
		t.Errorf("processes left behind: %v", left)
	}
	logs, _ := os.ReadFile(filepath.Join(spec.LogDir, "worker_1.log"))
	if !strings.Contains(string(logs), "attempt 1: worker 1 of 2") || !strings.Contains(string(logs), "attempt 2: worker 1 of 2") {
		t.Errorf("worker 1's log does not show both attempts:\n%s", logs)
	}
}

// TestHungWorkerIsRestarted: rank 0 stops reporting once; the heartbeat
// timeout fails the group, which resumes and completes.
func TestHungWorkerIsRestarted(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "hung-once")
	config := map[string]any{"steps": int64(6), "ckpt_every": int64(2), "hang_at": int64(4), "hang_marker": marker}
	spec := processSpec(t, "counter", 2, config)
	// Longer than a worker takes to start on a loaded machine.
	spec.Failure = FailureConfig{MaxFailures: 1, HeartbeatTimeout: 3}
	spec.KillTimeout = 100 * time.Millisecond
	spec.Checkpoints = &testStore{dir: t.TempDir()}
	sink := &collect{}
	sum, err := Run(context.Background(), spec, sink)
	if err != nil || sum.Outcome != Completed || sum.Restarts != 1 {
		t.Fatalf("Run: %+v, %v\nevents %+v\nresults %s", sum, err, sink.events, sink.series())
	}
	// The hang, with both workers' goroutines, then the restart, then
	// step 3 redone from the checkpoint of step 2, told as skipped.
	if len(sink.events) != 3 || sink.events[0].Kind != EventHung || len(sink.events[0].Stacks) != 2 ||
		sink.events[1].Kind != EventRestart || !strings.Contains(sink.events[1].Cause, "hung: no report") ||
		sink.events[2].Kind != EventReportsSkipped {
		t.Errorf("events %+v", sink.events)
	}
	undisturbed := &collect{}
	if _, err := Run(context.Background(), processSpec(t, "counter", 2, map[string]any{"steps": int64(6), "ckpt_every": int64(2)}), undisturbed); err != nil {
		t.Fatal(err)
	}
	if sink.series() != undisturbed.series() {
		t.Errorf("after a hang: %s\nundisturbed:  %s", sink.series(), undisturbed.series())
	}
	if left := leftovers(t, spec.Experiment); len(left) > 0 {
		t.Errorf("processes left behind: %v", left)
	}
}

// TestProcessWorkerCollectives: a group of one has in-process collectives,
// a larger group the TCP transport.
func TestProcessWorkerCollectives(t *testing.T) {
	for _, n := range []int{1, 3} {
		sink := &collect{}
		_, err := Run(context.Background(), processSpec(t, "sum", n, nil), sink)
		if err != nil || len(sink.results) != 1 || sink.results[0].Metrics["sum"] != float64(n*(n+1)/2) {
			t.Errorf("%d workers: %v, %+v", n, err, sink.results)
		}
	}
}
