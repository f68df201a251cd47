package schedulers

import "fmt"

// Action is what happens to a trial after a result.
type Action int

const (
	// Continue lets the trial run on. In an Order it resumes a paused trial
	// from its latest checkpoint.
	Continue Action = iota
	// Stop ends the trial now; its last result stands as its final one.
	Stop
	// Pause stops the trial's group after its latest checkpoint and frees
	// its resources; the trial runs again only when Next orders it resumed.
	Pause
	// Restart stops the trial's group and starts it again at once from
	// another trial's latest checkpoint with a new configuration, both
	// given by Decision.Exploit (Population Based Training's exploit and
	// explore step). The trial keeps its number and its history.
	Restart
)

func (a Action) String() string {
	switch a {
	case Continue:
		return "CONTINUE"
	case Stop:
		return "STOP"
	case Pause:
		return "PAUSE"
	case Restart:
		return "RESTART"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// MarshalText renders the action as its name, so that decisions read well
// in JSON (snapshots, event records).
func (a Action) MarshalText() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalText parses an action's name.
func (a *Action) UnmarshalText(b []byte) error {
	for _, x := range []Action{Continue, Stop, Pause, Restart} {
		if x.String() == string(b) {
			*a = x
			return nil
		}
	}
	return fmt.Errorf("unknown scheduler action %q", b)
}

// Decision is a scheduler's verdict on one result. The tuner records every
// decision with a non-empty Reason as an event in the trial's history.
type Decision struct {
	Action Action `json:"action"`
	// Reason says why, in words a user reads in `gotune show`: the rung,
	// the trial's value and the cutoff it was measured against. It is
	// empty for a Continue that is not worth recording.
	Reason string `json:"reason,omitempty"`
	// Rung is the value of the time attribute at which the decision was
	// taken: an ASHA or HyperBand rung's milestone, the time the median
	// rule compared at, a PBT perturbation time. Zero when no rung was
	// involved.
	Rung float64 `json:"rung,omitempty"`
	// Cutoff is the value of the objective metric, in the metric's own
	// units and direction (not negated for "max"), that the trial was
	// measured against at Rung. It means something only when HasCutoff is
	// true: a rung with too few results has no cutoff yet.
	Cutoff    float64 `json:"cutoff,omitempty"`
	HasCutoff bool    `json:"has_cutoff,omitempty"`
	// Exploit is set exactly when Action is Restart.
	Exploit *Exploit `json:"exploit,omitempty"`
}

// Exploit is a restart order of Population Based Training: the trial that
// reported stops and starts again from trial From's latest checkpoint (the
// tuner copies it) with Config.
type Exploit struct {
	// From is the trial whose latest committed checkpoint is copied.
	From int `json:"from"`
	// FromTime is the time attribute's value at that checkpoint as the
	// scheduler last saw it; the restarted trial's next result continues
	// from there.
	FromTime float64 `json:"from_time"`
	// Config is the restarted trial's complete new configuration.
	Config map[string]any `json:"config"`
}

// Order is an instruction about a paused trial, handed out by Next.
// Decision.Action is Continue (resume the trial from its latest checkpoint
// with its configuration) or Stop (end it without running it again).
type Order struct {
	Trial int `json:"trial"`
	Decision
}

// Capacity is what the tuner's loop can do at the moment it calls Next.
type Capacity struct {
	// CanResume is true when the loop has room to run one more trial. A
	// scheduler may order a resumption only then.
	CanResume bool
	// MoreTrials is true while the searcher will still add new trials;
	// false once the last one has been added. Schedulers that wait for
	// trials to arrive (HyperBand filling a bracket) stop waiting then.
	MoreTrials bool
}

// Result is what a scheduler sees of one report of a trial.
type Result struct {
	// Trial identifies the trial within its experiment.
	Trial int
	// Time is the value of the experiment's time attribute (epoch,
	// training_iteration, ...): how far the trial has progressed. It may
	// go back after a restart from a checkpoint.
	Time float64
	// Score is the objective metric normalised so that lower is better: the
	// tuner negates it when the objective's mode is "max".
	Score float64
	// Checkpoint is true when the report committed a checkpoint, which a
	// paused trial resumes from and which PBT copies into other trials.
	Checkpoint bool
	// Metrics holds every metric of the report, unnormalised.
	Metrics map[string]float64
}

// Scheduler decides the fate of trials from their results: continue, stop,
// pause, or (PBT) restart from another trial's checkpoint; and which paused
// trial runs next. Implement it to plug a custom scheduler into the tuner
// (tuner.WithScheduler); embed FIFO to inherit do-nothing methods.
//
// A scheduler is a pure state machine: events in, decisions out, no I/O and
// no goroutines. The tuner calls its methods from one goroutine, in the
// order the events happened:
//
//   - OnTrialAdd when a new trial starts, before any of its results; and
//     again for a trial that ended when it runs again (a failed trial that
//     tuner.WithRerunFailed reruns): the same trial goes on from its latest
//     checkpoint, so its next result may go back in time, as after any
//     restart from a checkpoint, and what was decided about it up to there
//     stands;
//   - OnResult for every result of a running trial; its Decision applies to
//     that trial at once;
//   - OnTrialEnd once a trial has ended (completed, failed,
//     stopped, or still paused when the experiment ends) — never for a
//     pause or a restart. A scheduler that also implements FailureObserver
//     is told first, by OnTrialFailed, when the trial failed;
//   - Next after every other call and whenever room frees up, until it
//     returns false; a trial is resumed or a new one started only through it
//     (the loop starts a new trial when Next has nothing to resume).
//
// A scheduler that never answers Pause or Restart works with any tuner;
// one that does needs trials that checkpoint (see Env.Checkpoints).
//
// A resumed experiment rebuilds its scheduler by making the recorded calls
// again, in order, on a new one. For that to give back the state the
// interrupted scheduler had, a scheduler must decide the same from the
// same calls (no clock, no unseeded randomness, no map iteration order in
// its decisions), and a call of Next that orders nothing must leave it as
// it was unless its Capacity differs from the call before: the tuner
// records only those calls of Next.
type Scheduler interface {
	// OnTrialAdd is told that trial starts with config, which it must not
	// modify, or that trial, which ended, runs again from its latest
	// checkpoint.
	OnTrialAdd(trial int, config map[string]any)
	// OnResult decides about the trial that reported r.
	OnResult(r Result) Decision
	// OnTrialEnd is told that trial has ended and will report no more.
	OnTrialEnd(trial int)
	// Next returns the next order about a paused trial, or false when there
	// is none now. An order to resume is allowed only when c.CanResume.
	Next(c Capacity) (Order, bool)
}

// FailureObserver is implemented by schedulers that tell a trial that
// failed (it ended with an error and is recorded ERROR: its training
// function returned one, or a worker died) from one that ended
// otherwise: the tuner calls OnTrialFailed just before OnTrialEnd for
// such a trial, live and when a resumed experiment makes the recorded
// calls again. A scheduler without it hears OnTrialEnd alone,
// however the trial ended. A failed trial that tuner.WithRerunFailed runs
// again is added again (see Scheduler) and, if it then ends without
// failing, has not failed. Optuna's pruners implement it: like Optuna,
// they count a failed trial neither as completed nor as a reference.
type FailureObserver interface {
	// OnTrialFailed is told that trial failed; OnTrialEnd follows.
	OnTrialFailed(trial int)
}

// EndTrial tells s that trial ended, and first, when it failed and s is a
// FailureObserver, that it failed: the calls a loop makes when a trial
// ends.
func EndTrial(s Scheduler, trial int, failed bool) {
	if f, ok := s.(FailureObserver); ok && failed {
		f.OnTrialFailed(trial)
	}
	s.OnTrialEnd(trial)
}

// Snapshotter is implemented by schedulers whose state can be saved and
// restored, so that an interrupted experiment resumes with the same
// decisions. Every built-in scheduler implements it.
type Snapshotter interface {
	// Snapshot encodes the scheduler's state, its random generator
	// included.
	Snapshot() ([]byte, error)
	// Restore replaces the state of a scheduler built from the same Config
	// and Env with a snapshot's.
	Restore(data []byte) error
}

// FIFO runs every trial to completion, in the order the searcher suggests
// them. Embed it in a custom scheduler to inherit do-nothing methods.
type FIFO struct{}

var (
	_ Scheduler   = FIFO{}
	_ Snapshotter = FIFO{}
)

// OnTrialAdd implements Scheduler; FIFO keeps no state.
func (FIFO) OnTrialAdd(int, map[string]any) {}

// OnResult implements Scheduler: always Continue.
func (FIFO) OnResult(Result) Decision { return Decision{Action: Continue} }

// OnTrialEnd implements Scheduler.
func (FIFO) OnTrialEnd(int) {}

// Next implements Scheduler: FIFO never pauses, so it has no orders.
func (FIFO) Next(Capacity) (Order, bool) { return Order{}, false }

// Snapshot implements Snapshotter: FIFO has no state.
func (FIFO) Snapshot() ([]byte, error) { return []byte("{}"), nil }

// Restore implements Snapshotter.
func (FIFO) Restore([]byte) error { return nil }
