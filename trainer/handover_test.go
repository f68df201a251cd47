package trainer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"
)

func init() { Register("handover", handOverFunc) }

// handOverFunc reports four times, handing over the folder "out" (which
// stands for any folder of the user's, /etc say), a link to it made where
// CheckpointDir makes folders, the worker's own scratch folder itself, and
// finally a proper checkpoint (holding a link to "out" among its files).
func handOverFunc(ctx context.Context, w *Worker) error {
	out := w.String("out", "")
	for round := 1; round <= 4; round++ {
		dir, err := w.CheckpointDir()
		if err != nil {
			return err
		}
		var handed string
		switch round {
		case 1:
			handed = out
		case 2:
			os.Remove(dir)
			if err := os.Symlink(out, dir); err != nil {
				return err
			}
			handed = dir
		case 3:
			handed = filepath.Dir(dir)
		case 4:
			os.WriteFile(filepath.Join(dir, "state"), []byte("4"), 0o644)
			if err := os.Symlink(out, filepath.Join(dir, "escape")); err != nil {
				return err
			}
			handed = dir
		}
		if err := w.Report(ctx, map[string]float64{"round": float64(round)}, WithCheckpoint(handed)); err != nil {
			return err
		}
	}
	return nil
}

// userFolder makes a folder of the user's, outside gotune's, with a file.
func userFolder(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "etc")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "passwd"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// checkUntouched fails the test unless the user's folder is as made.
func checkUntouched(t *testing.T, dir string) {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(dir, "passwd")); err != nil || string(b) != "keep" {
		t.Errorf("%s after the run: %q, %v; want it untouched", dir, b, err)
	}
}

// rounds is the "round" metric of every result, in order.
func (c *collect) rounds() []float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []float64
	for _, r := range c.results {
		out = append(out, r.Metrics["round"])
	}
	return out
}

// TestGoWorkersCheckpointsConfined: Go functions, in this process and as
// process workers, hand over a folder outside their scratch folder, a link
// out of it and the scratch folder itself: each is refused with an event
// and left alone, while every report still counts.
func TestGoWorkersCheckpointsConfined(t *testing.T) {
	for _, kind := range []string{"goroutine", "process"} {
		t.Run(kind, func(t *testing.T) {
			out := userFolder(t)
			store := &testStore{dir: t.TempDir()}
			spec := Spec{
				Experiment: uniqueName(t), Trial: 1,
				Config:      map[string]any{"out": out},
				Scaling:     ScalingConfig{NumWorkers: 1},
				KillTimeout: 2 * time.Second,
				ScratchDir:  filepath.Join(t.TempDir(), "scratch"),
				Checkpoints: store,
			}
			if kind == "goroutine" {
				spec.Train = handOverFunc
			} else {
				spec.Process = "handover"
			}
			sink := &collect{}
			if _, err := Run(context.Background(), spec, sink); err != nil {
				t.Fatal(err)
			}
			if got := sink.rounds(); !slices.Equal(got, []float64{1, 2, 3, 4}) {
				t.Errorf("reports of rounds %v, want 1 to 4", got)
			}
			if !slices.Equal(store.its, []int{4}) {
				t.Errorf("committed iterations %v, want only 4", store.its)
			}
			refused := sink.causes(EventCheckpointRefused)
			if len(refused) != 3 {
				t.Fatalf("%d refusals, want 3: %q", len(refused), refused)
			}
			for i, want := range []string{"outside", "resolves to " + out, "scratch folder itself"} {
				if !strings.Contains(refused[i], want) || !strings.Contains(refused[i], "worker 0") {
					t.Errorf("refusal %d: %q lacks %q", i+1, refused[i], want)
				}
			}
			checkUntouched(t, out)
			// The committed checkpoint holds the link as a link: deleting
			// it leaves the folder it points to alone.
			ck := filepath.Join(store.dir, "checkpoint_000004")
			if fi, err := os.Lstat(filepath.Join(ck, "escape")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Errorf("the checkpoint's link: %v, %v", fi, err)
			}
			if err := os.RemoveAll(ck); err != nil {
				t.Fatal(err)
			}
			checkUntouched(t, out)
		})
	}
}

// TestCommandCheckpointsConfined: a command worker (a shell script) hands
// over a folder outside its GOTUNE_CHECKPOINT_DIR and a link that leads
// out of it, and another rank hands over a shard outside its own: each is
// refused with an event naming the worker and the folder and left as it
// was; the reports still count, and a checkpoint that misses a refused
// shard is not committed.
func TestCommandCheckpointsConfined(t *testing.T) {
	out, out2, sync := userFolder(t), userFolder(t), t.TempDir()
	script := `
for r in 1 2 3 4; do
	if [ "$GOTUNE_WORLD_RANK" = 1 ]; then
		d="$GOTUNE_CHECKPOINT_DIR/s$r"; mkdir -p "$d"; echo 1 > "$d/shard_1"
		if [ $r = 3 ]; then d="$OUT2"; fi
		echo "@gotune {\"checkpoint\": \"$d\"}"
		touch "$SYNC/r1_$r"
	else
		while [ ! -e "$SYNC/r1_$r" ]; do sleep 0.01; done
		case $r in
		1) d="$OUT" ;;
		2) ln -s "$OUT" "$GOTUNE_CHECKPOINT_DIR/link"; d="$GOTUNE_CHECKPOINT_DIR/link/../etc" ;;
		*) d="$GOTUNE_CHECKPOINT_DIR/c$r"; mkdir -p "$d"; echo 0 > "$d/shard_0" ;;
		esac
		echo "@gotune {\"round\": $r, \"checkpoint\": \"$d\"}"
	fi
done`
	store := &testStore{dir: t.TempDir()}
	spec := Spec{
		Experiment: uniqueName(t), Trial: 1,
		Command:     []string{"sh", "-c", script},
		Env:         []string{"OUT=" + out, "OUT2=" + out2, "SYNC=" + sync},
		Scaling:     ScalingConfig{NumWorkers: 2},
		KillTimeout: 2 * time.Second,
		ScratchDir:  filepath.Join(t.TempDir(), "scratch"),
		LogDir:      filepath.Join(t.TempDir(), "logs"),
		Checkpoints: store,
	}
	sink := &collect{}
	if _, err := Run(context.Background(), spec, sink); err != nil {
		t.Fatal(err)
	}
	if got := sink.rounds(); !slices.Equal(got, []float64{1, 2, 3, 4}) {
		t.Errorf("reports of rounds %v, want 1 to 4", got)
	}
	if !slices.Equal(store.its, []int{4}) {
		t.Errorf("committed iterations %v, want only 4", store.its)
	}
	entries, _ := os.ReadDir(filepath.Join(store.dir, "checkpoint_000004"))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"shard_0", "shard_1"}) {
		t.Errorf("checkpoint 4 holds %v, want both shards", names)
	}
	refused := sink.causes(EventCheckpointRefused)
	want := []string{"worker 0: " + out, "worker 0: " + filepath.Join("link", "..", "etc"), "worker 1: " + out2}
	if len(refused) != len(want) {
		t.Fatalf("%d refusals, want %d: %q", len(refused), len(want), refused)
	}
	for _, w := range want {
		worker, path, _ := strings.Cut(w, ": ")
		if !slices.ContainsFunc(refused, func(r string) bool {
			return strings.HasPrefix(r, worker) && strings.Contains(r, path) && strings.Contains(r, "GOTUNE_CHECKPOINT_DIR")
		}) {
			t.Errorf("no refusal names %s, %s and GOTUNE_CHECKPOINT_DIR: %q", worker, path, refused)
		}
	}
	checkUntouched(t, out)
	checkUntouched(t, out2)
	log, _ := os.ReadFile(filepath.Join(spec.LogDir, "worker_0.log"))
	if !strings.Contains(string(log), "refused the checkpoint "+out) {
		t.Errorf("rank 0's log says nothing of the refusal:\n%s", log)
	}
}

// TestRefusalOfALongPathIsBounded: a worker's path is quoted in the event,
// up to a bound.
func TestRefusalOfALongPathIsBounded(t *testing.T) {
	long := "/" + strings.Repeat("d", 300) + strings.Repeat("/é", 20000)
	spec := Spec{
		Experiment: uniqueName(t), Trial: 1,
		Train: func(ctx context.Context, w *Worker) error {
			return w.Report(ctx, map[string]float64{"round": 1}, WithCheckpoint(long))
		},
		ScratchDir: filepath.Join(t.TempDir(), "scratch"),
	}
	sink := &collect{}
	if _, err := Run(context.Background(), spec, sink); err != nil {
		t.Fatal(err)
	}
	refused := sink.causes(EventCheckpointRefused)
	if len(refused) != 1 || len(refused[0]) > maxRefusal+200 || !strings.Contains(refused[0], long[:300]) || !utf8.ValidString(refused[0]) {
		t.Errorf("refusals of %d bytes: %.300q", len(refused[0]), refused)
	}
	if got := sink.rounds(); !slices.Equal(got, []float64{1}) {
		t.Errorf("reports %v", got)
	}
}

// TestGoWorkersMakeNoFolderUntilTheyCheckpoint: Go functions that only
// report leave the disk untouched; the first CheckpointDir makes the
// scratch folder, and its checkpoint is committed as usual.
func TestGoWorkersMakeNoFolderUntilTheyCheckpoint(t *testing.T) {
	scratch := filepath.Join(t.TempDir(), "scratch")
	var sawScratch atomic.Bool
	spec := Spec{
		Experiment: uniqueName(t), Trial: 1,
		Scaling: ScalingConfig{NumWorkers: 2},
		Train: func(ctx context.Context, w *Worker) error {
			// Before the report that both ranks must reach, so before
			// either asks for a folder.
			if _, err := os.Stat(scratch); err == nil {
				sawScratch.Store(true)
			}
			if err := w.Report(ctx, map[string]float64{"round": 1}); err != nil {
				return err
			}
			dir, err := w.CheckpointDir()
			if err != nil {
				return err
			}
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("rank%d", w.Rank())), []byte("x"), 0o644)
			return w.Report(ctx, map[string]float64{"round": 2}, WithCheckpoint(dir))
		},
		ScratchDir: scratch,
	}
	var shards []string
	sink := &collect{on: func(r Result) Action {
		for _, dir := range r.Checkpoint {
			if _, err := os.Stat(dir); err == nil {
				shards = append(shards, dir)
			}
		}
		return Continue
	}}
	if _, err := Run(context.Background(), spec, sink); err != nil {
		t.Fatal(err)
	}
	if sawScratch.Load() {
		t.Error("the scratch folder was made before any worker asked for a folder")
	}
	if len(shards) != 2 {
		t.Errorf("handed over %q, want both ranks' folders", shards)
	}
	if _, err := os.Stat(scratch); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the scratch folder outlived the run: %v", err)
	}
}

// TestRelativeFoldersMadeAbsolute: a spec whose scratch, log and trial
// folders are relative (as they were beside a database named "gotune.db")
// hands its command, which runs in another folder, only absolute paths:
// the checkpoint it hands over from GOTUNE_CHECKPOINT_DIR is committed,
// not refused as outside a relative scratch folder, and torch's error file
// can be written from the command's own folder.
func TestRelativeFoldersMadeAbsolute(t *testing.T) {
	here, elsewhere := t.TempDir(), t.TempDir()
	t.Chdir(here)
	script := `
for v in "$GOTUNE_CHECKPOINT_DIR" "$GOTUNE_TRIAL_DIR" "$TORCHELASTIC_ERROR_FILE"; do
	case "$v" in /*) ;; *) echo "not absolute: $v" >&2; exit 3 ;; esac
done
echo '{}' > "$TORCHELASTIC_ERROR_FILE" || exit 4
d="$GOTUNE_CHECKPOINT_DIR/c1"; mkdir -p "$d"; echo 1 > "$d/state"
echo "@gotune {\"round\": 1, \"checkpoint\": \"$d\"}"`
	store := &testStore{dir: t.TempDir()}
	spec := Spec{
		Experiment: uniqueName(t), Trial: 1,
		Command:     []string{"sh", "-c", script},
		Workdir:     elsewhere,
		Scaling:     ScalingConfig{NumWorkers: 1},
		KillTimeout: 2 * time.Second,
		ScratchDir:  filepath.Join("trial_1", ".scratch"),
		LogDir:      filepath.Join("trial_1", "logs"),
		TrialDir:    "trial_1",
		Checkpoints: store,
	}
	if err := os.MkdirAll(spec.TrialDir, 0o755); err != nil {
		t.Fatal(err)
	}
	sink := &collect{}
	if _, err := Run(context.Background(), spec, sink); err != nil {
		t.Fatal(err)
	}
	if refused := sink.causes(EventCheckpointRefused); len(refused) > 0 {
		t.Errorf("checkpoints refused: %q", refused)
	}
	if !slices.Equal(store.its, []int{1}) {
		t.Errorf("committed iterations %v, want 1", store.its)
	}
	if _, err := os.Stat(filepath.Join(here, "trial_1", "logs", "worker_0.error.json")); err != nil {
		t.Errorf("torch's error file: %v", err)
	}
}
