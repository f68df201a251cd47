package trainer

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestResolvePaths: only the program or the script is looked up beside
// the sweep file (then in the working directory); every other argument
// reaches the command as written, so that an output path that names a
// stale file beside the sweep file is not redirected there.
func TestResolvePaths(t *testing.T) {
	root := t.TempDir()
	base, work := filepath.Join(root, "sweep"), filepath.Join(root, "trial")
	for _, f := range []string{"sweep/train.py", "sweep/conf.yaml", "sweep/snapshot.pt", "sweep/data/x.csv", "trial/local.py", "trial/sub/x", "sweep/local.py", "sweep/run.sh"} {
		os.MkdirAll(filepath.Join(root, filepath.Dir(f)), 0o755)
		os.WriteFile(filepath.Join(root, f), nil, 0o644)
	}
	t.Chdir(root)
	os.WriteFile(filepath.Join(root, "cwd.py"), nil, 0o644)
	for _, tt := range []struct{ argv, want []string }{
		{[]string{"python3", "train.py", "--config=conf.yaml", "--snapshot=snapshot.pt", "snapshot.pt", "data/x.csv", "-v"},
			[]string{"python3", filepath.Join(base, "train.py"), "--config=conf.yaml", "--snapshot=snapshot.pt", "snapshot.pt", "data/x.csv", "-v"}},
		{[]string{"torchrun", "--nproc_per_node", "4", "data", "train.py", "--out=snapshot.pt"},
			[]string{"torchrun", "--nproc_per_node", "4", "data", filepath.Join(base, "train.py"), "--out=snapshot.pt"}},
		{[]string{"python3", "-u", "cwd.py", "train.py"}, []string{"python3", "-u", filepath.Join(root, "cwd.py"), "train.py"}},
		{[]string{"python3", "local.py", "train.py"}, []string{"python3", "local.py", "train.py"}},
		{[]string{"python3", "missing.py", "train.py"}, []string{"python3", "missing.py", filepath.Join(base, "train.py")}},
		{[]string{"./run.sh", "train.py"}, []string{filepath.Join(base, "run.sh"), "train.py"}},
		{[]string{"./gone.sh", "train.py"}, []string{"./gone.sh", "train.py"}},
		{[]string{"sh", "-c", "echo hi"}, []string{"sh", "-c", "echo hi"}},
		// An absolute script is the file the command runs: the data file
		// after it reaches the command as written.
		{[]string{"python3", filepath.Join(base, "train.py"), "conf.yaml"}, []string{"python3", filepath.Join(base, "train.py"), "conf.yaml"}},
		{[]string{"/usr/bin/python3", "-u", "train.py", "conf.yaml"}, []string{"/usr/bin/python3", "-u", filepath.Join(base, "train.py"), "conf.yaml"}},
		// A folder is no script, in the trial's folder or beside the sweep file.
		{[]string{"torchrun", "--nproc_per_node", "4", "sub", "data", "train.py"}, []string{"torchrun", "--nproc_per_node", "4", "sub", "data", filepath.Join(base, "train.py")}},
	} {
		if got := resolvePaths(tt.argv, work, base); !slices.Equal(got, tt.want) {
			t.Errorf("resolvePaths(%q):\n got %q\nwant %q", tt.argv, got, tt.want)
		}
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

// TestSweepDirPlaceholder: {sweep_dir} in an argument is the sweep file's
// folder, for the files beside it that arguments other than the script
// name.
func TestSweepDirPlaceholder(t *testing.T) {
	spec := Spec{Command: []string{"python3", "--config={sweep_dir}/conf.yaml", "--lr={lr}"}, Config: map[string]any{"lr": 0.1}, PathBase: "/sweeps/a"}
	argv, _, err := spec.expandCommand()
	if want := []string{"python3", "--config=/sweeps/a/conf.yaml", "--lr=0.1"}; err != nil || !slices.Equal(argv, want) {
		t.Errorf("expandCommand: %q, %v; want %q", argv, err, want)
	}
	if names := Placeholders(spec.Command); !slices.Equal(names, []string{"lr"}) {
		t.Errorf("Placeholders: %q, want only lr", names)
	}
}

// TestMissingProgramSaysWhereGotuneLooked: a relative program found
// nowhere fails at launch with the places looked in first named, the
// sweep file's folder and the working directory, not only the worker's
// folder the launch tried last.
func TestMissingProgramSaysWhereGotuneLooked(t *testing.T) {
	base, elsewhere := t.TempDir(), t.TempDir()
	t.Chdir(elsewhere)
	spec := Spec{
		Experiment: uniqueName(t), Trial: 1,
		Command:    []string{"./missing.sh"},
		PathBase:   base,
		TrialDir:   t.TempDir(),
		ScratchDir: filepath.Join(t.TempDir(), "scratch"),
	}
	_, err := Run(context.Background(), spec, &collect{})
	want := "./missing.sh is not in the sweep file's folder " + base + " or gotune's working directory " + elsewhere + " either"
	if err == nil || !strings.Contains(err.Error(), want) || !IsPermanent(err) {
		t.Errorf("Run: %v, want a permanent launch failure that says %q", err, want)
	}
}

// TestMissingFileSaysWhereItIs: a worker that fails for a relative file
// it cannot open, which lies beside the sweep file while the command runs
// in its trial's folder, fails saying so and how to name it; one that
// fails asserting that a path exists names what the sweep file's folder
// holds and the trial's lacks; a file found nowhere, another failure, or a
// command that runs in the sweep file's folder, gets no such word.
func TestMissingFileSaysWhereItIs(t *testing.T) {
	base := filepath.Join(t.TempDir(), "mnist")
	os.MkdirAll(base, 0o755)
	os.MkdirAll(filepath.Join(base, "..", "data", "MNIST"), 0o755)
	os.WriteFile(filepath.Join(base, "data.txt"), []byte("1 2 3\n"), 0o644)
	os.WriteFile(filepath.Join(base, "sweep.toml"), nil, 0o644)
	os.Mkdir(filepath.Join(base, "data"), 0o755)
	// pytorch/examples' word_language_model asserts that its data exists.
	os.WriteFile(filepath.Join(base, "check.py"), []byte("import os\nassert os.path.exists(os.path.join('data', 'train.txt'))\n"), 0o644)
	// pytorch/examples' mnist opens '../data' beside its own folder, and
	// downloads when that holds no data set (here without a network).
	os.WriteFile(filepath.Join(base, "mnist.py"), []byte("import os\ndef load(root):\n    os.makedirs(os.path.join(root, 'MNIST'), exist_ok=True)\n    raise RuntimeError('Error downloading train-images-idx3-ubyte.gz')\nload('../data')\n"), 0o644)
	// pytorch/examples' dcgan opens the folder its --dataroot names.
	os.WriteFile(filepath.Join(base, "dcgan.py"), []byte("import os, sys\nroot = sys.argv[1].split('=')[1]\nos.makedirs(os.path.join(root, 'MNIST'), exist_ok=True)\nprint('Downloading http://yann.lecun.com/exdb/mnist/train-images-idx3-ubyte.gz')\nsys.exit(1)\n"), 0o644)
	trialDir := filepath.Join(base, "checkpoints", "exp", "trial_1")
	os.MkdirAll(trialDir, 0o755)
	named := "data.txt is in the sweep file's folder " + base + ", but the command runs in " + trialDir + " (trainer.workdir): open it by its absolute path, or pass {sweep_dir}/data.txt as an argument"
	listed := "the command runs in " + trialDir + " (trainer.workdir), without data/, data.txt from the sweep file's folder " + base + ": a script that looks for its files by a relative path finds them only where it runs: pass {sweep_dir}/data/ (say) as an argument"
	quoted := "../data, quoted in the traceback, is " + filepath.Join(base, "..", "data") + " from the sweep file's folder " + base + ", but the command runs in " + trialDir + " (trainer.workdir), where it is " + filepath.Join(trialDir, "..", "data")
	argument := "the argument --dataroot=../data names " + filepath.Join(base, "..", "data") + " from the sweep file's folder " + base + ", but the command runs in " + trialDir + " (trainer.workdir), where it names " + filepath.Join(trialDir, "..", "data") + ": an argument other than the script reaches the command as written: pass {sweep_dir}/../data"
	for _, tc := range []struct {
		name    string
		command []string
		workdir string
		hint    string // "" for none
	}{
		{"a tool's message", []string{"sh", "-c", "cat data.txt"}, "{trial_dir}", named},
		{"Python's FileNotFoundError", []string{"python3", "-c", "open('data.txt')"}, "{trial_dir}", named},
		{"a file found nowhere", []string{"sh", "-c", "cat other.txt"}, "{trial_dir}", ""},
		{"run in the sweep file's folder", []string{"sh", "-c", "cat data.txt && cat other.txt"}, ".", ""},
		{"an assertion that a path exists", []string{"python3", "check.py"}, "{trial_dir}", listed},
		{"an assertion in the sweep file's folder", []string{"python3", "check.py"}, ".", ""},
		{"a relative path quoted in the traceback", []string{"python3", "mnist.py"}, "{trial_dir}", quoted},
		{"a relative path quoted in the sweep file's folder", []string{"python3", "mnist.py"}, ".", ""},
		{"a relative path as an argument", []string{"python3", "dcgan.py", "--dataroot=../data"}, "{trial_dir}", argument},
		{"a relative path as an argument in the sweep file's folder", []string{"python3", "dcgan.py", "--dataroot=../data"}, ".", ""},
		{"an argument that names nothing", []string{"python3", "dcgan.py", "--dataroot=../nothing"}, "{trial_dir}", ""},
		{"another failure", []string{"python3", "-c", "raise ValueError('lr too large')"}, "{trial_dir}", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := commandSpec(t, 1)
			spec.Command, spec.Workdir, spec.PathBase = tc.command, tc.workdir, base
			spec.TrialDir = trialDir
			_, err := Run(context.Background(), spec, &collect{})
			if err == nil {
				t.Fatal("Run: no failure")
			}
			msg := err.Error()
			if !strings.Contains(msg, "exited with status") {
				t.Fatalf("Run: %v, want the worker's exit", err)
			}
			if tc.hint != "" && !strings.Contains(msg, tc.hint) {
				t.Errorf("Run: %v\nwant the hint %q", err, tc.hint)
			}
			if tc.hint == "" && strings.Contains(msg, "trainer.workdir") {
				t.Errorf("Run: %v\nwant no hint", err)
			}
		})
	}
}
