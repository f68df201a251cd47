package storage

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// shard writes a rank's checkpoint folder with the given files.
func shard(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		writeFile(t, filepath.Join(dir, name), content)
	}
	return dir
}

func readAll(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		rel, _ := filepath.Rel(dir, path)
		out[rel] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestCommitMergesShards(t *testing.T) {
	d, err := OpenCheckpointDir(filepath.Join(t.TempDir(), "exp", "trial_1"), Retention{})
	if err != nil {
		t.Fatal(err)
	}
	rank0 := shard(t, map[string]string{"model.pt": "weights", "opt/state": "rank0", "same": "rank0"})
	rank1 := shard(t, map[string]string{"opt/state_1": "rank1", "same": "rank1"})
	info, removed, err := d.Commit(3, map[string]float64{"loss": 0.5}, []string{rank0, rank1})
	if err != nil || removed != nil {
		t.Fatalf("Commit: %v, removed %v", err, removed)
	}
	if filepath.Base(info.Path) != "checkpoint_000003" || info.Iteration != 3 {
		t.Errorf("info %+v", info)
	}
	got := readAll(t, info.Path)
	want := map[string]string{"model.pt": "weights", "opt/state": "rank0", "opt/state_1": "rank1", "same": "rank0"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("merged files %v, want %v (the lower rank wins a clash)", got, want)
	}
	for _, s := range []string{rank0, rank1} {
		if _, err := os.Stat(s); !os.IsNotExist(err) {
			t.Errorf("shard %s still exists after being taken over", s)
		}
	}
	// Reopening finds it, with its metrics.
	d2, err := OpenCheckpointDir(d.Path(), Retention{})
	if err != nil {
		t.Fatal(err)
	}
	latest, ok := d2.Latest()
	if !ok || latest.Iteration != 3 || latest.Metrics["loss"] != 0.5 || latest.Path != info.Path {
		t.Errorf("reopened latest %+v %v", latest, ok)
	}
	if _, _, err := d2.Commit(3, nil, nil); err == nil {
		t.Error("committing iteration 3 again succeeded")
	}
}

func TestCommitLeavesNothingHalfWritten(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenCheckpointDir(dir, Retention{})
	if err != nil {
		t.Fatal(err)
	}
	// A shard that is not a folder fails the commit; nothing is visible.
	file := filepath.Join(t.TempDir(), "not-a-folder")
	os.WriteFile(file, nil, 0o644)
	if _, _, err := d.Commit(1, nil, []string{shard(t, map[string]string{"a": "1"}), file}); err == nil {
		t.Fatal("commit of a file as a shard succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("a failed commit left %v", entries)
	}
	// What a crash mid-commit leaves is cleaned on open.
	os.MkdirAll(filepath.Join(dir, ".tmp-checkpoint_000002-123", "x"), 0o755)
	os.WriteFile(filepath.Join(dir, "checkpoint_000009.json"), []byte("{}"), 0o644)
	if _, err := OpenCheckpointDir(dir, Retention{}); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("open left %v", entries)
	}
}

func TestRetention(t *testing.T) {
	tests := []struct {
		name string
		keep Retention
		want []int
	}{
		{"keep all", Retention{}, []int{1, 2, 3, 4, 5}},
		{"newest", Retention{NumToKeep: 2}, []int{3, 4, 5}},
		{"best max", Retention{NumToKeep: 2, ScoreAttribute: "acc"}, []int{2, 3, 5}},
		{"best min", Retention{NumToKeep: 1, ScoreAttribute: "acc", Order: "min"}, []int{4, 5}},
		{"missing metric ranks last", Retention{NumToKeep: 3, ScoreAttribute: "acc", Order: "min"}, []int{2, 3, 4, 5}},
	}
	// acc by iteration; iteration 1 lacks it.
	acc := map[int]float64{2: 0.9, 3: 0.8, 4: 0.1, 5: 0.5}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := OpenCheckpointDir(t.TempDir(), tt.keep)
			if err != nil {
				t.Fatal(err)
			}
			var removed []int
			for it := 1; it <= 5; it++ {
				m := map[string]float64{"step": float64(it)}
				if v, ok := acc[it]; ok {
					m["acc"] = v
				}
				_, rm, err := d.Commit(it, m, []string{shard(t, map[string]string{"w": fmt.Sprint(it)})})
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range rm {
					removed = append(removed, c.Iteration)
					if _, err := os.Stat(c.Path); !os.IsNotExist(err) {
						t.Errorf("removed checkpoint %d still on disk", c.Iteration)
					}
				}
			}
			var kept []int
			for _, c := range d.List() {
				kept = append(kept, c.Iteration)
			}
			if !slices.Equal(kept, tt.want) {
				t.Errorf("kept %v, want %v", kept, tt.want)
			}
			if len(kept)+len(removed) != 5 {
				t.Errorf("kept %v and removed %v do not add up to 5", kept, removed)
			}
			entries, _ := os.ReadDir(d.Path())
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			if len(names) != 2*len(tt.want) || strings.Contains(strings.Join(names, " "), ".tmp") {
				t.Errorf("folder holds %v", names)
			}
		})
	}
}

func TestOpenCheckpointDirValidates(t *testing.T) {
	if _, err := OpenCheckpointDir(t.TempDir(), Retention{NumToKeep: -1}); err == nil {
		t.Error("negative num_to_keep accepted")
	}
	if _, err := OpenCheckpointDir(t.TempDir(), Retention{Order: "best"}); err == nil {
		t.Error("order \"best\" accepted")
	}
}

func TestCommitCopiesAcrossFileSystems(t *testing.T) {
	other, err := os.MkdirTemp("/dev/shm", "gotune-test-")
	if err != nil {
		t.Skip("no /dev/shm to stand for another file system")
	}
	defer os.RemoveAll(other)
	d, err := OpenCheckpointDir(t.TempDir(), Retention{})
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(other, "rank0")
	os.MkdirAll(filepath.Join(src, "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "sub", "w"), []byte("weights"), 0o600)
	os.Symlink("sub/w", filepath.Join(src, "link"))
	info, _, err := d.Commit(1, nil, []string{src})
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, info.Path); got["sub/w"] != "weights" || got["link"] != "weights" {
		t.Errorf("copied files %v", got)
	}
	if _, err := os.Stat(src); !os.IsNotExist(err) {
		t.Errorf("the shard on the other file system was not removed: %v", err)
	}
}

func TestCommitCopyLeavesTheSource(t *testing.T) {
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"model.ckpt": "weights", "sub/opt": "state"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d, err := OpenCheckpointDir(filepath.Join(t.TempDir(), "trial_2"), Retention{})
	if err != nil {
		t.Fatal(err)
	}
	info, _, err := d.CommitCopy(7, map[string]float64{"loss": 0.5}, src)
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"model.ckpt": "weights", "sub/opt": "state"} {
		got, err := os.ReadFile(filepath.Join(info.Path, name))
		if err != nil || string(got) != body {
			t.Errorf("copy's %s: %q, %v", name, got, err)
		}
		if got, err := os.ReadFile(filepath.Join(src, name)); err != nil || string(got) != body {
			t.Errorf("source's %s after the copy: %q, %v", name, got, err)
		}
	}
	if latest, ok := d.Latest(); !ok || latest.Iteration != 7 {
		t.Errorf("latest checkpoint %+v, want iteration 7", latest)
	}
	if _, _, err := d.CommitCopy(7, nil, src); err == nil {
		t.Error("a copy at an iteration that is not newer was committed")
	}
}

func TestSetAside(t *testing.T) {
	now := time.Date(2026, 11, 23, 23, 15, 0, 0, time.UTC)
	root := t.TempDir()
	dir := filepath.Join(root, "e")
	for _, step := range []struct {
		name  string
		setup func()
		want  string // the new name, relative to root; "" for none
	}{
		{"absent", func() {}, ""},
		{"empty", func() { os.MkdirAll(dir, 0o755) }, ""},
		{"with files", func() { writeFile(t, filepath.Join(dir, "trial_1", "reports.csv"), "a") }, "e.old-20261123T231500Z"},
		{"name taken", func() { writeFile(t, filepath.Join(dir, "trial_1", "reports.csv"), "b") }, "e.old-20261123T231500Z-2"},
		{"names taken", func() { writeFile(t, filepath.Join(dir, "x"), "c") }, "e.old-20261123T231500Z-3"},
	} {
		step.setup()
		got, err := SetAside(dir, now)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		want := ""
		if step.want != "" {
			want = filepath.Join(root, step.want)
		}
		if got != want {
			t.Errorf("%s: set aside to %q, want %q", step.name, got, want)
		}
	}
	for name, content := range map[string]string{
		"e.old-20261123T231500Z/trial_1/reports.csv":   "a",
		"e.old-20261123T231500Z-2/trial_1/reports.csv": "b",
		"e.old-20261123T231500Z-3/x":                   "c",
	} {
		if b, err := os.ReadFile(filepath.Join(root, name)); err != nil || string(b) != content {
			t.Errorf("%s: got %q, %v; want %q", name, b, err, content)
		}
	}
}

// writeFile writes content to path, creating its folders.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCheckpointFolderCreatedByFirstCommit: opening a trial's checkpoint
// folder does not create it (a trial that never checkpoints leaves none);
// the first commit does.
func TestCheckpointFolderCreatedByFirstCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "exp", "trial_1")
	d, err := OpenCheckpointDir(path, Retention{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(path)); !os.IsNotExist(err) {
		t.Fatalf("after open: %v, want no folder", err)
	}
	if len(d.List()) != 0 {
		t.Errorf("checkpoints of a missing folder: %v", d.List())
	}
	info, _, err := d.Commit(1, nil, []string{shard(t, map[string]string{"w": "1"})})
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, info.Path); got["w"] != "1" {
		t.Errorf("committed files %v", got)
	}
	again, err := OpenCheckpointDir(path, Retention{})
	if err != nil || len(again.List()) != 1 {
		t.Errorf("reopened: %v, %v", again.List(), err)
	}
}
