package trainer

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
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
	r      *runner
	number int // from 1 in this Run; see trialAttempt
	slots  []Slot
	resume checkpointRef
	// scratch begins the names of the ranks' scratch folders, which sit
	// side by side in the run's (rankScratch), one level fewer to make.
	scratch string
	// workers tracks the workers' status for a WorkerSink.
	workers *workerTable

	ctx    context.Context
	cancel context.CancelFunc
	// iter is the iteration of the attempt's latest report, startStep
	// the step the trial had recorded last when the attempt started,
	// redoUntil the step up to which its reports are work redone (nil once
	// past it), skipped the reports not delivered since the last one
	// delivered, and late those that came after the attempt ended: all
	// owned by the delivering goroutine, and by cleanup once the workers
	// are gone.
	iter      int
	startStep *Step
	redoUntil *Step
	skipped   skipRun
	late      int

	mu       sync.Mutex
	end      attemptEnd
	teardown func(graceful bool)
	watchdog *watchdog // nil without a heartbeat timeout
	stopCtx  func() bool
	refusals int     // report lines refused so far
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
		startStep: r.lastStep,
		redoUntil: r.lastStep,
	}
	r.attempts = number
	a.workers = newWorkerTable(r.sink, a.trialAttempt(), a.slots)
	// Workers see the caller's context values, but only the attempt's end
	// cancels them, so that the reason is always known first.
	a.ctx, a.cancel = context.WithCancel(context.WithoutCancel(r.ctx))
	r.spec.Inspector.attach(a)
	if hb := r.spec.Failure.Heartbeat(); hb > 0 {
		a.watchdog = startWatchdog(hb, func() time.Time { return a.hung(hb) })
	}
	a.stopCtx = context.AfterFunc(r.ctx, func() { a.finish(attemptEnd{kind: endCancelled, err: r.ctx.Err()}) })
	return a
}

// trialAttempt numbers the attempt among all the trial's, from 0
// (WorkerStatus.Attempt).
func (a *attempt) trialAttempt() int { return a.r.spec.Attempts + a.number - 1 }

// hung fails the attempt when no worker has reported for hb and returns
// the zero time, unless the failure config counts output as a sign of life
// and a worker's log has grown within hb: then it returns when, and the
// watchdog counts the silence from then.
func (a *attempt) hung(hb time.Duration) time.Time {
	if !a.r.spec.Failure.OutputHeartbeat {
		a.hangUp(fmt.Errorf("hung: no report from any worker for %v (failure.heartbeat_timeout)", hb))
		return time.Time{}
	}
	if quiet := a.quiet(); quiet < hb {
		return time.Now().Add(-quiet)
	}
	a.hangUp(fmt.Errorf("hung: no report and no output from any worker for %v (failure.heartbeat_timeout)", hb))
	return time.Time{}
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
		a.watchdog.close()
	}
	teardown := a.teardown
	a.mu.Unlock()
	a.cancel()
	if teardown != nil {
		teardown(e.graceful())
	}
	return true
}

// decide ends the attempt as the tuner answered a delivered report. A
// failure that ended the attempt while the tuner decided gives way to the
// decision: it was taken on a report already recorded, and restarting the
// group instead would lose it. The workers are stopping either way.
func (a *attempt) decide(e attemptEnd) {
	a.mu.Lock()
	if a.end.kind == endFailed {
		a.end = e
		a.mu.Unlock()
		return
	}
	a.mu.Unlock()
	a.finish(e)
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
	if a.watchdog != nil {
		a.watchdog.beat()
	}
}

// maxRefusalEvents is how many refused report lines an attempt tells its
// EventSink of; the workers' logs keep every one.
const maxRefusalEvents = 5

// refused tells the EventSink that a report line of rank was refused, for
// the reason msg, unless the attempt has told it of maxRefusalEvents
// already. It may be called from any goroutine.
func (a *attempt) refused(rank int, msg string) {
	a.mu.Lock()
	a.refusals++
	n := a.refusals
	a.mu.Unlock()
	if a.r.events == nil || n > maxRefusalEvents {
		return
	}
	cause := fmt.Sprintf("worker %d: %s", rank, msg)
	if n == maxRefusalEvents {
		cause += fmt.Sprintf(" (the attempt's %dth refused line: further ones are only in the workers' logs)", n)
	}
	e := Event{Kind: EventReportRefused, Time: time.Now(), Cause: cause, Attempt: a.trialAttempt(), Workers: a.size()}
	a.r.events.Event(a.r.ctx, e) // a record for people: its failure is not the trial's
}

// hold stops the watchdog while the sink decides; turning it off restarts
// the heartbeat timeout.
func (a *attempt) hold(on bool) {
	if a.watchdog != nil {
		a.watchdog.hold(on)
	}
}

// diskFull is told that a worker waits for space to write (err) or writes
// again (nil): the watchdog waits too, so that a full disk does not make
// the group hung, and the spec's OnDiskFull hears of it.
func (a *attempt) diskFull(err error) {
	a.hold(err != nil)
	if f := a.r.spec.OnDiskFull; f != nil {
		f(err)
	}
}

// cleanup releases what the attempt holds once its workers are gone.
func (a *attempt) cleanup() {
	a.stopCtx()
	if a.watchdog != nil {
		a.watchdog.close()
	}
	a.cancel()
	a.tellSkipped()
	a.tellLate()
	for rank := range a.slots {
		os.RemoveAll(a.rankScratch(rank))
	}
}

// deliver numbers one report of the group, commits its checkpoint, hands it
// to the sink and acts on the answer. Calls are serialised by the worker
// kind, in report order. shards are the folders the ranks handed over, in
// rank order, without gaps.
//
// A report that carries its own step (see ReportStep), of the kind the
// last delivered one with a step had, is numbered next after the last
// delivered. Until the attempt's first such report with a step past the
// step the group had delivered before it started (the restarted workers
// resumed from an earlier point: their own files, a checkpoint, or
// scratch), such reports are work redone and skipped. Any other report is
// numbered by the attempt's count from its checkpoint, and skipped when
// that is not past the last iteration delivered. Skipped reports are told
// (EventReportsSkipped).
func (a *attempt) deliver(metrics map[string]float64, shards []string) (Action, error) {
	r := a.r
	switch a.ended().kind {
	case endNone, endCancelled:
		// After the caller gave up (the run is stopping) the workers report
		// until they notice: each such report is still the trial's, and is
		// committed and told to the sink, with the checkpoint a worker may
		// save as it is told to stop. Dropping them would leave a gap
		// before that checkpoint, which the resumed run never fills.
	default:
		// The attempt is over (the tuner stopped or paused the trial, or
		// the group failed): what a worker printed before it noticed is
		// not the trial's, since a resumed or restarted group reports it
		// again or the scheduler has decided already.
		a.late++
		removeAll(shards)
		return Continue, nil
	}
	step, hasStep := ReportStep(metrics, r.spec.StepKey)
	// A step of a kind not delivered before (or of which the caller did
	// not say) cannot be compared: such a report is counted.
	stepped := hasStep && r.lastStep != nil && r.lastStep.Key == step.Key
	var k int
	if stepped {
		if a.redoUntil != nil && step.Value <= a.redoUntil.Value {
			a.skipped.add(step.Key, step.Value)
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
			a.skipped.add("", float64(k))
			removeAll(shards)
			return Continue, nil
		}
	}
	a.tellSkipped()
	res := Result{Iteration: k, Time: time.Now(), Metrics: metrics}
	// Committing the checkpoint and the report may wait for space on a
	// full disk: the group is not hung meanwhile.
	a.hold(true)
	if len(shards) > 0 {
		if r.spec.Checkpoints == nil {
			res.Checkpoint = shards
		} else {
			dir, err := r.spec.Checkpoints.Commit(k, metrics, shards)
			if err != nil {
				a.hold(false)
				removeAll(shards)
				return Continue, fmt.Errorf("report %d: commit its checkpoint: %w", k, err)
			}
			r.latest = checkpointRef{dir: dir, iteration: k}
			res.CheckpointPath = dir
		}
	}
	act, err := r.sink.Report(r.ctx, res)
	a.hold(false)
	if err != nil {
		return Continue, fmt.Errorf("report %d: %w", k, err)
	}
	r.delivered = k
	if hasStep {
		r.lastStep = &step
	}
	switch act {
	case Stop:
		a.decide(attemptEnd{kind: endStopped})
	case Pause:
		a.decide(attemptEnd{kind: endPaused})
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

// skipRun is a run of reports an attempt skipped: how many, and the first
// and last step (or counted iteration) they repeated; outOfOrder says
// they came after the attempt itself had delivered a later step, not as
// work redone after a restart.
type skipRun struct {
	n           int
	key         string // the steps' key; "" for counted iterations
	first, last float64
	outOfOrder  bool
}

// skipOutOfOrder counts a collected report at step at (of key) that
// comes at or below the step the trial recorded last: work redone when
// that step was recorded before the attempt started, else a step the
// attempt itself had passed (lines out of order).
func (a *attempt) skipOutOfOrder(key string, at float64) {
	outOfOrder := a.startStep == nil || a.startStep.Key != key || at > a.startStep.Value
	if a.skipped.n > 0 && a.skipped.outOfOrder != outOfOrder {
		a.tellSkipped()
	}
	a.skipped.add(key, at)
	a.skipped.outOfOrder = outOfOrder
}

func (s *skipRun) add(key string, at float64) {
	if s.n == 0 {
		s.key, s.first = key, at
	}
	s.n++
	s.last = at
}

// tellSkipped tells the EventSink of the reports skipped since the last
// one delivered, if any.
func (a *attempt) tellSkipped() {
	s := a.skipped
	a.skipped = skipRun{}
	if s.n == 0 || a.r.events == nil {
		return
	}
	var cause string
	switch {
	case s.outOfOrder:
		cause = fmt.Sprintf("skipped %d reports with %s %g to %g: each came after the trial had recorded that %s or a later one (the script's lines out of order: an earlier step printed last, a line on stderr read after later ones on stdout, or a metric printed long after the rest of its step, which was recorded without it)", s.n, s.key, s.first, s.last, s.key)
	case s.key != "":
		cause = fmt.Sprintf("skipped %d reports with %s %g to %g: the restarted workers redid steps the trial had recorded already", s.n, s.key, s.first, s.last)
	default:
		from := "the beginning (no committed checkpoint)"
		if a.resume.dir != "" {
			from = fmt.Sprintf("the checkpoint of iteration %d", a.resume.iteration)
		}
		var keys []string // the keys a report's own step is looked up by, in order
		for _, k := range append([]string{a.r.spec.StepKey}, StepHints...) {
			if k != "" && !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
		cause = fmt.Sprintf("skipped %d reports, counted as iterations %g to %g, which the trial had recorded already: the restarted workers are taken to start over from %s; a report that carries its own step (%s) is placed by it instead", s.n, s.first, s.last, from, strings.Join(keys, ", "))
	}
	a.r.events.Event(a.r.ctx, Event{Kind: EventReportsSkipped, Time: time.Now(), Cause: cause, Attempt: a.trialAttempt(), Workers: a.size()}) // a record for people: its failure is not the trial's
}

// tellLate tells the EventSink of the reports that came after the attempt
// ended, if any, unless the run is stopping (a resumed run reports them).
func (a *attempt) tellLate() {
	n := a.late
	a.late = 0
	end := a.ended()
	if n == 0 || a.r.events == nil || end.kind == endCancelled {
		return
	}
	why := map[endKind]string{endCompleted: "completed", endStopped: "was stopped", endPaused: "was paused", endResize: "ended to grow",
		endFailed: "failed"}[end.kind]
	cause := fmt.Sprintf("skipped %d reports that came after the attempt %s", n, why)
	a.r.events.Event(a.r.ctx, Event{Kind: EventReportsSkipped, Time: time.Now(), Cause: cause, Attempt: a.trialAttempt(), Workers: a.size()}) // a record for people
}
