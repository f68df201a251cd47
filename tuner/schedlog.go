package tuner

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/gotune/gotune/schedulers"
	"github.com/gotune/gotune/search"
	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
)

// The loop records every call that can change its scheduler's state as a
// storage.SchedulerInput, in the order it makes them, before the decision
// taken has any effect in the database. A resumed run makes the same calls
// on a new scheduler (replaySchedule), which then stands exactly where the
// interrupted one stood: ASHA's rungs hold the same records in the same
// order, promotions are not repeated, HyperBand's brackets and PBT's
// population are the same. Reports that were committed but that the
// interrupted run's scheduler never saw are then given to it as new.
//
// The kinds of input, with their data:
const (
	inputAdd    = "add"    // OnTrialAdd: addInput
	inputResult = "result" // OnResult: resultInput
	inputNext   = "next"   // Next: nextInput
	inputEnd    = "end"    // OnTrialEnd: endInput
)

type addInput struct {
	Config map[string]any `json:"config"`
	// From is the iteration a failed trial's rerun restarts after; the
	// scheduler hears of the trial anew.
	From int `json:"from,omitempty"`
}

type resultInput struct {
	Iteration  int                       `json:"iteration"`
	Time       storage.Number            `json:"time"`
	Score      storage.Number            `json:"score"`
	Checkpoint bool                      `json:"checkpoint,omitempty"`
	Metrics    map[string]storage.Number `json:"metrics"`
}

// nextInput is a call of Next: the capacity it was given and the order it
// returned, if any. A call that ordered nothing is recorded only when its
// capacity differs from the call before it (see Scheduler.Next).
type nextInput struct {
	Capacity schedulers.Capacity `json:"capacity"`
	Order    *schedulers.Order   `json:"order,omitempty"`
}

type endInput struct {
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// logInput records a scheduler input of trial (0 for none).
func (l *loop) logInput(trial int, kind string, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		l.fail(fmt.Errorf("record scheduler input: %w", err))
		return
	}
	l.record(l.t.db.LogSchedulerInput(l.exp.ID, storage.SchedulerInput{Trial: trial, Kind: kind, Data: b}))
}

// addTrial tells the scheduler about a new trial.
func (l *loop) addTrial(number int, config map[string]any) {
	l.addTrialFrom(number, config, 0)
}

// addTrialFrom tells the scheduler about a trial that starts after
// iteration from: a new trial (0), or a failed one that runs again.
func (l *loop) addTrialFrom(number int, config map[string]any, from int) {
	l.logInput(number, inputAdd, addInput{Config: config, From: from})
	l.t.scheduler.OnTrialAdd(number, config)
}

// result gives the scheduler a committed report of trial tr.
func (l *loop) result(tr *trialRun, iteration int, r schedulers.Result) schedulers.Decision {
	l.logInput(tr.number, inputResult, resultInput{Iteration: iteration, Time: storage.Number(r.Time),
		Score: storage.Number(r.Score), Checkpoint: r.Checkpoint, Metrics: storage.Numbers(r.Metrics)})
	return l.t.scheduler.OnResult(r)
}

// next asks the scheduler for an order about a paused trial.
func (l *loop) next(c schedulers.Capacity) (schedulers.Order, bool) {
	ord, ok := l.t.scheduler.Next(c)
	if ok || l.lastNext == nil || *l.lastNext != c {
		in := nextInput{Capacity: c}
		if ok {
			in.Order = &ord
		}
		l.logInput(ord.Trial, inputNext, in)
	}
	l.lastNext = &c
	return ord, ok
}

// trialEnded tells the scheduler that trial tr ended with status and, for
// an error, message; once.
func (l *loop) trialEnded(tr *trialRun, status, message string) {
	if tr.schedulerEnded {
		return
	}
	tr.schedulerEnded = true
	l.logInput(tr.number, inputEnd, endInput{Status: status, Error: message})
	schedulers.EndTrial(l.t.scheduler, tr.number, status == storage.TrialError)
}

// fate is where a trial stands after a replay of the scheduler's inputs:
// the scheduler's latest word on it and whether it ended.
type fate struct {
	added   bool
	decided bool
	last    schedulers.Decision
	// seen is the iteration of the trial's latest result the scheduler saw.
	seen      int
	ended     bool
	endStatus string
	endError  string
}

// replaySchedule rebuilds the scheduler's state from the experiment's
// recorded inputs, then adds the trials and gives it the committed
// reports that it never saw, recording those as inputs and their
// decisions as events. It returns each trial's fate.
func (l *loop) replaySchedule(ctx context.Context, st *storage.ResumeState) (map[int]*fate, error) {
	t := l.t
	inputs, err := t.db.SchedulerInputs(ctx, l.exp.ID)
	if err != nil {
		return nil, err
	}
	fates := map[int]*fate{}
	for _, ts := range st.Trials {
		fates[ts.Trial.Number] = &fate{}
	}
	for _, in := range inputs {
		f := fates[in.Trial]
		if f == nil && in.Kind != inputNext {
			// A trial whose creation did not commit: it is created anew.
			continue
		}
		switch in.Kind {
		case inputAdd:
			var a addInput
			if err := json.Unmarshal(in.Data, &a); err != nil {
				return nil, fmt.Errorf("scheduler input %d: %w", in.Seq, err)
			}
			t.scheduler.OnTrialAdd(in.Trial, search.RestoreTypes(t.cfg.Search.Space, a.Config))
			if f.ended {
				// A failed trial that a later run ran again.
				*f = fate{seen: a.From}
				l.trials[in.Trial].schedulerEnded = false
			}
			f.added = true
		case inputResult:
			var r resultInput
			if err := json.Unmarshal(in.Data, &r); err != nil {
				return nil, fmt.Errorf("scheduler input %d: %w", in.Seq, err)
			}
			metrics := make(map[string]float64, len(r.Metrics))
			for k, v := range r.Metrics {
				metrics[k] = float64(v)
			}
			f.last = t.scheduler.OnResult(schedulers.Result{Trial: in.Trial, Time: float64(r.Time),
				Score: float64(r.Score), Checkpoint: r.Checkpoint, Metrics: metrics})
			f.decided, f.seen = true, r.Iteration
		case inputNext:
			var n nextInput
			if err := json.Unmarshal(in.Data, &n); err != nil {
				return nil, fmt.Errorf("scheduler input %d: %w", in.Seq, err)
			}
			ord, ok := t.scheduler.Next(n.Capacity)
			if ok != (n.Order != nil) || ok && (ord.Trial != n.Order.Trial || ord.Action != n.Order.Action) {
				return nil, fmt.Errorf("resume: the scheduler's replay differs from the interrupted run at input %d: it ordered %s, then %s (a scheduler must decide the same from the same inputs)",
					in.Seq, describeOrder(n.Order), describeOrder(orderIf(ord, ok)))
			}
			l.lastNext = &n.Capacity
			if ok && fates[ord.Trial] != nil {
				fates[ord.Trial].last, fates[ord.Trial].decided = ord.Decision, true
			}
		case inputEnd:
			var e endInput
			if err := json.Unmarshal(in.Data, &e); err != nil {
				return nil, fmt.Errorf("scheduler input %d: %w", in.Seq, err)
			}
			schedulers.EndTrial(t.scheduler, in.Trial, e.Status == storage.TrialError)
			f.ended, f.endStatus, f.endError = true, e.Status, e.Error
			l.trials[in.Trial].schedulerEnded = true
		}
	}
	// What the interrupted run did after its last recorded input: trials
	// it created, then reports it committed, in the order it committed
	// them.
	var tail []tailReport
	for _, ts := range st.Trials {
		f := fates[ts.Trial.Number]
		if !f.added {
			l.addTrial(ts.Trial.Number, search.RestoreTypes(t.cfg.Search.Space, ts.Trial.Params))
			f.added = true
		}
		for _, rep := range ts.Reports {
			if rep.Iteration > f.seen {
				// The checkpoint a report committed is kept when it is
				// the trial's latest.
				ckpt := ts.Checkpoint != nil && ts.Checkpoint.Iteration == rep.Iteration
				tail = append(tail, tailReport{ts.Trial.Number, rep, ckpt})
			}
		}
	}
	slices.SortFunc(tail, func(a, b tailReport) int { return int(a.rep.Seq - b.rep.Seq) })
	for _, tr := range tail {
		f := fates[tr.trial]
		if f.ended {
			continue
		}
		run := l.trials[tr.trial]
		_, score, ok := t.score(tr.rep.Metrics)
		if !ok {
			continue
		}
		progress, hasProgress := t.progress(trainer.Result{Iteration: tr.rep.Iteration, Metrics: tr.rep.Metrics})
		if !hasProgress {
			continue
		}
		f.last = l.result(run, tr.rep.Iteration, schedulers.Result{Trial: tr.trial, Time: progress, Score: score,
			Metrics: tr.rep.Metrics, Checkpoint: tr.checkpoint})
		f.decided, f.seen = true, tr.rep.Iteration
		l.recordDecision(run, f.last, progress)
	}
	return fates, l.err
}

// tailReport is a committed report the scheduler has not seen.
type tailReport struct {
	trial      int
	rep        storage.Report
	checkpoint bool
}

func orderIf(ord schedulers.Order, ok bool) *schedulers.Order {
	if !ok {
		return nil
	}
	return &ord
}

func describeOrder(o *schedulers.Order) string {
	if o == nil {
		return "nothing"
	}
	return fmt.Sprintf("%s of trial %d", o.Action, o.Trial)
}
