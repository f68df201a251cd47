package tuner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

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

// groupSpec builds the trainer's spec of a trial's group: what it runs, its
// placement on the tuner's pool, and its checkpoint folder,
// <root>/<experiment>/trial_<n>, with logs under the log root likewise.
// done must be called once the group's run has ended.
func (t *Tuner) groupSpec(number int, config map[string]any) (trainer.Spec, func(), error) {
	tc := t.cfg.Trainer
	spec := trainer.Spec{
		Experiment:  t.cfg.Name,
		Trial:       number,
		Seed:        trialSeed(t.cfg.Seed, number),
		Config:      config,
		Scaling:     tc.Scaling,
		Failure:     tc.Failure,
		KillTimeout: tc.Kill(),
		Placer:      managerPlacer{m: t.manager, req: t.groupRequest(number)},
		LogDir:      filepath.Join(t.logRoot(), t.cfg.Name, fmt.Sprintf("trial_%d", number)),
	}
	switch {
	case t.process != "":
		spec.Process = t.process
	case tc.Command != nil:
		spec.Command, spec.Workdir = tc.Command, tc.Workdir
	default:
		spec.Train = t.train
	}
	t.clusterSpec(&spec)
	dir := t.TrialDir(number)
	cd, err := storage.OpenCheckpointDir(dir, t.retention())
	if err != nil {
		return spec, nil, err
	}
	spec.Checkpoints = trialCheckpoints{cd}
	spec.ScratchDir = cd.ScratchDir()
	// A trial that never checkpointed leaves no empty folder behind.
	done := func() { os.Remove(dir) }
	return spec, done, nil
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
// beside it.
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

// TrialDir is the folder of trial number's committed checkpoints,
// <checkpoint root>/<experiment>/trial_<n>: per-trial files such as a CSV
// of its reports go beside them. It exists once the trial has written
// something there.
func (t *Tuner) TrialDir(number int) string {
	return filepath.Join(t.checkpointRoot(), t.cfg.Name, fmt.Sprintf("trial_%d", number))
}

func (t *Tuner) logRoot() string { return filepath.Join(t.dataRoot(), "logs") }

// trialCheckpoints commits a trial's checkpoints into its folder.
type trialCheckpoints struct{ dir *storage.CheckpointDir }

func (c trialCheckpoints) Commit(iteration int, metrics map[string]float64, shards []string) (string, error) {
	info, _, err := c.dir.Commit(iteration, metrics, shards)
	return info.Path, err
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

// managerPlacer places a trial's group through the resource manager.
type managerPlacer struct {
	m   *workers.Manager
	req workers.Request
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
	return managedPlacement{a}, nil
}

// managedPlacement is a group's allocation from the resource manager.
type managedPlacement struct{ a *workers.Allocation }

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

func (p managedPlacement) Release() { p.a.Release() }
