package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Retention says which of a trial's committed checkpoints stay on disk.
type Retention struct {
	// NumToKeep is how many checkpoints to keep besides the latest, which
	// is always kept (a restarted group resumes from it); 0 keeps every one.
	NumToKeep int
	// ScoreAttribute names the reported metric that ranks checkpoints: the
	// best NumToKeep by it are kept. "" ranks by recency: the newest are kept.
	// A checkpoint whose report lacks the metric ranks below all others.
	ScoreAttribute string
	// Order is "max" (higher scores are better; the default) or "min".
	Order string
}

// CheckpointInfo describes one committed checkpoint.
type CheckpointInfo struct {
	// Path is the checkpoint's folder.
	Path string `json:"-"`
	// Iteration is the number of the report that committed it.
	Iteration int                `json:"iteration"`
	Time      time.Time          `json:"time"`
	Metrics   map[string]float64 `json:"metrics"`
}

// CheckpointDir is one trial's checkpoint folder. Every checkpoint in it is
// committed atomically: it is assembled under a temporary name, synced to
// disk, then renamed into place, so a reader never sees a half-written one
// and a crash leaves only a temporary folder that the next open removes.
//
// Layout: checkpoint_000042/ holds the files of the report of iteration 42
// (the merged files of every rank that contributed), and
// checkpoint_000042.json beside it its iteration, time and metrics.
// Methods are safe for concurrent use.
type CheckpointDir struct {
	path string
	keep Retention

	mu   sync.Mutex
	list []CheckpointInfo // oldest first
}

const (
	checkpointPrefix = "checkpoint_"
	tempPrefix       = ".tmp-"
	scratchName      = ".scratch"
)

// OpenCheckpointDir opens the checkpoint folder at path with the given
// retention. It removes what an interrupted commit left behind and finds
// the checkpoints already committed there. It does not create the folder:
// the first commit does, so that a trial that never checkpoints leaves no
// folder behind.
func OpenCheckpointDir(path string, keep Retention) (*CheckpointDir, error) {
	if keep.NumToKeep < 0 {
		return nil, fmt.Errorf("checkpoints: num_to_keep must not be negative, got %d", keep.NumToKeep)
	}
	if keep.Order != "" && keep.Order != "min" && keep.Order != "max" {
		return nil, fmt.Errorf("checkpoints: order must be \"min\" or \"max\", got %q", keep.Order)
	}
	// The folder is made by the first commit; a read-only place is named
	// now, before anything runs.
	if err := folderError(path, nil); err != nil {
		return nil, fmt.Errorf("checkpoints: %w", err)
	}
	d := &CheckpointDir{path: path, keep: keep}
	entries, err := os.ReadDir(path)
	if errors.Is(err, fs.ErrNotExist) {
		return d, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoints: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, tempPrefix) {
			if err := os.RemoveAll(filepath.Join(path, name)); err != nil {
				return nil, fmt.Errorf("checkpoints: remove an interrupted commit: %w", err)
			}
			continue
		}
		if !strings.HasPrefix(name, checkpointPrefix) {
			continue
		}
		if !e.IsDir() {
			// A description whose folder was never committed, or was
			// being removed when the process stopped.
			if base, ok := strings.CutSuffix(name, ".json"); ok {
				if _, err := os.Stat(filepath.Join(path, base)); errors.Is(err, fs.ErrNotExist) {
					os.Remove(filepath.Join(path, name))
				}
			}
			continue
		}
		info, err := readCheckpointInfo(filepath.Join(path, name))
		if err != nil {
			return nil, err
		}
		d.list = append(d.list, info)
	}
	slices.SortFunc(d.list, func(a, b CheckpointInfo) int { return a.Iteration - b.Iteration })
	return d, nil
}

func readCheckpointInfo(dir string) (CheckpointInfo, error) {
	data, err := os.ReadFile(dir + ".json")
	if err != nil {
		return CheckpointInfo{}, fmt.Errorf("checkpoints: %s has no description: %w", dir, err)
	}
	var info CheckpointInfo
	if err := json.Unmarshal(data, &info); err != nil {
		return CheckpointInfo{}, fmt.Errorf("checkpoints: %s.json: %w", dir, err)
	}
	info.Path = dir
	return info, nil
}

// Path is the trial's checkpoint folder.
func (d *CheckpointDir) Path() string { return d.path }

// ScratchDir is a folder inside the checkpoint folder, on the same file
// system, where workers write checkpoints before handing them over, so that
// committing them is a rename rather than a copy. It is not created here.
func (d *CheckpointDir) ScratchDir() string { return ScratchDir(d.path) }

// ScratchDir is CheckpointDir.ScratchDir of the checkpoint folder path,
// for a folder that is not open: what a run that was killed left there is
// no use to the next.
func ScratchDir(path string) string { return filepath.Join(path, scratchName) }

// List returns the committed checkpoints still on disk, oldest first.
func (d *CheckpointDir) List() []CheckpointInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.list)
}

// Latest returns the newest committed checkpoint; false when there is none.
func (d *CheckpointDir) Latest() (CheckpointInfo, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.list) == 0 {
		return CheckpointInfo{}, false
	}
	return d.list[len(d.list)-1], true
}

// DiscardAfter removes the committed checkpoints newer than iteration and
// returns them: when a run was interrupted between committing a report's
// checkpoint and recording the report, the checkpoint belongs to a report
// that never was, and the resumed run commits that iteration again.
func (d *CheckpointDir) DiscardAfter(iteration int) ([]CheckpointInfo, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var gone []CheckpointInfo
	for len(d.list) > 0 && d.list[len(d.list)-1].Iteration > iteration {
		last := d.list[len(d.list)-1]
		if err := removeCheckpoint(last.Path); err != nil {
			return gone, err
		}
		d.list = d.list[:len(d.list)-1]
		gone = append(gone, last)
	}
	return gone, nil
}

// CommitCopy commits a copy of another checkpoint folder, from, as this
// trial's checkpoint of the given iteration (as Population Based Training
// does when a trial takes over a better trial's weights); from is left as
// it is. Otherwise it is Commit.
func (d *CheckpointDir) CommitCopy(iteration int, metrics map[string]float64, from string) (CheckpointInfo, []CheckpointInfo, error) {
	if err := os.MkdirAll(d.ScratchDir(), 0o755); err != nil {
		return CheckpointInfo{}, nil, fmt.Errorf("checkpoints: %w", err)
	}
	tmp, err := os.MkdirTemp(d.ScratchDir(), "copy-")
	if err != nil {
		return CheckpointInfo{}, nil, fmt.Errorf("checkpoints: %w", err)
	}
	if err := copyTree(from, tmp); err != nil {
		os.RemoveAll(tmp)
		return CheckpointInfo{}, nil, fmt.Errorf("checkpoints: copy %s: %w", from, err)
	}
	info, removed, err := d.Commit(iteration, metrics, []string{tmp})
	if err != nil {
		os.RemoveAll(tmp)
	}
	return info, removed, err
}

// Commit merges shards, the folders the group's ranks handed over with the
// report of the given iteration (in rank order), into one checkpoint and
// commits it, then applies the retention. It takes the shards over: their
// files are moved (copied when they lie on another file system) and the
// folders removed. Where two ranks hand over a file with the same path
// inside their folders, the lower rank's is kept. It returns the committed
// checkpoint and those the retention removed. Iterations must be committed
// in increasing order; an iteration that is not newer than the latest
// committed one is refused. A commit that fails leaves the shards' files
// in the first shard's folder (the others' files that it took over
// included), so trying it again with the same shards commits the same
// checkpoint.
func (d *CheckpointDir) Commit(iteration int, metrics map[string]float64, shards []string) (CheckpointInfo, []CheckpointInfo, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n := len(d.list); n > 0 && d.list[n-1].Iteration >= iteration {
		return CheckpointInfo{}, nil, fmt.Errorf("checkpoints: iteration %d is not newer than the committed %d", iteration, d.list[n-1].Iteration)
	}
	if err := os.MkdirAll(d.path, 0o755); err != nil {
		return CheckpointInfo{}, nil, fmt.Errorf("checkpoints: %w", err)
	}
	name := fmt.Sprintf("%s%06d", checkpointPrefix, iteration)
	final := filepath.Join(d.path, name)
	tmp, err := os.MkdirTemp(d.path, tempPrefix+name+"-")
	if err != nil {
		return CheckpointInfo{}, nil, fmt.Errorf("checkpoints: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			// Hand what was taken over back to the first shard, so that
			// a commit that failed (the disk is full, say) can be tried
			// again with the same shards and commits the same files.
			if len(shards) > 0 {
				mergeInto(shards[0], tmp)
			}
			os.RemoveAll(tmp)
		}
	}()
	for _, shard := range shards {
		if err := mergeInto(tmp, shard); err != nil {
			return CheckpointInfo{}, nil, fmt.Errorf("checkpoints: take over %s: %w", shard, err)
		}
	}
	if err := syncTree(tmp); err != nil {
		return CheckpointInfo{}, nil, fmt.Errorf("checkpoints: sync: %w", err)
	}
	info := CheckpointInfo{Path: final, Iteration: iteration, Time: time.Now().UTC(), Metrics: finite(metrics)}
	desc, err := json.Marshal(info)
	if err != nil {
		return CheckpointInfo{}, nil, err
	}
	// The description first, then the folder: a committed folder always
	// has its description.
	if err := WriteFileAtomic(final+".json", desc); err != nil {
		return CheckpointInfo{}, nil, fmt.Errorf("checkpoints: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		os.Remove(final + ".json")
		return CheckpointInfo{}, nil, fmt.Errorf("checkpoints: commit: %w", err)
	}
	ok = true
	if err := syncDir(d.path); err != nil {
		return CheckpointInfo{}, nil, fmt.Errorf("checkpoints: sync: %w", err)
	}
	for _, shard := range shards {
		os.RemoveAll(shard)
	}
	d.list = append(d.list, info)
	removed, err := d.pruneLocked()
	return info, removed, err
}

// finite drops non-finite values, which JSON cannot hold.
func finite(m map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			out[k] = v
		}
	}
	return out
}

// pruneLocked removes the checkpoints the retention does not keep.
func (d *CheckpointDir) pruneLocked() ([]CheckpointInfo, error) {
	keepN := d.keep.NumToKeep
	if keepN == 0 || len(d.list) <= keepN+1 {
		return nil, nil
	}
	older := slices.Clone(d.list[:len(d.list)-1]) // the latest is always kept
	// Best first; ties go to the newer.
	better := func(a, b CheckpointInfo) int { return b.Iteration - a.Iteration }
	if attr := d.keep.ScoreAttribute; attr != "" {
		sign := 1.0
		if d.keep.Order == "min" {
			sign = -1
		}
		better = func(a, b CheckpointInfo) int {
			va, oka := a.Metrics[attr]
			vb, okb := b.Metrics[attr]
			switch {
			case oka != okb:
				if oka {
					return -1
				}
				return 1
			case oka && va != vb:
				if sign*va > sign*vb {
					return -1
				}
				return 1
			}
			return b.Iteration - a.Iteration
		}
	}
	slices.SortStableFunc(older, better)
	drop := map[int]bool{}
	var removed []CheckpointInfo
	var firstErr error
	for _, c := range older[keepN:] {
		if err := removeCheckpoint(c.Path); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		drop[c.Iteration] = true
		removed = append(removed, c)
	}
	d.list = slices.DeleteFunc(d.list, func(c CheckpointInfo) bool { return drop[c.Iteration] })
	slices.SortFunc(removed, func(a, b CheckpointInfo) int { return a.Iteration - b.Iteration })
	return removed, firstErr
}

// removeCheckpoint deletes a committed checkpoint: it is first renamed to a
// temporary name, so it disappears at once and a crash midway leaves only
// what the next open cleans up.
func removeCheckpoint(dir string) error {
	tmp := filepath.Join(filepath.Dir(dir), tempPrefix+"removed-"+filepath.Base(dir))
	if err := os.Rename(dir, tmp); err != nil {
		return fmt.Errorf("checkpoints: remove %s: %w", dir, err)
	}
	if err := os.Remove(dir + ".json"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("checkpoints: remove %s.json: %w", dir, err)
	}
	return os.RemoveAll(tmp)
}

// mergeInto moves the contents of src into dst. Folders present in both are
// merged; a file already present in dst is kept and src's copy dropped.
// Nothing is followed: src must be a folder, not a link to one, and links
// inside it are moved as links.
func mergeInto(dst, src string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("not a folder")
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		from, to := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		existing, err := os.Lstat(to)
		switch {
		case err == nil && existing.IsDir() && e.IsDir():
			if err := mergeInto(to, from); err != nil {
				return err
			}
			continue
		case err == nil:
			continue // a lower rank's file of the same name wins
		case !errors.Is(err, fs.ErrNotExist):
			return err
		}
		if err := move(from, to); err != nil {
			return err
		}
	}
	return nil
}

// move renames from to to, copying when they are on different file systems.
func move(from, to string) error {
	err := os.Rename(from, to)
	if err == nil {
		return nil
	}
	var le *os.LinkError
	if !errors.As(err, &le) || !errors.Is(le.Err, syscall.EXDEV) {
		return err
	}
	if err := copyTree(from, to); err != nil {
		return err
	}
	return os.RemoveAll(from)
}

func copyTree(from, to string) error {
	return filepath.WalkDir(from, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		target := filepath.Join(to, rel)
		switch {
		case e.IsDir():
			return os.MkdirAll(target, 0o755)
		case e.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case !e.Type().IsRegular():
			return nil // sockets, pipes and devices are no checkpoint data
		}
		return copyFile(path, target)
	})
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// syncTree flushes every regular file and folder under root to disk.
func syncTree(root string) error {
	return filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.IsDir() && !e.Type().IsRegular() {
			return nil
		}
		return syncPath(path)
	})
}

func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func syncDir(dir string) error { return syncPath(dir) }

// WriteFileAtomic writes data to path through a synced temporary file in
// path's folder, renamed over path: a reader sees the old file or the new
// one, never part of it.
func WriteFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), tempPrefix+filepath.Base(path)+"-")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// SetAside renames folder dir, when it exists and holds anything, to a
// name beside it that no run uses, dir + ".old-" + the time in UTC (with
// "-2", "-3", … when taken), and returns that name; it returns "" when dir
// is absent or empty. A new experiment sets aside the folders that an
// earlier experiment of the same name left beside a database that no
// longer knows it, so that nothing of the earlier one is lost and nothing
// of it is mistaken for the new one's. Hold the folder's lock (LockFolder).
func SetAside(dir string, now time.Time) (string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && len(entries) == 0) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("set aside %s: %w", dir, err)
	}
	base := dir + ".old-" + now.UTC().Format("20060102T150405Z")
	to := base
	for n := 2; ; n++ {
		if _, err := os.Lstat(to); errors.Is(err, fs.ErrNotExist) {
			break
		}
		to = fmt.Sprintf("%s-%d", base, n)
	}
	if err := os.Rename(dir, to); err != nil {
		return "", fmt.Errorf("set aside %s: %w", dir, err)
	}
	return to, nil
}
