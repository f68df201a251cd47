package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gotune/gotune/cmd/gotune/sweepfile"
	"github.com/gotune/gotune/storage"
)

// exampleSweeps is what TestExamplesAsUsersRunThem knows of each sweep
// file in examples/: whether its trainable hands checkpoints to gotune
// (a clean run must then keep some) and whether it needs PyTorch. A sweep
// file missing here fails the test, so that every example is run.
var exampleSweeps = map[string]struct{ checkpoints, torch bool }{
	"quickstart.toml":        {checkpoints: true},
	"pytorch_ddp.toml":       {checkpoints: true, torch: true},
	"torchrun_snapshot.toml": {torch: true},
}

// badEvents are the kinds of trial events a clean run of an example must
// not have: each is a failure, a refusal or a loss, however the sweep ends.
var badEvents = []string{
	storage.EventError, storage.EventRestart, storage.EventCheckpointRefused, storage.EventReportsSkipped,
	storage.EventHung, storage.EventInterrupt, "report_refused",
}

// TestExamplesAsUsersRunThem copies the repository's files into a fresh
// folder and runs there, exactly as written, the README's first command
// and every examples/*.toml with a gotune built from the copy: the default
// database (gotune.db in the current folder), relative paths and python3
// from PATH, as a user does. Each run must exit 0 with nothing on stderr,
// every trial must end TERMINATED or STOPPED with none of badEvents, and a
// trainable that checkpoints must have its checkpoints kept. Then a run
// from another folder of the quickstart by its absolute path must work
// the same, with its database in that folder. Examples that need PyTorch
// are skipped without it, unless GOTUNE_CI is set.
func TestExamplesAsUsersRunThem(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gotune and runs every example")
	}
	repo := copyRepository(t)
	bin := filepath.Join(t.TempDir(), "gotune")
	build := exec.Command("go", "build", "-o", bin, "./cmd/gotune")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	readmeCmd := readmeFirstCommand(t, repo)
	t.Run("readme", func(t *testing.T) {
		if !slices.Equal(readmeCmd, []string{"go", "run", "./cmd/gotune", "run", "examples/quickstart.toml"}) {
			t.Logf("the README's first command is now %q", readmeCmd)
		}
		runAsUser(t, repo, readmeCmd, sweepOf(t, repo, readmeCmd))
	})
	sweeps, _ := filepath.Glob(filepath.Join(repo, "examples", "*.toml"))
	for _, sweep := range sweeps {
		name := filepath.Base(sweep)
		t.Run(strings.TrimSuffix(name, ".toml"), func(t *testing.T) {
			ex, ok := exampleSweeps[name]
			if !ok {
				t.Fatalf("examples/%s is not in exampleSweeps: say whether it checkpoints and needs PyTorch", name)
			}
			if ex.torch {
				needTorch(t)
			}
			args := []string{bin, "run", filepath.Join("examples", name)}
			if slices.Contains(readmeCmd, args[2]) {
				t.Skip("run by the README's first command")
			}
			runAsUser(t, repo, args, sweep)
		})
	}
	t.Run("from another folder", func(t *testing.T) {
		elsewhere := t.TempDir()
		sweep := filepath.Join(repo, "examples", "quickstart.toml")
		runAsUser(t, elsewhere, []string{bin, "run", sweep}, sweep)
		if _, err := os.Stat(filepath.Join(elsewhere, "gotune.db")); err != nil {
			t.Errorf("the default database is not in the current folder: %v", err)
		}
	})
}

// runAsUser runs args in dir as a user does and checks the run of the
// sweep file at sweep is clean (see TestExamplesAsUsersRunThem).
func runAsUser(t *testing.T, dir string, args []string, sweep string) {
	t.Helper()
	cfg, err := sweepfile.Load(sweep)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out.String(), errOut.String())
	}
	if errOut.Len() > 0 {
		t.Errorf("%s said on stderr:\n%s", strings.Join(args, " "), errOut.String())
	}
	db, err := storage.OpenReadOnly(filepath.Join(dir, "gotune.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	trials, err := db.Trials(ctx, cfg.Name)
	if err != nil || len(trials) == 0 {
		t.Fatalf("trials of %s: %d, %v\n%s", cfg.Name, len(trials), err, out.String())
	}
	kept := 0
	for _, tr := range trials {
		if tr.Status != storage.TrialTerminated && tr.Status != storage.TrialStopped {
			t.Errorf("trial %d is %s", tr.Number, tr.Status)
		}
		recs, err := db.CheckpointRecords(ctx, cfg.Name, tr.Number)
		if err != nil {
			t.Fatal(err)
		}
		kept += len(recs)
	}
	events, err := db.Events(ctx, cfg.Name, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if slices.Contains(badEvents, e.Kind) {
			t.Errorf("trial %d: %s: %s", e.Trial, e.Kind, e.Message)
		}
	}
	want := exampleSweeps[filepath.Base(sweep)].checkpoints
	if want && kept == 0 {
		t.Errorf("the trainable checkpoints, but no checkpoint was kept")
	}
	if t.Failed() {
		t.Logf("stdout of %s:\n%s", strings.Join(args, " "), out.String())
	}
}

// copyRepository copies the repository's files (those git tracks, and new
// ones it does not ignore) into a temporary folder and returns it.
func copyRepository(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	list, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files (the test copies the files git knows of): %v", err)
	}
	dst := t.TempDir()
	for _, name := range strings.Split(strings.TrimSuffix(string(list), "\x00"), "\x00") {
		src := filepath.Join(root, name)
		fi, err := os.Lstat(src)
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the working tree, or a link
		}
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, name), data, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// readmeFirstCommand is the first command the README shows, indented by
// four spaces, split into its words.
func readmeFirstCommand(t *testing.T, repo string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "    "); ok && strings.HasPrefix(line, "go run ") {
			return strings.Fields(line)
		}
	}
	t.Fatal("README.md shows no indented `go run` command")
	return nil
}

// sweepOf is the sweep file a gotune command line runs, in repo.
func sweepOf(t *testing.T, repo string, args []string) string {
	t.Helper()
	for i, a := range args {
		if a == "run" && i+1 < len(args) && strings.HasSuffix(args[len(args)-1], ".toml") {
			return filepath.Join(repo, args[len(args)-1])
		}
	}
	t.Fatalf("%q runs no sweep file", args)
	return ""
}

// needTorch skips the test when the python3 of PATH has no PyTorch, and
// fails it instead under GOTUNE_CI.
func needTorch(t *testing.T) {
	t.Helper()
	out, err := exec.Command("python3", "-c", "import torch").CombinedOutput()
	if err == nil {
		return
	}
	msg := fmt.Sprintf("python3 from PATH cannot import torch: %v %s", err, bytes.TrimSpace(out))
	if os.Getenv("GOTUNE_CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}
