package tuner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

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
		Placer:      poolPlacer{pool: t.pool, per: workers.Resources{CPUs: tc.Scaling.CPUs()}},
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
	dir := filepath.Join(t.checkpointRoot(), t.cfg.Name, fmt.Sprintf("trial_%d", number))
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

func (t *Tuner) logRoot() string { return filepath.Join(t.dataRoot(), "logs") }

// trialCheckpoints commits a trial's checkpoints into its folder.
type trialCheckpoints struct{ dir *storage.CheckpointDir }

func (c trialCheckpoints) Commit(iteration int, metrics map[string]float64, shards []string) (string, error) {
	info, _, err := c.dir.Commit(iteration, metrics, shards)
	return info.Path, err
}

// poolPlacer places a trial's group on the tuner's pool: all of its
// smallest size at once, then as many more workers as fit.
type poolPlacer struct {
	pool *workers.Pool
	per  workers.Resources
}

func (p poolPlacer) Place(ctx context.Context, lo, hi int) (trainer.Placement, error) {
	alloc, err := p.pool.Acquire(ctx, lo, p.per)
	if err != nil {
		return nil, err
	}
	pl := &poolPlacement{p: p, allocs: []*workers.Allocation{alloc}, n: lo}
	pl.Grow(hi - lo)
	return pl, nil
}

// poolPlacement is a group's workers reserved on the pool, one allocation
// for the first lo and one per worker added since.
type poolPlacement struct {
	p      poolPlacer
	allocs []*workers.Allocation
	n      int
}

func (pl *poolPlacement) Slots() []trainer.Slot { return make([]trainer.Slot, pl.n) }

// Grow takes what fits now: Acquire with a context that has already ended
// grants only a request that needs no waiting, behind no waiting group.
func (pl *poolPlacement) Grow(k int) int {
	now, cancel := context.WithCancel(context.Background())
	cancel()
	added := 0
	for added < k {
		a, err := pl.p.pool.Acquire(now, 1, pl.p.per)
		if err != nil {
			break
		}
		pl.allocs = append(pl.allocs, a)
		added++
	}
	pl.n += added
	return added
}

func (pl *poolPlacement) Release() {
	for _, a := range pl.allocs {
		a.Release()
	}
	pl.allocs, pl.n = nil, 0
}
