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

	"github.com/gotune/gotune/storage"
)

// slurmUp makes sure a Slurm cluster takes jobs: as root it brings up the
// one-node cluster of scripts/slurm-up.sh (which changes nothing where it is
// up already); as another user it needs one up. Where there is none, and
// where Slurm is not installed, the test is skipped, except in CI
// (GOTUNE_CI=1) where it fails.
func slurmUp(t *testing.T) {
	t.Helper()
	missing := ""
	for _, p := range []string{"sbatch", "squeue", "scancel", "slurmctld", "slurmd", "munged"} {
		if _, err := exec.LookPath(p); err != nil {
			missing = p + " (apt-get install slurm-wlm munge)"
			break
		}
	}
	if missing == "" && os.Geteuid() == 0 {
		out, err := exec.Command(filepath.Join(repoRoot, "scripts/slurm-up.sh")).CombinedOutput()
		if err != nil {
			t.Fatalf("scripts/slurm-up.sh: %v\n%s", err, out)
		}
	} else if missing == "" {
		if out, _ := exec.Command("sinfo", "-h", "-o", "%T").Output(); !strings.Contains(string(out), "idle") && !strings.Contains(string(out), "mix") {
			missing = "a Slurm cluster with a node up (run scripts/slurm-up.sh as root)"
		}
	}
	if missing != "" {
		if os.Getenv("GOTUNE_CI") == "1" {
			t.Fatalf("the Slurm test needs %s, and GOTUNE_CI is set", missing)
		}
		t.Skipf("the Slurm test needs %s", missing)
	}
}

// slurmJob is a submission of deploy/slurm/gotune.sbatch, with this test
// binary standing in for gotune.
type slurmJob struct {
	dir, sweep string
	cpus       int // --cpus-per-task
}

// run submits the documented script for the sweep, waits until the job
// has ended, and returns its id and, where it did not complete with exit
// code 0, an error saying how it ended.
func (j slurmJob) run(t *testing.T) (string, error) {
	t.Helper()
	id := j.submit(t)
	waitJobGone(t, id, 2*time.Minute)
	out, err := exec.Command("scontrol", "-o", "show", "job", id).Output()
	if err != nil {
		t.Fatalf("scontrol show job %s: %v", id, err)
	}
	state, exit := field(string(out), "JobState"), field(string(out), "ExitCode")
	if state != "COMPLETED" || exit != "0:0" {
		return id, fmt.Errorf("job %s ended %s, exit code %s", id, state, exit)
	}
	return id, nil
}

// field is the value of key in scontrol's one-line key=value output.
func field(line, key string) string {
	for _, kv := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}

// submit submits the documented script for the sweep and returns the
// job's id.
func (j slurmJob) submit(t *testing.T) string {
	t.Helper()
	script, err := filepath.Abs(filepath.Join(repoRoot, "deploy/slurm/gotune.sbatch"))
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--parsable", "--nodes=1", fmt.Sprintf("--cpus-per-task=%d", j.cpus), "--chdir=" + j.dir,
		"--output=" + filepath.Join(j.dir, "job-%j.out"), script, j.sweep}
	cmd := exec.Command("sbatch", args...)
	cmd.Env = append(os.Environ(), "GOTUNE="+os.Args[0], "GOTUNE_AS_MAIN=1", "GOTUNE_PORT="+freePort(t))
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("sbatch: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("sbatch: %v", err)
	}
	id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
	return id
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
// its agent ran under srun offering the one CPU Slurm gave its task (read
// from Slurm's environment), and the sweep's results in SQLite are those of
// the same sweep run without Slurm.
func TestSlurmBatchScript(t *testing.T) {
	slurmUp(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "gotune.db")
	// One CPU, fewer than the node has: the agent offers what Slurm gave.
	job := slurmJob{dir: dir, sweep: slurmSweep(t, dir, "slurm", db, 8), cpus: 1}
	id, err := job.run(t)
	if err != nil {
		t.Fatalf("job %s: %v\n%s", id, err, job.output(id))
	}
	out := job.output(id)
	if !strings.Contains(out, "best trial:") || !strings.Contains(out, "joined from") {
		t.Errorf("job %s's output lacks the agent's joining or the sweep's summary:\n%s", id, out)
	}
	if !strings.Contains(out, ": 1 CPU, ") {
		t.Errorf("job %s's agent did not offer the 1 CPU Slurm gave its task:\n%s", id, out)
	}
	got := trialRowsOf(t, db, "slurm")
	want := trialRowsOf(t, runHere(t, job.sweep), "slurm")
	if len(got) != 4 {
		t.Fatalf("%d trials under Slurm, want 4:\n%s", len(got), out)
	}
	for i, r := range got {
		if r.Status != "TERMINATED" || r.Iterations != 8 {
			t.Errorf("trial %d: %s with %d iterations, want TERMINATED with 8", r.TrialID, r.Status, r.Iterations)
		}
		if r.LastMetric == nil || want[i].LastMetric == nil || *r.LastMetric != *want[i].LastMetric {
			t.Errorf("trial %d: val_acc %v under Slurm, %v without", r.TrialID, num(r.LastMetric), num(want[i].LastMetric))
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

// TestSlurmCancelAndResubmit cancels a job of deploy/slurm/gotune.sbatch
// mid-sweep: by scancel, which signals every step at once as preemption
// does; by SIGTERM to the batch script alone, as --signal=B:TERM@60 does
// before the time limit; and by SIGTERM to the agents' step first (its
// workers die of it before the head hears of the end). gotune exits on its SIGTERM well
// within KillWait, with no trial failed or ended early for it and the
// interrupted ones left to continue. Submitting the same script again
// finishes the sweep: exactly num_samples trials, none run twice, each
// with the results of an undisturbed run (the built-in model resumes from
// its checkpoints bit for bit).
// preemptedEpochs is the length of TestSlurmCancelAndResubmit's trials.
const preemptedEpochs = 40

func TestSlurmCancelAndResubmit(t *testing.T) {
	slurmUp(t)
	dir := t.TempDir()
	undisturbed := trialRowsOf(t, runHere(t, slurmSweep(t, dir, "preempted", filepath.Join(dir, "unused.db"), preemptedEpochs)), "preempted")
	for _, c := range []struct {
		name   string
		cancel func(id string) error
	}{
		{"scancel", func(id string) error { return exec.Command("scancel", id).Run() }},
		// As --signal=B:TERM@60 does before the time limit.
		{"batch script only", func(id string) error { return exec.Command("scancel", "--batch", "--signal=TERM", id).Run() }},
		{"agents first", func(id string) error {
			if err := exec.Command("scancel", "--signal=TERM", id+".0").Run(); err != nil {
				return err
			}
			time.Sleep(300 * time.Millisecond)
			return exec.Command("scancel", id).Run()
		}},
	} {
		t.Run(c.name, func(t *testing.T) { cancelAndResubmit(t, c.cancel, undisturbed) })
	}
}

// cancelAndResubmit runs the sweep as a job, cancels it, resubmits it and
// compares the results with want, those of an undisturbed run.
func cancelAndResubmit(t *testing.T, cancel func(id string) error, want []trialJSON) {
	dir := t.TempDir()
	db := filepath.Join(dir, "gotune.db")
	job := slurmJob{dir: dir, sweep: slurmSweep(t, dir, "preempted", db, preemptedEpochs), cpus: 2}
	id := job.submit(t)
	t.Cleanup(func() { exec.Command("scancel", id).Run() })

	deadline := time.Now().Add(time.Minute)
	for {
		if rows, ok := tryTrials(db, "preempted"); ok && len(rows) > 0 && rows[0].Iterations >= 10 {
			break
		}
		if s := jobState(id); s != "PENDING" && s != "RUNNING" {
			t.Fatalf("job %s is %q before it could be cancelled:\n%s", id, s, job.output(id))
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sweep of job %s made no progress:\n%s", id, job.output(id))
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancelled := time.Now()
	if err := cancel(id); err != nil {
		t.Fatalf("scancel %s: %v", id, err)
	}
	waitJobGone(t, id, time.Minute)
	// KillWait is 30 s: gotune must have ended before Slurm's SIGKILL.
	if took := time.Since(cancelled); took > 20*time.Second {
		t.Errorf("job %s took %v to end after scancel", id, took)
	}
	out := job.output(id)
	if !strings.Contains(out, "interrupted: completed reports are in") {
		t.Errorf("gotune did not end on its own after the SIGTERM:\n%s", out)
	}
	interrupted := 0
	for _, r := range trialRowsOf(t, db, "preempted") {
		switch r.Status {
		case storage.TrialInterrupted:
			interrupted++
			// Its history says the run stopped while it ran.
			if code, show, _ := runCLI("show", "--db", db, "preempted", fmt.Sprint(r.TrialID)); code != 0 || !strings.Contains(show, "interrupt") {
				t.Errorf("trial %d's history has no interrupt event:\n%s", r.TrialID, show)
			}
		case "TERMINATED":
		default:
			t.Errorf("trial %d is %s after scancel (%s), want INTERRUPTED or TERMINATED:\n%s", r.TrialID, r.Status, r.Error, out)
		}
	}
	if interrupted == 0 {
		t.Fatalf("scancel interrupted no trial:\n%s", out)
	}

	id2, err := job.run(t)
	if err != nil {
		t.Fatalf("the resubmitted job %s: %v\n%s", id2, err, job.output(id2))
	}
	got := trialRowsOf(t, db, "preempted")
	if len(got) != 4 {
		t.Fatalf("%d trials after the resubmission, want exactly 4:\n%s", len(got), job.output(id2))
	}
	seen := map[string]int{}
	restarts := 0
	for i, r := range got {
		b, _ := json.Marshal(r.Params)
		if first, ok := seen[string(b)]; ok {
			t.Errorf("trial %d repeats trial %d's configuration %s", r.TrialID, first, b)
		}
		seen[string(b)] = r.TrialID
		if r.Status != "TERMINATED" || r.Iterations != preemptedEpochs {
			t.Errorf("trial %d: %s with %d iterations, want TERMINATED with %d", r.TrialID, r.Status, r.Iterations, preemptedEpochs)
		}
		if r.LastMetric == nil || want[i].LastMetric == nil || *r.LastMetric != *want[i].LastMetric || *r.BestMetric != *want[i].BestMetric {
			t.Errorf("trial %d: val_acc last %v best %v, undisturbed %v %v", r.TrialID, num(r.LastMetric), num(r.BestMetric), num(want[i].LastMetric), num(want[i].BestMetric))
		}
		restarts += r.Restarts
	}
	if restarts < interrupted {
		t.Errorf("%d restarts recorded for %d interrupted trials", restarts, interrupted)
	}
}

// tryTrials is `gotune trials --json` of experiment name in db, and false
// where it cannot be read (yet).
func tryTrials(db, name string) ([]trialJSON, bool) {
	code, out, _ := runCLI("trials", "--db", db, "--json", name)
	var rows []trialJSON
	return rows, code == 0 && json.Unmarshal([]byte(out), &rows) == nil
}

// num is *p, or nil.
func num(p *storage.Number) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestSlurmCancelKeepsAJustInTimeCheckpoint cancels a Slurm job of a sweep
// of Python command workers that save a checkpoint only when asked to stop
// (gotune.should_checkpoint): Slurm's SIGTERM reaches them directly, their
// agent relays the checkpoints they hand over as they exit, the head keeps
// them, and the resubmitted job resumes every interrupted trial from the
// epoch where it stopped.
func TestSlurmCancelKeepsAJustInTimeCheckpoint(t *testing.T) {
	slurmUp(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "gotune.db")
	job := slurmJob{dir: dir, sweep: jitSweep(t, dir, db), cpus: 2}
	id := job.submit(t)
	t.Cleanup(func() { exec.Command("scancel", id).Run() })
	deadline := time.Now().Add(time.Minute)
	for {
		if rows, ok := tryTrials(db, "jit"); ok && len(rows) == 2 && rows[0].Iterations >= 5 && rows[1].Iterations >= 5 {
			break
		}
		if s := jobState(id); s != "PENDING" && s != "RUNNING" {
			t.Fatalf("job %s is %q before it could be cancelled:\n%s", id, s, job.output(id))
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sweep of job %s made no progress:\n%s", id, job.output(id))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := exec.Command("scancel", id).Run(); err != nil {
		t.Fatalf("scancel %s: %v", id, err)
	}
	waitJobGone(t, id, time.Minute)
	stopped := map[int]int{}
	for _, r := range trialRowsOf(t, db, "jit") {
		if r.Status != storage.TrialInterrupted {
			t.Fatalf("trial %d is %s after scancel, want INTERRUPTED:\n%s", r.TrialID, r.Status, job.output(id))
		}
		stopped[r.TrialID] = r.Iterations
	}
	if id2, err := job.run(t); err != nil {
		t.Fatalf("the resubmitted job %s: %v\n%s", id2, err, job.output(id2))
	}
	checkResumedWhereStopped(t, db, stopped)
}
