package tuner

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/workers"
)

//go:noinline
func trialBlocksHere(ctx context.Context, release <-chan struct{}) {
	select {
	case <-ctx.Done():
	case <-release:
	}
}

// While a sweep runs, its control socket beside the database gives the
// stacks of a running trial's workers; once it ends there is no socket.
func TestControlSocketStacks(t *testing.T) {
	for _, deep := range []bool{false, true} {
		t.Run(map[bool]string{false: "short path", true: "path too long for a socket"}[deep], func(t *testing.T) {
			cfg := testConfig(t, 1)
			if deep {
				dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
				os.MkdirAll(dir, 0o755)
				cfg.Storage = filepath.Join(dir, "gotune.db")
			}
			release := make(chan struct{})
			started := make(chan struct{}, 2)
			tu, err := New(cfg, WithTrainFunc(func(ctx context.Context, w *trainer.Worker) error {
				started <- struct{}{}
				trialBlocksHere(ctx, release)
				return w.Report(ctx, map[string]float64{"loss": 1, "step": 1})
			}))
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := tu.Fit(context.Background())
				done <- err
			}()
			<-started
			<-started
			ctx := context.Background()
			reply, err := TrialStacks(ctx, cfg.Storage, cfg.Name, 1, -1)
			if err != nil {
				close(release)
				t.Fatal(err)
			}
			if fi, err := os.Stat(storage.ControlPath(cfg.Storage, cfg.Name)); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("socket: %v, %v, want mode 0600", fi, err)
			}
			if len(reply.Stacks) != 2 || reply.Trial != 1 {
				t.Errorf("got %d stacks of trial %d, want 2 of trial 1", len(reply.Stacks), reply.Trial)
			}
			for _, s := range reply.Stacks {
				if s.Method != workers.StackGoroutines || !strings.Contains(s.Text, "trialBlocksHere") {
					t.Errorf("rank %d: %s:\n%s", s.Rank, s.Method, s.Text)
				}
			}
			for _, tc := range []struct {
				trial, rank int
				want        string
			}{{1, 5, "no rank 5"}, {9, -1, "is not running"}} {
				if _, err := TrialStacks(ctx, cfg.Storage, cfg.Name, tc.trial, tc.rank); err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("trial %d rank %d: got %v, want %q", tc.trial, tc.rank, err, tc.want)
				}
			}
			close(release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if _, err := TrialStacks(ctx, cfg.Storage, cfg.Name, 1, -1); !errors.Is(err, ErrNotLive) {
				t.Errorf("after the run: got %v, want ErrNotLive", err)
			}
			if _, err := os.Lstat(storage.ControlPath(cfg.Storage, cfg.Name)); err == nil {
				t.Error("the control socket outlived the run")
			}
		})
	}
}

// A control socket that cannot be set up as promised (here: its link
// beside a database too deep for a socket cannot be made, a file is in the
// way) is an error, not a silent run without it.
func TestControlSocketSetupFailureReported(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "gotune.db")
	path := storage.ControlPath(db, "exp")
	if err := os.WriteFile(path, []byte("in the way"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := serveControl(db, "exp", &inspectors{})
	if err == nil {
		c.Close()
		t.Fatal("serveControl succeeded without its link")
	}
	if !strings.Contains(err.Error(), path) || !errors.Is(err, os.ErrExist) {
		t.Errorf("got %v, want an error naming %s that says it exists", err, path)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "in the way" {
		t.Errorf("the file in the way: %q, %v; want it left as it was", b, err)
	}
}

// A hung trial's event carries its workers' stacks.
func TestHungTrialEventHasStacks(t *testing.T) {
	cfg := testConfig(t, 1)
	cfg.Trainer = trainer.Config{
		Command: []string{"sh", "-c", `echo '@gotune {"loss": 1}'; exec sleep 60`},
		Scaling: trainer.ScalingConfig{NumWorkers: 1, CPUsPerWorker: 0.01},
		Failure: trainer.FailureConfig{HeartbeatTimeout: 0.5},
	}
	tu, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tu.Fit(ctx)
	db, err := storage.OpenReadOnly(cfg.Storage)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	events, err := db.Events(ctx, cfg.Name, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if e.Kind != storage.EventHung {
			continue
		}
		var data struct{ Stacks []trainer.WorkerStack }
		json.Unmarshal(e.Data, &data)
		if len(data.Stacks) != 1 || data.Stacks[0].PID == 0 || !strings.Contains(data.Stacks[0].Text, "sleep") {
			t.Errorf("hung event's stacks: %s", e.Data)
		}
		return
	}
	t.Errorf("no %q event in %+v", storage.EventHung, events)
}

// A trial's inspector, which reaches its group's workers, goes when the
// group ends: a long sweep keeps only the running trials'.
func TestInspectorsOfRunningTrialsOnly(t *testing.T) {
	cfg := testConfig(t, 6)
	cfg.Search.MaxConcurrent = 1
	var tu *Tuner
	var most atomic.Int64
	tu, err := New(cfg, WithTrainFunc(func(ctx context.Context, w *trainer.Worker) error {
		if w.Rank() == 0 {
			n := int64(len(tu.inspectors.all()))
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
		}
		return w.Report(ctx, map[string]float64{"loss": 1, "step": 1})
	}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tu.Fit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := most.Load(); got != 1 {
		t.Errorf("up to %d inspectors held with one trial running at a time, want 1", got)
	}
}
