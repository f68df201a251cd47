package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunContinuesAfterKill9 kills a running `gotune run` with SIGKILL and
// runs the same command again: the sweep continues where it was, with
// exactly num_samples trials, and every trial ends with the metrics of an
// undisturbed run (the built-in models resume bit for bit).
func TestRunContinuesAfterKill9(t *testing.T) {
	const trials, epochs = 4, 60
	sweep := liveSweep(t, "killed", trials, epochs)
	db := filepath.Join(t.TempDir(), "gotune.db")

	cmd := gotune(t, "run", "--db", db, sweep)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Kill it once the sweep is well under way.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		code, out, _ := runCLI("trials", "--db", db, "--json", "killed")
		var rows []trialJSON
		if code == 0 && json.Unmarshal([]byte(out), &rows) == nil && len(rows) > 0 && rows[0].Iterations >= 5 {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("the sweep ended before it could be killed: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the sweep made no progress")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-exited

	code, out, _ := runCLI("trials", "--db", db, "--json", "killed")
	var before []trialJSON
	if code != 0 || json.Unmarshal([]byte(out), &before) != nil {
		t.Fatalf("trials after the kill: exit %d\n%s", code, out)
	}
	unfinished := 0
	for _, r := range before {
		if r.Status == "RUNNING" {
			unfinished++
		}
	}
	if unfinished == 0 {
		t.Fatalf("the kill left no trial unfinished: %+v", before)
	}

	if code, stdout, stderr := runCLI("run", "--db", db, sweep); code != 0 {
		t.Fatalf("the run after the kill: exit %d\n%s\n%s", code, stdout, stderr)
	}
	// An undisturbed run of the same sweep, for the metrics.
	fresh := filepath.Join(t.TempDir(), "fresh.db")
	if code, _, stderr := runCLI("run", "--db", fresh, sweep); code != 0 {
		t.Fatalf("undisturbed run: exit %d\n%s", code, stderr)
	}
	after, want := trialRows(t, db), trialRows(t, fresh)
	if len(after) != trials {
		t.Fatalf("%d trials after the resume, want exactly %d", len(after), trials)
	}
	restarted := 0
	for i, r := range after {
		if r.Status != "TERMINATED" || r.Iterations != epochs {
			t.Errorf("trial %d: %s with %d iterations, want TERMINATED with %d", r.TrialID, r.Status, r.Iterations, epochs)
		}
		if *r.LastMetric != *want[i].LastMetric || *r.BestMetric != *want[i].BestMetric {
			t.Errorf("trial %d: val_acc last %v best %v, an undisturbed run %v %v", r.TrialID, *r.LastMetric, *r.BestMetric, *want[i].LastMetric, *want[i].BestMetric)
		}
		restarted += r.Restarts
	}
	if restarted < unfinished {
		t.Errorf("%d restarts recorded for %d interrupted trials", restarted, unfinished)
	}
	// The experiment has ended: running it again is refused, and --resume
	// of an experiment that is not there is bad input.
	if code, _, stderr := runCLI("run", "--db", db, sweep); code != 2 || !strings.Contains(stderr, "has already ended") {
		t.Errorf("a third run: exit %d\n%s", code, stderr)
	}
	if code, _, stderr := runCLI("run", "--resume", "--db", filepath.Join(t.TempDir(), "none.db"), sweep); code != 2 || !strings.Contains(stderr, "nothing to resume") {
		t.Errorf("--resume without an experiment: exit %d\n%s", code, stderr)
	}
}

func trialRows(t *testing.T, db string) []trialJSON {
	t.Helper()
	return trialRowsOf(t, db, "killed")
}

// trialRowsOf is `gotune trials --json` of experiment exp in db.
func trialRowsOf(t *testing.T, db, exp string) []trialJSON {
	t.Helper()
	code, out, stderr := runCLI("trials", "--db", db, "--json", exp)
	var rows []trialJSON
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil {
		t.Fatalf("trials: exit %d\n%s%s", code, out, stderr)
	}
	return rows
}
