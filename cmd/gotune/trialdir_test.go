package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// snapshotScript is a stand-in for PyTorch's DDP tutorial script: it
// resumes from --snapshot (snapshot.pt where it runs) when the file is
// there, trains the epochs left, and saves the snapshot after each.
const snapshotScript = `import argparse, json, os
ap = argparse.ArgumentParser()
ap.add_argument("--snapshot", default="snapshot.pt")
ap.add_argument("--epochs", type=int, default=2)
args = ap.parse_args()
start = 0
if os.path.exists(args.snapshot):
    with open(args.snapshot) as f:
        start = json.load(f)["epochs_run"]
for epoch in range(start, args.epochs):
    with open(args.snapshot, "w") as f:
        json.dump({"epochs_run": epoch + 1}, f)
    print("@gotune " + json.dumps({"epoch": epoch, "resumed_at": start, "loss": 1.0 / (epoch + 1)}), flush=True)
`

// TestTrialFolders runs sweeps of a script that resumes from a snapshot it
// finds where it runs, as the PyTorch DDP tutorial's script does, one and
// two trials at a time (real processes). By default every trial runs in
// its own folder and starts afresh, also when a stale snapshot.pt sits
// beside the sweep file and the command names it (--snapshot=snapshot.pt
// is passed as written, not redirected there), and nothing is said; in a
// shared workdir (workdir = ".") a trial resumes another's snapshot, and
// gotune warns of it naming the file, never the file its own output is
// redirected to.
func TestTrialFolders(t *testing.T) {
	for _, tc := range []struct {
		name, workdir string
		concurrent    int
		shared        bool
	}{
		{"default", "", 1, false},
		{"default concurrent", "", 2, false},
		{"trial_dir", `workdir = "{trial_dir}"`, 2, false},
		{"shared", `workdir = "."`, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "train.py"), []byte(snapshotScript), 0o644)
			os.WriteFile(filepath.Join(dir, "snapshot.pt"), []byte(`{"epochs_run": 1}`), 0o644) // stale, from a run by hand
			if tc.shared {
				os.Remove(filepath.Join(dir, "snapshot.pt"))
			}
			os.WriteFile(filepath.Join(dir, "sweep.toml"), []byte(fmt.Sprintf(`name = "snap"
[objective]
metric = "loss"
[search]
num_samples = 4
max_concurrent = %d
[trainer]
command = ["python3", "train.py", "--snapshot=snapshot.pt", "--epochs=2"]
%s
[trainer.scaling]
cpus_per_worker = 0.1
`, tc.concurrent, tc.workdir)), 0o644)
			outFile, err := os.Create(filepath.Join(dir, "out.txt")) // gotune run sweep.toml > out.txt
			if err != nil {
				t.Fatal(err)
			}
			defer outFile.Close()
			cmd := gotune(t, "run", "--db", filepath.Join(dir, "snap.db"), "sweep.toml")
			cmd.Dir = dir
			var errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = outFile, &errOut
			err = cmd.Run()
			out, _ := os.ReadFile(outFile.Name())
			if err != nil {
				t.Fatalf("gotune run: %v\n%s\n%s", err, out, errOut.String())
			}
			warned := strings.Contains(errOut.String(), "warning: the sweep's trials share the working directory") &&
				strings.Contains(errOut.String(), "snapshot.pt") && strings.Contains(errOut.String(), `workdir = "{trial_dir}"`)
			if warned != tc.shared || strings.Contains(errOut.String(), "out.txt") {
				t.Errorf("warned %v, want %v (and never of out.txt):\n%s", warned, tc.shared, errOut.String())
			}
			// A trial that resumed another's snapshot reports from
			// epoch 1, or not at all when that one had run every epoch.
			resumed := strings.Contains(string(out), "resumed_at=1") || regexp.MustCompile(`(?m)^\d+\s+TERMINATED\s+0\s`).Match(out)
			if resumed != tc.shared {
				t.Errorf("a trial resumed a snapshot it did not write: %v, want %v:\n%s", resumed, tc.shared, out)
			}
			if tc.shared {
				return
			}
			for trial := 1; trial <= 4; trial++ {
				td := filepath.Join(dir, "checkpoints", "snap", fmt.Sprintf("trial_%d", trial))
				for _, f := range []string{"snapshot.pt", "reports.csv"} {
					if _, err := os.Stat(filepath.Join(td, f)); err != nil {
						t.Errorf("trial %d's folder: %v", trial, err)
					}
				}
			}
			if stale, _ := os.ReadFile(filepath.Join(dir, "snapshot.pt")); string(stale) != `{"epochs_run": 1}` {
				t.Errorf("the stale snapshot beside the sweep file was written: %s", stale)
			}
		})
	}
}

// TestNoSharedDirWarningWithoutACommand: a trial whose command never
// started (no such program) wrote nothing, and gotune's own output
// redirected into the shared folder is not a trial's file: no warning.
func TestNoSharedDirWarningWithoutACommand(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "sweep.toml"), []byte(`name = "nocmd"
[objective]
metric = "loss"
[search]
num_samples = 2
max_concurrent = 1
[trainer]
command = ["./no-such-program"]
workdir = "."
[trainer.scaling]
cpus_per_worker = 0.1
`), 0o644)
	outFile, err := os.Create(filepath.Join(dir, "out.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer outFile.Close()
	cmd := gotune(t, "run", "--db", filepath.Join(dir, "nocmd.db"), "sweep.toml")
	cmd.Dir = dir
	var errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = outFile, &errOut
	cmd.Run()
	if strings.Contains(errOut.String(), "share the working directory") {
		t.Errorf("warned:\n%s", errOut.String())
	}
}

func TestRunFailsWhenNoTrialReportsTheObjective(t *testing.T) {
	dir := t.TempDir()
	sweep := filepath.Join(dir, "sweep.toml")
	os.WriteFile(sweep, []byte(`name = "typo"
[objective]
metric = "val_loss"
[trainer]
command = ["sh", "-c", "echo '@gotune {\"val-loss\": 1, \"epoch\": 1}'"]
[trainer.scaling]
cpus_per_worker = 0.1
`), 0o644)
	code, _, stderr := runCLI("run", "--db", filepath.Join(dir, "typo.db"), sweep)
	if code != exitFailed || !strings.Contains(stderr, `no trial reported the objective "val_loss"; the reports carried epoch, val-loss`) {
		t.Errorf("exit %d, stderr:\n%s", code, stderr)
	}
}

// TestNoSharedDirWarningForTheDatabaseFolder: a database in a folder below
// the working directory is gotune's own, and so are the checkpoints and
// trials beside it; a command that writes nothing there is not warned of.
func TestNoSharedDirWarningForTheDatabaseFolder(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "sweep.toml"), []byte(`name = "quiet"
[objective]
metric = "loss"
[search]
num_samples = 2
max_concurrent = 1
[trainer]
command = ["sh", "-c", "echo '@gotune {\"loss\": 1}'; echo x > \"$GOTUNE_TRIAL_DIR/own.txt\""]
workdir = "."
[trainer.scaling]
cpus_per_worker = 0.1
`), 0o644)
	os.Mkdir(filepath.Join(dir, "results"), 0o755)
	cmd := gotune(t, "run", "--db", filepath.Join("results", "quiet.db"), "sweep.toml")
	cmd.Dir = dir
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("gotune run: %v\n%s\n%s", err, out.String(), errOut.String())
	}
	if strings.Contains(errOut.String(), "share the working directory") {
		t.Errorf("warned of gotune's own folder:\n%s", errOut.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "results", "checkpoints", "quiet", "trial_1", "own.txt")); err != nil {
		t.Errorf("the trial's own file: %v", err)
	}
}

// TestRunNamesTheLineOfAMissingProgram: a command whose program does not
// exist is refused before any trial starts, as every sweep-file error is:
// file, line and key.
func TestRunNamesTheLineOfAMissingProgram(t *testing.T) {
	dir := t.TempDir()
	sweep := filepath.Join(dir, "sweep.toml")
	os.WriteFile(sweep, []byte(`name = "noprog"
[objective]
metric = "loss"
[trainer]
workdir = "."
command = ["./no-such-program", "--lr=1"]
`), 0o644)
	code, _, stderr := runCLI("run", "--db", filepath.Join(dir, "noprog.db"), sweep)
	want := sweep + ":6: trainer.command: program ./no-such-program is not in "
	if code != exitBadInput || !strings.Contains(stderr, want) {
		t.Errorf("exit %d, stderr:\n%s\nwant exit %d and %q", code, stderr, exitBadInput, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "noprog.db")); err == nil {
		t.Error("the refused sweep created its database")
	}
}
