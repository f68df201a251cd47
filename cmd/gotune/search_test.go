package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
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
