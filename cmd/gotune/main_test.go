package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/workers"
)

// TestMain lets the test binary stand in for gotune: with GOTUNE_AS_MAIN
// set it runs the CLI on its arguments, so tests can start real gotune
// processes.
func TestMain(m *testing.M) {
	workers.WardenMain() // the warden of a gotune run started by a test
	trainer.WorkerMain() // the process workers of built-in models on agents
	if os.Getenv("GOTUNE_AS_MAIN") == "1" {
		subreap()
		os.Exit(run(os.Args, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

const repoRoot = "../.."

// gotune starts the CLI as a child process in the repository root.
func gotune(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "GOTUNE_AS_MAIN=1")
	return cmd
}

// gotuneIn runs the CLI as a child process in dir, as a user does from a
// sweep's folder, and returns its exit code, stdout and stderr.
func gotuneIn(t *testing.T, dir string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := gotune(t, args...)
	cmd.Dir = dir
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

// runCLI runs the CLI in-process and returns its exit code, stdout and stderr.
func runCLI(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(append([]string{"gotune"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestQuickstart runs the README's quickstart as a separate process and
// reads its results while it runs and after.
func TestQuickstart(t *testing.T) {
	db := filepath.Join(t.TempDir(), "quick.db")
	cmd := gotune(t, "run", "--db", db, "examples/quickstart.toml")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- cmd.Wait() }()

	// Read the database while the sweep writes it (WAL).
	readsDuringRun := 0
	var runErr error
wait:
	for {
		select {
		case runErr = <-done:
			break wait
		default:
		}
		if code, stdout, _ := runCLI("trials", "--db", db, "--json", "quickstart"); code == 0 {
			var rows []trialJSON
			if err := json.Unmarshal([]byte(stdout), &rows); err != nil {
				t.Fatalf("trials --json during the run is not JSON: %v\n%s", err, stdout)
			}
			readsDuringRun++
		}
	}
	if runErr != nil {
		t.Fatalf("gotune run: %v\nstdout:\n%s\nstderr:\n%s", runErr, out.String(), errOut.String())
	}
	if readsDuringRun == 0 {
		t.Error("never managed to read the trials while the sweep ran")
	}
	if !strings.Contains(out.String(), "best trial:") || !strings.Contains(out.String(), "epoch=20") {
		t.Errorf("run output lacks the per-report lines or the summary:\n%s", out.String())
	}

	code, stdout, stderr := runCLI("trials", "--db", db, "--json", "quickstart")
	if code != 0 {
		t.Fatalf("trials: exit %d: %s", code, stderr)
	}
	var rows []trialJSON
	if err := json.Unmarshal([]byte(stdout), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 12 {
		t.Fatalf("got %d trials, want 12", len(rows))
	}
	for _, r := range rows {
		if r.Status != "TERMINATED" || r.Iterations != 20 {
			t.Errorf("trial %d: %s with %d iterations, want TERMINATED with 20", r.TrialID, r.Status, r.Iterations)
		}
	}

	code, stdout, stderr = runCLI("best", "--db", db, "--json", "quickstart")
	if code != 0 {
		t.Fatalf("best: exit %d: %s", code, stderr)
	}
	var best bestJSON
	if err := json.Unmarshal([]byte(stdout), &best); err != nil {
		t.Fatal(err)
	}
	if best.BestMetric == nil || *best.BestMetric < 0.90 {
		t.Errorf("best val_acc %v, want >= 0.90", best.BestMetric)
	}
	for _, k := range []string{"epoch", "train_loss", "val_loss", "val_acc"} {
		if _, ok := best.Metrics[k]; !ok {
			t.Errorf("best trial's last report lacks %s: %v", k, best.Metrics)
		}
	}
	if code, stdout, _ := runCLI("best", "--db", db, "quickstart"); code != 0 || !strings.Contains(stdout, "best val_acc") {
		t.Errorf("best (table): exit %d\n%s", code, stdout)
	}
	if code, stdout, _ := runCLI("trials", "--db", db, "quickstart"); code != 0 || strings.Count(stdout, "TERMINATED") != 12 {
		t.Errorf("trials (table): exit %d\n%s", code, stdout)
	}
}

func writeSweep(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sweep.toml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
