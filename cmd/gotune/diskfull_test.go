package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// smallFS mounts a tmpfs of the given size for the test, or skips it
// saying why when this system lets the test mount none (it needs root).
func smallFS(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := mountSmallFS(t, dir, size); err != nil {
		t.Skip(err)
	}
	return dir
}

// mountSmallFS mounts a tmpfs of the given size on dir for the test.
func mountSmallFS(t *testing.T, dir, size string) error {
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("cannot mount a small tmpfs to fill (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return nil
}

// fillFS writes a file in dir until its file system is full and returns
// the file's path.
func fillFS(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 64<<10)
	for {
		if _, err := f.Write(block); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return path
		}
	}
}

// TestRunPausesWhileTheDiskIsFull runs a sweep whose database, checkpoints
// and logs are on a small file system, and fills it twice while trials
// report. Each time the sweep pauses with a message on stderr instead of
// failing trials; the first time it goes on by itself once space is freed,
// the second time it is killed with SIGKILL while paused, space is freed,
// and the same command finishes it. Every trial ends exactly as in an
// undisturbed run: nothing was lost, nothing counted as a failure. With
// checkpoints, the workers' checkpoint files meet the full disk first;
// without, the results database does.
func TestRunPausesWhileTheDiskIsFull(t *testing.T) {
	for _, tt := range []struct{ name, space, trainer string }{
		{"checkpoints", "", ""},
		{"no checkpoints", "checkpoint_every = 0\n", ""},
		{"process workers", "", "isolation = \"process\"\n"},
	} {
		t.Run(tt.name, func(t *testing.T) { runOnAFullDisk(t, tt.space, tt.trainer) })
	}
}

// runOnAFullDisk is TestRunPausesWhileTheDiskIsFull with space added to
// [search.space] and trainer to [trainer].
func runOnAFullDisk(t *testing.T, space, trainer string) {
	const trials, epochs = 2, 60
	sweep := liveSweep(t, "full", trials, epochs)
	body, err := os.ReadFile(sweep)
	if err != nil {
		t.Fatal(err)
	}
	body = []byte(strings.Replace(string(body), "[trainer]\n", space+"[trainer]\n"+trainer, 1))
	// No restart allowed: a failure, a hung group included, would end its
	// trial in ERROR.
	body = append(body, "[trainer.failure]\nmax_failures = 0\nheartbeat_timeout = 1\n[trainer.checkpoint]\nnum_to_keep = 1\n"...)
	if err := os.WriteFile(sweep, body, 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(smallFS(t, "8m"), "gotune.db")

	iter := regexp.MustCompile(`trial \d+\s+iter (\d+)`)
	lastIter := func(p *proc) int {
		n := 0
		for _, m := range iter.FindAllStringSubmatch(p.text(), -1) {
			fmt.Sscan(m[1], &n)
		}
		return n
	}
	awaitIter := func(p *proc, at int) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for lastIter(p) < at {
			select {
			case <-p.done:
				t.Fatalf("the sweep ended before iteration %d:\n%s", at, p.text())
			case <-time.After(5 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("no iteration %d:\n%s", at, p.text())
			}
		}
	}
	// pausedNow fills the disk and checks that the sweep pauses: the
	// message comes, reports stop, and the process stays up.
	pausedNow := func(p *proc, times int) string {
		t.Helper()
		filler := fillFS(t, filepath.Dir(db))
		deadline := time.Now().Add(time.Minute)
		for strings.Count(p.text(), "the disk is full: the sweep is paused") < times {
			select {
			case <-p.done:
				t.Fatalf("the sweep ended on a full disk (%v):\n%s", p.err, p.text())
			case <-time.After(10 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("no message of the full disk:\n%s", p.text())
			}
		}
		before := lastIter(p)
		time.Sleep(1500 * time.Millisecond) // past heartbeat_timeout
		select {
		case <-p.done:
			t.Fatalf("the sweep ended on a full disk (%v):\n%s", p.err, p.text())
		default:
		}
		if after := lastIter(p); after > before+2 {
			t.Fatalf("reports went on from %d to %d on a full disk", before, after)
		}
		for _, r := range trialRowsOf(t, db, "full") {
			if r.Status == "ERROR" {
				t.Fatalf("trial %d ERROR on a full disk: %s", r.TrialID, r.Error)
			}
		}
		return filler
	}

	p := startGotune(t, "run", "--db", db, sweep)
	awaitIter(p, 5)
	filler := pausedNow(p, 1)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	p.await(t, "there is space again: the sweep goes on")
	resumedAt := lastIter(p)
	awaitIter(p, resumedAt+5)

	filler = pausedNow(p, 2)
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := runCLI("run", "--db", db, sweep); code != 0 {
		t.Fatalf("the run after the kill: exit %d\n%s\n%s", code, stdout, stderr)
	}

	fresh := filepath.Join(t.TempDir(), "fresh.db")
	if code, _, stderr := runCLI("run", "--db", fresh, sweep); code != 0 {
		t.Fatalf("undisturbed run: exit %d\n%s", code, stderr)
	}
	got, want := trialRowsOf(t, db, "full"), trialRowsOf(t, fresh, "full")
	if len(got) != trials {
		t.Fatalf("%d trials, want %d", len(got), trials)
	}
	for i, r := range got {
		if r.Status != "TERMINATED" || r.Iterations != epochs {
			t.Errorf("trial %d: %s with %d iterations (%s), want TERMINATED with %d", r.TrialID, r.Status, r.Iterations, r.Error, epochs)
		}
		if *r.LastMetric != *want[i].LastMetric || *r.BestMetric != *want[i].BestMetric {
			t.Errorf("trial %d: val_acc last %v best %v, an undisturbed run %v %v", r.TrialID, *r.LastMetric, *r.BestMetric, *want[i].LastMetric, *want[i].BestMetric)
		}
	}
}
