package tuner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gotune/gotune/schedulers"
	"github.com/gotune/gotune/search"
	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/workers"
)

// ErrExperimentExists is returned by Fit when the database already has an
// experiment of the config's name that it cannot continue: one that has
// finished, or that was started with a different configuration.
var ErrExperimentExists = errors.New("experiment exists")

// ErrNothingToResume is returned by Fit with WithResumeOnly when the
// database has no experiment of the config's name.
var ErrNothingToResume = errors.New("nothing to resume")

// prepare creates the experiment, or continues it when the database has it
// unfinished, and returns the loop that runs it.
func (t *Tuner) prepare(ctx context.Context) (*loop, error) {
	exp, err := t.db.Experiment(ctx, t.cfg.Name)
	if errors.Is(err, storage.ErrNotFound) {
		if t.resumeOnly {
			return nil, fmt.Errorf("%w: %s has no experiment %q", ErrNothingToResume, t.db.Path(), t.cfg.Name)
		}
		// Folders of this name that the database does not know are an
		// earlier experiment's (its database deleted or replaced).
		var setAside []string
		for _, dir := range t.experimentFolders() {
			to, err := storage.SetAside(dir, time.Now())
			if err != nil {
				return nil, err
			}
			if to != "" {
				setAside = append(setAside, fmt.Sprintf("%s to %s", dir, to))
			}
		}
		exp, err = t.db.CreateExperiment(ctx, t.cfg.Name, t.cfg.Objective.Metric, t.cfg.Objective.Mode, t.cfg.record())
		if err != nil {
			return nil, err
		}
		if len(setAside) > 0 {
			msg := "moved what an earlier experiment of this name left, unknown to this database: " + strings.Join(setAside, ", ")
			if err := t.db.AddEvent(ctx, exp.ID, 0, "set_aside", msg, nil); err != nil {
				return nil, err
			}
		}
		if err := t.warmStart(ctx, exp, false); err != nil {
			return nil, err
		}
		return newLoop(t, exp), nil
	}
	if err != nil {
		return nil, err
	}
	if err := t.mayContinue(ctx, exp); err != nil {
		return nil, err
	}
	st, err := t.db.ResumeState(ctx, t.cfg.Name)
	if err != nil {
		return nil, err
	}
	if err := t.db.ResumeExperiment(ctx, exp.ID); err != nil {
		return nil, err
	}
	if err := t.endLeftovers(ctx, st); err != nil {
		return nil, err
	}
	if err := t.warmStart(ctx, exp, true); err != nil {
		return nil, err
	}
	l := newLoop(t, exp)
	if err := l.restore(ctx, st); err != nil {
		return nil, err
	}
	return l, nil
}

// endLeftovers ends what an interrupted run of the experiment left behind
// on this node, before its trials restart: the processes its workers
// started that are still running (a worker process dies with the run that
// started it, but not what it started), found by their workers.TagVar,
// which is the worker's scratch folder inside the experiment's checkpoint
// folder; the trials' scratch folders; and the workers the database still
// shows running. The experiment's folders are locked, so no live run's
// worker carries such a tag.
func (t *Tuner) endLeftovers(ctx context.Context, st *storage.ResumeState) error {
	expID := st.Experiment.ID
	root, err := filepath.Abs(filepath.Join(t.checkpointRoot(), t.cfg.Name))
	if err != nil {
		return err
	}
	if n := workers.KillTagged(root + string(filepath.Separator)); n > 0 {
		msg := fmt.Sprintf("killed %d processes that workers of the interrupted run left running", n)
		if err := t.db.AddEvent(ctx, expID, 0, "cleanup", msg, nil); err != nil {
			return err
		}
	}
	for _, ts := range st.Trials {
		if err := os.RemoveAll(storage.ScratchDir(t.TrialDir(ts.Trial.Number))); err != nil {
			return fmt.Errorf("trial %d: remove the scratch folder of the interrupted run: %w", ts.Trial.Number, err)
		}
	}
	_, err = t.db.EndRunningWorkers(ctx, expID, trainer.WorkerStopped)
	return err
}

// identity is what an experiment's configuration must keep for a later run
// to continue it. Where results go, the resources and max_concurrent may
// change between runs.
type identity struct {
	Seed      int64     `json:"seed"`
	Objective Objective `json:"objective"`
	Search    struct {
		Algorithm  string            `json:"algorithm"`
		NumSamples int               `json:"num_samples"`
		Seed       *int64            `json:"seed"`
		Space      map[string]string `json:"space"`
		Points     []map[string]any  `json:"points_to_evaluate"`
		WarmStart  string            `json:"warm_start"`
	} `json:"search"`
	Scheduler SchedulerConfig `json:"scheduler"`
	Trainer   trainer.Config  `json:"trainer"`
}

func (c Config) identity(space map[string]string) identity {
	var id identity
	id.Seed, id.Objective, id.Scheduler, id.Trainer = c.Seed, c.Objective, c.Scheduler, c.Trainer
	id.Trainer.LogMaxBytes, id.Trainer.LogKeep = 0, 0 // how much of the workers' logs is kept may change too
	id.Trainer.Failure.FailFast = nil                 // and whether a failure ends the run
	id.Search.Algorithm, id.Search.NumSamples, id.Search.Seed = c.Search.Algorithm, c.Search.NumSamples, c.Search.Seed
	id.Search.Space = space
	id.Search.Points, id.Search.WarmStart = c.Search.PointsToEvaluate, c.Search.WarmStart
	return id
}

// recordedConfig is the JSON Config.record writes.
type recordedConfig struct {
	Config
	Space map[string]string `json:"space"`
}

// restartOnResume records that a trial restored by a resumed run starts
// again from where restartPoint says, why being the cause before it, and
// tells the observer, so that `gotune run` prints it.
func (l *loop) restartOnResume(ctx context.Context, tr *trialRun, why string) error {
	why += restartPoint(tr)
	if err := l.t.db.RestartTrial(ctx, tr.record.ID(), tr.iterations, why); err != nil {
		return err
	}
	l.t.notify(fmt.Sprintf("trial %d: %s", tr.number, why))
	return nil
}

// restore replays a recorded experiment into the loop: every trial's
// configuration, reports and end to the searcher (see search.Replayer), the
// scheduler's recorded inputs to the scheduler (see replaySchedule). Then
// each unfinished trial goes on as the scheduler last decided: ended,
// paused, exploiting another trial's checkpoint, or restarted from its
// latest checkpoint when the interruption cut it short.
func (l *loop) restore(ctx context.Context, st *storage.ResumeState) error {
	t := l.t
	// rerun: a failed trial to run again (WithRerunFailed).
	rerun := func(rec *storage.Trial) bool { return t.rerunFailed && rec.Status == storage.TrialError }
	for _, ts := range st.Trials {
		rec := ts.Trial
		config := search.RestoreTypes(t.cfg.Search.Space, rec.Params)
		tr, err := l.newTrialRun(ctx, rec, config, false)
		if err != nil {
			return err
		}
		tr.attempts = ts.Attempts
		l.started = max(l.started, rec.Number)
		switch err := search.Replay(t.searcher, rec.Number, config); {
		case errors.Is(err, search.ErrExhausted):
			l.exhausted = true
		case err != nil && !errors.Is(err, search.ErrWait):
			return fmt.Errorf("searcher: replay trial %d: %w", rec.Number, err)
		}
		if rerun(rec) {
			// The rerun goes on from the trial's latest checkpoint: the
			// reports after it are reported again.
			ts = ts.UpTo(tr.ckpts.dir.Latest())
		}
		l.replayReports(tr, ts)
		// A group commits a report's checkpoint before the report itself,
		// so an interruption may leave a checkpoint newer than the recorded
		// reports: it is discarded, and the run resumes from the newest
		// checkpoint the reports reach.
		if err := tr.ckpts.discardAfter(tr.iterations); err != nil {
			return fmt.Errorf("trial %d: %w", rec.Number, err)
		}
		if c, ok := tr.ckpts.dir.Latest(); ok {
			tr.resumeDir, tr.resumeIter = c.Path, c.Iteration
		}
		if finished(rec.Status) && !rerun(rec) {
			l.replayEnd(tr, rec.Status)
		}
	}
	fates, err := l.replaySchedule(ctx, st)
	if err != nil {
		return err
	}
	var interrupted, exploiting []*trialRun
	for _, ts := range st.Trials {
		rec := ts.Trial
		tr, f := l.trials[rec.Number], fates[rec.Number]
		switch {
		case rerun(rec):
			// The scheduler hears of the trial again, from where it
			// restarts.
			tr.schedulerEnded = false
			l.addTrialFrom(rec.Number, tr.config, tr.iterations)
			if err := l.restartOnResume(ctx, tr, "rerun of the failed trial "); err != nil {
				return err
			}
			l.launch(ctx, tr)
		case finished(rec.Status):
			if !f.ended {
				// Recorded before the scheduler's inputs were.
				l.trialEnded(tr, rec.Status, "")
			}
		case f.ended:
			// The run ended the trial and was interrupted before it
			// recorded the end.
			var err error
			if f.endError != "" {
				err = errors.New(f.endError)
			}
			l.endTrial(ctx, tr, f.endStatus, err)
		case f.decided && f.last.Action == schedulers.Stop:
			tr.terminal = t.cfg.Scheduler.MaxT > 0 && tr.last != nil && tr.last.Step >= t.cfg.Scheduler.MaxT
			l.endTrial(ctx, tr, l.stoppedStatus(tr), nil)
		case f.decided && f.last.Action == schedulers.Pause:
			tr.state = trialPaused
			if rec.Status != storage.TrialPaused {
				l.record(t.db.SetTrialStatus(ctx, rec.ID(), storage.TrialPaused))
				l.record(t.db.AddEvent(ctx, l.exp.ID, rec.ID(), storage.EventPause, reasonOr(f.last.Reason, "paused by the scheduler"), nil))
			}
		case f.decided && f.last.Action == schedulers.Restart && f.last.Exploit != nil:
			tr.state = trialPaused
			tr.exploit, tr.exploitReason = f.last.Exploit, f.last.Reason
			exploiting = append(exploiting, tr)
		default: // running, or promoted: the interruption cut it short
			interrupted = append(interrupted, tr)
		}
	}
	for _, tr := range interrupted {
		if err := l.restartOnResume(ctx, tr, "the experiment was resumed; the trial restarts "); err != nil {
			return err
		}
		tr.restarts++
		// Every restart begins an attempt, so the attempts are at least
		// the restarts: a kill can lose the record of the last attempt's
		// workers, whose log already names it.
		tr.attempts = max(tr.attempts, tr.restarts)
		// PENDING until its group has its workers again (managerPlacer).
		if err := t.db.SetTrialStatus(ctx, tr.record.ID(), storage.TrialPending); err != nil {
			return err
		}
		l.launch(ctx, tr)
	}
	for _, tr := range exploiting {
		l.exploit(ctx, tr)
	}
	return l.err
}

// restartPoint says where trial tr restarts from.
func restartPoint(tr *trialRun) string {
	if tr.resumeDir == "" {
		return "from scratch"
	}
	return fmt.Sprintf("from its checkpoint of iteration %d", tr.resumeIter)
}

// finished reports whether a trial's status is final.
func finished(status string) bool {
	switch status {
	case storage.TrialTerminated, storage.TrialStopped, storage.TrialError:
		return true
	}
	return false
}

// replayReports feeds a recorded trial's reports to the searcher.
func (l *loop) replayReports(tr *trialRun, ts storage.TrialState) {
	t := l.t
	for _, rep := range ts.Reports {
		tr.iterations = rep.Iteration
		tr.lastStep = t.stepOf(rep.Metrics, tr.lastStep)
		value, score, ok := t.score(rep.Metrics)
		if !ok {
			continue
		}
		l.scored = true
		l.addToCurve(tr.number, value)
		progress, hasProgress := t.progress(trainer.Result{Iteration: rep.Iteration, Metrics: rep.Metrics})
		step := progress
		if !hasProgress {
			step = float64(rep.Iteration)
		}
		tr.last = &search.Observation{Step: step, Score: score, Metrics: rep.Metrics}
		t.searcher.OnResult(tr.number, *tr.last)
	}
}

// replayEnd tells the searcher how a recorded trial ended.
func (l *loop) replayEnd(tr *trialRun, status string) {
	tr.state = trialEnded
	if status != storage.TrialError {
		l.succeeded++
	}
	l.t.searcher.OnTrialEnd(tr.number, searcherEnd(status, tr.last))
}

// spaceRecord renders the search space in sweep-file syntax, by name.
func (c Config) spaceRecord() map[string]string {
	space := map[string]string{}
	if c.Search.Space != nil {
		for _, p := range c.Search.Space.Params() {
			space[p.Name] = p.String()
		}
	}
	return space
}
