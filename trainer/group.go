package trainer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/gotune/gotune/allreduce"
)

// Action is the tuner's answer to a report.
type Action int

const (
	// Continue lets the group train on.
	Continue Action = iota
	// Stop ends the trial: the group is cancelled and Run returns Stopped.
	Stop
)

// Result is one report of a trial as the tuner receives it.
type Result struct {
	// Iteration counts the trial's reports from 1.
	Iteration int
	Time      time.Time
	Metrics   map[string]float64
	// Checkpoint lists the folders the ranks handed over with this report,
	// in rank order; empty when the report carries no checkpoint. The
	// sink takes them over: it must move or copy them before answering.
	Checkpoint []string
}

// Sink receives a running trial's results. Report is called from one
// goroutine at a time, in report order; the group waits for its answer
// before the reporting worker continues.
type Sink interface {
	Report(ctx context.Context, r Result) (Action, error)
}

// Spec is everything needed to run one trial's group.
type Spec struct {
	Experiment string
	Trial      int
	// Seed is the trial's seed, handed to every worker.
	Seed   int64
	Config map[string]any
	// Train runs on every worker.
	Train   TrainFunc
	Scaling ScalingConfig
	// ResumeDir is the committed checkpoint to start from; "" for a fresh start.
	ResumeDir string
	// ScratchDir is where workers' checkpoint folders are created; a
	// temporary folder when empty. Run removes what is left in it.
	ScratchDir string
}

// Outcome is how a group's run ended without error.
type Outcome int

const (
	// Completed means every worker's training function returned nil.
	Completed Outcome = iota
	// Stopped means the tuner stopped the trial.
	Stopped
)

func (o Outcome) String() string {
	if o == Stopped {
		return "stopped"
	}
	return "completed"
}

// Run runs spec's group of goroutine workers to the end: until every worker
// returns, the sink answers Stop, a worker fails, or ctx ends. A worker that
// returns an error or panics fails the whole group: the others are cancelled
// and their collectives fail, and Run returns the first worker's error.
func Run(ctx context.Context, spec Spec, sink Sink) (Outcome, error) {
	if spec.Train == nil {
		return 0, errors.New("trainer: spec has no training function")
	}
	n := spec.Scaling.Workers()
	scratch := spec.ScratchDir
	if scratch == "" {
		dir, err := os.MkdirTemp("", "gotune-scratch-")
		if err != nil {
			return 0, fmt.Errorf("trainer: scratch folder: %w", err)
		}
		scratch = dir
	}
	defer os.RemoveAll(scratch)
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	comms := allreduce.NewLocal(n)
	g := newGather(n, sink, cancel)

	errs := make([]error, n)
	var wg sync.WaitGroup
	for rank := range n {
		w := &Worker{
			experiment: spec.Experiment,
			trial:      spec.Trial,
			rank:       rank,
			localRank:  rank,
			seed:       spec.Seed,
			config:     spec.Config,
			comm:       comms[rank],
			scratchDir: scratch,
			resumeDir:  spec.ResumeDir,
			report:     g.report,
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := runWorker(gctx, spec.Train, w)
			if err != nil {
				errs[rank] = err
				// Unblock the other ranks: cancel their context and break
				// the collectives they may be waiting in.
				cancel()
				comms[rank].Close()
			}
		}()
	}
	wg.Wait()
	for _, c := range comms {
		c.Close()
	}

	if g.wasStopped() {
		return Stopped, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return Completed, firstFailure(errs)
}

// firstFailure picks the error that explains a group's failure: a real
// failure rather than the cancellations and broken collectives it caused in
// the other ranks.
func firstFailure(errs []error) error {
	var fallback error
	for rank, err := range errs {
		if err == nil {
			continue
		}
		err = fmt.Errorf("worker %d: %w", rank, err)
		if errors.Is(err, context.Canceled) || errors.Is(err, allreduce.ErrClosed) {
			if fallback == nil {
				fallback = err
			}
			continue
		}
		return err
	}
	return fallback
}

func runWorker(ctx context.Context, train TrainFunc, w *Worker) (err error) {
	defer func() {
		if p := recover(); p != nil {
			if ce, ok := p.(*ConfigError); ok {
				err = ce
				return
			}
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return train(ctx, w)
}
