package trainer

import (
	"context"
	"sync"
	"time"
)

// Worker states in WorkerStatus.State.
const (
	WorkerRunning = "RUNNING"
	WorkerExited  = "EXITED"  // returned or exited with status 0
	WorkerFailed  = "FAILED"  // failed, crashed or was killed for its group's failure
	WorkerStopped = "STOPPED" // stopped because its group stopped, paused or restarted
)

// WorkerStatus is one worker of a trial's group as the trainer last saw it.
type WorkerStatus struct {
	// Attempt numbers the start of the trial's group the worker belongs
	// to, from 0 for the first: Spec.Attempts, then one more at each
	// restart or resize of this Run.
	Attempt int
	Rank    int
	// Node names the node it runs on; "" is this one.
	Node string
	// PID is its process id, 0 for a goroutine worker.
	PID int
	// LogPath is the file that keeps its output, "" when none.
	LogPath string
	State   string
	// Steps counts the reports (report lines, for a command) the worker
	// made in this attempt, and StepRate is Steps per second since it
	// started: a worker well below the others' rate is a straggler.
	Steps    int
	StepRate float64
}

// WorkerSink is an optional ability of a Sink: it is told the status of the
// group's workers when an attempt has started them, every few seconds
// while they report, and when the attempt ends. The status is for people
// watching, so its error is ignored: it never fails training.
type WorkerSink interface {
	Workers(ctx context.Context, ws []WorkerStatus) error
}

// workerFlushEvery bounds how often step counts are passed to a WorkerSink.
const workerFlushEvery = 2 * time.Second

// workerTable tracks an attempt's workers for a WorkerSink.
type workerTable struct {
	sink WorkerSink // nil: nobody listens

	mu        sync.Mutex
	ws        []WorkerStatus
	started   []time.Time
	lastFlush time.Time
}

// newWorkerTable tracks the workers in slots of the trial's attempt
// number attempt (WorkerStatus.Attempt).
func newWorkerTable(sink Sink, attempt int, slots []Slot) *workerTable {
	t := &workerTable{ws: make([]WorkerStatus, len(slots)), started: make([]time.Time, len(slots))}
	t.sink, _ = sink.(WorkerSink)
	for i, s := range slots {
		t.ws[i] = WorkerStatus{Attempt: attempt, Rank: i, Node: s.Node}
	}
	return t
}

// start records that rank started as process pid (0 for a goroutine).
func (t *workerTable) start(rank, pid int, logPath string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ws[rank].PID, t.ws[rank].LogPath, t.ws[rank].State = pid, logPath, WorkerRunning
	t.started[rank] = time.Now()
}

// step counts a report of rank and passes the table on when it is due.
func (t *workerTable) step(ctx context.Context, rank int) {
	t.mu.Lock()
	t.ws[rank].Steps++
	due := t.sink != nil && time.Since(t.lastFlush) >= workerFlushEvery
	t.mu.Unlock()
	if due {
		t.flush(ctx)
	}
}

// end records that rank is gone, in state, unless it already ended.
func (t *workerTable) end(rank int, state string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ws[rank].State == WorkerRunning || t.ws[rank].State == "" {
		t.ws[rank].State = state
	}
}

// endAll marks every worker still running as state, when the attempt ended.
func (t *workerTable) endAll(state string) {
	for rank := range t.ws {
		t.end(rank, state)
	}
}

// flush passes the table to the sink.
func (t *workerTable) flush(ctx context.Context) {
	if t.sink == nil {
		return
	}
	t.mu.Lock()
	now := time.Now()
	t.lastFlush = now
	ws := make([]WorkerStatus, 0, len(t.ws))
	for i, w := range t.ws {
		if w.State == "" {
			continue // never started
		}
		if secs := now.Sub(t.started[i]).Seconds(); secs > 0 {
			w.StepRate = float64(w.Steps) / secs
		}
		ws = append(ws, w)
	}
	t.mu.Unlock()
	_ = t.sink.Workers(context.WithoutCancel(ctx), ws)
}
