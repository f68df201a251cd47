// Package sim plays the trial side of a schedulers.Scheduler exactly, on a
// simulated clock: a fixed number of workers, trials that train one
// iteration per clock tick, checkpoints and PBT's checkpoint copies as
// in-memory state. It follows the loop contract that Scheduler documents
// (OnTrialAdd, OnResult, OnTrialFailed and OnTrialEnd, and Next after
// every event), so it is both the test harness of the built-in schedulers
// and a reference for the tuner's loop, and it measures a scheduler's
// compute on synthetic learning curves (bench/schedulers). It imports
// schedulers and searchspace only.
package sim

import (
	"container/heap"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/gotune/gotune/schedulers"
)

// Model is a simulated training function: deterministic, its whole state
// a vector of numbers (which is what a checkpoint holds).
type Model interface {
	// Init returns the state of a fresh trial with config, before its
	// first iteration.
	Init(trial int, config map[string]any) []float64
	// Step trains iteration iter (from 1) of trial from state, which it
	// may modify, and returns the new state and the score (lower is
	// better). The trial's number stands for whatever stays with a trial
	// when it copies another's checkpoint (its data shard, its machine).
	Step(trial int, config map[string]any, state []float64, iter int) ([]float64, float64)
}

// Options describes a simulated experiment.
type Options struct {
	// Workers is how many trials run at once; default 1.
	Workers int
	// NumSamples is how many trials are added in all.
	NumSamples int
	// MaxIter is the number of iterations after which a trial's training
	// ends by itself.
	MaxIter int
	// CheckpointEvery makes a trial checkpoint after every this many
	// iterations; 0 means after every iteration, negative never.
	CheckpointEvery int
	// Config returns trial's configuration (trials are numbered from 1).
	Config func(trial int) map[string]any
	Model  Model
	// Fail reports whether trial fails during iteration iter: it then ends
	// without reporting it. Nil means no trial fails.
	Fail func(trial, iter int) bool
}

// Status is how a simulated trial ended.
type Status string

const (
	// Completed: the trial trained MaxIter iterations.
	Completed Status = "completed"
	// Stopped: the scheduler stopped it.
	Stopped Status = "stopped"
	// EndedPaused: it was paused when nothing else was left to run.
	EndedPaused Status = "ended paused"
	// Failed: Options.Fail made it fail.
	Failed Status = "failed"
)

// Report is one result as the trial produced it.
type Report struct {
	Clock int
	Trial int
	Iter  int
	Score float64
	// State is the trial's state after the iteration.
	State      []float64
	Checkpoint bool
	// Compute is the number of iterations trained by all trials so far,
	// this one included.
	Compute int
}

// Event is a decision on a result, or an order from Next, worth
// recording: every one but a Continue without a reason.
type Event struct {
	Clock int
	Trial int
	// Iter is the trial's iteration when the event happened.
	Iter int
	// Order is true for an order from Next.
	Order bool
	schedulers.Decision
}

// Copy is a checkpoint copied from one trial into another by a Restart.
type Copy struct {
	Clock    int
	To, From int
	// Iter is the iteration of the copied checkpoint.
	Iter int
	// State is the checkpoint's content as copied.
	State []float64
}

// Trial is a trial's final condition.
type Trial struct {
	Number int
	// Config is its latest configuration (a Restart replaces it).
	Config map[string]any
	// Iter is its iteration after the last report, or at its checkpoint
	// when it ended paused.
	Iter     int
	State    []float64
	Status   Status
	Resumes  int
	Restarts int
}

// Run is everything a simulation produced.
type Run struct {
	Reports []Report
	Events  []Event
	Copies  []Copy
	// Trials are indexed by number − 1.
	Trials []*Trial
	// Compute is the number of iterations trained in all; Clock the
	// simulated time when the last trial ended.
	Compute, Clock int
}

type checkpoint struct {
	iter  int
	state []float64
}

type trial struct {
	Trial
	paused bool
	ckpt   *checkpoint
}

type sim struct {
	s       schedulers.Scheduler
	o       Options
	run     Run
	trials  []*trial
	queue   queue
	free    int
	clock   int
	started int
}

// ErrContract is wrapped by every error that reports a scheduler breaking
// the loop contract.
var ErrContract = errors.New("scheduler broke the loop contract")

// Simulate runs the experiment o describes under s to the end.
func Simulate(s schedulers.Scheduler, o Options) (*Run, error) {
	if o.Workers == 0 {
		o.Workers = 1
	}
	if o.Workers < 0 || o.NumSamples < 0 || o.MaxIter < 1 || o.Config == nil || o.Model == nil {
		return nil, errors.New("sim: options need Workers ≥ 0, NumSamples ≥ 0, MaxIter ≥ 1, a Config function and a Model")
	}
	m := &sim{s: s, o: o, free: o.Workers}
	if err := m.dispatch(); err != nil {
		return &m.run, err
	}
	for m.queue.Len() > 0 {
		it := heap.Pop(&m.queue).(item)
		m.clock = it.clock
		if err := m.step(m.trials[it.trial-1]); err != nil {
			return &m.run, err
		}
		if err := m.dispatch(); err != nil {
			return &m.run, err
		}
	}
	for _, t := range m.trials {
		if t.paused {
			t.paused, t.Status = false, EndedPaused
			s.OnTrialEnd(t.Number)
		}
	}
	m.run.Clock = m.clock
	for _, t := range m.trials {
		m.run.Trials = append(m.run.Trials, &t.Trial)
	}
	return &m.run, nil
}

func (m *sim) contract(format string, args ...any) error {
	return fmt.Errorf("%w: clock %d: %s", ErrContract, m.clock, fmt.Sprintf(format, args...))
}

// dispatch carries out Next's orders and starts new trials while there is
// room, as the tuner's loop does after every event.
func (m *sim) dispatch() error {
	for guard := 0; ; guard++ {
		if guard > 4*(m.o.NumSamples+m.o.Workers)+16 {
			return m.contract("Next keeps handing out orders")
		}
		more := m.started < m.o.NumSamples
		o, ok := m.s.Next(schedulers.Capacity{CanResume: m.free > 0, MoreTrials: more})
		if ok {
			if err := m.order(o); err != nil {
				return err
			}
			continue
		}
		if m.free > 0 && more {
			m.start()
			continue
		}
		return nil
	}
}

func (m *sim) order(o schedulers.Order) error {
	if o.Trial < 1 || o.Trial > len(m.trials) || !m.trials[o.Trial-1].paused {
		return m.contract("order %s for trial %d, which is not paused", o.Action, o.Trial)
	}
	t := m.trials[o.Trial-1]
	m.run.Events = append(m.run.Events, Event{Clock: m.clock, Trial: t.Number, Iter: t.Iter, Order: true, Decision: o.Decision})
	switch o.Action {
	case schedulers.Stop:
		t.paused, t.Status = false, Stopped
		m.s.OnTrialEnd(t.Number)
	case schedulers.Continue:
		if m.free == 0 {
			return m.contract("resumed trial %d with no room (CanResume was false)", t.Number)
		}
		t.paused = false
		t.Resumes++
		m.free--
		heap.Push(&m.queue, item{m.clock + 1, t.Number})
	default:
		return m.contract("order %s for trial %d: orders are CONTINUE or STOP", o.Action, t.Number)
	}
	return nil
}

func (m *sim) start() {
	m.started++
	n := m.started
	cfg := maps.Clone(m.o.Config(n))
	m.s.OnTrialAdd(n, cfg)
	t := &trial{Trial: Trial{Number: n, Config: cfg, State: m.o.Model.Init(n, cfg)}}
	m.trials = append(m.trials, t)
	m.free--
	heap.Push(&m.queue, item{m.clock + 1, n})
}

// step trains one iteration of t and applies the scheduler's decision.
func (m *sim) step(t *trial) error {
	m.run.Compute++
	if m.o.Fail != nil && m.o.Fail(t.Number, t.Iter+1) {
		m.end(t, Failed)
		return nil
	}
	t.Iter++
	var score float64
	t.State, score = m.o.Model.Step(t.Number, t.Config, t.State, t.Iter)
	every := max(m.o.CheckpointEvery, 1)
	ckpt := m.o.CheckpointEvery >= 0 && t.Iter%every == 0
	if ckpt {
		t.ckpt = &checkpoint{t.Iter, slices.Clone(t.State)}
	}
	m.run.Reports = append(m.run.Reports, Report{Clock: m.clock, Trial: t.Number, Iter: t.Iter, Score: score,
		State: slices.Clone(t.State), Checkpoint: ckpt, Compute: m.run.Compute})
	d := m.s.OnResult(schedulers.Result{Trial: t.Number, Time: float64(t.Iter), Score: score, Checkpoint: ckpt})
	if d.Action != schedulers.Continue || d.Reason != "" {
		m.run.Events = append(m.run.Events, Event{Clock: m.clock, Trial: t.Number, Iter: t.Iter, Decision: d})
	}
	switch d.Action {
	case schedulers.Continue:
		if t.Iter >= m.o.MaxIter {
			m.end(t, Completed)
			return nil
		}
	case schedulers.Stop:
		m.end(t, Stopped)
		return nil
	case schedulers.Pause:
		// The trial goes back to its latest checkpoint, or to the start.
		if t.ckpt != nil {
			t.Iter, t.State = t.ckpt.iter, slices.Clone(t.ckpt.state)
		} else {
			t.Iter, t.State = 0, m.o.Model.Init(t.Number, t.Config)
		}
		t.paused = true
		m.free++
		return nil
	case schedulers.Restart:
		if err := m.restart(t, d.Exploit); err != nil {
			return err
		}
		if t.Iter >= m.o.MaxIter {
			m.end(t, Completed)
			return nil
		}
	default:
		return m.contract("decision %s for trial %d", d.Action, t.Number)
	}
	heap.Push(&m.queue, item{m.clock + 1, t.Number})
	return nil
}

// restart copies the donor's latest checkpoint into t, as the tuner copies
// checkpoint folders, and gives t its new configuration.
func (m *sim) restart(t *trial, e *schedulers.Exploit) error {
	if e == nil {
		return m.contract("RESTART for trial %d without an Exploit", t.Number)
	}
	if e.From < 1 || e.From > len(m.trials) || e.From == t.Number {
		return m.contract("trial %d restarts from trial %d, which is not another trial", t.Number, e.From)
	}
	donor := m.trials[e.From-1]
	if donor.ckpt == nil {
		return m.contract("trial %d restarts from trial %d, which has no checkpoint", t.Number, e.From)
	}
	if float64(donor.ckpt.iter) != e.FromTime {
		return m.contract("trial %d restarts from trial %d's checkpoint at %g, but its latest is at %d", t.Number, e.From, e.FromTime, donor.ckpt.iter)
	}
	state := slices.Clone(donor.ckpt.state)
	m.run.Copies = append(m.run.Copies, Copy{Clock: m.clock, To: t.Number, From: e.From, Iter: donor.ckpt.iter, State: slices.Clone(state)})
	t.Iter, t.State = donor.ckpt.iter, state
	t.ckpt = &checkpoint{donor.ckpt.iter, slices.Clone(state)}
	t.Config = maps.Clone(e.Config)
	t.Restarts++
	return nil
}

// end ends t with status s, telling the scheduler as the tuner does
// (schedulers.EndTrial).
func (m *sim) end(t *trial, s Status) {
	t.Status = s
	m.free++
	schedulers.EndTrial(m.s, t.Number, s == Failed)
}

// item is a trial whose current iteration finishes at clock.
type item struct{ clock, trial int }

// queue orders iterations by clock, then by trial number.
type queue []item

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	if q[i].clock != q[j].clock {
		return q[i].clock < q[j].clock
	}
	return q[i].trial < q[j].trial
}
func (q queue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)   { *q = append(*q, x.(item)) }
func (q *queue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}
