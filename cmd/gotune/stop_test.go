package main

import (
	"encoding/csv"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotune/gotune/storage"
)

// jitWorker trains for {epochs} steps and saves a checkpoint only when it
// is asked to stop (gotune.should_checkpoint); every report says which
// epoch the run started from.
const jitWorker = `
import os, sys, time
sys.path.insert(0, sys.argv[1])
import gotune

cfg = gotune.config()
resumed_from = 0
if gotune.resume_dir():
    with open(os.path.join(gotune.resume_dir(), "epoch")) as f:
        resumed_from = int(f.read())
for epoch in range(resumed_from + 1, cfg["epochs"] + 1):
    time.sleep(0.02)
    loss = 1.0 / (epoch * cfg["x"])
    if gotune.should_checkpoint():
        ckpt = gotune.checkpoint_dir()
        with open(os.path.join(ckpt, "epoch"), "w") as f:
            f.write(str(epoch))
        gotune.report(epoch=epoch, loss=loss, resumed_from=resumed_from, checkpoint=ckpt)
        sys.exit("not reached: the report ends a stopped worker")
    gotune.report(epoch=epoch, loss=loss, resumed_from=resumed_from)
`

// TestStopKeepsAJustInTimeCheckpoint stops `gotune run` with SIGTERM, as a
// batch system does, mid-sweep. Its command workers, told to stop, save a
// checkpoint at once (gotune.should_checkpoint) and hand it over as they
// exit: gotune keeps it though the run is stopping, and the run that
// continues the sweep resumes every interrupted trial from it, at the
// iteration where it stopped.
func TestStopKeepsAJustInTimeCheckpoint(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "gotune.db")
	sweep := jitSweep(t, dir, db)

	cmd := gotune(t, "run", "--db", db, sweep)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(time.Minute)
	for {
		rows, ok := tryTrials(db, "jit")
		if ok && len(rows) == 2 && rows[0].Iterations >= 5 && rows[1].Iterations >= 5 {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("the sweep ended before it could be stopped: %v\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sweep made no progress:\n%s", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(8 * time.Second): // before the 10 s grace ran out
		cmd.Process.Kill()
		t.Fatalf("gotune run did not exit after SIGTERM:\n%s", out.String())
	}
	stopped := map[int]int{} // trial -> iterations when stopped
	for _, r := range trialRowsOf(t, db, "jit") {
		if r.Status != storage.TrialInterrupted {
			t.Fatalf("trial %d is %s after the SIGTERM, want INTERRUPTED:\n%s", r.TrialID, r.Status, out.String())
		}
		stopped[r.TrialID] = r.Iterations
	}

	if code, stdout, stderr := runCLI("run", "--db", db, sweep); code != 0 {
		t.Fatalf("the run that continues: exit %d\n%s%s", code, stdout, stderr)
	}
	checkResumedWhereStopped(t, db, stopped)
}

// jitEpochs is the length of jitSweep's trials.
const jitEpochs = 150

// jitSweep writes a sweep of two trials of jitWorker, run at once, into
// dir, with its results in db.
func jitSweep(t *testing.T, dir, db string) string {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("GOTUNE_CI") == "1" {
			t.Fatal("python3 is needed in CI")
		}
		t.Skip("no python3")
	}
	pydir, err := filepath.Abs(filepath.Join(repoRoot, "python"))
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "train.py")
	if err := os.WriteFile(script, []byte(jitWorker), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "jit.toml")
	body := fmt.Sprintf(`name = "jit"
storage = %q
[objective]
metric = "loss"
mode = "min"
[search]
algorithm = "grid"
max_concurrent = 2
[search.space]
x = { grid = [1.0, 2.0] }
epochs = %d
[trainer]
command = [%q, %q, %q]
[trainer.checkpoint]
num_to_keep = 1
`, db, jitEpochs, python, script, pydir)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// checkResumedWhereStopped checks that every trial of jitSweep in db ran to
// its end and resumed from the epoch stopped gives it.
func checkResumedWhereStopped(t *testing.T, db string, stopped map[int]int) {
	t.Helper()
	code, csvOut, stderr := runCLI("query", "--db", db, "--csv",
		"SELECT trial_id, max(json_extract(metrics_json, '$.resumed_from')), max(iteration) FROM reports_v WHERE experiment = 'jit' GROUP BY trial_id ORDER BY trial_id")
	if code != 0 {
		t.Fatalf("query: exit %d\n%s", code, stderr)
	}
	records, err := csv.NewReader(strings.NewReader(csvOut)).ReadAll()
	if err != nil || len(records) != 3 {
		t.Fatalf("query: %v\n%s", err, csvOut)
	}
	for _, rec := range records[1:] {
		trial, _ := strconv.Atoi(rec[0])
		from, _ := strconv.Atoi(rec[1])
		last, _ := strconv.Atoi(rec[2])
		if from != stopped[trial] || last != jitEpochs {
			t.Errorf("trial %d resumed from epoch %d and ended at %d; it was stopped at %d and has %d epochs", trial, from, last, stopped[trial], jitEpochs)
		}
	}
}
