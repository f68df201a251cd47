package tuner

import (
	"context"
	"sync"

	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/workers"
)

// gpuWatch ties GPU samples to the workers using the devices: it knows each
// running trial's allocation and the database ids of its workers, and
// records what a sampler reads. Methods are safe for concurrent use; the
// zero value records nothing until started.
type gpuWatch struct {
	db    *storage.DB
	expID int64
	// index maps a node's device VisibleID to its NVML index.
	index map[string]map[string]int

	mu     sync.Mutex
	groups map[int]*watchedGroup // by trial number
}

type watchedGroup struct {
	alloc   *workers.Allocation
	workers map[int]int64 // rank -> worker id in the database
}

func newGPUWatch(db *storage.DB, expID int64, nodes []workers.Node) *gpuWatch {
	w := &gpuWatch{db: db, expID: expID, index: map[string]map[string]int{}, groups: map[int]*watchedGroup{}}
	for _, n := range nodes {
		w.index[n.Name] = map[string]int{}
		for _, g := range n.GPUs {
			w.index[n.Name][g.VisibleID()] = g.Index
		}
	}
	return w
}

// placed registers the allocation of a trial's group.
func (w *gpuWatch) placed(trial int, a *workers.Allocation) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.groups[trial] = &watchedGroup{alloc: a, workers: map[int]int64{}}
}

// released forgets a trial's group, unless a newer allocation replaced it.
func (w *gpuWatch) released(trial int, a *workers.Allocation) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if g := w.groups[trial]; g != nil && g.alloc == a {
		delete(w.groups, trial)
	}
}

// worker learns the database id of a trial's worker.
func (w *gpuWatch) worker(trial, rank int, id int64) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if g := w.groups[trial]; g != nil {
		g.workers[rank] = id
	}
}

// workerID is the database id of a running trial's worker, 0 when unknown.
func (w *gpuWatch) workerID(trial, rank int) int64 {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if g := w.groups[trial]; g != nil {
		return g.workers[rank]
	}
	return 0
}

// record stores a batch of samples, each device's sample once per worker
// using it; it runs on the sampler's goroutine.
func (w *gpuWatch) record(samples []workers.GPUSample) {
	var rows []storage.ResourceSample
	w.mu.Lock()
	for _, g := range w.groups {
		for _, s := range g.alloc.Attribute(samples) {
			index, ok := w.index[s.Node][s.GPU]
			if !ok {
				continue
			}
			row := storage.ResourceSample{Time: s.Time, Node: s.Node, WorkerID: g.workers[s.Worker], GPU: index,
				MemoryUsed: int64(s.MemoryUsed), MemoryTotal: int64(s.MemoryTotal)}
			if s.HasUtilization {
				row.Util = s.Utilization
			}
			rows = append(rows, row)
		}
	}
	w.mu.Unlock()
	if len(rows) > 0 {
		// A sample that cannot be recorded is lost; the sweep goes on.
		_ = w.db.AddResourceSamples(context.Background(), w.expID, rows)
	}
}

// recordWorkers records the status of a trial's workers; it runs in the
// trial's goroutine, which goes on without waiting for the commit.
func (t *Tuner) recordWorkers(ctx context.Context, tr *trialRun, ws []trainer.WorkerStatus) error {
	recs := make([]storage.WorkerRecord, len(ws))
	for i, w := range ws {
		recs[i] = storage.WorkerRecord{Attempt: w.Attempt, Rank: w.Rank, Node: w.Node, PID: w.PID, Status: w.State, LogPath: w.LogPath, StepRate: w.StepRate}
	}
	if err := t.db.QueueWorkers(tr.record.ID(), recs, func(rank int, id int64) { t.gpus.worker(tr.number, rank, id) }); err != nil {
		return err
	}
	return t.recordStragglers(ctx, tr, ws)
}
