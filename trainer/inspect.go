package trainer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gotune/gotune/workers"
)

// WorkerStack is one worker's stack at one moment, or why it could not be
// taken.
type WorkerStack struct {
	Rank int    `json:"rank"`
	Node string `json:"node,omitempty"`
	// PID is the worker's process id, 0 for a goroutine worker.
	PID int `json:"pid,omitempty"`
	// Method says how the stack was taken: one of workers.StackDumped,
	// StackGDB, StackProc, StackGoroutines.
	Method string `json:"method,omitempty"`
	Text   string `json:"text,omitempty"`
	// Error is set instead of Text when the stack could not be taken.
	Error string `json:"error,omitempty"`
}

// ErrNotRunning is the error of an Inspector whose group runs no workers
// at the moment (before its first start, between attempts, after Run).
var ErrNotRunning = errors.New("the trial's group is not running")

// Inspector reaches the workers of a running group, wherever they run, to
// see what they are doing. Set Spec.Inspector to one before Run; its
// methods may be called from any goroutine while Run runs, and follow the
// group's restarts.
type Inspector struct {
	mu sync.Mutex
	a  *attempt
}

// attach makes a the attempt the inspector reaches.
func (in *Inspector) attach(a *attempt) {
	if in == nil {
		return
	}
	in.mu.Lock()
	in.a = a
	in.mu.Unlock()
}

// Stacks takes the current stack of the worker of rank, or of every worker
// when rank is negative, in rank order. A worker whose stack cannot be
// taken has its Error set; Stacks fails only when the group is not running
// or has no such rank.
func (in *Inspector) Stacks(ctx context.Context, rank int) ([]WorkerStack, error) {
	a, ps, err := in.runningProbes()
	if err != nil {
		return nil, err
	}
	if rank >= a.size() {
		return nil, fmt.Errorf("no rank %d: the group has %d workers", rank, a.size())
	}
	return a.stacksOf(ctx, ps, rank), nil
}

// probe reaches one running worker: *workers.Process for a process
// worker, goroutineProbe for a goroutine.
type probe interface {
	Stack(ctx context.Context) (workers.Stack, error)
	Usage(ctx context.Context) (workers.ProcUsage, error)
}

// setProbe says how to reach rank while it runs.
func (a *attempt) setProbe(rank int, p probe) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.probes == nil {
		a.probes = make([]probe, a.size())
	}
	a.probes[rank] = p
}

// runningProbes returns the attempt's probes by rank (nil: not started),
// or ErrNotRunning.
func (in *Inspector) runningProbes() (*attempt, []probe, error) {
	in.mu.Lock()
	a := in.a
	in.mu.Unlock()
	if a == nil || a.ended().kind != endNone {
		return nil, nil, ErrNotRunning
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a, append([]probe(nil), a.probes...), nil
}

// WorkerUsage is what one process worker and the processes it started use
// at one moment (see workers.ProcUsage).
type WorkerUsage struct {
	Rank int
	Node string
	workers.ProcUsage
}

// Usage reads what each of the group's process workers uses now, in rank
// order; goroutine workers, which share the caller's process, and workers
// whose usage cannot be read are left out.
func (in *Inspector) Usage(ctx context.Context) ([]WorkerUsage, error) {
	a, ps, err := in.runningProbes()
	if err != nil {
		return nil, err
	}
	var out []WorkerUsage
	for rank, p := range ps {
		if p == nil {
			continue
		}
		if u, err := p.Usage(ctx); err == nil {
			out = append(out, WorkerUsage{Rank: rank, Node: a.slots[rank].Node, ProcUsage: u})
		}
	}
	return out, nil
}

// stacksOf takes the stacks of rank, or of every rank when rank < 0, all
// at once, through the probes ps.
func (a *attempt) stacksOf(ctx context.Context, ps []probe, rank int) []WorkerStack {
	lo, hi := 0, a.size()
	if rank >= 0 {
		lo, hi = rank, rank+1
	}
	out := make([]WorkerStack, hi-lo)
	var wg sync.WaitGroup
	for r := lo; r < hi; r++ {
		ws := &out[r-lo]
		ws.Rank, ws.Node = r, a.slots[r].Node
		if r >= len(ps) || ps[r] == nil {
			ws.Error = "the worker has not started"
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := ps[r].Stack(ctx)
			if err != nil {
				ws.Error = err.Error()
				return
			}
			ws.PID, ws.Method, ws.Text = st.PID, st.Method, st.Text
		}()
	}
	wg.Wait()
	return out
}

// hungStacksTimeout bounds how long a hung group's stacks are waited for
// before it is restarted.
const hungStacksTimeout = 15 * time.Second

// recordHung tells the EventSink that the attempt hung, with its workers'
// stacks, before the attempt is ended for it.
func (a *attempt) recordHung(cause error) {
	if a.r.events == nil {
		return
	}
	ctx, cancel := context.WithTimeout(a.ctx, hungStacksTimeout)
	defer cancel()
	a.mu.Lock()
	ps := append([]probe(nil), a.probes...)
	a.mu.Unlock()
	// The runner's checkpoint and report counts belong to the delivering
	// goroutine: the restart event that follows tells them.
	e := Event{Kind: EventHung, Time: time.Now(), Cause: cause.Error(), Attempt: a.trialAttempt(), Workers: a.size(),
		Stacks: a.stacksOf(ctx, ps, -1)}
	_ = a.r.events.Event(context.WithoutCancel(a.ctx), e) // the restart that follows is what counts
}

// Labels of a goroutine worker, so that its goroutines (and those it
// starts) can be told apart in this process's goroutine profile.
const (
	labelExperiment = "gotune_experiment"
	labelTrial      = "gotune_trial"
	labelAttempt    = "gotune_attempt"
	labelRank       = "gotune_rank"
)

// workerLabels are the profile labels of a goroutine worker.
func (a *attempt) workerLabels(rank int) pprof.LabelSet {
	return pprof.Labels(labelExperiment, a.r.spec.Experiment, labelTrial, strconv.Itoa(a.r.spec.Trial),
		labelAttempt, strconv.Itoa(a.trialAttempt()), labelRank, strconv.Itoa(rank))
}

// goroutineProbe reaches a goroutine worker: its stack is that of the
// goroutines labelled with its labels (want, as pairs), in this process's
// goroutine profile.
type goroutineProbe struct{ want []string }

func (a *attempt) goroutineProbe(rank int) goroutineProbe {
	return goroutineProbe{[]string{labelExperiment, a.r.spec.Experiment, labelTrial, strconv.Itoa(a.r.spec.Trial),
		labelAttempt, strconv.Itoa(a.trialAttempt()), labelRank, strconv.Itoa(rank)}}
}

func (g goroutineProbe) Stack(context.Context) (workers.Stack, error) {
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		return workers.Stack{}, err
	}
	return workers.Stack{Method: workers.StackGoroutines, Text: labelledStacks(b.String(), g.want)}, nil
}

// errSharedProcess is the usage of a goroutine worker.
var errSharedProcess = errors.New("a goroutine worker shares the tuner's process")

func (goroutineProbe) Usage(context.Context) (workers.ProcUsage, error) {
	return workers.ProcUsage{}, errSharedProcess
}

// labelledStacks keeps the records of a goroutine profile in its debug=1
// text form whose labels hold every key and value of kv (pairs).
func labelledStacks(profile string, kv []string) string {
	var b strings.Builder
	for _, rec := range strings.Split(profile, "\n\n") {
		labels := ""
		for _, line := range strings.Split(rec, "\n") {
			if l, ok := strings.CutPrefix(line, "# labels: "); ok {
				labels = l
			}
		}
		match := labels != ""
		for i := 0; match && i+1 < len(kv); i += 2 {
			match = strings.Contains(labels, strconv.Quote(kv[i])+":"+strconv.Quote(kv[i+1]))
		}
		if match {
			b.WriteString(strings.TrimSpace(rec))
			b.WriteString("\n\n")
		}
	}
	return b.String()
}
