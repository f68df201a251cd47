package tuner

import (
	"context"
	"path/filepath"

	"github.com/gotune/gotune/cluster"
	"github.com/gotune/gotune/trainer"
)

// WithCluster runs the sweep across the nodes of the agents that join h as
// well as this one: groups are placed by h's manager (instead of a manager
// of the config's Resources, whose nodes h's manager should hold) and
// their worker processes start on the nodes they are placed on. Workers
// must be processes: a command, a function given to WithWorkerProcess, or
// a built-in model, which then runs in process workers of this program
// (whose main must call trainer.WorkerMain first, as gotune's does; the
// agents must run the same program). A Go training function given to
// WithTrainFunc cannot leave this process and is refused.
//
// A trial whose worker is lost with its node restarts from its latest
// checkpoint, as after any failure (so set failure.max_failures), on the
// nodes left: an elastic group shrinks, a fixed one waits until it fits.
func WithCluster(h *cluster.Head) Option {
	return func(t *Tuner) {
		t.cluster = h
		t.manager = h.Manager()
	}
}

// builtinEnv is the variable that tells trainer.BuiltinProcess workers
// which model to train, with the data set's paths made absolute so that a
// worker started in another folder, or on another node that shares them,
// finds the files.
func builtinEnv(cfg trainer.Config) (string, error) {
	for _, p := range []*string{&cfg.Dataset, &cfg.Split} {
		if *p != "" {
			abs, err := filepath.Abs(cfg.Path(*p))
			if err != nil {
				return "", &ConfigError{Key: "trainer.dataset", Err: err}
			}
			*p = abs
		}
	}
	env, err := trainer.BuiltinEnv(cfg)
	if err != nil {
		return "", &ConfigError{Key: "trainer", Err: err}
	}
	return env, nil
}

// clusterSpec places a trial's group across the cluster's nodes.
func (t *Tuner) clusterSpec(spec *trainer.Spec) {
	if t.cluster == nil {
		return
	}
	spec.Launcher = t.cluster.Local()
	if p, ok := spec.Placer.(managerPlacer); ok {
		spec.Placer = clusterPlacer{p, t.cluster}
	}
}

// clusterPlacer places through the manager and starts each worker on its
// node.
type clusterPlacer struct {
	managerPlacer
	h *cluster.Head
}

func (p clusterPlacer) Place(ctx context.Context, lo, hi int) (trainer.Placement, error) {
	pl, err := p.managerPlacer.Place(ctx, lo, hi)
	if err != nil {
		return nil, err
	}
	return clusterPlacement{pl.(managedPlacement), p.h}, nil
}

type clusterPlacement struct {
	managedPlacement
	h *cluster.Head
}

func (p clusterPlacement) Slots() []trainer.Slot {
	slots := p.managedPlacement.Slots()
	for i, w := range p.a.Workers() {
		if l := p.h.Launcher(w.NodeIndex); l != nil {
			slots[i].Launcher = l
		}
	}
	return slots
}
