package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gotune/gotune/cluster"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/workers"
)

// launchedEpochs is the length of TestSlurmLauncher's trials: long enough
// to cancel a job in the middle of one.
const launchedEpochs = 150

// TestSlurmLauncher runs a sweep of 4 trials, 2 at a time, with [cluster]
// launcher = "slurm" on a real one-node Slurm cluster, from outside any
// job as from a login node: every worker runs on the agent of a Slurm job
// the sweep submitted, sized for one group. scancel of one of those jobs
// in the middle of a trial fails that trial's group as a lost node; a
// replacement job is submitted and the trial restarts from its checkpoint.
// The sweep ends with the results of the same sweep run here without
// Slurm, and with none of its jobs left in the queue. A second run of the
// experiment meanwhile is refused without touching the first's jobs.
func TestSlurmLauncher(t *testing.T) {
	slurmUp(t)
	dir := t.TempDir()
	want := trialRowsOf(t, runHere(t, slurmSweep(t, t.TempDir(), "launched", filepath.Join(dir, "unused.db"), launchedEpochs)), "launched")
	db := filepath.Join(dir, "gotune.db")
	sweep := slurmSweep(t, dir, "launched", db, launchedEpochs)
	appendTo(t, sweep, "[trainer.failure]\nmax_failures = 3\n[cluster]\nlauncher = \"slurm\"\n")
	name := cluster.SlurmJobName(db, "launched")
	t.Cleanup(func() { exec.Command("scancel", "--name="+name).Run() })

	// A process of its own, as a user runs it on a login node.
	cmd := gotune(t, "run", sweep)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	defer func() {
		if t.Failed() { // the launcher's lines on its jobs and agents
			t.Logf("gotune run's stderr:\n%s", &stderr)
		}
	}()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	// Once both running trials are well under way, cancel one of the two
	// jobs: each holds the group of one of them.
	var cancelled string
	// Other jobs on the cluster may hold its CPUs for a while.
	deadline := time.Now().Add(2 * time.Minute)
	for cancelled == "" {
		select {
		case err := <-done:
			t.Fatalf("the sweep ended (%v) before a job could be cancelled:\n%s%s", err, &stdout, &stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no two trials under way in two running jobs within 2 minutes; queue: %v", jobsNamed(t, name))
		}
		rows, _ := tryTrials(db, "launched")
		running := 0
		for _, r := range rows {
			if r.Status == "RUNNING" && r.Iterations >= 10 && r.Iterations < launchedEpochs-20 {
				running++
			}
		}
		if jobs := jobsNamed(t, name); running == 2 && len(jobs) == 2 {
			// A second run of the experiment is refused, and leaves the
			// jobs of the first alone.
			if code, _, stderr := runCLI("run", sweep); code != 2 || !strings.Contains(stderr, "experiment is already running") {
				t.Errorf("a second run while the sweep runs: exit %d, want 2, already running:\n%s", code, stderr)
			}
			if again := jobsNamed(t, name); !slices.Equal(again, jobs) {
				t.Errorf("the second run changed the queue from %v to %v", jobs, again)
			}
			cancelled = jobs[0]
			if err := exec.Command("scancel", cancelled).Run(); err != nil {
				t.Fatalf("scancel %s: %v", cancelled, err)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}

	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("gotune run: %v\n%s%s", err, &stdout, &stderr)
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("the sweep did not end within 3 minutes after job %s was cancelled", cancelled)
	}
	r := struct{ out, stderr string }{stdout.String(), stderr.String()}
	if left := jobsNamed(t, name); len(left) > 0 {
		t.Errorf("jobs %v of the sweep are still in the queue after it ended", left)
	}
	if !strings.Contains(r.stderr, "Slurm job "+cancelled+" ended (CANCELLED") {
		t.Errorf("the run did not say job %s was cancelled:\n%s", cancelled, r.stderr)
	}

	got := trialRowsOf(t, db, "launched")
	if len(got) != 4 {
		t.Fatalf("%d trials, want 4:\n%s", len(got), r.out)
	}
	restarts := 0
	for i, g := range got {
		if g.Status != "TERMINATED" || g.Iterations != launchedEpochs {
			t.Errorf("trial %d: %s with %d iterations, want TERMINATED with %d", g.TrialID, g.Status, g.Iterations, launchedEpochs)
		}
		if g.LastMetric == nil || want[i].LastMetric == nil || *g.LastMetric != *want[i].LastMetric || *g.BestMetric != *want[i].BestMetric {
			t.Errorf("trial %d: val_acc last %v best %v through Slurm, %v %v here", g.TrialID, num(g.LastMetric), num(g.BestMetric), num(want[i].LastMetric), num(want[i].BestMetric))
		}
		restarts += g.Restarts
	}
	if restarts != 1 {
		t.Errorf("%d restarts, want 1 (the trial of cancelled job %s):\n%s", restarts, cancelled, r.out)
	}
	if !strings.Contains(r.out, "restart with 2 workers from the checkpoint of iteration") {
		t.Errorf("the restarted trial did not start from a checkpoint:\n%s", r.out)
	}

	// Every worker ran on a job's agent, the cancelled job's among them and
	// another's. (A replacement job is submitted only while a group waits
	// for one, so the restarted trial may run on the other job's agent
	// once that agent is free, before any replacement is needed.)
	code, out, qerr := runCLI("query", "--db", db, "--json", "SELECT DISTINCT node FROM workers ORDER BY node")
	var nodes []struct{ Node string }
	if code != 0 || json.Unmarshal([]byte(out), &nodes) != nil {
		t.Fatalf("query: exit %d\n%s%s", code, out, qerr)
	}
	var names []string
	for _, n := range nodes {
		names = append(names, n.Node)
		if !strings.HasPrefix(n.Node, "slurm-") {
			t.Errorf("a worker ran on node %q, not on a Slurm job's agent", n.Node)
		}
	}
	if !slices.Contains(names, "slurm-"+cancelled+"-0") || len(names) < 2 {
		t.Errorf("workers ran on %v; want the cancelled job %s's agent and at least one more", names, cancelled)
	}
}

// appendTo appends text to the file at path.
func appendTo(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
}

// jobsNamed lists the ids of the running or pending jobs named name, in
// id order.
func jobsNamed(t *testing.T, name string) []string {
	t.Helper()
	out, err := exec.Command("squeue", "--noheader", "--name="+name, "--sort=i", "--format=%i").Output()
	if err != nil {
		t.Fatalf("squeue: %v", err)
	}
	return strings.Fields(string(out))
}

// TestSlurmLauncherNeedsSbatch checks that a sweep with launcher = "slurm"
// where Slurm's commands are not in PATH stops before it starts, with exit
// 2 and a message that says what is missing.
func TestSlurmLauncherNeedsSbatch(t *testing.T) {
	dir := t.TempDir()
	sweep := slurmSweep(t, dir, "nosbatch", filepath.Join(dir, "gotune.db"), 2)
	appendTo(t, sweep, "[cluster]\nlauncher = \"slurm\"\n")
	t.Setenv("PATH", t.TempDir())
	code, out, stderr := runCLI("run", sweep)
	if code != 2 || !strings.Contains(stderr, "needs Slurm's sbatch, which is not in PATH") {
		t.Errorf("exit %d, want 2 naming sbatch:\n%s%s", code, out, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "gotune.db")); err == nil {
		t.Error("the sweep created its database before it refused to start")
	}
}

// TestSlurmLauncherRefusedJob checks that a sweep whose jobs Slurm refuses
// (a partition it does not have) stops before it starts, with exit 2 and
// sbatch's own message.
func TestSlurmLauncherRefusedJob(t *testing.T) {
	slurmUp(t)
	dir := t.TempDir()
	sweep := slurmSweep(t, dir, "refused", filepath.Join(dir, "gotune.db"), 2)
	appendTo(t, sweep, "[cluster]\nlauncher = \"slurm\"\npartition = \"nosuchpartition\"\n")
	code, out, stderr := runCLI("run", sweep)
	if code != 2 || !strings.Contains(stderr, "sbatch") || !strings.Contains(stderr, "invalid partition") {
		t.Errorf("exit %d, want 2 with sbatch's message:\n%s%s", code, out, stderr)
	}
	if left := jobsNamed(t, cluster.SlurmJobName(filepath.Join(dir, "gotune.db"), "refused")); len(left) > 0 {
		t.Errorf("jobs %v in the queue", left)
	}
}

// TestSlurmGroupSize checks what the sweep file's scaling makes of an
// agent job's size: one trial group at its largest.
func TestSlurmGroupSize(t *testing.T) {
	for _, tt := range []struct {
		name    string
		scaling trainer.ScalingConfig
		want    cluster.GroupSize
	}{
		{"defaults", trainer.ScalingConfig{}, cluster.GroupSize{Workers: 1}},
		{"memory and GPUs", trainer.ScalingConfig{NumWorkers: 2, CPUsPerWorker: 4, GPUsPerWorker: 0.5, MemoryPerWorker: 3 * workers.GiB},
			cluster.GroupSize{Workers: 2, CPUsPerWorker: 4, GPUsPerWorker: 0.5, MemoryPerWorker: 3 * workers.GiB}},
		{"elastic, at its largest", trainer.ScalingConfig{MinWorkers: 1, MaxWorkers: 4, CPUsPerWorker: 2}, cluster.GroupSize{Workers: 4, CPUsPerWorker: 2}},
		{"spread", trainer.ScalingConfig{NumWorkers: 4, Placement: workers.Spread}, cluster.GroupSize{Workers: 4, Placement: workers.Spread}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := groupSize(tt.scaling); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
