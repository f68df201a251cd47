package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/tuner"
)

// sharedDirWatch warns, once, when a trial's command writes files into the
// working directory that every trial of the sweep shares: a later trial
// may read them as its own (the PyTorch DDP tutorial resumes from any
// snapshot.pt it finds where it runs). It compares the folder's entries
// when each trial ends with what the folder held when the sweep started,
// leaving out the results database, gotune's own folders and the files
// its own output goes to (gotune run sweep.toml > out.txt). A trial that
// failed without a report (its command may never have started) is not
// blamed for what changed.
type sharedDirWatch struct {
	dir      string
	skip     func(name string) bool
	before   map[string]stamp
	w        io.Writer
	warned   bool
	reported map[int]bool
}

// stamp is what tells that a folder entry changed.
type stamp struct {
	size    int64
	modTime time.Time
}

// newSharedDirWatch watches the folder cfg's command runs in, when it runs
// a command in a folder that several trials share; nil otherwise.
func newSharedDirWatch(cfg tuner.Config, w io.Writer) *sharedDirWatch {
	tc := cfg.Trainer
	if tc.Command == nil || cfg.Search.Trials() < 2 || strings.Contains(tc.Workdir, "{") {
		return nil
	}
	dir, err := filepath.Abs(tc.Path(tc.Workdir)) // "" is the working directory
	if err != nil {
		return nil
	}
	storage := cfg.Storage
	if storage == "" {
		storage = tuner.DefaultStorage
	}
	db, _ := filepath.Abs(storage)
	var outputs []os.FileInfo
	for _, f := range []*os.File{os.Stdout, os.Stderr} {
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			outputs = append(outputs, fi)
		}
	}
	s := &sharedDirWatch{dir: dir, w: w, reported: map[int]bool{}, skip: func(name string) bool {
		path := filepath.Join(dir, name)
		if fi, err := os.Stat(path); err == nil && slices.ContainsFunc(outputs, func(o os.FileInfo) bool { return os.SameFile(o, fi) }) {
			return true
		}
		// The database with its journal files, the folders of checkpoints,
		// trials and logs beside it, and a folder that holds them all.
		if rel, err := filepath.Rel(path, db); err == nil && filepath.IsLocal(rel) {
			return true
		}
		return strings.HasPrefix(path, db) || filepath.Dir(db) == dir && (name == "checkpoints" || name == "logs")
	}}
	s.before = s.scan()
	return s
}

func (s *sharedDirWatch) scan() map[string]stamp {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil
	}
	m := make(map[string]stamp, len(entries))
	for _, e := range entries {
		if s.skip(e.Name()) {
			continue
		}
		if fi, err := e.Info(); err == nil {
			m[e.Name()] = stamp{fi.Size(), fi.ModTime()}
		}
	}
	return m
}

// OnReport implements tuner.Observer.
func (s *sharedDirWatch) OnReport(trial int, _ trainer.Result) { s.reported[trial] = true }

// OnTrialEnd implements tuner.Observer: it looks for what changed.
func (s *sharedDirWatch) OnTrialEnd(trial int, _ string, err error) {
	defer delete(s.reported, trial)
	if s.warned || s.before == nil || err != nil && !s.reported[trial] {
		return
	}
	var changed []string
	for name, st := range s.scan() {
		if old, ok := s.before[name]; !ok || old != st {
			changed = append(changed, name)
		}
	}
	if len(changed) == 0 {
		return
	}
	slices.Sort(changed)
	if len(changed) > 5 {
		changed = append(changed[:5], "…")
	}
	s.warned = true
	fmt.Fprintf(s.w, "warning: the sweep's trials share the working directory %s, and by the end of trial %d its command had written %s there: "+
		"a later trial may write over them, or read them as its own (a checkpoint to resume from). "+
		"Set workdir = \"{trial_dir}\" in [trainer] to run each trial in its own folder, or write under $GOTUNE_TRIAL_DIR\n",
		s.dir, trial, strings.Join(changed, ", "))
}
