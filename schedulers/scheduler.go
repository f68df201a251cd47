package schedulers

import "fmt"

// Action is what happens to a trial after a result.
type Action int

const (
	// Continue lets the trial run on.
	Continue Action = iota
	// Stop ends the trial now; its last result stands as its final one.
	Stop
	// Pause stops the trial after its latest checkpoint so it can be resumed later.
	Pause
)

func (a Action) String() string {
	switch a {
	case Continue:
		return "CONTINUE"
	case Stop:
		return "STOP"
	case Pause:
		return "PAUSE"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Decision is a scheduler's verdict on one result, with the reason recorded in
// the trial's history (for example the rung and the cutoff it was measured
// against). Reason may be empty for Continue.
type Decision struct {
	Action Action
	Reason string
}

// Result is what a scheduler sees of one report of a trial.
type Result struct {
	// Trial identifies the trial within its experiment.
	Trial int
	// Time is the value of the experiment's time attribute (epoch,
	// training_iteration, ...): how far the trial has progressed.
	Time float64
	// Score is the objective metric normalised so that lower is better: the
	// tuner negates it when the objective's mode is "max".
	Score float64
	// Metrics holds every metric of the report, unnormalised.
	Metrics map[string]float64
}

// Scheduler decides the fate of running trials. The tuner calls its methods
// from one goroutine, in the order the events happened.
type Scheduler interface {
	// OnResult is called with every result of a running trial.
	OnResult(r Result) Decision
	// OnTrialEnd is called once a trial has finished, failed or been stopped;
	// its results must no longer influence decisions about running trials
	// beyond what the scheduler chooses to remember.
	OnTrialEnd(trial int)
}

// FIFO runs every trial to completion, in the order the searcher suggests them.
type FIFO struct{}

var _ Scheduler = FIFO{}

// OnResult implements Scheduler: always Continue.
func (FIFO) OnResult(Result) Decision { return Decision{Action: Continue} }

// OnTrialEnd implements Scheduler.
func (FIFO) OnTrialEnd(int) {}
