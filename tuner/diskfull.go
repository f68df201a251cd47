package tuner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/gotune/gotune/storage"
)

// DiskObserver is an Observer that also wants to hear when the sweep
// pauses because the disk is full, and when it goes on. OnDiskFull is
// called with the error (which names the file) once when writes start
// waiting for space, and with nil when they succeed again. Unlike the
// Observer's methods, it may be called from any goroutine.
type DiskObserver interface {
	Observer
	OnDiskFull(err error)
}

// diskWait is how a run waits for space while the disk is full: results
// and checkpoints that cannot be written are tried again, with growing
// pauses, for as long as the run's context lives, and the observer hears
// once that the sweep waits and once that it goes on. A worker whose report
// waits meanwhile is not counted hung: its group holds its watchdog while
// the report is committed.
type diskWait struct {
	ctx      context.Context
	observer Observer

	mu   sync.Mutex
	full bool
}

func newDiskWait(ctx context.Context, o Observer) *diskWait {
	return &diskWait{ctx: ctx, observer: o}
}

// notify records whether writes wait for space (err wraps a full disk) or
// go on (err is nil), and tells the observer when that changes.
func (d *diskWait) notify(err error) {
	if d == nil {
		return
	}
	d.mu.Lock()
	changed := d.full != (err != nil)
	d.full = err != nil
	d.mu.Unlock()
	if o, ok := d.observer.(DiskObserver); ok && changed {
		o.OnDiskFull(err)
	}
}

// Pauses between the tries of a file write that waits for space.
const (
	firstDiskPause = 10 * time.Millisecond
	maxDiskPause   = time.Second
)

// retry runs write until it does not fail for a full disk, or until the
// run's context ends; then a full disk's error wraps storage.ErrDiskFull.
// Outside a run (d is nil) it runs write once.
func (d *diskWait) retry(what string, write func() error) error {
	if d == nil {
		return write()
	}
	for pause := firstDiskPause; ; pause = min(2*pause, maxDiskPause) {
		err := write()
		if err == nil {
			d.notify(nil)
			return nil
		}
		if !isDiskFull(err) {
			return err
		}
		if !errors.Is(err, storage.ErrDiskFull) {
			err = fmt.Errorf("%w: %s: %w; free some space, then run the same command again to continue", storage.ErrDiskFull, what, err)
		}
		d.notify(err)
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-d.ctx.Done():
			t.Stop()
			return err
		}
	}
}

// isDiskFull reports whether err says the disk, a quota or the file-size
// limit is full.
func isDiskFull(err error) bool {
	return errors.Is(err, storage.ErrDiskFull) || errors.Is(err, syscall.ENOSPC) ||
		errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EFBIG)
}
