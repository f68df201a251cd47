package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// slurmUp brings up the one-node Slurm cluster of scripts/slurm-up.sh (it
// changes nothing where it is up already). Where that cannot be done, not
// root or Slurm not installed, the test is skipped, except in CI
// (GOTUNE_CI=1) where it fails.
func slurmUp(t *testing.T) {
	t.Helper()
	missing := ""
	if os.Geteuid() != 0 {
		missing = "root (slurmd and munged run as root)"
	} else {
		for _, p := range []string{"sbatch", "slurmctld", "slurmd", "munged"} {
			if _, err := exec.LookPath(p); err != nil {
				missing = p + " (apt-get install slurm-wlm munge)"
				break
			}
		}
	}
	if missing != "" {
		if os.Getenv("GOTUNE_CI") == "1" {
			t.Fatalf("the Slurm test needs %s, and GOTUNE_CI is set", missing)
		}
		t.Skipf("the Slurm test needs %s", missing)
	}
	out, err := exec.Command(filepath.Join(repoRoot, "scripts/slurm-up.sh")).CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/slurm-up.sh: %v\n%s", err, out)
	}
}

// slurmJob is a submission of deploy/slurm/gotune.sbatch, with this test
// binary standing in for gotune.
type slurmJob struct {
	dir, sweep string
}

// submit submits the documented script for the sweep and returns the
// job's id. wait makes sbatch return only once the job has ended.
func (j slurmJob) submit(t *testing.T, wait bool, extra ...string) (string, error) {
	t.Helper()
	script, err := filepath.Abs(filepath.Join(repoRoot, "deploy/slurm/gotune.sbatch"))
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--parsable", "--nodes=1", "--cpus-per-task=2", "--chdir=" + j.dir,
		"--output=" + filepath.Join(j.dir, "job-%j.out")}
	if wait {
		args = append(args, "--wait")
	}
	args = append(append(args, extra...), script, j.sweep)
	cmd := exec.Command("sbatch", args...)
	cmd.Env = append(os.Environ(), "GOTUNE="+os.Args[0], "GOTUNE_AS_MAIN=1", "GOTUNE_PORT="+freePort(t))
	out, err := cmd.Output()
	id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
	if err != nil && id == "" {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("sbatch: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("sbatch: %v", err)
	}
	return id, err
}

// output is the job's output file.
func (j slurmJob) output(id string) string {
	b, _ := os.ReadFile(filepath.Join(j.dir, "job-"+id+".out"))
	return string(b)
}

// slurmSweep is a quickstart-like sweep of the built-in model whose results
// go to db: 4 trials, 2 at a time, of 2 data-parallel process workers.
func slurmSweep(t *testing.T, dir, name, db string, epochs int) string {
	t.Helper()
	dataset, err := filepath.Abs(filepath.Join(repoRoot, "examples/data/digits.csv"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name+".toml")
	body := fmt.Sprintf(`name = %q
seed = 7
storage = %q
[objective]
metric = "val_acc"
mode = "max"
[search]
algorithm = "random"
num_samples = 4
max_concurrent = 2
[search.space]
lr = { loguniform = [0.003, 0.1] }
hidden = { choice = [32, 64] }
epochs = %d
[scheduler]
kind = "fifo"
[trainer]
model = "mlp"
dataset = %q
[trainer.scaling]
num_workers = 2
cpus_per_worker = 0.5
[trainer.checkpoint]
num_to_keep = 2
`, name, db, epochs, dataset)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSlurmBatchScript submits deploy/slurm/gotune.sbatch, as docs/cluster.md
// says, to a real one-node Slurm cluster: the job ends COMPLETED (exit 0),
// its agent ran under srun with the CPUs Slurm gave its task, and the sweep's
// results in SQLite are those of the same sweep run without Slurm.
func TestSlurmBatchScript(t *testing.T) {
	slurmUp(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "gotune.db")
	job := slurmJob{dir: dir, sweep: slurmSweep(t, dir, "slurm", db, 8)}
	id, err := job.submit(t, true)
	if err != nil {
		t.Fatalf("job %s: %v\n%s", id, err, job.output(id))
	}
	out := job.output(id)
	if !strings.Contains(out, "best trial:") || !strings.Contains(out, "joined") {
		t.Errorf("job %s's output lacks the agent's joining or the sweep's summary:\n%s", id, out)
	}
	got := trialsOf(t, db, "slurm")
	want := trialsOf(t, runHere(t, job.sweep), "slurm")
	if len(got) != 4 {
		t.Fatalf("%d trials under Slurm, want 4:\n%s", len(got), out)
	}
	for i, r := range got {
		if r.Status != "TERMINATED" || r.Iterations != 8 {
			t.Errorf("trial %d: %s with %d iterations, want TERMINATED with 8", r.TrialID, r.Status, r.Iterations)
		}
		if r.LastMetric == nil || want[i].LastMetric == nil || *r.LastMetric != *want[i].LastMetric {
			t.Errorf("trial %d: val_acc %v under Slurm, %v without", r.TrialID, r.LastMetric, want[i].LastMetric)
		}
	}
}

// runHere runs sweep in this process, without Slurm, into a new database,
// and returns the database's path.
func runHere(t *testing.T, sweep string) string {
	t.Helper()
	db := filepath.Join(t.TempDir(), "here.db")
	if code, stdout, stderr := runCLI("run", "--db", db, sweep); code != 0 {
		t.Fatalf("the sweep without Slurm: exit %d\n%s%s", code, stdout, stderr)
	}
	return db
}

// trialsOf is `gotune trials --json` of experiment name in db.
func trialsOf(t *testing.T, db, name string) []trialJSON {
	t.Helper()
	code, out, stderr := runCLI("trials", "--db", db, "--json", name)
	var rows []trialJSON
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil {
		t.Fatalf("trials: exit %d\n%s%s", code, out, stderr)
	}
	return rows
}

// jobState is the state sacct-less Slurm reports for a job: squeue's while
// it is queued or runs, "" once it has left the queue.
func jobState(id string) string {
	out, _ := exec.Command("squeue", "-h", "-j", id, "-o", "%T").Output()
	return strings.TrimSpace(string(out))
}

// waitJobGone waits until job id has left the queue.
func waitJobGone(t *testing.T, id string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for jobState(id) != "" {
		if time.Now().After(deadline) {
			t.Fatalf("job %s still %s after %v", id, jobState(id), within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
