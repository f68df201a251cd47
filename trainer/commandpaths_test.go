package trainer

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestResolvePaths(t *testing.T) {
	root := t.TempDir()
	base, work := filepath.Join(root, "sweep"), filepath.Join(root, "trial")
	for _, f := range []string{"sweep/train.py", "sweep/conf.yaml", "sweep/data/x.csv", "trial/local.txt", "sweep/local.txt"} {
		os.MkdirAll(filepath.Join(root, filepath.Dir(f)), 0o755)
		os.WriteFile(filepath.Join(root, f), nil, 0o644)
	}
	t.Chdir(root)
	os.WriteFile(filepath.Join(root, "cwd.txt"), nil, 0o644)
	argv := []string{"python3", "train.py", "--config=conf.yaml", "--data", "data/x.csv", "data", "local.txt", "cwd.txt", "missing.py", "--out=out", "-v"}
	got := resolvePaths(argv, work, base)
	want := []string{"python3", filepath.Join(base, "train.py"), "--config=" + filepath.Join(base, "conf.yaml"), "--data",
		filepath.Join(base, "data/x.csv"), "data", "local.txt", filepath.Join(root, "cwd.txt"), "missing.py", "--out=out", "-v"}
	if !slices.Equal(got, want) {
		t.Errorf("resolvePaths:\n got %q\nwant %q", got, want)
	}
	if got := resolvePaths([]string{"./run.sh"}, work, base); got[0] != "./run.sh" {
		t.Errorf("a program found nowhere: %q", got[0])
	}
	os.WriteFile(filepath.Join(base, "run.sh"), nil, 0o755)
	if got := resolvePaths([]string{"./run.sh"}, work, base); got[0] != filepath.Join(base, "run.sh") {
		t.Errorf("a program in the sweep folder: %q", got[0])
	}
}

func TestCommandRunsInTheTrialFolder(t *testing.T) {
	base, trialDir := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(base, "train.sh"), []byte(`pwd > where; echo "$GOTUNE_TRIAL_DIR $1" > env; echo '@gotune {"ok": 1}'`), 0o644)
	spec := Spec{
		Experiment: uniqueName(t), Trial: 3,
		Command:    []string{"sh", "train.sh", "--out={trial_dir}/out"},
		Workdir:    "{trial_dir}",
		PathBase:   base,
		TrialDir:   trialDir,
		ScratchDir: filepath.Join(t.TempDir(), "scratch"),
	}
	sink := &collect{}
	if _, err := Run(context.Background(), spec, sink); err != nil {
		t.Fatal(err)
	}
	where, _ := os.ReadFile(filepath.Join(trialDir, "where"))
	env, _ := os.ReadFile(filepath.Join(trialDir, "env"))
	if got := strings.TrimSpace(string(where)); got != trialDir {
		t.Errorf("ran in %q, want %q", got, trialDir)
	}
	if got, want := strings.TrimSpace(string(env)), trialDir+" --out="+trialDir+"/out"; got != want {
		t.Errorf("GOTUNE_TRIAL_DIR and argument: %q, want %q", got, want)
	}
	spec.TrialDir = ""
	if _, err := Run(context.Background(), spec, sink); err == nil || !strings.Contains(err.Error(), "{trial_dir} needs the trial's folder") {
		t.Errorf("without a trial folder: %v", err)
	}
}

// TestCommandPathsBesideSweepFile: with the default workdir (where gotune
// runs) the script the command names is found beside the sweep file
// (PathBase), and a relative workdir is in that folder too.
func TestCommandPathsBesideSweepFile(t *testing.T) {
	base, elsewhere := t.TempDir(), t.TempDir()
	os.Mkdir(filepath.Join(base, "runs"), 0o755)
	os.WriteFile(filepath.Join(base, "train.sh"), []byte(`pwd > "$OUT/where"; echo '@gotune {"ok": 1}'`), 0o644)
	t.Chdir(elsewhere)
	for _, tt := range []struct{ workdir, want string }{{"", elsewhere}, {"runs", filepath.Join(base, "runs")}} {
		out := t.TempDir()
		spec := Spec{
			Experiment: uniqueName(t), Trial: 1,
			Command:    []string{"sh", "train.sh"},
			Workdir:    tt.workdir,
			PathBase:   base,
			Env:        []string{"OUT=" + out},
			ScratchDir: filepath.Join(t.TempDir(), "scratch"),
		}
		sink := &collect{}
		if _, err := Run(context.Background(), spec, sink); err != nil {
			t.Errorf("workdir %q: %v", tt.workdir, err)
			continue
		}
		where, _ := os.ReadFile(filepath.Join(out, "where"))
		if got := strings.TrimSpace(string(where)); got != tt.want {
			t.Errorf("workdir %q: ran in %q, want %q", tt.workdir, got, tt.want)
		}
	}
}
