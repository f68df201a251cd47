package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrialFolders runs a sweep whose command resumes from a snapshot.pt
// it finds where it runs, as the PyTorch DDP tutorial's script does: in
// the shared working directory, trial 2 resumes trial 1's snapshot and
// gotune warns; with workdir = "{trial_dir}" every trial starts afresh in
// its own folder, which also holds its logs, and nothing is said.
func TestTrialFolders(t *testing.T) {
	script := `start=0; [ -f snapshot.pt ] && start=$(cat snapshot.pt)
echo $((start + 1)) > snapshot.pt
echo "starting at $start" >&2
echo "@gotune {\"start\": $start, \"loss\": 1}"`
	for _, tc := range []struct {
		workdir string
		shared  bool
	}{{"", true}, {`workdir = "{trial_dir}"`, false}} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "train.sh"), []byte(script), 0o644)
		os.WriteFile(filepath.Join(dir, "sweep.toml"), []byte(fmt.Sprintf(`name = "snap"
[objective]
metric = "loss"
[search]
num_samples = 2
max_concurrent = 1
[trainer]
command = ["sh", "train.sh"]
%s
[trainer.scaling]
cpus_per_worker = 0.1
`, tc.workdir)), 0o644)
		cmd := gotune(t, "run", "--db", filepath.Join(dir, "snap.db"), "sweep.toml")
		cmd.Dir = dir
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("gotune run: %v\n%s\n%s", err, out.String(), errOut.String())
		}
		warned := strings.Contains(errOut.String(), "warning: the sweep's trials share the working directory") &&
			strings.Contains(errOut.String(), "snapshot.pt") && strings.Contains(errOut.String(), `workdir = "{trial_dir}"`)
		if warned != tc.shared {
			t.Errorf("%q: warned %v, want %v:\n%s", tc.workdir, warned, tc.shared, errOut.String())
		}
		resumed := strings.Contains(out.String(), "start=1")
		if resumed != tc.shared {
			t.Errorf("%q: a trial resumed another's snapshot: %v, want %v:\n%s", tc.workdir, resumed, tc.shared, out.String())
		}
		if tc.shared {
			continue
		}
		for trial := 1; trial <= 2; trial++ {
			td := filepath.Join(dir, "checkpoints", "snap", fmt.Sprintf("trial_%d", trial))
			for _, f := range []string{"snapshot.pt", "logs/worker_0.log", "reports.csv"} {
				if _, err := os.Stat(filepath.Join(td, f)); err != nil {
					t.Errorf("trial %d's folder: %v", trial, err)
				}
			}
		}
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
