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
	in.mu.Lock()
	a := in.a
	in.mu.Unlock()
	if a == nil || a.ended().kind != endNone {
		return nil, ErrNotRunning
	}
	if rank >= a.size() {
		return nil, fmt.Errorf("no rank %d: the group has %d workers", rank, a.size())
	}
	return a.stacks(ctx, rank), nil
}

// stacker takes one worker's stack.
type stacker func(ctx context.Context) (workers.Stack, error)

// setStacker says how to take rank's stack while it runs.
func (a *attempt) setStacker(rank int, f stacker) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stackers == nil {
		a.stackers = make([]stacker, a.size())
	}
	a.stackers[rank] = f
}

// stacks takes the stacks of rank, or of every rank when rank < 0, all at
// once.
func (a *attempt) stacks(ctx context.Context, rank int) []WorkerStack {
	a.mu.Lock()
	fs := append([]stacker(nil), a.stackers...)
	a.mu.Unlock()
	lo, hi := 0, a.size()
	if rank >= 0 {
		lo, hi = rank, rank+1
	}
	out := make([]WorkerStack, hi-lo)
	var wg sync.WaitGroup
	for r := lo; r < hi; r++ {
		ws := &out[r-lo]
		ws.Rank, ws.Node = r, a.slots[r].Node
		if r >= len(fs) || fs[r] == nil {
			ws.Error = "the worker has not started"
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := fs[r](ctx)
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
	// The runner's checkpoint and report counts belong to the delivering
	// goroutine: the restart event that follows tells them.
	e := Event{Kind: EventHung, Time: time.Now(), Cause: cause.Error(), Attempt: a.number, Workers: a.size(),
		Stacks: a.stacks(ctx, -1)}
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
		labelAttempt, strconv.Itoa(a.number), labelRank, strconv.Itoa(rank))
}

// goroutineStacker takes the stacks of the goroutines labelled with rank's
// labels, from this process's goroutine profile.
func (a *attempt) goroutineStacker(rank int) stacker {
	want := []string{labelExperiment, a.r.spec.Experiment, labelTrial, strconv.Itoa(a.r.spec.Trial),
		labelAttempt, strconv.Itoa(a.number), labelRank, strconv.Itoa(rank)}
	return func(context.Context) (workers.Stack, error) {
		var b bytes.Buffer
		if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
			return workers.Stack{}, err
		}
		return workers.Stack{Method: workers.StackGoroutines, Text: labelledStacks(b.String(), want)}, nil
	}
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
