package tuner

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
)

// diskNotes records what a DiskObserver hears.
type diskNotes struct {
	nopObserver
	mu    sync.Mutex
	heard []error
}

func (d *diskNotes) OnDiskFull(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.heard = append(d.heard, err)
}

func (d *diskNotes) list() []error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]error(nil), d.heard...)
}

// TestCheckpointCommitWaitsForSpace commits a trial's checkpoint into a
// folder on a small tmpfs that is full: the commit waits (the observer
// hears once that the disk is full, with the error naming the file), and
// once space is freed it commits the shard's files and the observer hears
// that writing goes on. When the run's context ends first, the commit
// fails with storage.ErrDiskFull and the shard's files are still there.
func TestCheckpointCommitWaitsForSpace(t *testing.T) {
	root := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", root).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a small tmpfs to fill (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", root).Run() })
	ctx := context.Background()
	db, err := storage.Open(filepath.Join(t.TempDir(), "gotune.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exp, err := db.CreateExperiment(ctx, "e", "loss", "min", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := db.CreateTrial(ctx, exp.ID, 1, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	dir, err := storage.OpenCheckpointDir(filepath.Join(root, "trial_1"), storage.Retention{})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	notes := &diskNotes{}
	c := &trialCheckpoints{db: db, trialID: rec.ID(), dir: dir, space: newDiskWait(runCtx, notes), ids: map[string]int64{}}
	var _ trainer.CheckpointStore = c

	shard := func(name string) string {
		s := filepath.Join(dir.ScratchDir(), name)
		if err := os.MkdirAll(s, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(s, "model.ckpt"), []byte("weights "+name), 0o644); err != nil {
			t.Fatal(err)
		}
		return s
	}
	fill := func() string {
		path := filepath.Join(root, "filler")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for {
			if _, err := f.Write(make([]byte, 4096)); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				return path
			}
		}
	}

	s1 := shard("one")
	filler := fill()
	done := make(chan error, 1)
	var path string
	go func() {
		var err error
		path, err = c.Commit(1, map[string]float64{"loss": 1}, []string{s1})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the commit returned %v on a full disk; want it to wait", err)
	case <-time.After(300 * time.Millisecond):
	}
	if heard := notes.list(); len(heard) != 1 || !errors.Is(heard[0], storage.ErrDiskFull) || !errors.Is(heard[0], syscall.ENOSPC) {
		t.Fatalf("the observer heard %v, want one disk-full error", heard)
	}
	os.Remove(filler)
	if err := <-done; err != nil {
		t.Fatalf("commit after space was freed: %v", err)
	}
	if data, err := os.ReadFile(filepath.Join(path, "model.ckpt")); err != nil || string(data) != "weights one" {
		t.Errorf("committed %q, %v", data, err)
	}
	if heard := notes.list(); len(heard) != 2 || heard[1] != nil {
		t.Errorf("the observer heard %v, want the disk-full error then nil", heard)
	}

	// The run ends while the commit waits: it gives up, keeping the shard.
	s2 := shard("two")
	fill()
	go func() {
		_, err := c.Commit(2, map[string]float64{"loss": 0.5}, []string{s2})
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	cancel()
	if err := <-done; !errors.Is(err, storage.ErrDiskFull) {
		t.Fatalf("commit when the run ended: got %v, want ErrDiskFull", err)
	}
	if data, err := os.ReadFile(filepath.Join(s2, "model.ckpt")); err != nil || string(data) != "weights two" {
		t.Errorf("the shard after the commit gave up: %q, %v", data, err)
	}
}
