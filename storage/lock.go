package storage

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
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
	f *os.File
}

// safeLockName is an experiment name usable as it is in a file name.
var safeLockName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// LockPath is the lock file of experiment name of the database at dbPath:
// "DB.NAME.lock" beside the database, with NAME replaced by a hash of it
// when it is not a plain file name.
func LockPath(dbPath, name string) string {
	if !safeLockName.MatchString(name) || strings.Trim(name, ".") == "" {
		sum := sha256.Sum256([]byte(name))
		name = hex.EncodeToString(sum[:8])
	}
	return dbPath + "." + name + ".lock"
}

// LockExperiment takes the exclusive lock on experiment name of this
// database, whether the experiment exists yet or not. It does not wait:
// when another run (in any process, this one included) holds the lock, it
// fails with an error that wraps ErrExperimentRunning and names the holder's
// process id. Release the lock when the run ends; the lock files stay, as
// they must for the lock to be safe.
func (db *DB) LockExperiment(name string) (*ExperimentLock, error) {
	path := LockPath(db.path, name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock experiment %q: %w", name, err)
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
			return nil, fmt.Errorf("%w: %q in %s is held by %s (lock %s); wait for it to end or stop it, then run again to continue",
				ErrExperimentRunning, name, db.path, holder, path)
		}
		return nil, fmt.Errorf("lock experiment %q: %w", name, err)
	}
	// The holder's pid, for the error above; the lock is what counts.
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &ExperimentLock{f: f}, nil
}

// Release gives the lock up. Releasing twice is harmless.
func (l *ExperimentLock) Release() error {
	if l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the last descriptor releases the flock
	l.f = nil
	return err
}
