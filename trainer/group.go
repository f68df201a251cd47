package trainer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gotune/gotune/workers"
)

// Action is the tuner's answer to a report.
type Action int

const (
	// Continue lets the group train on.
	Continue Action = iota
	// Stop ends the trial: the group is stopped and Run returns Stopped.
	Stop
	// Pause stops the group so that it can be resumed later from its
	// latest committed checkpoint: Run returns Paused, and the Summary names
	// the checkpoint. A report that carries a checkpoint is the place to
	// pause without losing work; paused elsewhere, the work since the
	// latest checkpoint is done again on resume.
	Pause
)

func (a Action) String() string {
	switch a {
	case Continue:
		return "continue"
	case Stop:
		return "stop"
	case Pause:
		return "pause"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Result is one report of a trial as the tuner receives it.
type Result struct {
	// Iteration numbers the trial's reports from 1. After a restart from a
	// checkpoint, numbering goes on from the iteration that committed it;
	// reports the trial had already delivered are not delivered again. A
	// report that carries its own step (Spec.StepKey) is numbered next
	// after the last delivered, when its step is new.
	Iteration int
	Time      time.Time
	Metrics   map[string]float64
	// CheckpointPath is the committed checkpoint of this report when the
	// Spec has a CheckpointStore; "" when the report carries none.
	CheckpointPath string
	// Checkpoint lists the folders the ranks handed over with this report,
	// in rank order, when the Spec has no CheckpointStore; the sink takes
	// them over and must move or copy them before answering.
	Checkpoint []string
}

// Sink receives a running trial's results. Report is called from one
// goroutine at a time, in report order; the group waits for its answer
// before the reporting workers continue. Once the group's context has
// ended, Report may still be called, with that context, for the reports
// the workers make until they exit (one may commit the checkpoint a worker
// saves as it is told to stop): the sink should keep them (with a context
// of its own), and its answer is ignored.
type Sink interface {
	Report(ctx context.Context, r Result) (Action, error)
}

// EventSink is a Sink that also wants to hear of the group's restarts,
// resizes and refused checkpoints. A Sink without it is not told. Restarts
// and resizes come from Run's goroutine between attempts; a refused
// checkpoint comes from the goroutine that received its report, before
// the report reaches Report, possibly while another call is in progress.
type EventSink interface {
	Sink
	Event(ctx context.Context, e Event) error
}

// EventKind says what happened to a group.
type EventKind string

const (
	// EventRestart: the group failed and starts again.
	EventRestart EventKind = "restart"
	// EventResize: an elastic group grew and starts again, larger.
	EventResize EventKind = "resize"
	// EventCheckpointRefused: a worker handed over a checkpoint that is not
	// a folder inside its own GOTUNE_CHECKPOINT_DIR (or that could not be
	// read): it is left where it is, untouched, and the report counts
	// without a checkpoint. Cause says which folder and why.
	EventCheckpointRefused EventKind = "checkpoint_refused"
	// EventReportRefused: a command worker printed a report line that was
	// refused (malformed, or over workers.MaxReportLine), which Cause
	// explains; the group goes on. Only the first few of an attempt are
	// told; the worker's log keeps every one.
	EventReportRefused EventKind = "report_refused"
	// EventReportsSkipped: reports of an attempt were not delivered, and
	// Cause says how many and why: after a restart, they repeated steps
	// (or, without a step, iterations counted from the checkpoint) that
	// the trial had delivered already; or they came after the attempt
	// ended. Told once per attempt and reason, when the attempt delivers
	// again or ends.
	EventReportsSkipped EventKind = "reports_skipped"
	// EventHung: the group let failure.heartbeat_timeout pass without a
	// report (Cause says so) and is about to fail for it; Stacks holds its
	// workers' stacks, taken just before they are stopped.
	EventHung EventKind = "hung"
	// EventMetricsUnmatched: on a trial's first attempt, a metrics pattern
	// (Spec.Metrics) matched none of rank 0's lines, or no metrics file was
	// found, within its first minute (while no source had given a metric)
	// or by rank 0's exit. Cause names the pattern and shows rank 0's last
	// lines. The group goes on.
	EventMetricsUnmatched EventKind = "metrics_unmatched"
	// EventMetricsAmbiguous: on a trial's first attempt, DefaultPattern
	// read one metric name from lines that name it differently ("loss:
	// 0.53" and "test loss: 0.0071"), so a step keeps whichever came last.
	// Cause quotes a line of each. Told once per name; the group goes on.
	EventMetricsAmbiguous EventKind = "metrics_ambiguous"
)

// Event is a restart or a resize of a trial's group, told to an EventSink
// just before the new group starts, a checkpoint or a report line refused,
// told as the worker hands it over, or a hung group just before it fails.
type Event struct {
	Kind EventKind
	Time time.Time
	// Cause says why: the failure that ended the previous group, or the
	// resize.
	Cause string
	// Attempt numbers the group about to start among the trial's starts,
	// as WorkerStatus.Attempt does (for a refused checkpoint or report, a
	// hung group or skipped reports: the group running).
	Attempt int
	// Workers is the size of the group about to start (or running).
	Workers int
	// Checkpoint is the committed checkpoint it resumes from, "" when none
	// (and for a refused checkpoint), and Iteration the report that
	// committed it.
	Checkpoint string
	Iteration  int
	// Recorded is the trial's last delivered iteration: the group about to
	// start delivers only reports past it (see Spec.StepKey).
	Recorded int
	// Stacks are the workers' stacks of a hung group (EventHung).
	Stacks []WorkerStack
}

// Spec is everything needed to run one trial's group. Exactly one of Train,
// Process and Command says what the workers run.
type Spec struct {
	Experiment string
	Trial      int
	// Seed is the trial's seed, handed to every worker.
	Seed   int64
	Config map[string]any

	// Train runs on every worker, each in a goroutine of this process.
	Train TrainFunc
	// Process names a function given to Register; every worker runs it in
	// a child process of this binary, so that a crash, a panic or an
	// os.Exit in a worker cannot take the caller down. The binary's main
	// must call WorkerMain first.
	Process string
	// Command is a program every worker runs, per the command-worker
	// contract; "{name}" placeholders are expanded from Config (see
	// ExpandCommand), and "{trial_dir}" is TrialDir. Workdir is the folder
	// it runs in, expanded likewise; "" is the caller's. When Workdir is
	// set, relative paths in Command that name no file there are looked up
	// in PathBase, then in the caller's working directory (the sweep
	// file's folder, for a sweep file).
	Command  []string
	Workdir  string
	PathBase string

	Scaling ScalingConfig
	Failure FailureConfig
	// KillTimeout is the grace period between SIGTERM and SIGKILL when
	// process workers are stopped; 0 means DefaultKillTimeout.
	KillTimeout time.Duration

	// ResumeDir is the committed checkpoint to start from, "" for a fresh
	// start, and ResumeIteration the iteration of the report that
	// committed it: reports go on from ResumeIteration+1.
	ResumeDir       string
	ResumeIteration int
	// Delivered is the trial's last iteration the sink has already
	// received, when it is past ResumeIteration (a run that stopped after
	// its latest checkpoint): those reports are computed again but not
	// delivered again. 0 means ResumeIteration.
	Delivered int

	// StepKey names the report key that carries a report's own step (the
	// scheduler's time attribute); a report without it has its own step
	// in an epoch or step key instead, when it has one (see ReportStep).
	// After a restart, reports with a step are skipped until one's step
	// is past the step of the last report delivered before, so that every
	// step is delivered once however far back the workers resume (their
	// own files, ResumeDir, or scratch); within a group's run, steps may
	// repeat. A report with no step is numbered by count (see Result).
	// Every skipped report is told (EventReportsSkipped).
	StepKey string
	// LastStep is the step of the trial's last delivered report that had
	// one, for a resume; nil when none.
	LastStep *Step
	// Metrics says where a command's metrics come from besides its report
	// lines (see MetricsConfig). Collected reports carry their step under
	// Metrics.StepName(), which must be StepKey (Run sets StepKey to it
	// when empty), and one whose step is at or below the last recorded
	// step is dropped.
	Metrics MetricsConfig
	// Objectives are the metrics trials are ranked by. A collected step
	// that holds them all is emitted once no metric has come for it for
	// a while, without waiting for a later step (see MetricsConfig).
	Objectives []string
	// Restarts counts the trial's restarts before this Run (a resumed
	// sweep's): TORCHELASTIC_RESTART_COUNT goes on from it.
	Restarts int
	// Attempts counts the starts of the trial's group before this Run (an
	// earlier Run's, whether it failed, was paused or was interrupted):
	// WorkerStatus.Attempt and the attempt numbers in the workers' logs go
	// on from it.
	Attempts int

	// Checkpoints commits the checkpoints that reports hand over; nil hands
	// the ranks' folders to the sink in Result.Checkpoint instead, and a
	// restarted group can then only resume from ResumeDir.
	Checkpoints CheckpointStore
	// Placer reserves the group's workers, and is asked again after every
	// failure; nil runs Scaling.Workers() workers on this node, reserved by
	// the caller.
	Placer Placer
	// Launcher starts the worker processes of slots without a Launcher of
	// their own, on this node, and its Host is where the group's
	// rendezvous listens; nil means workers.LocalLauncher{}, on 127.0.0.1,
	// enough when every worker runs on this node.
	Launcher Launcher
	// ScratchDir is where workers write checkpoints before handing them
	// over; a temporary folder when empty. Put it on the checkpoint store's
	// file system so that committing is a rename. Run empties it first (what
	// is there was left by a run that was killed) and removes it at the end.
	// Each worker has a folder of its own inside (GOTUNE_CHECKPOINT_DIR; for
	// a Go function, where Worker.CheckpointDir creates folders), and only a
	// folder inside it is taken over: see workers.Confine.
	ScratchDir string
	// LogDir receives one log file per process worker, worker_<rank>.log,
	// appended to across restarts; "" keeps no log files (a failure's error
	// still quotes the worker's last lines).
	LogDir string
	// LogMaxBytes caps each log file of LogDir, which is rotated into up to
	// LogKeep older files (see Config.LogMaxBytes); 0 means no cap.
	LogMaxBytes workers.Bytes
	LogKeep     int
	// Env holds extra NAME=value variables for every process and command
	// worker. They replace the caller's variables of the same name (and
	// the defaults OMP_NUM_THREADS and PYTHONUNBUFFERED), never the ones the
	// command-worker contract sets.
	Env []string
	// TrialDir is the trial's own folder, in GOTUNE_TRIAL_DIR; "" for none.
	// The caller creates it.
	TrialDir string
	// OnDiskFull, when not nil, is told when a worker waits for space to
	// write (Worker.WaitForSpace) with the error, which names the file, and
	// with nil when it writes again. It may be called from any goroutine.
	OnDiskFull func(err error)
	// Inspector, when set, reaches the group's workers while Run runs
	// (their stacks); nil: nobody asks.
	Inspector *Inspector
}

// StepHints are the report keys that carry a report's own step when it
// lacks Spec.StepKey, in the order they are looked for: a script that
// resumes from its own snapshot and reports its epoch is placed by it.
var StepHints = []string{"epoch", "step"}

// Step is a report's own step: the value of its metric Key.
type Step struct {
	Key   string
	Value float64
}

func (s Step) String() string { return fmt.Sprintf("%s %g", s.Key, s.Value) }

// ReportStep is the step a report carries (see Spec.StepKey): its stepKey
// metric, or, when it has none, the first of StepHints it has; ok is false
// when it has none of them. stepKey "" is not looked for.
func ReportStep(metrics map[string]float64, stepKey string) (step Step, ok bool) {
	if v, ok := metrics[stepKey]; ok && stepKey != "" {
		return Step{stepKey, v}, true
	}
	for _, k := range StepHints {
		if v, ok := metrics[k]; ok {
			return Step{k, v}, true
		}
	}
	return Step{}, false
}

// CheckpointStore commits a trial's checkpoints: storage.CheckpointDir,
// wrapped by the tuner, is the implementation.
type CheckpointStore interface {
	// Commit merges shards, the folders the ranks handed over with the
	// report of the given iteration (in rank order), into one checkpoint,
	// commits it atomically and returns its folder. It takes the shards
	// over. Iterations arrive in increasing order.
	Commit(iteration int, metrics map[string]float64, shards []string) (string, error)
}

// Outcome is how a group's run ended without error.
type Outcome int

const (
	// Completed means every worker's training ended without error.
	Completed Outcome = iota
	// Stopped means the tuner stopped the trial.
	Stopped
	// Paused means the tuner paused the trial: run it again with the
	// Summary's checkpoint to resume it.
	Paused
)

func (o Outcome) String() string {
	switch o {
	case Stopped:
		return "stopped"
	case Paused:
		return "paused"
	}
	return "completed"
}

// Summary is how a run of a trial's group ended.
type Summary struct {
	Outcome Outcome
	// Checkpoint is the trial's latest committed checkpoint ("" when none)
	// and CheckpointIteration the report that committed it: what to put in
	// Spec.ResumeDir and Spec.ResumeIteration to resume a paused trial.
	Checkpoint          string
	CheckpointIteration int
	// Iterations is the trial's last delivered iteration (Spec.Delivered
	// for a resume).
	Iterations int
	// Restarts counts the restarts after failures during this run.
	Restarts int
	// Attempts counts the group's starts during this run (restarts and
	// resizes included): Spec.Attempts of the trial's next Run goes on by
	// it.
	Attempts int
}

// permanentError marks a failure that a restart cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as a failure that restarting the group cannot fix (a
// bad configuration, a missing file): a worker that returns it fails the
// trial at once, whatever FailureConfig.MaxFailures allows.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

// IsPermanent reports whether err, or an error it wraps, was marked by Permanent.
func IsPermanent(err error) bool {
	var pe *permanentError
	return errors.As(err, &pe)
}

// Run runs spec's group to the end: until every worker finishes, the sink
// answers Stop or Pause, a failure exhausts FailureConfig.MaxFailures, or
// ctx ends. A worker that fails (returns an error, panics, exits with a
// non-zero status, is killed, or lets the heartbeat timeout pass) fails the
// whole group: the other workers are stopped, every process of the group is
// gone before the group restarts, and the new group resumes from the latest
// committed checkpoint. Run returns the failure's error when the trial
// cannot go on, and ctx's error when ctx ends first.
func Run(ctx context.Context, spec Spec, sink Sink) (Summary, error) {
	kind, err := spec.kind()
	if err != nil {
		return Summary{}, err
	}
	// Workers run in other folders (Workdir, another node's): every
	// folder they are told of, and the one their checkpoints are confined
	// to, is absolute, made so once here.
	for _, dir := range []*string{&spec.ScratchDir, &spec.LogDir, &spec.TrialDir} {
		if *dir == "" {
			continue
		}
		if *dir, err = filepath.Abs(*dir); err != nil {
			return Summary{}, fmt.Errorf("trainer: %w", err)
		}
	}
	if spec.Metrics.Collects() {
		if spec.Command == nil {
			return Summary{}, errors.New("trainer: Spec.Metrics collects a command's metrics: set Command")
		}
		if spec.StepKey == "" {
			spec.StepKey = spec.Metrics.StepName()
		} else if spec.StepKey != spec.Metrics.StepName() {
			return Summary{}, fmt.Errorf("trainer: Spec.StepKey %q is not the collected metrics' step %q: a restart could record a step twice", spec.StepKey, spec.Metrics.StepName())
		}
	}
	r := &runner{spec: spec, sink: sink, kind: kind}
	r.events, _ = sink.(EventSink)
	r.latest = checkpointRef{dir: spec.ResumeDir, iteration: spec.ResumeIteration}
	r.delivered = max(spec.Delivered, spec.ResumeIteration)
	r.lastStep = spec.LastStep
	scratch := spec.ScratchDir
	if scratch == "" {
		dir, err := os.MkdirTemp("", "gotune-scratch-")
		if err != nil {
			return Summary{}, fmt.Errorf("trainer: scratch folder: %w", err)
		}
		scratch = dir
	} else if err := os.RemoveAll(scratch); err != nil {
		return Summary{}, fmt.Errorf("trainer: empty the scratch folder a killed run left: %w", err)
	}
	// The scratch folder is made when a worker's folder in it is: a trial
	// of Go functions that never checkpoint leaves the disk untouched.
	defer os.RemoveAll(scratch)
	if spec.LogDir != "" {
		// The log folder, made for torch's error files, goes when no
		// worker wrote anything into it.
		defer os.Remove(spec.LogDir)
	}
	r.scratch = scratch
	return r.run(ctx)
}

// groupKind runs one attempt of a group with one kind of worker: it starts
// the attempt's workers, returns once every one of them is gone, and ends
// the attempt (attempt.finish) when they fail or all finish.
type groupKind interface {
	runAttempt(a *attempt)
}

func (s Spec) kind() (groupKind, error) {
	n := 0
	var k groupKind
	if s.Train != nil {
		n++
		k = goroutineKind{s.Train}
	}
	if s.Process != "" {
		n++
		if lookupRegistered(s.Process) == nil {
			return nil, fmt.Errorf("trainer: no function registered as %q: call trainer.Register(%q, f) in an init function", s.Process, s.Process)
		}
		k = processKind{s.Process}
	}
	if s.Command != nil {
		n++
		argv, dir, err := s.expandCommand()
		if err != nil {
			return nil, fmt.Errorf("trainer: %w", err)
		}
		k = &commandKind{argv: argv, dir: dir}
	}
	switch n {
	case 0:
		return nil, errors.New("trainer: spec says nothing to run: set Train, Process or Command")
	case 1:
		return k, nil
	}
	return nil, errors.New("trainer: spec sets more than one of Train, Process and Command")
}

// checkpointRef is a committed checkpoint and the iteration that committed it.
type checkpointRef struct {
	dir       string
	iteration int
}

// runner is one Run: it owns the group's attempts, the trial's report
// numbering across them and its latest committed checkpoint. Its fields
// after placement are touched by one attempt's delivering goroutine at a
// time, and by run between attempts.
type runner struct {
	spec    Spec
	sink    Sink
	events  EventSink
	kind    groupKind
	scratch string
	ctx     context.Context

	placement Placement
	latest    checkpointRef
	delivered int
	lastStep  *Step // see Spec.LastStep
	restarts  int
	attempts  int // the attempts begun (Summary.Attempts)
}

func (r *runner) run(ctx context.Context) (Summary, error) {
	r.ctx = ctx
	lo, hi := r.spec.Scaling.Bounds()
	placer := r.spec.Placer
	if placer == nil {
		placer = localPlacer{}
	}
	pl, err := placer.Place(ctx, lo, hi)
	if err != nil {
		return r.summary(Completed), fmt.Errorf("trainer: place the group: %w", err)
	}
	r.placement = pl
	defer func() { r.placement.Release() }()

	failures := 0
	for number := 1; ; number++ {
		a := r.newAttempt(number)
		r.kind.runAttempt(a)
		a.cleanup()
		end := a.ended()
		a.workers.endAll(WorkerStopped)
		a.workers.flush(ctx)
		switch end.kind {
		case endCompleted:
			return r.summary(Completed), nil
		case endStopped:
			return r.summary(Stopped), nil
		case endPaused:
			return r.summary(Paused), nil
		case endResize:
			if err := r.event(EventResize, fmt.Sprintf("grew from %d to %d workers", len(a.slots), len(r.placement.Slots())), a.trialAttempt()+1); err != nil {
				return r.summary(Completed), err
			}
			continue
		}
		// Failed or cancelled.
		if ctx.Err() != nil {
			return r.summary(Completed), ctx.Err()
		}
		if IsPermanent(end.err) {
			return r.summary(Completed), end.err
		}
		failures++
		if limit := r.spec.Failure.MaxFailures; limit >= 0 && failures > limit {
			if limit > 0 {
				return r.summary(Completed), fmt.Errorf("%w (after %d restarts, failure.max_failures = %d)", end.err, r.restarts, limit)
			}
			return r.summary(Completed), end.err
		}
		r.restarts++
		r.placement.Release()
		pl, err := placer.Place(ctx, lo, hi)
		if err != nil {
			r.placement = noPlacement{}
			return r.summary(Completed), fmt.Errorf("trainer: place the group again after %v: %w", end.err, err)
		}
		r.placement = pl
		if err := r.event(EventRestart, end.err.Error(), a.trialAttempt()+1); err != nil {
			return r.summary(Completed), err
		}
	}
}

func (r *runner) event(kind EventKind, cause string, attempt int) error {
	if r.events == nil {
		return nil
	}
	e := Event{Kind: kind, Time: time.Now(), Cause: cause, Attempt: attempt,
		Workers: len(r.placement.Slots()), Checkpoint: r.latest.dir, Iteration: r.latest.iteration, Recorded: r.delivered}
	if err := r.events.Event(r.ctx, e); err != nil {
		return fmt.Errorf("trainer: record %s: %w", kind, err)
	}
	return nil
}

func (r *runner) summary(o Outcome) Summary {
	return Summary{Outcome: o, Checkpoint: r.latest.dir, CheckpointIteration: r.latest.iteration,
		Iterations: r.delivered, Restarts: r.restarts, Attempts: r.attempts}
}

// attemptScratch begins the names of attempt number's scratch folders.
func (r *runner) attemptScratch(number int) string {
	return filepath.Join(r.scratch, fmt.Sprintf("attempt-%d", number))
}
