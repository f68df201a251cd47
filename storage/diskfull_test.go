package storage

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// smallFS mounts a tmpfs of size bytes for the test, or skips it saying
// why when this system lets the test mount none (it needs root).
func smallFS(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a small tmpfs to fill (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// fill writes a file in dir until the file system is full, and returns
// its path.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 4096)
	for {
		if _, err := f.Write(block); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return path
		}
	}
}

// TestCommitOnAFullDiskKeepsTheShards commits a checkpoint of two shards
// on a file system that is really full: the commit fails with ENOSPC,
// every file of the shards is still there to try again, and once space
// is freed the same call commits the merged checkpoint.
func TestCommitOnAFullDiskKeepsTheShards(t *testing.T) {
	root := smallFS(t, "256k")
	d, err := OpenCheckpointDir(filepath.Join(root, "trial_1"), Retention{})
	if err != nil {
		t.Fatal(err)
	}
	scratch := d.ScratchDir()
	shards := []string{filepath.Join(scratch, "rank-0"), filepath.Join(scratch, "rank-1")}
	writeFile(t, filepath.Join(shards[0], "model.ckpt"), "weights")
	writeFile(t, filepath.Join(shards[0], "opt", "state"), "moments")
	writeFile(t, filepath.Join(shards[1], "model.ckpt"), "rank 1's copy")
	writeFile(t, filepath.Join(shards[1], "opt", "rank1"), "rank 1's state")
	filler := fill(t, root)
	_, _, err = d.Commit(1, map[string]float64{"loss": 1}, shards)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("commit on a full disk: got %v, want ENOSPC", err)
	}
	if _, ok := d.Latest(); ok {
		t.Fatal("a failed commit is listed")
	}
	want := map[string]string{"model.ckpt": "weights", "opt/state": "moments", "opt/rank1": "rank 1's state"}
	got := readAll(t, shards[0])
	for k, v := range want {
		if got[k] != v {
			t.Errorf("after the failed commit, the first shard holds %v; want %v", got, want)
			break
		}
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	info, _, err := d.Commit(1, map[string]float64{"loss": 1}, shards)
	if err != nil {
		t.Fatalf("commit after space was freed: %v", err)
	}
	if got := readAll(t, info.Path); len(got) != len(want) || got["model.ckpt"] != "weights" || got["opt/rank1"] != "rank 1's state" {
		t.Errorf("committed %v, want %v", got, want)
	}
}
