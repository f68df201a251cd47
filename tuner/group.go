package tuner

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/workers"
)

// EventObserver is an Observer that also wants to hear of restarts and
// resizes of trials' groups. Its method is called from the tuner's loop
// goroutine, like the Observer's.
type EventObserver interface {
	Observer
	OnEvent(trial int, e trainer.Event)
}

// groupSpec builds the trainer's spec of a trial's group: what it runs,
// with the trial's current configuration, from its resume point, placed by
// the resource manager, committing checkpoints into the trial's folder
// (TrialDir) and writing its workers' logs in the folder's logs/.
func (t *Tuner) groupSpec(tr *trialRun) trainer.Spec {
	tc := t.cfg.Trainer
	spec := trainer.Spec{
		Experiment:      t.cfg.Name,
		Trial:           tr.number,
		Seed:            trialSeed(t.cfg.Seed, tr.number),
		Config:          tr.config,
		Scaling:         tc.Scaling,
		Failure:         tc.Failure,
		KillTimeout:     tc.Kill(),
		Placer:          managerPlacer{m: t.manager, req: t.groupRequest(tr.number), trial: tr.number, watch: t.gpus, db: t.db, trialID: tr.record.ID()},
		LogDir:          t.logDir(tr.number),
		TrialDir:        absPath(t.TrialDir(tr.number)),
		Checkpoints:     tr.ckpts,
		ScratchDir:      tr.ckpts.dir.ScratchDir(),
		ResumeDir:       tr.resumeDir,
		ResumeIteration: tr.resumeIter,
		Delivered:       tr.iterations,
		StepKey:         t.cfg.Scheduler.TimeAttr,
		LastStep:        tr.lastStep,
		Metrics:         tc.Metrics,
		Objectives:      t.cfg.Objective.metricNames(),
		Restarts:        tr.restarts,
		Attempts:        tr.attempts,
		Env:             append(slices.Clip(t.env), tc.EnvList()...),
		OnDiskFull:      t.space.notify,
		Inspector:       t.inspectors.of(tr.number),
	}
	spec.LogMaxBytes, spec.LogKeep = tc.LogLimits()
	switch {
	case t.process != "":
		spec.Process = t.process
	case tc.Command != nil:
		spec.Command, spec.Workdir, spec.PathBase = tc.Command, tc.Workdir, tc.PathBase
		spec.Env = append(slices.Clip(t.env), t.cmdEnv...)
	default:
		spec.Train = t.train
	}
	t.clusterSpec(&spec)
	return spec
}

// stepOf is the step a report carries, which the trainer places a
// restarted group's reports by (see trainer.ReportStep), or last when the
// report has none.
func (t *Tuner) stepOf(metrics map[string]float64, last *trainer.Step) *trainer.Step {
	if step, ok := trainer.ReportStep(metrics, t.cfg.Scheduler.TimeAttr); ok {
		return &step
	}
	return last
}

// absPath is path made absolute, or path when the working directory is gone.
func absPath(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// openCheckpoints opens trial rec's checkpoint folder and learns which of
// its checkpoints the database records, so that retention marks them
// deleted. A fresh trial, just created, has none: the database is not asked.
func (t *Tuner) openCheckpoints(ctx context.Context, rec *storage.Trial, fresh bool) (*trialCheckpoints, error) {
	cd, err := storage.OpenCheckpointDir(t.TrialDir(rec.Number), t.retention())
	if err != nil {
		return nil, err
	}
	c := &trialCheckpoints{db: t.db, trialID: rec.ID(), dir: cd, space: t.space, ids: map[string]int64{}}
	if fresh {
		return c, nil
	}
	records, err := t.db.CheckpointRecords(ctx, t.cfg.Name, rec.Number)
	if err != nil {
		return nil, err
	}
	for _, r := range records {
		if r.Kept() {
			c.ids[r.Path] = r.ID
		}
	}
	return c, nil
}

// retention is the trial checkpoints' retention: the checkpoint config,
// ordered like the objective when it scores by the objective's metric.
func (t *Tuner) retention() storage.Retention {
	cc := t.cfg.Trainer.Checkpoint
	order := cc.Order
	if order == "" && cc.ScoreAttribute == t.cfg.Objective.Metric {
		order = t.cfg.Objective.Mode
	}
	return storage.Retention{NumToKeep: cc.NumToKeep, ScoreAttribute: cc.ScoreAttribute, Order: order}
}

// dataRoot is the folder of the results database; checkpoints and logs go
// beside it. It is absolute (see New and storage.Open).
func (t *Tuner) dataRoot() string {
	if t.db != nil && t.db.Path() != "" {
		return filepath.Dir(t.db.Path())
	}
	return filepath.Dir(t.cfg.Storage)
}

func (t *Tuner) checkpointRoot() string {
	if t.checkpoints != "" {
		return t.checkpoints
	}
	return filepath.Join(t.dataRoot(), "checkpoints")
}

// TrialDir is trial number's own folder,
// <checkpoint root>/<experiment>/trial_<n>: its committed checkpoints, its
// workers' logs (logs/worker_<rank>.log), per-trial files such as a CSV of
// its reports, and whatever a command writes in $GOTUNE_TRIAL_DIR. It
// exists while the trial's group runs (its workers' scratch folder is
// inside); a log, a checkpoint or a file is created only when something is
// written into it, and a trial that ends with nothing in its folder leaves
// no folder behind.
func (t *Tuner) TrialDir(number int) string {
	return filepath.Join(t.checkpointRoot(), t.cfg.Name, fmt.Sprintf("trial_%d", number))
}

// logDir is the folder of trial number's workers' logs (trainer.Spec.LogDir).
func (t *Tuner) logDir(number int) string {
	return filepath.Join(t.TrialDir(number), "logs")
}

// experimentFolders are the experiment's folders on disk: its trials'.
func (t *Tuner) experimentFolders() []string {
	return []string{filepath.Join(t.checkpointRoot(), t.cfg.Name)}
}

// trialCheckpoints commits a trial's checkpoints into its folder and
// records them in the database: every committed one, and which the
// retention removed. The trial's group commits from its goroutine, the loop
// (a PBT exploit) while no group runs.
type trialCheckpoints struct {
	db      *storage.DB
	trialID int64
	dir     *storage.CheckpointDir
	// space makes commits wait while the disk is full.
	space *diskWait

	mu  sync.Mutex
	ids map[string]int64 // committed path -> record id
}

// Commit implements trainer.CheckpointStore.
func (c *trialCheckpoints) Commit(iteration int, metrics map[string]float64, shards []string) (string, error) {
	var info storage.CheckpointInfo
	var removed []storage.CheckpointInfo
	err := c.space.retry("commit the checkpoint of report "+strconv.Itoa(iteration), func() (err error) {
		info, removed, err = c.dir.Commit(iteration, metrics, shards)
		return err
	})
	if err != nil {
		return "", err
	}
	return info.Path, c.recordCommit(info, removed)
}

// commitCopy commits a copy of another trial's checkpoint folder.
func (c *trialCheckpoints) commitCopy(iteration int, metrics map[string]float64, from string) (storage.CheckpointInfo, error) {
	var info storage.CheckpointInfo
	var removed []storage.CheckpointInfo
	err := c.space.retry("copy checkpoint "+from, func() (err error) {
		info, removed, err = c.dir.CommitCopy(iteration, metrics, from)
		return err
	})
	if err != nil {
		return info, err
	}
	return info, c.recordCommit(info, removed)
}

// discardAfter removes the checkpoints newer than iteration (see
// storage.CheckpointDir.DiscardAfter) and marks them deleted.
func (c *trialCheckpoints) discardAfter(iteration int) error {
	gone, err := c.dir.DiscardAfter(iteration)
	if err != nil {
		return err
	}
	return c.markDeleted(gone)
}

func (c *trialCheckpoints) recordCommit(info storage.CheckpointInfo, removed []storage.CheckpointInfo) error {
	id, err := c.db.RecordCheckpoint(context.Background(), c.trialID, info.Iteration, info.Path, info.Metrics)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.ids[info.Path] = id
	c.mu.Unlock()
	return c.markDeleted(removed)
}

// markDeleted records that the files of removed checkpoints are gone.
func (c *trialCheckpoints) markDeleted(removed []storage.CheckpointInfo) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range removed {
		if id, ok := c.ids[r.Path]; ok {
			if err := c.db.MarkCheckpointDeleted(context.Background(), id); err != nil {
				return err
			}
			delete(c.ids, r.Path)
		}
	}
	return nil
}

// groupRequest is what a trial's group asks the resource manager for;
// trial 0 names no trial.
func (t *Tuner) groupRequest(trial int) workers.Request {
	sc := t.cfg.Trainer.Scaling
	r := workers.Request{
		Workers:   sc.Workers(),
		Per:       workers.Resources{CPUs: sc.CPUs(), GPUs: sc.GPUsPerWorker, Memory: sc.MemoryPerWorker},
		Placement: sc.Placement,
	}
	if trial > 0 {
		r.Name = fmt.Sprintf("trial %d", trial)
	}
	return r
}

// groupsThatFit is how many of the trials' groups (at their smallest size)
// the manager's nodes hold at once, at least 1. It bounds the trials that
// run at once when max_concurrent is not set.
func (t *Tuner) groupsThatFit() int {
	req := t.groupRequest(0)
	lo := req.MinWorkers
	if lo == 0 {
		lo = req.Workers
	}
	per := req.Per
	total := 0
	for _, n := range t.manager.Nodes() {
		fit := int(n.CPUs / per.CPUs)
		switch {
		case per.GPUs > 0 && per.GPUs < 1:
			fit = min(fit, len(n.GPUs)*int(1/per.GPUs))
		case per.GPUs >= 1:
			fit = min(fit, len(n.GPUs)/int(per.GPUs))
		}
		if per.Memory > 0 && n.Memory > 0 {
			fit = min(fit, int(n.Memory/per.Memory))
		}
		total += fit
	}
	return max(total/lo, 1)
}

// managerPlacer places a trial's group through the resource manager,
// shows its allocation to the GPU watch, and records the trial RUNNING
// once its group has its workers (it is PENDING while it waits for them).
type managerPlacer struct {
	m       *workers.Manager
	req     workers.Request
	trial   int
	watch   *gpuWatch
	db      *storage.DB
	trialID int64
}

// Place asks the manager for hi workers, granted once lo fit.
func (p managerPlacer) Place(ctx context.Context, lo, hi int) (trainer.Placement, error) {
	req := p.req
	req.Workers, req.MinWorkers = hi, 0
	if lo < hi {
		req.MinWorkers = lo
	}
	a, err := p.m.Acquire(ctx, req)
	if err != nil {
		return nil, err
	}
	if err := p.db.QueueTrialRunning(p.trialID); err != nil {
		a.Release()
		return nil, err
	}
	p.watch.placed(p.trial, a)
	return managedPlacement{a: a, trial: p.trial, watch: p.watch}, nil
}

// managedPlacement is a group's allocation from the resource manager.
type managedPlacement struct {
	a     *workers.Allocation
	trial int
	watch *gpuWatch
}

func (p managedPlacement) Slots() []trainer.Slot {
	ws := p.a.Workers()
	slots := make([]trainer.Slot, len(ws))
	for i, w := range ws {
		slots[i].Node = w.Node
		if w.CUDAVisibleDevices != "" {
			slots[i].GPUs = strings.Split(w.CUDAVisibleDevices, ",")
		}
	}
	return slots
}

// Grow adds what fits now; the manager grows an allocation toward the
// size the group asked for, which is at most n more workers.
func (p managedPlacement) Grow(int) int {
	k, _ := p.a.Grow() // the only error is growing a released group: nothing added
	return k
}

func (p managedPlacement) Release() {
	p.watch.released(p.trial, p.a)
	p.a.Release()
}
