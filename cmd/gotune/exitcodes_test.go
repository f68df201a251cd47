package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotune/gotune/storage"
)

// readOnly makes folder dir read-only until the test ends: as root, by
// mounting it over itself read-only (writes fail with EROFS); otherwise by
// taking the write permission away (EACCES).
func readOnly(t *testing.T, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o755) })
		return
	}
	if out, err := exec.Command("mount", "--bind", dir, dir).CombinedOutput(); err != nil {
		t.Skipf("cannot bind-mount %s to make it read-only: %v: %s", dir, err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	if out, err := exec.Command("mount", "-o", "remount,bind,ro", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot remount %s read-only: %v: %s", dir, err, out)
	}
}

// TestExitCodes runs every failure that README.md's exit codes cover in
// a gotune process of its own and checks its exit code (0 success; 1 the
// sweep ran but every trial failed, a query failed, or the run was
// interrupted; 2 bad usage or bad input) and that its error names what is
// at fault.
func TestExitCodes(t *testing.T) {
	dataset, err := filepath.Abs(filepath.Join(repoRoot, "examples/data/digits.csv"))
	if err != nil {
		t.Fatal(err)
	}
	sweep := func(extra, trainer string) string {
		return `name = "e"
[objective]
metric = "val_acc"
mode = "max"
[search]
num_samples = 2
[search.space]
epochs = 1
` + extra + `
[trainer]
model = "mlp"
dataset = "` + dataset + `"
` + trainer
	}
	good := writeSweep(t, sweep("", ""))
	// A finished experiment, and one whose run was interrupted.
	done := filepath.Join(t.TempDir(), "done.db")
	if code, _, stderr := runCLI("run", "--db", done, good); code != 0 {
		t.Fatalf("setup run: exit %d\n%s", code, stderr)
	}
	stopped := filepath.Join(t.TempDir(), "stopped.db")
	long := writeSweep(t, strings.Replace(sweep("", ""), "epochs = 1", "epochs = 100000", 1))

	tests := []struct {
		name string
		args func(t *testing.T) []string
		// dir is where gotune runs; "" for the repository's root.
		dir       func(t *testing.T) string
		interrupt bool // SIGINT once the first report is printed
		code      int
		inStderr  []string
	}{
		// 0: success.
		{name: "run succeeds", code: 0, args: func(t *testing.T) []string {
			return []string{"run", "--db", filepath.Join(t.TempDir(), "db"), good}
		}},
		{name: "ls", code: 0, args: func(*testing.T) []string { return []string{"ls", "--db", done} }},
		{name: "trials", code: 0, args: func(*testing.T) []string { return []string{"trials", "--db", done, "e"} }},
		{name: "query", code: 0, args: func(*testing.T) []string { return []string{"query", "--db", done, "SELECT count(*) FROM trials_v"} }},

		// 1: the sweep ran but every trial failed; a query failed; interrupted.
		{name: "every trial fails", code: 1, args: func(t *testing.T) []string {
			return []string{"run", "--db", filepath.Join(t.TempDir(), "db"), writeSweep(t, sweep(`lr = -1.0`, ""))}
		}, inStderr: []string{"every trial failed"}},
		{name: "query with a syntax error", code: 1, args: func(*testing.T) []string {
			return []string{"query", "--db", done, "SELEC 1"}
		}, inStderr: []string{"syntax error"}},
		{name: "query that writes", code: 1, args: func(*testing.T) []string {
			return []string{"query", "--db", done, "DELETE FROM trials"}
		}, inStderr: []string{"read-only"}},
		{name: "query that runs past --timeout", code: 1, args: func(*testing.T) []string {
			return []string{"query", "--db", done, "--timeout", "300ms", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c"}
		}, inStderr: []string{"stopped after 300ms (--timeout)"}},
		{name: "run interrupted", code: 1, interrupt: true, args: func(*testing.T) []string {
			return []string{"run", "--db", stopped, long}
		}, inStderr: []string{"interrupted", stopped}},

		// 2: bad usage.
		{name: "unknown command", code: 2, args: func(*testing.T) []string { return []string{"bogus"} }, inStderr: []string{"bogus"}},
		{name: "unknown flag", code: 2, args: func(*testing.T) []string { return []string{"run", "--bogus", "x"} }, inStderr: []string{"bogus"}},
		{name: "no argument", code: 2, args: func(*testing.T) []string { return []string{"run"} }, inStderr: []string{"takes one argument"}},
		{name: "two arguments", code: 2, args: func(*testing.T) []string { return []string{"run", good, good} }, inStderr: []string{"takes one argument"}},
		{name: "--json with --csv", code: 2, args: func(*testing.T) []string {
			return []string{"query", "--db", done, "--json", "--csv", "SELECT 1"}
		}, inStderr: []string{"--json", "--csv"}},
		{name: "negative --timeout", code: 2, args: func(*testing.T) []string {
			return []string{"query", "--db", done, "--timeout", "-1s", "SELECT 1"}
		}, inStderr: []string{"--timeout"}},
		{name: "export format", code: 2, args: func(*testing.T) []string { return []string{"export", "--db", done, "e", "--format", "xml"} }, inStderr: []string{"xml"}},
		{name: "trials --status", code: 2, args: func(*testing.T) []string { return []string{"trials", "--db", done, "e", "--status", "WEIRD"} }, inStderr: []string{"WEIRD"}},
		{name: "trials --limit", code: 2, args: func(*testing.T) []string { return []string{"trials", "--db", done, "e", "--limit", "-1"} }, inStderr: []string{"--limit"}},
		{name: "--resources", code: 2, args: func(*testing.T) []string { return []string{"run", "--resources", "cpus=lots", good} }, inStderr: []string{"--resources", "lots"}},
		{name: "agent without --head", code: 2, args: func(*testing.T) []string { return []string{"agent", "--token", "t"} }, inStderr: []string{"--head"}},
		{name: "agent without a token", code: 2, args: func(*testing.T) []string { return []string{"agent", "--head", "127.0.0.1:1"} }, inStderr: []string{"token"}},
		{name: "--listen without a token", code: 2, args: func(*testing.T) []string { return []string{"run", "--listen", "127.0.0.1:0", good} }, inStderr: []string{"token"}},
		{name: "dashboard address", code: 2, args: func(*testing.T) []string { return []string{"dashboard", "--db", done, "--addr", "127.0.0.1:99999"} }, inStderr: []string{"99999"}},

		// 2: bad input, each error naming the file or the thing at fault.
		{name: "missing sweep file", code: 2, args: func(*testing.T) []string { return []string{"run", "/nonexistent/sweep.toml"} }, inStderr: []string{"/nonexistent/sweep.toml"}},
		{name: "name that is a path", code: 2, args: func(t *testing.T) []string {
			return []string{"run", "--db", filepath.Join(t.TempDir(), "db"), writeSweep(t, strings.Replace(sweep("", ""), `name = "e"`, `name = "../e"`, 1))}
		}, inStderr: []string{"sweep.toml:1", `name: "../e" holds a '/'`}},
		{name: "name that is dot-dot", code: 2, args: func(t *testing.T) []string {
			return []string{"run", "--db", filepath.Join(t.TempDir(), "db"), writeSweep(t, strings.Replace(sweep("", ""), `name = "e"`, `name = ".."`, 1))}
		}, inStderr: []string{"sweep.toml:1", `name: ".." is not a name`}},
		{name: "empty name", code: 2, args: func(t *testing.T) []string {
			return []string{"run", "--db", filepath.Join(t.TempDir(), "db"), writeSweep(t, strings.Replace(sweep("", ""), `name = "e"`, `name = ""`, 1))}
		}, inStderr: []string{"sweep.toml:1", "name: the experiment needs a name"}},
		{name: "name with a control character", code: 2, args: func(t *testing.T) []string {
			return []string{"run", "--db", filepath.Join(t.TempDir(), "db"), writeSweep(t, strings.Replace(sweep("", ""), `name = "e"`, `name = "e\u001b[2J"`, 1))}
		}, inStderr: []string{"sweep.toml:1", "name:", "control character U+001B"}},
		{name: "name like a flag", code: 2, args: func(t *testing.T) []string {
			return []string{"run", "--db", filepath.Join(t.TempDir(), "db"), writeSweep(t, strings.Replace(sweep("", ""), `name = "e"`, `name = "-e"`, 1))}
		}, inStderr: []string{"sweep.toml:1", `name: "-e" starts with "-"`}},
		{name: "misspelt key", code: 2, args: func(t *testing.T) []string {
			return []string{"run", writeSweep(t, strings.Replace(sweep("", ""), "num_samples", "num_sampels", 1))}
		}, inStderr: []string{"sweep.toml:6", "search.num_sampels", "unknown key"}},
		{name: "wrong type", code: 2, args: func(t *testing.T) []string {
			return []string{"run", writeSweep(t, strings.Replace(sweep("", ""), "num_samples = 2", "num_samples = 2.5", 1))}
		}, inStderr: []string{"sweep.toml:6", "search.num_samples"}},
		{name: "empty range", code: 2, args: func(t *testing.T) []string {
			return []string{"run", writeSweep(t, sweep("lr = { uniform = [0.5, 0.1] }", ""))}
		}, inStderr: []string{"sweep.toml:", "lr"}},
		{name: "missing dataset", code: 2, args: func(t *testing.T) []string {
			return []string{"run", writeSweep(t, strings.Replace(sweep("", ""), dataset, "/nonexistent/digits.csv", 1))}
		}, inStderr: []string{"trainer.dataset", "/nonexistent/digits.csv"}},
		{name: "a group that can never fit", code: 2, args: func(t *testing.T) []string {
			return []string{"run", "--db", filepath.Join(t.TempDir(), "db"), writeSweep(t, sweep("", "[trainer.scaling]\ncpus_per_worker = 100000\n"))}
		}, inStderr: []string{"trainer.scaling"}},
		{name: "an experiment that has ended", code: 2, args: func(*testing.T) []string { return []string{"run", "--db", done, good} }, inStderr: []string{"has already ended", done}},
		{name: "--resume with nothing to resume", code: 2, args: func(t *testing.T) []string {
			return []string{"run", "--resume", "--db", filepath.Join(t.TempDir(), "none.db"), good}
		}, inStderr: []string{"nothing to resume", "none.db"}},
		{name: "a changed sweep file", code: 2, args: func(t *testing.T) []string {
			return []string{"run", "--db", stopped, writeSweep(t, strings.Replace(sweep("", ""), "epochs = 1", "epochs = 100000\nlr = 0.5", 1))}
		}, inStderr: []string{stopped}},
		{name: "an experiment another run is running", code: 2, args: func(t *testing.T) []string {
			db := filepath.Join(t.TempDir(), "gotune.db")
			w, err := storage.Open(db)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { w.Close() })
			lock, err := w.LockExperiment("e")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { lock.Release() })
			return []string{"run", "--db", db, good}
		}, inStderr: []string{"already running"}},
		{name: "unknown experiment", code: 2, args: func(*testing.T) []string { return []string{"trials", "--db", done, "nope"} }, inStderr: []string{`"nope"`, "not found"}},
		{name: "unknown trial", code: 2, args: func(*testing.T) []string { return []string{"show", "--db", done, "e", "99"} }, inStderr: []string{"trial 99", "not found"}},
		{name: "an experiment without its trial", code: 2, args: func(*testing.T) []string { return []string{"stack", "--db", done, "e"} }, inStderr: []string{"(gotune stack e 1)", "gotune trials e lists its trials"}},
		{name: "an unknown experiment without a trial", code: 2, args: func(*testing.T) []string { return []string{"show", "--db", done, "nope"} }, inStderr: []string{`"nope"`, "not found"}},
		{name: "a trial that is not a number", code: 2, args: func(*testing.T) []string { return []string{"show", "--db", done, "e", "x"} }, inStderr: []string{`"x"`}},
		{name: "missing database", code: 2, args: func(t *testing.T) []string {
			return []string{"ls", "--db", filepath.Join(t.TempDir(), "none.db")}
		}, inStderr: []string{"none.db"}},
		{name: "a file that is not a database", code: 2, args: func(t *testing.T) []string {
			return []string{"best", "--db", writeSweep(t, strings.Repeat("junk ", 500)), "e"}
		}, inStderr: []string{"sweep.toml", "not a gotune results database"}},
		{name: "another program's SQLite database", code: 2, args: func(t *testing.T) []string {
			db := filepath.Join(t.TempDir(), "other.db")
			if out, err := exec.Command("sqlite3", db, "CREATE TABLE x(y)").CombinedOutput(); err != nil {
				t.Skipf("no sqlite3 program to make another program's database: %v %s", err, out)
			}
			return []string{"ls", "--db", db}
		}, inStderr: []string{"other.db", "another program"}},
		{name: "database folder missing", code: 2, args: func(t *testing.T) []string {
			return []string{"run", "--db", filepath.Join(t.TempDir(), "nowhere", "gotune.db"), good}
		}, inStderr: []string{"nowhere", "does not exist"}},
		{name: "database folder unwritable", code: 2, args: func(t *testing.T) []string {
			dir := t.TempDir()
			readOnly(t, dir)
			return []string{"run", "--db", filepath.Join(dir, "gotune.db"), good}
		}, inStderr: []string{"read-only folder: "}},
		{name: "database in an unwritable folder, read", code: 2, args: func(t *testing.T) []string {
			dir := t.TempDir()
			data, err := os.ReadFile(done)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "copy.db"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			readOnly(t, dir)
			return []string{"ls", "--db", filepath.Join(dir, "copy.db")}
		}, inStderr: []string{"copy.db", "read-only folder: "}},
		{name: "checkpoint folder unwritable", code: 2, args: func(t *testing.T) []string {
			dir := t.TempDir()
			if err := os.Mkdir(filepath.Join(dir, "checkpoints"), 0o755); err != nil {
				t.Fatal(err)
			}
			readOnly(t, filepath.Join(dir, "checkpoints"))
			return []string{"run", "--db", filepath.Join(dir, "gotune.db"), good}
		}, inStderr: []string{"checkpoints", "read-only folder: "}},
		{name: "run in an unwritable folder", code: 2, dir: func(t *testing.T) string {
			dir := t.TempDir()
			readOnly(t, dir)
			return dir
		}, args: func(*testing.T) []string { return []string{"run", good} }, inStderr: []string{"gotune.db", "read-only folder: "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := gotune(t, tt.args(t)...)
			if tt.dir != nil {
				cmd.Dir = tt.dir(t)
			}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if tt.interrupt {
				out := &proc{done: make(chan struct{})}
				cmd.Stdout = out
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				deadline := time.Now().Add(time.Minute)
				for !strings.Contains(out.text(), "iter 1 ") && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				cmd.Process.Signal(syscall.SIGINT)
				cmd.Wait()
			} else {
				cmd.Run()
			}
			if os.Getenv("GOTUNE_TEST_VERBOSE") != "" {
				t.Logf("exit %d: %s", cmd.ProcessState.ExitCode(), stderr.String())
			}
			if code := cmd.ProcessState.ExitCode(); code != tt.code {
				t.Errorf("gotune %s: exit %d, want %d; stderr:\n%s", strings.Join(cmd.Args[1:], " "), code, tt.code, stderr.String())
			}
			for _, s := range tt.inStderr {
				if !strings.Contains(stderr.String(), s) {
					t.Errorf("stderr lacks %q:\n%s", s, stderr.String())
				}
			}
		})
	}
}
