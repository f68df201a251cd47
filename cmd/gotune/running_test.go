package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gotune/gotune/storage"
)

// liveSweep writes a small sweep of the built-in MLP named name.
func liveSweep(t *testing.T, name string, trials, epochs int) string {
	t.Helper()
	dataset, err := filepath.Abs(filepath.Join(repoRoot, "examples/data/digits.csv"))
	if err != nil {
		t.Fatal(err)
	}
	return writeSweep(t, fmt.Sprintf(`name = %q
seed = 3
[objective]
metric = "val_acc"
mode = "max"
[search]
num_samples = %d
max_concurrent = 2
[search.space]
lr = { loguniform = [0.01, 0.1] }
epochs = %d
[trainer]
model = "mlp"
dataset = %q
`, name, trials, epochs, dataset))
}

// TestRunRefusesAnExperimentThatIsRunning holds an experiment's lock as a
// running sweep does: a second run of it is refused with a clear error and
// touches nothing.
func TestRunRefusesAnExperimentThatIsRunning(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gotune.db")
	sweep := liveSweep(t, "live", 1, 1)
	w, err := storage.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	lock, err := w.LockExperiment("live")
	if err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI("run", sweep, "--db", db)
	if code != 2 || !strings.Contains(stderr, "already running") || !strings.Contains(stderr, fmt.Sprintf("process %d", os.Getpid())) {
		t.Errorf("second run: exit %d, stderr:\n%s", code, stderr)
	}
	if exps, err := w.Experiments(t.Context()); err != nil || len(exps) != 0 {
		t.Errorf("the refused run recorded %v (%v)", exps, err)
	}
	lock.Release()
	if code, _, stderr := runCLI("run", sweep, "--db", db); code != 0 {
		t.Errorf("run after the lock was released: exit %d\n%s", code, stderr)
	}
}

// TestResultsWhileASweepRuns runs every results command against a database
// that a `gotune run` process is writing.
func TestResultsWhileASweepRuns(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gotune.db")
	cmd := gotune(t, "run", "--db", db, liveSweep(t, "live", 4, 15))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	jsonDoc := func(args ...string) bool {
		code, stdout, stderr := runCLI(append(args, "--db", db)...)
		if code != 0 {
			return false
		}
		if !json.Valid([]byte(stdout)) {
			t.Errorf("gotune %s during the run: not one JSON document:\n%s\n%s", strings.Join(args, " "), stdout, stderr)
		}
		return true
	}
	rounds := 0
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("gotune run: %v\n%s", err, out.String())
			}
			running = false
		default:
		}
		// Until the first report, best and show have nothing to show.
		if !jsonDoc("best", "live", "--json") {
			continue
		}
		ok := jsonDoc("ls", "--json") && jsonDoc("trials", "live", "--sort", "val_acc", "--json") &&
			jsonDoc("show", "live", "1", "--json") && jsonDoc("export", "live", "--format", "json") &&
			jsonDoc("query", "--json", "SELECT trial_id, count(*) AS n FROM reports_v GROUP BY trial_id")
		code, stdout, stderr := runCLI("export", "live", "--format", "csv", "--db", db)
		if _, err := csv.NewReader(strings.NewReader(stdout)).ReadAll(); code != 0 || err != nil {
			t.Errorf("export csv during the run: exit %d, %v\n%s", code, err, stderr)
		}
		if !ok {
			t.Fatal("a results command failed during the run")
		}
		if running {
			rounds++
		}
	}
	if rounds == 0 {
		t.Error("the sweep ended before any results command ran against it")
	}
	t.Logf("%d rounds of results commands during the run", rounds)
}
