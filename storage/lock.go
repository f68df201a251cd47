package storage

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
)

// ErrExperimentRunning is wrapped by LockExperiment's error when another
// run holds the experiment.
var ErrExperimentRunning = errors.New("experiment is already running")

// ExperimentLock is a run's exclusive hold on one experiment of a database.
// It is an flock(2) lock on a file beside the database, so the operating
// system releases it when the process ends in any way, kill -9 included,
// and the experiment can be resumed at once.
type ExperimentLock struct {
	f    *os.File
	path string
}

// safeLockName is an experiment name usable as it is in a file name.
var safeLockName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// LockPath is the lock file of experiment name of the database at dbPath:
// "DB.NAME.lock" beside the database, with NAME replaced by a hash of it
// when it is not a plain file name.
func LockPath(dbPath, name string) string {
	return dbPath + "." + fileName(name) + ".lock"
}

// ControlPath is where the run of experiment name of the database at
// dbPath serves its control socket while it runs (the stacks of its
// workers): "DB.NAME.sock" beside the database, NAME as in LockPath.
func ControlPath(dbPath, name string) string {
	return dbPath + "." + fileName(name) + ".sock"
}

// fileName is an experiment name usable in a file name: itself when it is
// a plain one, else a hash of it.
func fileName(name string) string {
	if !safeLockName.MatchString(name) || strings.Trim(name, ".") == "" {
		sum := sha256.Sum256([]byte(name))
		name = hex.EncodeToString(sum[:8])
	}
	return name
}

// LockExperiment takes the exclusive lock on experiment name of this
// database, whether the experiment exists yet or not. It does not wait:
// when another run (in any process, this one included) holds the lock, it
// fails with an error that wraps ErrExperimentRunning and names the holder's
// process id. Release the lock when the run ends, which removes its file.
func (db *DB) LockExperiment(name string) (*ExperimentLock, error) {
	return lockFile(LockPath(db.path, name), func(holder, path string) error {
		return fmt.Errorf("%w: %q in %s is held by %s (lock %s); wait for it to end or stop it, then run again to continue",
			ErrExperimentRunning, name, db.path, holder, path)
	})
}

// LockFolder takes the exclusive lock on folder dir, an experiment's
// checkpoints or logs, which runs with different databases may share (two
// databases in one folder, or one shared checkpoint root). Like
// LockExperiment it does not wait: when another run holds the folder, it
// fails with an error that wraps ErrExperimentRunning and names the
// holder's process id. The lock is on the file dir+".lock", so dir itself
// may be absent, created, or set aside while it is held.
func LockFolder(dir string) (*ExperimentLock, error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("lock folder %s: %w", dir, orFolderError(filepath.Dir(dir), err))
	}
	return lockFile(dir+".lock", func(holder, path string) error {
		return fmt.Errorf("%w: folder %s is in use by %s (lock %s), a run of the same experiment name with another database; wait for it to end, or choose another name or database folder",
			ErrExperimentRunning, dir, holder, path)
	})
}

// lockFile takes an flock(2) on the file at path, creating it, without
// waiting; when another holds it, busy's error is returned, given the
// holder ("process N" when its pid can be read) and the path. A holder
// removes the file as it releases the lock, so a lock taken on a file
// that is no longer at path (or another file is) is given up and taken
// again on the file there now.
func lockFile(path string, busy func(holder, path string) error) (*ExperimentLock, error) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, orFolderError(filepath.Dir(path), err))
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				holder := "another process"
				if b, err := os.ReadFile(path); err == nil {
					if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
						holder = fmt.Sprintf("process %d", pid)
					}
				}
				return nil, busy(holder, path)
			}
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		held, errHeld := f.Stat()
		there, errThere := os.Stat(path)
		if errHeld != nil || errThere != nil || !os.SameFile(held, there) {
			// Released and removed by its holder between the open and
			// the lock.
			f.Close()
			continue
		}
		// The holder's pid, for the error above; the lock is what counts.
		if err := f.Truncate(0); err == nil {
			f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		}
		return &ExperimentLock{f: f, path: path}, nil
	}
}

// RunLive reports whether a run holds experiment name's lock (see
// LockExperiment), which a run that died no longer does. It tests the lock
// with a shared one, taken and given up at once, so a run that starts at
// that very moment may be refused as if another held it.
func (db *DB) RunLive(name string) bool {
	f, err := os.Open(LockPath(db.path, name))
	if err != nil {
		return false // no lock file: no run ever held it
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
	return false
}

// ShowLiveStatus sets the status of each RUNNING experiment of es that no
// run holds (RunLive) to INTERRUPTED, as it is: its run died without a
// word. For what people read (gotune ls and rm; the dashboard, which
// needs RunLive for the trials too, applies ShownExperimentStatus itself).
func (db *DB) ShowLiveStatus(es ...*Experiment) {
	for _, e := range es {
		if e.Status == ExperimentRunning {
			e.Status = ShownExperimentStatus(e.Status, db.RunLive(e.Name))
		}
	}
}

// Release gives the lock up and removes its file, which a run that ends
// cleanly thus leaves no trace of (a process that is killed leaves the
// file, and the next lock takes it over). Releasing twice is harmless.
func (l *ExperimentLock) Release() error {
	if l.f == nil {
		return nil
	}
	// Removed while still held: whoever opens the path from now on gets a
	// new file, and whoever opened the old one finds it gone once it holds
	// it, and tries again.
	errRemove := os.Remove(l.path)
	if errors.Is(errRemove, fs.ErrNotExist) {
		errRemove = nil
	}
	err := l.f.Close() // closing the last descriptor releases the flock
	l.f = nil
	return errors.Join(errRemove, err)
}
