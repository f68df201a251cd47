package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gotune/gotune/search"
)

// TestRunPointsAndWarmStart runs a sweep, then a TPE sweep that starts
// from points_to_evaluate and is warm-started from the first: its first
// trials run the points (a left-out parameter drawn), and gotune run
// says which of the first sweep's trials the searcher learnt from.
func TestRunPointsAndWarmStart(t *testing.T) {
	dataset, err := filepath.Abs(filepath.Join(repoRoot, "examples/data/digits.csv"))
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "gotune.db")
	sweep := func(name, search string) string {
		return writeSweep(t, fmt.Sprintf(`name = %q
seed = 3
[objective]
metric = "val_acc"
mode = "max"
[search]
%s
[search.space]
lr = { loguniform = [0.01, 0.1] }
hidden = { choice = [16, 32] }
epochs = 2
[trainer]
model = "mlp"
dataset = %q
`, name, search, dataset))
	}
	if code, out, errOut := runCLI("run", "--db", db, sweep("first", "num_samples = 3")); code != 0 {
		t.Fatalf("first sweep: exit %d\n%s\n%s", code, out, errOut)
	}
	second := sweep("second", `algorithm = "tpe"
num_samples = 3
warm_start = "first"
points_to_evaluate = [{ lr = 0.05, hidden = 16 }, { hidden = 32 }]`)
	code, out, errOut := runCLI("run", "--db", db, second)
	if code != 0 {
		t.Fatalf("second sweep: exit %d\n%s\n%s", code, out, errOut)
	}
	if want := `warm start: the searcher learnt from 3 of the 3 trials of "first"`; !strings.Contains(out, want) {
		t.Errorf("gotune run does not say %q:\n%s", want, out)
	}
	code, out, _ = runCLI("trials", "--db", db, "--json", "second")
	var rows []trialJSON
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 3 {
		t.Fatalf("trials: exit %d\n%s", code, out)
	}
	if p := rows[0].Params; p["lr"] != 0.05 || p["hidden"] != 16.0 {
		t.Errorf("trial 1 ran %v, want the first point", p)
	}
	if p := rows[1].Params; p["hidden"] != 32.0 || p["lr"] == nil {
		t.Errorf("trial 2 ran %v, want the second point with lr drawn", p)
	}
}

// TestRunWithUnmetConstraints runs a sweep whose constraint no trial can
// meet (every trial's last report is of its second epoch): gotune run
// exits 1 and says so, gotune trials marks every trial infeasible, and
// gotune best finds none.
func TestRunWithUnmetConstraints(t *testing.T) {
	dataset, err := filepath.Abs(filepath.Join(repoRoot, "examples/data/digits.csv"))
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "gotune.db")
	sweep := writeSweep(t, fmt.Sprintf(`name = "unmet"
seed = 3
[objective]
metric = "val_acc"
mode = "max"
constraints = ["epoch <= 1"]
[search]
num_samples = 2
[search.space]
lr = { loguniform = [0.01, 0.1] }
epochs = 2
[trainer]
model = "mlp"
dataset = %q
`, dataset))
	code, out, errOut := runCLI("run", "--db", db, sweep)
	if code != 1 || !strings.Contains(errOut, "no trial met the constraints: epoch <= 1") {
		t.Fatalf("run: exit %d, want 1 saying no trial met the constraints\n%s\n%s", code, out, errOut)
	}
	code, out, _ = runCLI("trials", "--db", db, "unmet")
	if code != 0 || strings.Count(out, "(infeasible)") != 2 {
		t.Errorf("trials: exit %d, want both trials marked infeasible:\n%s", code, out)
	}
	code, out, _ = runCLI("trials", "--db", db, "--json", "unmet")
	var rows []trialJSON
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 2 || rows[0].Feasible == nil || *rows[0].Feasible {
		t.Errorf("trials --json: exit %d, want feasible false:\n%s", code, out)
	}
	if code, _, errOut := runCLI("best", "--db", db, "unmet"); code != 2 || !strings.Contains(errOut, "none that did is feasible") {
		t.Errorf("best: exit %d\n%s", code, errOut)
	}
}

// TestRunSeveralObjectives runs a sweep of two objectives: gotune best
// lists the Pareto front (a JSON array with each trial's objectives),
// gotune trials marks its members, and the SQL view agrees.
func TestRunSeveralObjectives(t *testing.T) {
	dataset, err := filepath.Abs(filepath.Join(repoRoot, "examples/data/digits.csv"))
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "gotune.db")
	sweep := writeSweep(t, fmt.Sprintf(`name = "two"
seed = 3
[objective]
metric = ["val_loss", "val_acc"]
mode = ["min", "min"]
[search]
algorithm = "nsga2"
num_samples = 4
[search.space]
lr = { loguniform = [0.001, 0.3] }
epochs = 2
[trainer]
model = "mlp"
dataset = %q
`, dataset))
	code, out, errOut := runCLI("run", "--db", db, sweep)
	if code != 0 || !strings.Contains(out, "the Pareto front over val_loss (min), val_acc (min) has") {
		t.Fatalf("run: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ = runCLI("best", "--db", db, "--json", "two")
	var front []frontJSON
	if code != 0 || json.Unmarshal([]byte(out), &front) != nil || len(front) == 0 {
		t.Fatalf("best --json: exit %d\n%s", code, out)
	}
	for _, f := range front {
		if len(f.Objectives) != 2 {
			t.Errorf("front trial %d: objectives %v", f.TrialID, f.Objectives)
		}
	}
	code, out, _ = runCLI("trials", "--db", db, "--json", "two")
	var rows []trialJSON
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 4 {
		t.Fatalf("trials --json: exit %d\n%s", code, out)
	}
	members := 0
	for _, r := range rows {
		if r.OnFront == nil {
			t.Fatalf("trial %d has no on_front", r.TrialID)
		}
		if *r.OnFront {
			members++
		}
	}
	if members != len(front) {
		t.Errorf("trials marks %d on the front, best lists %d", members, len(front))
	}
	code, out, _ = runCLI("trials", "--db", db, "two")
	if code != 0 || strings.Count(out, "(front)") != len(front) {
		t.Errorf("trials: %d marked, want %d:\n%s", strings.Count(out, "(front)"), len(front), out)
	}
	code, out, _ = runCLI("query", "--db", db, "SELECT count(*) FROM trial_standing_v WHERE experiment = 'two' AND on_front = 1")
	if code != 0 || !strings.Contains(out, fmt.Sprint(len(front))) {
		t.Errorf("query: exit %d\n%s", code, out)
	}
}

// TestImportanceCommand runs a sweep and ranks its parameters: gotune
// importance prints a table and --json an array whose shares add up to 1;
// a metric that is not an objective is bad input.
func TestImportanceCommand(t *testing.T) {
	dataset, err := filepath.Abs(filepath.Join(repoRoot, "examples/data/digits.csv"))
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "gotune.db")
	sweep := writeSweep(t, fmt.Sprintf(`name = "imp"
seed = 3
[objective]
metric = "val_loss"
[search]
num_samples = 8
[search.space]
lr = { loguniform = [0.0001, 0.5] }
hidden = { choice = [8, 32] }
layers = { randint = [1, 3] }
epochs = 2
[trainer]
model = "mlp"
dataset = %q
`, dataset))
	if code, out, errOut := runCLI("run", "--db", db, sweep); code != 0 {
		t.Fatalf("run: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut := runCLI("importance", "--db", db, "--json", "imp")
	var ranks []search.ParamImportance
	if code != 0 || json.Unmarshal([]byte(out), &ranks) != nil || len(ranks) != 3 {
		t.Fatalf("importance --json: exit %d\n%s\n%s", code, out, errOut)
	}
	sum := 0.0
	for _, r := range ranks {
		sum += r.Importance
		if r.Trials != 8 {
			t.Errorf("%s judged on %d trials, want 8", r.Name, r.Trials)
		}
	}
	if math.Abs(sum-1) > 1e-9 {
		t.Errorf("shares add up to %g", sum)
	}
	// 8 trials at the default quantile of 0.1: its best 1 (at least one).
	if code, out, _ := runCLI("importance", "--db", db, "imp"); code != 0 || !strings.Contains(out, "PARAM") || !strings.Contains(out, ranks[0].Name) ||
		!strings.Contains(out, "the best 1 of 8 trials (quantile 0.1)") {
		t.Errorf("importance: exit %d\n%s", code, out)
	}
	if code, _, errOut := runCLI("importance", "--db", db, "--metric", "val_acc", "imp"); code != 2 || !strings.Contains(errOut, "not an objective") {
		t.Errorf("importance --metric val_acc: exit %d\n%s", code, errOut)
	}
}

// TestRunEndsAnExhaustedSpace runs a TPE sweep of 8 trials over a space
// of 4 configurations: gotune run tries each once and says the searcher
// ran out of configurations.
func TestRunEndsAnExhaustedSpace(t *testing.T) {
	dataset, err := filepath.Abs(filepath.Join(repoRoot, "examples/data/digits.csv"))
	if err != nil {
		t.Fatal(err)
	}
	sweep := writeSweep(t, fmt.Sprintf(`name = "finite"
seed = 3
[objective]
metric = "val_acc"
mode = "max"
[search]
algorithm = "tpe"
num_samples = 8
[search.space]
lr = { choice = [0.01, 0.05] }
hidden = { choice = [16, 32] }
epochs = 1
[trainer]
model = "mlp"
dataset = %q
`, dataset))
	code, out, errOut := runCLI("run", "--db", filepath.Join(t.TempDir(), "gotune.db"), sweep)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"the searcher has no more configurations: the sweep ends after 4 of its 8 trials", "finite: 4 trials"} {
		if !strings.Contains(out, want) {
			t.Errorf("gotune run does not say %q:\n%s", want, out)
		}
	}
}

// TestRunBOHBFromSweepFile runs algorithm = "bohb" under HyperBand from a
// sweep file, over workers whose loss at epoch e is (x−0.3)² + 1/e: every
// trial ends well and HyperBand stops some early. (Which budget BOHB
// models, and what it suggests there, the tuner's BOHB tests check.)
func TestRunBOHBFromSweepFile(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "worker.sh")
	if err := os.WriteFile(script, []byte(chaosWorker), 0o644); err != nil {
		t.Fatal(err)
	}
	const trials = 3 * search.TPEStartupTrials
	sweep := writeSweep(t, fmt.Sprintf(`name = "bohb"
seed = 5
[objective]
metric = "loss"
mode = "min"
[search]
algorithm = "bohb"
num_samples = %d
max_concurrent = 1
[search.space]
x = { uniform = [0.0, 1.0] }
[scheduler]
kind = "hyperband"
time_attr = "epoch"
max_t = 9
reduction_factor = 3
[trainer]
command = ["sh", %q, "{x}", "9"]
[trainer.checkpoint]
num_to_keep = 1
`, trials, script))
	db := filepath.Join(dir, "gotune.db")
	if code, out, errOut := runCLI("run", "--db", db, sweep); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ := runCLI("trials", "--db", db, "--json", "bohb")
	var rows []trialJSON
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != trials {
		t.Fatalf("trials: exit %d\n%s", code, out)
	}
	stopped := 0
	for _, r := range rows {
		switch r.Status {
		case "STOPPED":
			stopped++
		case "TERMINATED":
		default:
			t.Errorf("trial %d ended %s", r.TrialID, r.Status)
		}
	}
	if stopped == 0 {
		t.Error("HyperBand stopped no trial early")
	}
}
