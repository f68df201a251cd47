package trainer

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"
)

// endKind is why an attempt ended.
type endKind int

const (
	endNone endKind = iota
	endCompleted
	endStopped
	endPaused
	endResize
	endCancelled
	endFailed
)

// attemptEnd is why an attempt ended; err is the failure for endFailed.
type attemptEnd struct {
	kind endKind
	err  error
}

// graceful reports whether the workers still running are asked to stop
// (SIGTERM, then SIGKILL after the grace period) rather than killed at once.
func (e attemptEnd) graceful() bool { return e.kind != endFailed }

// attempt is one start of a trial's group: a set of workers that run until
// they finish, the tuner stops or pauses them, or one of them fails. Its
// context is cancelled when it ends; the first reason to end it wins.
type attempt struct {
	r       *runner
	number  int
	slots   []Slot
	resume  checkpointRef
	scratch string
	// workers tracks the workers' status for a WorkerSink.
	workers *workerTable

	ctx    context.Context
	cancel context.CancelFunc
	// iter is the iteration of the attempt's latest report, and redoUntil
	// the step up to which its reports are work redone (nil once past it),
	// both owned by the delivering goroutine.
	iter      int
	redoUntil *float64

	mu       sync.Mutex
	end      attemptEnd
	teardown func(graceful bool)
	watchdog *time.Timer
	hbOff    bool // the watchdog is held while the sink decides
	stopCtx  func() bool
	probes   []probe // by rank; see setProbe
}

func (r *runner) newAttempt(number int) *attempt {
	a := &attempt{
		r:         r,
		number:    number,
		slots:     r.placement.Slots(),
		resume:    r.latest,
		scratch:   r.attemptScratch(number),
		iter:      r.latest.iteration,
		redoUntil: r.lastStep,
	}
	a.workers = newWorkerTable(r.sink, a.slots)
	// Workers see the caller's context values, but only the attempt's end
	// cancels them, so that the reason is always known first.
	a.ctx, a.cancel = context.WithCancel(context.WithoutCancel(r.ctx))
	a.stopCtx = context.AfterFunc(r.ctx, func() { a.finish(attemptEnd{kind: endCancelled, err: r.ctx.Err()}) })
	r.spec.Inspector.attach(a)
	if hb := r.spec.Failure.Heartbeat(); hb > 0 {
		a.watchdog = time.AfterFunc(hb, func() { a.hung(hb) })
	}
	return a
}

// hung fails the attempt when no worker has reported for hb, unless the
// failure config counts output as a sign of life and a worker's log has
// grown within hb: then the watchdog waits for the rest of hb from then.
func (a *attempt) hung(hb time.Duration) {
	if !a.r.spec.Failure.OutputHeartbeat {
		a.hangUp(fmt.Errorf("hung: no report from any worker for %v (failure.heartbeat_timeout)", hb))
		return
	}
	if quiet := a.quiet(); quiet < hb {
		a.mu.Lock()
		if a.end.kind == endNone && !a.hbOff {
			a.watchdog.Reset(hb - quiet)
		}
		a.mu.Unlock()
		return
	}
	a.hangUp(fmt.Errorf("hung: no report and no output from any worker for %v (failure.heartbeat_timeout)", hb))
}

// hangUp fails the hung attempt with err, once its workers' stacks are
// recorded (see EventHung).
func (a *attempt) hangUp(err error) {
	if a.ended().kind != endNone {
		return
	}
	a.recordHung(err)
	a.finish(attemptEnd{kind: endFailed, err: err})
}

// quiet is how long ago a worker's log last grew, by its file's
// modification time; a very long time when there are no log files.
func (a *attempt) quiet() time.Duration {
	quiet := time.Duration(1<<63 - 1)
	for rank := range a.size() {
		if path := a.logPath(rank); path != "" {
			if fi, err := os.Stat(path); err == nil {
				quiet = min(quiet, time.Since(fi.ModTime()))
			}
		}
	}
	return quiet
}

// size is the number of workers of the attempt.
func (a *attempt) size() int { return len(a.slots) }

// onEnd sets the function that stops the attempt's remaining workers when
// it ends. It must be set before the workers start; when the attempt has
// already ended, it runs at once.
func (a *attempt) onEnd(f func(graceful bool)) {
	a.mu.Lock()
	a.teardown = f
	end := a.end
	a.mu.Unlock()
	if end.kind != endNone {
		f(end.graceful())
	}
}

// finish ends the attempt for reason e unless it has already ended, and
// stops its remaining workers. It reports whether e is the reason.
func (a *attempt) finish(e attemptEnd) bool {
	a.mu.Lock()
	if a.end.kind != endNone {
		a.mu.Unlock()
		return false
	}
	a.end = e
	if a.watchdog != nil {
		a.watchdog.Stop()
	}
	teardown := a.teardown
	a.mu.Unlock()
	a.cancel()
	if teardown != nil {
		teardown(e.graceful())
	}
	return true
}

// fail ends the attempt with err as its failure.
func (a *attempt) fail(err error) bool { return a.finish(attemptEnd{kind: endFailed, err: err}) }

// ended returns why the attempt ended.
func (a *attempt) ended() attemptEnd {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.end
}

// setFailure replaces the failure the attempt ended with by a better
// explanation found once every worker was gone.
func (a *attempt) setFailure(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.end.kind == endFailed {
		a.end.err = err
	}
}

// beat tells the watchdog that the group is alive: rank reported.
func (a *attempt) beat(rank int) {
	a.workers.step(a.ctx, rank)
	a.resetWatchdog()
}

// resetWatchdog restarts the heartbeat timeout.
func (a *attempt) resetWatchdog() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.watchdog != nil && a.end.kind == endNone && !a.hbOff {
		a.watchdog.Reset(a.r.spec.Failure.Heartbeat())
	}
}

// hold stops the watchdog while the sink decides; beat restarts it.
func (a *attempt) hold(on bool) {
	a.mu.Lock()
	a.hbOff = on
	if on && a.watchdog != nil {
		a.watchdog.Stop()
	}
	a.mu.Unlock()
	if !on {
		a.resetWatchdog()
	}
}

// cleanup releases what the attempt holds once its workers are gone.
func (a *attempt) cleanup() {
	a.stopCtx()
	a.mu.Lock()
	if a.watchdog != nil {
		a.watchdog.Stop()
	}
	a.mu.Unlock()
	a.cancel()
	os.RemoveAll(a.scratch)
}

// deliver numbers one report of the group, commits its checkpoint, hands it
// to the sink and acts on the answer. Calls are serialised by the worker
// kind, in report order. shards are the folders the ranks handed over, in
// rank order, without gaps.
//
// A report that carries its own step (Spec.StepKey) is numbered next after
// the last delivered. Until the attempt's first report with a step past
// the step the group had delivered before it started (the restarted
// workers resumed from an earlier point: their own files, a checkpoint, or
// scratch), such reports are work redone and dropped. A report without is
// numbered by the attempt's count from its checkpoint, and new when that
// is past the last iteration delivered.
func (a *attempt) deliver(metrics map[string]float64, shards []string) (Action, error) {
	r := a.r
	if a.ended().kind != endNone {
		// The attempt is over (the tuner stopped or paused the trial, or
		// the group failed): what a worker printed before it noticed is
		// not the trial's, since a resumed or restarted group reports it
		// again or the scheduler has decided already.
		removeAll(shards)
		return Continue, nil
	}
	step, stepped := metrics[r.spec.StepKey]
	stepped = stepped && r.spec.StepKey != ""
	var k int
	if stepped {
		if a.redoUntil != nil && step <= *a.redoUntil {
			removeAll(shards)
			return Continue, nil
		}
		a.redoUntil = nil
		k = r.delivered + 1
		a.iter = k
	} else {
		a.iter++
		k = a.iter
		if k <= r.delivered {
			// Work redone after a restart: the sink has this report already.
			removeAll(shards)
			return Continue, nil
		}
	}
	res := Result{Iteration: k, Time: time.Now(), Metrics: metrics}
	if len(shards) > 0 {
		if r.spec.Checkpoints == nil {
			res.Checkpoint = shards
		} else {
			dir, err := r.spec.Checkpoints.Commit(k, metrics, shards)
			if err != nil {
				removeAll(shards)
				return Continue, fmt.Errorf("report %d: commit its checkpoint: %w", k, err)
			}
			r.latest = checkpointRef{dir: dir, iteration: k}
			res.CheckpointPath = dir
		}
	}
	a.hold(true)
	act, err := r.sink.Report(r.ctx, res)
	a.hold(false)
	if err != nil {
		return Continue, fmt.Errorf("report %d: %w", k, err)
	}
	r.delivered = k
	if stepped {
		r.lastStep = &step
	}
	switch act {
	case Stop:
		a.finish(attemptEnd{kind: endStopped})
	case Pause:
		a.finish(attemptEnd{kind: endPaused})
	case Continue:
		if res.CheckpointPath != "" {
			a.maybeGrow()
		}
	}
	return act, nil
}

// maybeGrow ends the attempt to restart it larger, from the checkpoint just
// committed, when an elastic group is below its maximum and more workers fit.
func (a *attempt) maybeGrow() {
	_, hi := a.r.spec.Scaling.Bounds()
	have := len(a.slots)
	if have >= hi {
		return
	}
	if a.r.placement.Grow(hi-have) > 0 {
		a.finish(attemptEnd{kind: endResize})
	}
}

func removeAll(dirs []string) {
	for _, d := range dirs {
		if d != "" {
			os.RemoveAll(d)
		}
	}
}
