package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotune/gotune/cmd/gotune/sweepfile"
	"github.com/gotune/gotune/storage"
)

// TestTorchrunScriptUnchanged runs examples/torchrun_snapshot.py, a
// torchrun script that keeps its own snapshot.pt where it runs, under
// gotune with real PyTorch (CPU, gloo): two trials of two workers, one
// after the other, each in its own folder. Rank 1 of trial 1 is killed
// with SIGKILL after its first epoch; the group restarts, the script
// resumes from its snapshot, and every epoch is recorded once. Trial 2
// starts afresh, torch sees torchrun's environment, and the sweep says
// nothing about a shared working directory.
func TestTorchrunScriptUnchanged(t *testing.T) {
	torchAvailable(t)
	if _, err := sweepfile.Load(filepath.Join(repoRoot, "examples", "torchrun_snapshot.toml")); err != nil {
		t.Fatalf("the example sweep file: %v", err)
	}
	dir := t.TempDir()
	sweep := filepath.Join(dir, "snap.toml")
	os.WriteFile(sweep, []byte(`name = "snap"
[objective]
metric = "val_acc"
mode = "max"
[search]
num_samples = 2
max_concurrent = 1
[search.space]
hidden = { choice = [32, 64] }
[scheduler]
kind = "fifo"
time_attr = "epoch"
[trainer]
command = ["/usr/bin/python3", "examples/torchrun_snapshot.py", "--hidden={hidden}", "--epochs=4"]
workdir = "{trial_dir}"
[trainer.scaling]
num_workers = 2
cpus_per_worker = 1
[trainer.failure]
max_failures = 1
`), 0o644)
	db := filepath.Join(dir, "snap.db")
	cmd := gotune(t, "run", "--db", db, sweep)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := make(chan error, 1)
	go func() { killed <- killAfterFirstEpoch(db) }()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("gotune run: %v\n%s\n%s", err, out.String(), errOut.String())
	}
	if err := <-killed; err != nil {
		t.Fatalf("kill rank 1 of trial 1: %v\n%s", err, out.String())
	}
	if strings.Contains(errOut.String(), "share the working directory") {
		t.Errorf("a warning about a shared working directory:\n%s", errOut.String())
	}

	ro, err := storage.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	ctx := context.Background()
	for trial, wantRestarts := range map[int]int{1: 1, 2: 0} {
		tr, err := ro.Trial(ctx, "snap", trial)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Status != "TERMINATED" || tr.Restarts != wantRestarts {
			t.Errorf("trial %d: %s after %d restarts, want TERMINATED after %d", trial, tr.Status, tr.Restarts, wantRestarts)
		}
		reps, err := ro.Reports(ctx, "snap", trial)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range reps {
			got = append(got, fmt.Sprintf("%d:%g", r.Iteration, r.Metrics["epoch"]))
		}
		if strings.Join(got, " ") != "1:1 2:2 3:3 4:4" {
			t.Errorf("trial %d's reports (iteration:epoch) %v, want every epoch once", trial, got)
		}
		td := filepath.Join(dir, "checkpoints", "snap", fmt.Sprintf("trial_%d", trial))
		if _, err := os.Stat(filepath.Join(td, "snapshot.pt")); err != nil {
			t.Errorf("trial %d keeps no snapshot in its folder: %v", trial, err)
		}
		log, _ := os.ReadFile(filepath.Join(td, "logs", "worker_0.log"))
		starts := strings.Count(string(log), "torchelastic launched: True, restart ")
		fresh := strings.Contains(string(log), "torchelastic launched: True, restart 0, resuming after epoch 0 of 4")
		resumed := strings.Contains(string(log), "torchelastic launched: True, restart 1, resuming after epoch ") &&
			!strings.Contains(string(log), "restart 1, resuming after epoch 0 ")
		if starts != 1+wantRestarts || !fresh || resumed != (wantRestarts == 1) {
			t.Errorf("trial %d's rank 0 log: %d starts, fresh start %v, resumed its snapshot %v:\n%s", trial, starts, fresh, resumed, log)
		}
	}
}

// killAfterFirstEpoch waits for trial 1 of sweep "snap" to report an epoch,
// then kills its rank 1 with SIGKILL.
func killAfterFirstEpoch(db string) error {
	deadline := time.Now().Add(2 * time.Minute)
	ctx := context.Background()
	for ; time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		ro, err := storage.OpenReadOnly(db)
		if err != nil {
			continue
		}
		reps, _ := ro.Reports(ctx, "snap", 1)
		ws, _ := ro.Workers(ctx, "snap", 1)
		ro.Close()
		if len(reps) == 0 {
			continue
		}
		for _, w := range ws {
			if w.Rank == 1 && w.Status == "RUNNING" && w.PID > 0 {
				return syscall.Kill(w.PID, syscall.SIGKILL)
			}
		}
	}
	return fmt.Errorf("trial 1 reported no epoch in time")
}
