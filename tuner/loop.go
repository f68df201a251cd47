package tuner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/gotune/gotune/schedulers"
	"github.com/gotune/gotune/search"
	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
)

// loop is one run of an experiment. Its run method is the only goroutine
// that touches the searcher, the scheduler, the observer and the trials'
// states; each running trial's group runs in a goroutine of its own and
// talks to the loop through events.
type loop struct {
	t      *Tuner
	exp    *storage.Experiment
	events chan event

	trials map[int]*trialRun
	// started counts the trials created, numbered 1..started; running the
	// groups running now; succeeded the trials that ended without error.
	started, running, succeeded int
	// waiting: the searcher asked to wait for a running trial's next event.
	// exhausted: it has no more configurations. scored: a report carried
	// the objective.
	waiting, exhausted, scored bool
	// firstTrials are the first trials launched in this run, as many as
	// sameFailuresToStop; sameFailures counts those that ended ERROR, all
	// as the first did (firstFailure, its FailureSignature), -1 once one
	// ended otherwise (see watchFailures).
	firstTrials  []int
	sameFailures int
	firstFailure string
	// err ends the run: a database failure or a searcher's error.
	err    error
	cancel context.CancelFunc
	// lastNext is the capacity of the latest call of the scheduler's Next.
	lastNext *schedulers.Capacity
	// curves follows the first trials' objective (see watchCurves).
	curves curveWatch
	// toldUntimed: the sweep said that reports lack the scheduler's time
	// attribute (see tellUntimed); toldUnjudged: that a trial's reports
	// lacked the objective until its end (see tellUnjudged).
	toldUntimed, toldUnjudged bool
}

// EventSearchExhausted is the experiment event recorded when the searcher
// runs out of configurations (Suggest returned search.ErrExhausted) before the
// sweep's planned trials; its data holds trials (those suggested) and
// planned.
const EventSearchExhausted = "search_exhausted"

// event is a message from a trial's goroutine to the loop.
type event struct {
	trial *trialRun
	// A report: result, answered on reply.
	result *trainer.Result
	reply  chan trainer.Action
	// A restart or a resize of the trial's group.
	group *trainer.Event
	// Otherwise the group has ended, with summary and err.
	summary trainer.Summary
	err     error
}

// trialState is where a trial is in its life.
type trialState int

const (
	trialRunning trialState = iota // its group runs, or is about to
	trialPaused                    // the scheduler paused it; it may be resumed
	trialEnded
)

// trialRun is one trial's state. The loop owns it; a trial's goroutine
// only reads what the loop gave it before starting the group.
type trialRun struct {
	number int
	record *storage.Trial
	config map[string]any
	ckpts  *trialCheckpoints
	state  trialState
	// last is the trial's latest result that carried the objective; nil
	// until there is one.
	last *search.Observation
	// iterations is the trial's last recorded report; resume is the
	// committed checkpoint its group starts from next ("" for scratch).
	iterations  int
	lastStep    *trainer.Step // the step of its last report that had one (trainer.ReportStep)
	resumeDir   string
	resumeIter  int
	pauseReason string
	// pausing: the scheduler paused the trial and its group is stopping;
	// pending is an order about it that came meanwhile.
	pausing  bool
	pending  *schedulers.Order
	terminal bool // the scheduler stopped it at max_t: it completed
	// schedulerEnded: the scheduler has been told the trial ended.
	schedulerEnded bool
	exploit        *schedulers.Exploit // a PBT restart waiting for the group to stop
	exploitReason  string
	// restarts counts the trial's recorded restarts, those of earlier runs
	// of the sweep included (see trainer.Spec.Restarts); attempts counts
	// the starts of its group, those of earlier runs and groups included
	// (see trainer.Spec.Attempts).
	restarts, attempts int
	// Of this run's reports, judged counts those the scheduler judged
	// (they carried the objective and the scheduler's time attribute),
	// untimed those that carried the objective alone (see tellUntimed),
	// and unscored those that carried the time attribute alone (see
	// tellUnjudged).
	judged, untimed, unscored int
	// stepLike names a metric of this run's reports that looks like a
	// step (see stepLikeName), for tellUntimed to offer; "" for none.
	stepLike string
}

func newLoop(t *Tuner, exp *storage.Experiment) *loop {
	return &loop{t: t, exp: exp, events: make(chan event), trials: map[int]*trialRun{}}
}

// run drives the experiment until every trial has ended, the run fails, or
// ctx ends. Trials interrupted by ctx stay RUNNING in the database, as after
// a crash, so that a later run resumes them.
func (l *loop) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	l.cancel = cancel
	for {
		if l.err == nil && ctx.Err() == nil {
			l.dispatch(ctx)
		}
		if l.running == 0 {
			if l.err == nil && ctx.Err() == nil {
				if l.waiting {
					l.fail(fmt.Errorf("searcher: Suggest for trial %d returned ErrWait with no trial running to wait for", l.started+1))
				} else if l.endPaused(ctx) {
					continue
				}
			}
			break
		}
		l.handle(ctx, <-l.events)
	}
	if l.err != nil {
		return l.err
	}
	return ctx.Err()
}

// handle takes in one event of a trial's group.
func (l *loop) handle(ctx context.Context, ev event) {
	l.waiting = false
	switch {
	case ev.result != nil:
		ev.reply <- l.onReport(ctx, ev.trial, *ev.result)
	case ev.group != nil:
		l.onGroupEvent(ctx, ev.trial, *ev.group)
	default:
		l.running--
		l.t.inspectors.drop(ev.trial.number)
		l.onGroupEnd(ctx, ev)
	}
}

// fail ends the run with err, the first failure winning.
func (l *loop) fail(err error) {
	if l.err == nil {
		l.err = err
		l.cancel()
	}
}

// dispatch carries out the scheduler's orders about paused trials, then
// starts new trials while there is room.
func (l *loop) dispatch(ctx context.Context) {
	for l.err == nil {
		ord, ok := l.next(schedulers.Capacity{CanResume: l.hasRoom(), MoreTrials: l.moreTrials()})
		if !ok {
			break
		}
		l.order(ctx, ord)
	}
	if l.err == nil && !l.waiting && l.moreTrials() && l.hasRoom() {
		l.startTrials(ctx)
	}
}

// moreTrials reports whether the searcher will still add trials.
func (l *loop) moreTrials() bool {
	return !l.exhausted && l.started < l.t.cfg.Search.Trials()
}

// hasRoom reports whether one more group may run: below max_concurrent, or
// without it below the number of groups the resources hold at once (more
// would only wait for resources, and a searcher suggests better when it
// has seen more results).
func (l *loop) hasRoom() bool {
	return l.running < l.room()
}

// room is how many groups may run at once: max_concurrent, or without it
// the number of groups the resources hold at once.
func (l *loop) room() int {
	if n := l.t.cfg.Search.MaxConcurrent; n > 0 {
		return n
	}
	return l.t.groupsThatFit()
}

// order carries out a scheduler's order about a paused trial.
func (l *loop) order(ctx context.Context, ord schedulers.Order) {
	tr := l.trials[ord.Trial]
	if tr != nil && tr.pausing {
		// The scheduler counts the trial paused from its decision on; the
		// order waits for the group to stop.
		tr.pending = &ord
		return
	}
	if tr == nil || tr.state != trialPaused {
		l.fail(fmt.Errorf("scheduler: ordered %s for trial %d, which is not paused", ord.Action, ord.Trial))
		return
	}
	switch ord.Action {
	case schedulers.Continue:
		if !l.hasRoom() {
			l.fail(fmt.Errorf("scheduler: ordered trial %d resumed with no room to run it", ord.Trial))
			return
		}
		// PENDING until its group has its workers again (managerPlacer).
		l.record(l.t.db.SetTrialStatus(ctx, tr.record.ID(), storage.TrialPending))
		l.record(l.t.db.AddEvent(ctx, l.exp.ID, tr.record.ID(), storage.EventPromotion, reasonOr(ord.Reason, "resumed by the scheduler"), decisionData(ord.Decision, ord.Rung)))
		l.launch(ctx, tr)
	case schedulers.Stop:
		l.endTrial(ctx, tr, l.stoppedStatus(tr), nil)
	default:
		l.fail(fmt.Errorf("scheduler: order %s for paused trial %d: want CONTINUE or STOP", ord.Action, ord.Trial))
	}
}

// startTrials asks the searcher for configurations while there is room
// and starts them as new trials, recorded with one commit.
func (l *loop) startTrials(ctx context.Context) {
	t := l.t
	var batch []storage.NewTrial
	room, trials := l.room(), t.cfg.Search.Trials()
	for l.running+len(batch) < room && l.started+len(batch) < trials {
		number := l.started + len(batch) + 1
		config, err := t.searcher.Suggest(number)
		if errors.Is(err, search.ErrWait) {
			l.waiting = true
			break
		}
		if errors.Is(err, search.ErrExhausted) {
			l.exhausted = true
			msg := fmt.Sprintf("the searcher has no more configurations: the sweep ends after %d of its %d trials (a finite space is tried without repeats unless search.allow_repeats is set)", number-1, trials)
			l.record(l.t.announce(ctx, l.exp.ID, EventSearchExhausted, msg, map[string]int{"trials": number - 1, "planned": trials}))
			break
		}
		if err != nil {
			l.fail(fmt.Errorf("searcher: suggest trial %d: %w", number, err))
			break
		}
		batch = append(batch, storage.NewTrial{Number: number, Params: config, Pending: true})
	}
	if len(batch) == 0 || l.err != nil {
		return
	}
	recs, err := t.db.CreateTrials(ctx, l.exp.ID, batch)
	if err != nil {
		l.fail(err)
		return
	}
	for i, rec := range recs {
		l.started++
		tr, err := l.newTrialRun(ctx, rec, batch[i].Params, true)
		if err != nil {
			l.fail(err)
			return
		}
		l.addTrial(rec.Number, batch[i].Params)
		l.launch(ctx, tr)
	}
}

// newTrialRun opens the trial's checkpoint folder and registers the trial;
// fresh says it was just created (it has no checkpoint records to read).
func (l *loop) newTrialRun(ctx context.Context, rec *storage.Trial, config map[string]any, fresh bool) (*trialRun, error) {
	ckpts, err := l.t.openCheckpoints(ctx, rec, fresh)
	if err != nil {
		return nil, err
	}
	tr := &trialRun{number: rec.Number, record: rec, config: config, ckpts: ckpts, restarts: rec.Restarts}
	l.trials[tr.number] = tr
	return tr, nil
}

// launch starts the trial's group from its resume point.
func (l *loop) launch(ctx context.Context, tr *trialRun) {
	if len(l.firstTrials) < l.sameFailuresToStop() && !slices.Contains(l.firstTrials, tr.number) {
		l.firstTrials = append(l.firstTrials, tr.number)
	}
	tr.state = trialRunning
	spec := l.t.groupSpec(tr)
	l.running++
	go func() {
		summary, err := trainer.Run(ctx, spec, &sink{l: l, trial: tr})
		l.events <- event{trial: tr, summary: summary, err: err}
	}()
}

// sink persists a trial's reports and asks the loop for a decision. Each
// report is committed before the scheduler sees it, so a decision never
// rests on a result that a crash could lose. Its methods run in the
// trial's goroutine.
type sink struct {
	l     *loop
	trial *trialRun
}

func (s *sink) Report(ctx context.Context, r trainer.Result) (trainer.Action, error) {
	value, _, ok := s.l.t.score(r.Metrics)
	var objective *float64
	if ok {
		objective = &value
	}
	rep := storage.Report{Iteration: r.Iteration, Time: r.Time, Metrics: r.Metrics}
	// A report is recorded even when the run stops meanwhile: its
	// checkpoint may be committed already, and the reports the workers
	// make until they notice the stop are the trial's (see trainer.Sink),
	// or the trial would resume after reports it never recorded.
	if err := s.l.t.db.AddReport(context.WithoutCancel(ctx), s.trial.record.ID(), rep, objective); err != nil {
		// The group fails with the error; a full disk ends the run (the
		// trial stays resumable), anything else fails the trial.
		return trainer.Stop, err
	}
	if ctx.Err() != nil {
		// The run is stopping: a resumed run tells the scheduler.
		return trainer.Continue, nil
	}
	reply := make(chan trainer.Action, 1)
	s.l.events <- event{trial: s.trial, result: &r, reply: reply}
	return <-reply, nil
}

// Event passes a restart or a resize of the trial's group to the loop.
func (s *sink) Event(_ context.Context, e trainer.Event) error {
	s.l.events <- event{trial: s.trial, group: &e}
	return nil
}

// Workers records the status of the trial's workers.
func (s *sink) Workers(ctx context.Context, ws []trainer.WorkerStatus) error {
	return s.l.t.recordWorkers(ctx, s.trial, ws)
}

// onReport tells the searcher about a committed result and asks the
// scheduler about it.
func (l *loop) onReport(ctx context.Context, tr *trialRun, r trainer.Result) trainer.Action {
	t := l.t
	tr.iterations = r.Iteration
	tr.lastStep = t.stepOf(r.Metrics, tr.lastStep)
	if tr.judged == 0 && tr.stepLike == "" {
		tr.stepLike = stepLikeName(r.Metrics, t.cfg.Scheduler.TimeAttr)
	}
	t.observer.OnReport(tr.number, r)
	value, score, ok := t.score(r.Metrics)
	if !ok {
		if _, timed := t.progress(r); timed {
			tr.unscored++
		}
		return trainer.Continue
	}
	l.scored = true
	l.addToCurve(tr.number, value)
	progress, hasProgress := t.progress(r)
	step := progress
	if !hasProgress {
		step = float64(r.Iteration)
	}
	tr.last = &search.Observation{Step: step, Score: score, Metrics: r.Metrics}
	t.searcher.OnResult(tr.number, *tr.last)
	if !hasProgress {
		if tr.untimed++; tr.untimed >= untimedToTell {
			l.tellUntimed(ctx, tr)
		}
		return trainer.Continue
	}
	tr.judged++
	d := l.result(tr, r.Iteration, schedulers.Result{Trial: tr.number, Time: progress, Score: score, Metrics: r.Metrics,
		Checkpoint: r.CheckpointPath != "" || len(r.Checkpoint) > 0})
	l.recordDecision(tr, d, progress)
	switch d.Action {
	case schedulers.Stop:
		tr.terminal = l.t.cfg.Scheduler.MaxT > 0 && progress >= l.t.cfg.Scheduler.MaxT
		return trainer.Stop
	case schedulers.Pause:
		tr.pauseReason, tr.pausing = d.Reason, true
		return trainer.Pause
	case schedulers.Restart:
		if d.Exploit == nil {
			l.fail(fmt.Errorf("scheduler: RESTART of trial %d without an exploit", tr.number))
			return trainer.Stop
		}
		tr.exploit, tr.exploitReason = d.Exploit, d.Reason
		return trainer.Pause
	}
	return trainer.Continue
}

// EventTimeAttrMissing is the experiment event recorded when a trial's
// reports carry the objective but not the scheduler's time attribute, so
// that the scheduler judges none of them (see tellUntimed).
const EventTimeAttrMissing = "time_attr_missing"

// untimedToTell is how many of a trial's reports carry the objective
// without the scheduler's time attribute, and none with it, before the
// sweep says so; a trial that ends with fewer says so at its end. A
// script may print a line or two before its first step.
const untimedToTell = 3

// tellUntimed says once, as an EventTimeAttrMissing, that trial tr's
// reports carry the objective without the scheduler's time attribute,
// when none of them (in this run) had it and the scheduler needs it:
// the scheduler never hears of such a report, so it stops no trial early
// for it, and nothing else would say so.
func (l *loop) tellUntimed(ctx context.Context, tr *trialRun) {
	t := l.t
	sc := t.cfg.Scheduler
	if l.toldUntimed || tr.judged > 0 || tr.untimed == 0 || sc.Kind == "fifo" && sc.MaxT == 0 {
		return
	}
	l.toldUntimed = true
	how := fmt.Sprintf("report %s with it, or leave scheduler.time_attr out to count reports", sc.TimeAttr)
	switch collects := t.cfg.Trainer.Metrics.Collects(); {
	case collects && tr.stepLike != "":
		how = fmt.Sprintf("its reports carry %s: step = %q in [trainer.metrics] takes the step from it", tr.stepLike, tr.stepLike)
	case collects:
		how = fmt.Sprintf("[trainer.metrics] takes the step from a pattern's group named %s (or the file's field, or the name that step = names)", sc.TimeAttr)
	case tr.stepLike != "":
		how = fmt.Sprintf("its reports carry %s: scheduler.time_attr = %q counts progress by it; or report %s, or leave scheduler.time_attr out to count reports", tr.stepLike, tr.stepLike, sc.TimeAttr)
	}
	times := fmt.Sprintf("%d times", tr.untimed)
	if tr.untimed == 1 {
		times = "once"
	}
	msg := fmt.Sprintf("trial %d reported %s %s without %s, the scheduler's time (scheduler.time_attr): the %s scheduler judges no such report, so it stops no trial early on them: %s",
		tr.number, t.cfg.Objective.Metric, times, sc.TimeAttr, sc.Kind, how)
	l.record(t.announce(ctx, l.exp.ID, EventTimeAttrMissing, msg, nil))
}

// stepLikeNames are the metric names, in lower case, that scripts commonly
// give their step or epoch under.
var stepLikeNames = []string{"epoch", "step", "global_step", "iter", "iteration"}

// stepLikeName returns the name of a metric in metrics, other than
// timeAttr, that looks like a step: one of stepLikeNames in any case
// ("Epoch" in "Train Epoch: 1"), with a whole, non-negative value. It
// returns "" when none does, or several do.
func stepLikeName(metrics map[string]float64, timeAttr string) string {
	found := ""
	for name, v := range metrics {
		if name == timeAttr || !slices.Contains(stepLikeNames, strings.ToLower(name)) || v < 0 || v != math.Trunc(v) {
			continue
		}
		if found != "" {
			return ""
		}
		found = name
	}
	return found
}

// onGroupEvent records a restart or a resize of a trial's group.
func (l *loop) onGroupEvent(ctx context.Context, tr *trialRun, e trainer.Event) {
	if o, ok := l.t.observer.(EventObserver); ok {
		o.OnEvent(tr.number, e)
	}
	switch e.Kind {
	case trainer.EventRestart:
		// The restarted group does not deliver the reports already recorded
		// again, so every report is kept.
		tr.restarts++
		l.record(l.t.db.RestartTrial(ctx, tr.record.ID(), tr.iterations, e.Cause))
	default:
		data := map[string]any{"attempt": e.Attempt, "workers": e.Workers}
		if e.Stacks != nil {
			data["stacks"] = e.Stacks // a hung group's
		}
		l.record(l.t.db.AddEvent(ctx, l.exp.ID, tr.record.ID(), string(e.Kind), e.Cause, data))
	}
}

// onGroupEnd decides what becomes of a trial whose group has stopped.
func (l *loop) onGroupEnd(ctx context.Context, ev event) {
	tr, sum, err := ev.trial, ev.summary, ev.err
	tr.pausing = false
	tr.attempts += sum.Attempts
	if sum.Checkpoint != "" {
		tr.resumeDir, tr.resumeIter = sum.Checkpoint, sum.CheckpointIteration
	}
	tr.iterations = max(tr.iterations, sum.Iterations)
	l.tellUntimed(ctx, tr)
	switch {
	case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) && errors.Is(l.err, ErrObjectiveNeverReported):
		// The sweep ends, FAILED, for want of the objective, which this
		// trial's reports lack too: nothing is left to resume it for.
		l.endTrial(ctx, tr, storage.TrialStopped, fmt.Errorf("the sweep ended: %w %q", ErrObjectiveNeverReported, l.t.cfg.Objective.Metric))
	case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
		// Interrupted: the trial stays RUNNING for a resumed run.
		l.record(l.t.db.AddEvent(context.WithoutCancel(ctx), l.exp.ID, tr.record.ID(), storage.EventInterrupt,
			"the run stopped while the trial ran; a resumed run continues it from its latest checkpoint",
			map[string]any{"iteration": tr.iterations, "checkpoint_iteration": tr.resumeIter}))
	case errors.Is(err, storage.ErrDiskFull):
		l.fail(fmt.Errorf("trial %d: %w", tr.number, err))
	case err != nil:
		l.endTrial(ctx, tr, storage.TrialError, err)
	case sum.Outcome == trainer.Paused && tr.exploit != nil:
		l.exploit(ctx, tr)
	case sum.Outcome == trainer.Paused:
		tr.state = trialPaused
		l.record(l.t.db.SetTrialStatus(ctx, tr.record.ID(), storage.TrialPaused))
		l.record(l.t.db.AddEvent(ctx, l.exp.ID, tr.record.ID(), storage.EventPause, reasonOr(tr.pauseReason, "paused by the scheduler"), nil))
		if ord := tr.pending; ord != nil {
			tr.pending = nil
			l.order(ctx, *ord)
		}
	case sum.Outcome == trainer.Stopped:
		if tr.terminal { // it ran to max_t; one stopped at a rung was judged there
			l.tellUnjudged(ctx, tr)
		}
		l.endTrial(ctx, tr, l.stoppedStatus(tr), nil)
	default:
		l.tellUnjudged(ctx, tr)
		l.endTrial(ctx, tr, storage.TrialTerminated, nil)
	}
}

// EventObjectiveLate is the experiment event recorded when a trial ran to
// its end with the objective in at most one of its timed reports, so that
// the scheduler could not judge it on the way (see tellUnjudged).
const EventObjectiveLate = "objective_late"

// tellUnjudged says once, as an EventObjectiveLate, that trial tr ran to
// its end while the scheduler judged at most one of its reports, the
// others having the scheduler's time attribute but not the objective (a
// script that evaluates only after its last epoch): the scheduler could
// not stop it early, and nothing else would say so.
func (l *loop) tellUnjudged(ctx context.Context, tr *trialRun) {
	t := l.t
	sc := t.cfg.Scheduler
	if l.toldUnjudged || tr.judged > 1 || tr.unscored < untimedToTell || sc.Kind == "fifo" {
		return
	}
	l.toldUnjudged = true
	msg := fmt.Sprintf("trial %d carried %s, the objective, in %d of its %d reports with %s: the %s scheduler judges only reports that carry the objective, so it could not stop the trial early; report %s at each step (evaluate every epoch, say) for it to judge trials as they go",
		tr.number, t.cfg.Objective.Metric, tr.judged, tr.judged+tr.unscored, sc.TimeAttr, sc.Kind, t.cfg.Objective.Metric)
	l.record(t.announce(ctx, l.exp.ID, EventObjectiveLate, msg, nil))
}

// stoppedStatus is the status of a trial the scheduler stopped: TERMINATED
// when it had reached max_t (it ran its course), STOPPED otherwise.
func (l *loop) stoppedStatus(tr *trialRun) string {
	if tr.terminal {
		return storage.TrialTerminated
	}
	return storage.TrialStopped
}

// endTrial records how a trial ended and tells the scheduler, the searcher
// and the observer.
func (l *loop) endTrial(ctx context.Context, tr *trialRun, status string, err error) {
	t := l.t
	tr.state = trialEnded
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if status != storage.TrialError {
		l.succeeded++
	}
	l.trialEnded(tr, status, msg)
	// Queued like the scheduler input before it: the loop goes on to the
	// next trial without waiting for the commit, which comes before that
	// trial's own.
	l.record(t.db.QueueFinishTrial(tr.record.ID(), status, msg))
	t.searcher.OnTrialEnd(tr.number, searcherEnd(status, tr.last))
	t.observer.OnTrialEnd(tr.number, status, err)
	// A trial that never checkpointed leaves no empty folder behind, and
	// no state in memory: only a checkpoint (for PBT to copy) keeps it.
	os.Remove(tr.ckpts.dir.Path())
	if _, ok := tr.ckpts.dir.Latest(); !ok {
		delete(l.trials, tr.number)
	}
	l.watchFailures(ctx, tr, status, err)
	l.watchCurves(ctx, tr, status)
	l.checkObjectiveReported(ctx)
}

// minSameFailures is how many trials, at least, must fail the same way
// before a sweep without fail_fast set ends (see watchFailures).
const minSameFailures = 5

// sameFailuresToStop is how many of the first trials launched in this run
// must fail the same way for a sweep without fail_fast set to end: as
// many as run at once, and at least minSameFailures.
func (l *loop) sameFailuresToStop() int { return max(minSameFailures, l.room()) }

// watchFailures ends the run when trial tr ends with status (and err):
// with fail_fast = true at any failure; with fail_fast unset once the
// first trials launched in this run, sameFailuresToStop of them, all
// ended ERROR the same way (see FailureSignature), no trial having
// completed, while more are to start. Such a failure does not depend on
// the configuration (a missing module, a wrong path, a broken
// environment): the trials to come would only fail the same way. The
// first trials launched, not the first to end, so that configurations
// that fail at once, among others that take long, do not end a sweep
// just by ending first: with a share p of the space failing alike, the
// first k trials all fail with chance p^k (3% for half of it, k = 5).
// Either way the reason is recorded as an EventSweepStopped.
func (l *loop) watchFailures(ctx context.Context, tr *trialRun, status string, err error) {
	t := l.t
	failFast := t.cfg.Trainer.Failure.FailFast
	switch {
	case status == storage.TrialError && failFast != nil && *failFast:
		l.stop(ctx, &FailFastError{Trial: tr.number, Err: err})
		return
	case failFast != nil, l.sameFailures < 0, !slices.Contains(l.firstTrials, tr.number):
		return
	case status != storage.TrialError || l.succeeded > 0:
		l.sameFailures = -1
		return
	}
	switch sig := FailureSignature(err); {
	case l.sameFailures == 0:
		l.firstFailure, l.sameFailures = sig, 1
	case sig == l.firstFailure:
		l.sameFailures++
	default:
		l.sameFailures = -1
		return
	}
	if l.sameFailures == l.sameFailuresToStop() && l.started < t.cfg.Search.Trials() && !l.exhausted {
		l.stop(ctx, &SameFailureError{Trials: l.sameFailures, Err: err})
	}
}

// EventSweepStopped is the experiment event recorded when failed trials
// end a run (see watchFailures); its message is the reason.
const EventSweepStopped = "sweep_stopped"

// stop ends the run with err, recording it first as the experiment's
// EventSweepStopped, so that the reason outlives the run's output.
func (l *loop) stop(ctx context.Context, err error) {
	l.record(l.t.db.AddEvent(ctx, l.exp.ID, 0, EventSweepStopped, err.Error(), nil))
	l.fail(err)
}

// digits matches a run of decimal digits.
var digits = regexp.MustCompile(`[0-9]+`)

// FailureSignature is what two trials' failures must share to count as
// the same: err's message with every number blanked, since a worker's
// pid, its trial's folder and a traceback's line numbers differ from
// trial to trial (and a value drawn from the search space would too).
func FailureSignature(err error) string {
	if err == nil {
		return ""
	}
	return digits.ReplaceAllString(err.Error(), "#")
}

// checkObjectiveReported ends the run with an *ObjectiveMissingError once
// the first trials, as many as run at once, have ended without error and
// no report has carried the objective: its name is wrong, and the other
// trials would only spend their time the same way.
func (l *loop) checkObjectiveReported(ctx context.Context) {
	t := l.t
	if l.scored || l.err != nil || l.succeeded < min(l.room(), t.cfg.Search.Trials()) {
		return
	}
	l.fail(t.objectiveMissing(ctx))
}

// removeEmptyFolders removes the folders of the trials that hold nothing,
// and the experiment's when none is left, once no group runs: an
// interrupted trial that never wrote a file leaves none behind, as one
// that ends does (endTrial).
func (l *loop) removeEmptyFolders() {
	for _, tr := range l.trials {
		os.Remove(tr.ckpts.dir.Path())
	}
	for _, dir := range l.t.experimentFolders() {
		os.Remove(dir)
	}
}

// searcherEnd is how a searcher sees a trial that ended with status.
func searcherEnd(status string, last *search.Observation) search.TrialEnd {
	end := search.TrialEnd{Status: search.TrialCompleted, Last: last}
	switch status {
	case storage.TrialError:
		end.Status = search.TrialFailed
	case storage.TrialStopped:
		end.Status = search.TrialStopped
	}
	return end
}

// endPaused ends the trials still paused when nothing runs and nothing
// more will start: the scheduler had no more use for them. It reports
// whether it ended any.
func (l *loop) endPaused(ctx context.Context) bool {
	if l.moreTrials() {
		return false
	}
	ended := false
	for n := 1; n <= l.started; n++ {
		if tr := l.trials[n]; tr != nil && tr.state == trialPaused {
			l.record(l.t.db.AddEvent(ctx, l.exp.ID, tr.record.ID(), storage.EventDecision,
				"the experiment ended with the trial paused", map[string]any{"action": "STOP"}))
			l.endTrial(ctx, tr, l.stoppedStatus(tr), nil)
			ended = true
		}
	}
	return ended
}

// record fails the run on a database error: results that cannot be
// recorded must not be produced.
func (l *loop) record(err error) {
	if err != nil {
		l.fail(err)
	}
}

// recordDecision keeps a scheduler decision that says why in the trial's
// history, with the rung and the cutoff it was measured against. The event
// is queued, not waited for, like the scheduler input it follows: the loop
// answers the trial without a commit of its own.
func (l *loop) recordDecision(tr *trialRun, d schedulers.Decision, progress float64) {
	if d.Reason == "" {
		return
	}
	l.record(l.t.db.QueueEvent(l.exp.ID, tr.record.ID(), storage.EventDecision, d.Reason, decisionData(d, progress)))
}

// decisionData is what an event keeps of a decision taken at time: the
// action, and the rung, the cutoff and the exploited trial where they apply.
func decisionData(d schedulers.Decision, time float64) map[string]any {
	data := map[string]any{"action": d.Action.String(), "time": time}
	if d.Rung != 0 {
		data["rung"] = d.Rung
	}
	if d.HasCutoff {
		data["cutoff"] = d.Cutoff
	}
	if d.Exploit != nil {
		data["exploit_from"] = d.Exploit.From
	}
	return data
}

func reasonOr(reason, fallback string) string {
	if reason != "" {
		return reason
	}
	return fallback
}

// exploit restarts a trial that Population Based Training told to take
// over a better trial's latest checkpoint with a new configuration: the
// checkpoint is copied into the trial's own folder as its next iteration,
// its params are recorded, and its group starts again from the copy. When
// the better trial has no checkpoint (its trainable does not checkpoint),
// the trial only explores: it restarts from its own state with the new
// configuration.
func (l *loop) exploit(ctx context.Context, tr *trialRun) {
	ex, reason := tr.exploit, tr.exploitReason
	tr.exploit = nil
	if ex.From < 1 || ex.From > l.started {
		l.fail(fmt.Errorf("scheduler: trial %d exploits trial %d, which does not exist", tr.number, ex.From))
		return
	}
	donor := l.trials[ex.From] // nil: it ended without a checkpoint
	reason = reasonOr(reason, fmt.Sprintf("took over trial %d's checkpoint", ex.From))
	// The donor may run on and prune the checkpoint being copied: try its
	// newest one again.
	for attempt := 0; ; attempt++ {
		var latest storage.CheckpointInfo
		ok := false
		if donor != nil {
			latest, ok = donor.ckpts.dir.Latest()
		}
		if !ok {
			reason += fmt.Sprintf(" (trial %d has no checkpoint: only the configuration changes)", ex.From)
			break
		}
		copied, err := tr.ckpts.commitCopy(tr.iterations+1, latest.Metrics, latest.Path)
		if err == nil {
			tr.resumeDir, tr.resumeIter, tr.iterations = copied.Path, copied.Iteration, copied.Iteration
			tr.lastStep = l.t.stepOf(latest.Metrics, nil)
			break
		}
		if attempt == 2 {
			l.fail(fmt.Errorf("trial %d exploits trial %d: %w", tr.number, ex.From, err))
			return
		}
	}
	tr.config = ex.Config
	l.record(l.t.db.SetTrialParams(ctx, tr.record.ID(), ex.Config, reason))
	l.launch(ctx, tr)
}
