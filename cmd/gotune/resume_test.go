package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotune/gotune/storage"
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
		if r.Status == storage.TrialInterrupted {
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

// tpeWorker reports a loss of its trial's x and lr three times, a tenth
// of a second apart.
const tpeWorker = `
for e in 1 2 3; do
	sleep 0.1
	loss=$(awk -v x="$1" -v lr="$2" -v e="$e" 'BEGIN { printf "%.10g", (x - 0.3) * (x - 0.3) + (log(lr) / log(10) + 2) ^ 2 / 10 + 1 / e }')
	echo "@gotune {\"epoch\": $e, \"loss\": $loss}"
done
`

// TestKilledTPESweepRepeatsNoConfiguration kills `gotune run` of a TPE
// sweep of 12 trials, 3 at a time, with SIGKILL once 5 trials exist, and
// runs it again: no configuration is tried twice, and the sweep tries the
// configurations an undisturbed run does (all 12 are TPE's random
// start-up, which draws trial n's configuration from a generator of its
// own).
func TestKilledTPESweepRepeatsNoConfiguration(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "worker.sh")
	if err := os.WriteFile(script, []byte(tpeWorker), 0o644); err != nil {
		t.Fatal(err)
	}
	sweep := writeSweep(t, fmt.Sprintf(`name = "tpe"
seed = 4
[objective]
metric = "loss"
mode = "min"
[search]
algorithm = "tpe"
num_samples = 12
max_concurrent = 3
[search.space]
x = { uniform = [0.0, 1.0] }
lr = { loguniform = [1e-4, 1.0] }
act = { choice = ["relu", "tanh"] }
[trainer]
command = ["sh", %q, "{x}", "{lr}", "{act}"]
`, script))
	db := filepath.Join(dir, "gotune.db")
	rows := func(db string) []trialJSON {
		t.Helper()
		code, out, stderr := runCLI("trials", "--db", db, "--json", "tpe")
		var rows []trialJSON
		if code != 0 || json.Unmarshal([]byte(out), &rows) != nil {
			t.Fatalf("trials: exit %d\n%s%s", code, out, stderr)
		}
		return rows
	}

	cmd := gotune(t, "run", "--db", db, sweep)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(time.Minute)
	for {
		code, out, _ := runCLI("trials", "--db", db, "--json", "tpe")
		var rows []trialJSON
		if code == 0 && json.Unmarshal([]byte(out), &rows) == nil && len(rows) >= 5 {
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
	killed := rows(db)
	if len(killed) >= 12 {
		t.Fatalf("the kill came after every trial was created: %d trials", len(killed))
	}

	if code, stdout, stderr := runCLI("run", "--db", db, sweep); code != 0 {
		t.Fatalf("the run after the kill: exit %d\n%s\n%s", code, stdout, stderr)
	}
	fresh := filepath.Join(dir, "fresh.db")
	if code, _, stderr := runCLI("run", "--db", fresh, sweep); code != 0 {
		t.Fatalf("undisturbed run: exit %d\n%s", code, stderr)
	}
	got, want := rows(db), rows(fresh)
	if len(got) != 12 || len(want) != 12 {
		t.Fatalf("%d trials after the kill and the rerun, %d undisturbed; want 12", len(got), len(want))
	}
	seen := map[string]int{}
	for i, r := range got {
		b, _ := json.Marshal(r.Params)
		if first, ok := seen[string(b)]; ok {
			t.Errorf("trial %d repeats trial %d's configuration %s (the kill left %d trials)", r.TrialID, first, b, len(killed))
		}
		seen[string(b)] = r.TrialID
		if !reflect.DeepEqual(r.Params, want[i].Params) {
			t.Errorf("trial %d ran %v, in an undisturbed run %v", r.TrialID, r.Params, want[i].Params)
		}
	}
}
