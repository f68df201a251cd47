package tuner

import (
	"context"
	"errors"
	"fmt"

	"github.com/gotune/gotune/schedulers"
	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
)

// loop is one run of an experiment. Its run method is the only goroutine
// that touches the searcher, the scheduler and the observer; each trial runs
// in a goroutine of its own and talks to the loop through events.
type loop struct {
	t      *Tuner
	exp    *storage.Experiment
	events chan event

	started, running, succeeded int
}

// event is a message from a trial goroutine to the loop.
type event struct {
	trial *trialRun
	// A report: result, answered on reply.
	result *trainer.Result
	reply  chan trainer.Action
	// A restart or a resize of the trial's group, for the observer.
	group *trainer.Event
	// Otherwise the trial has ended with outcome and err.
	outcome trainer.Outcome
	err     error
}

// trialRun is one trial's state, shared between its goroutine and the loop.
type trialRun struct {
	number int
	record *storage.Trial
	config map[string]any
	// last is the trial's latest result that carried the objective, owned
	// by the loop; nil until there is one.
	last *Observation
}

func (l *loop) run(ctx context.Context) error {
	t := l.t
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	trials := t.cfg.Search.Trials()
	var runErr error
	// waiting: the searcher asked to wait for a running trial's next event.
	// exhausted: it has no more configurations.
	waiting, exhausted := false, false
	for {
		for runErr == nil && ctx.Err() == nil && !waiting && !exhausted && l.started < trials {
			switch err := l.startTrial(ctx); {
			case errors.Is(err, ErrWait):
				waiting = true
			case errors.Is(err, ErrExhausted):
				exhausted = true
			case err != nil:
				runErr = err
				cancel()
			}
		}
		if l.running == 0 {
			if waiting && runErr == nil && ctx.Err() == nil {
				runErr = fmt.Errorf("searcher: Suggest for trial %d returned ErrWait with no trial running to wait for", l.started+1)
			}
			break
		}
		ev := <-l.events
		waiting = false
		if ev.result != nil {
			ev.reply <- l.onReport(ev.trial, *ev.result)
			continue
		}
		if ev.group != nil {
			if o, ok := t.observer.(EventObserver); ok {
				o.OnEvent(ev.trial.number, *ev.group)
			}
			continue
		}
		l.running--
		if err := l.onTrialEnd(ctx, ev); err != nil && runErr == nil {
			runErr = err
			cancel()
		}
	}
	if runErr == nil {
		runErr = ctx.Err()
	}
	return runErr
}

func (l *loop) startTrial(ctx context.Context) error {
	t := l.t
	number := l.started + 1
	config, err := t.searcher.Suggest(number)
	if errors.Is(err, ErrWait) || errors.Is(err, ErrExhausted) {
		return err
	}
	if err != nil {
		return fmt.Errorf("searcher: suggest trial %d: %w", number, err)
	}
	rec, err := t.db.CreateTrial(ctx, l.exp.ID, number, config)
	if err != nil {
		return err
	}
	l.started++
	l.running++
	t.scheduler.OnTrialAdd(number, config)
	tr := &trialRun{number: number, record: rec, config: config}
	go l.runTrial(ctx, tr)
	return nil
}

// runTrial runs the trial's group, which places itself, and tells the loop
// how it ended. It runs in the trial's own goroutine.
func (l *loop) runTrial(ctx context.Context, tr *trialRun) {
	spec, done, err := l.t.groupSpec(tr.number, tr.config)
	if err != nil {
		l.events <- event{trial: tr, err: err}
		return
	}
	summary, err := trainer.Run(ctx, spec, &sink{l: l, trial: tr})
	done()
	l.events <- event{trial: tr, outcome: summary.Outcome, err: err}
}

// sink persists a trial's reports and asks the loop for a decision. Each
// report is committed before the scheduler sees it, so a decision never
// rests on a result that a crash could lose.
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
	if err := s.l.t.db.AddReport(ctx, s.trial.record.ID(), rep, objective); err != nil {
		return trainer.Stop, err
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

// onReport tells the searcher about a committed result and asks the
// scheduler about it.
func (l *loop) onReport(tr *trialRun, r trainer.Result) trainer.Action {
	t := l.t
	t.observer.OnReport(tr.number, r)
	_, score, ok := t.score(r.Metrics)
	if !ok {
		return trainer.Continue
	}
	progress, hasProgress := t.progress(r)
	step := progress
	if !hasProgress {
		step = float64(r.Iteration)
	}
	tr.last = &Observation{Step: step, Score: score, Metrics: r.Metrics}
	t.searcher.OnResult(tr.number, *tr.last)
	if !hasProgress {
		return trainer.Continue
	}
	d := t.scheduler.OnResult(schedulers.Result{Trial: tr.number, Time: progress, Score: score, Metrics: r.Metrics})
	if d.Action == schedulers.Continue {
		return trainer.Continue
	}
	return trainer.Stop
}

// onTrialEnd records how a trial ended and tells the searcher and the
// scheduler. It fails only when the database does.
func (l *loop) onTrialEnd(ctx context.Context, ev event) error {
	t := l.t
	tr := ev.trial
	status, msg := storage.TrialTerminated, ""
	switch {
	case ev.err != nil && ctx.Err() != nil && errors.Is(ev.err, ctx.Err()):
		// Interrupted: the trial stays RUNNING in the database, as after a
		// crash, so that a resumed experiment knows to run it again.
		return nil
	case ev.err != nil:
		status, msg = storage.TrialError, ev.err.Error()
	case ev.outcome == trainer.Stopped:
		status = storage.TrialStopped
	}
	if status != storage.TrialError {
		l.succeeded++
	}
	if err := t.db.FinishTrial(context.WithoutCancel(ctx), tr.record.ID(), status, msg); err != nil {
		return err
	}
	t.scheduler.OnTrialEnd(tr.number)
	end := TrialEnd{Status: TrialCompleted, Last: tr.last}
	switch status {
	case storage.TrialError:
		end.Status = TrialFailed
	case storage.TrialStopped:
		end.Status = TrialStopped
	}
	t.searcher.OnTrialEnd(tr.number, end)
	t.observer.OnTrialEnd(tr.number, status, ev.err)
	return nil
}
