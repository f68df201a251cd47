package tuner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/workers"
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
func WithCluster(h *workers.Head) Option {
	return func(t *Tuner) {
		t.cluster = h
		t.manager = h.Manager()
	}
}

// builtinProcess is the registered function that runs a built-in model in
// a process worker, for sweeps whose workers run on other nodes. The
// trainer's config reaches it under builtinConfigKey in the trial's
// configuration, as JSON.
const (
	builtinProcess   = "gotune.builtin"
	builtinConfigKey = "gotune.trainer"
)

func init() { trainer.Register(builtinProcess, runBuiltin) }

func runBuiltin(ctx context.Context, w *trainer.Worker) error {
	var cfg trainer.Config
	if err := json.Unmarshal([]byte(w.String(builtinConfigKey, "")), &cfg); err != nil {
		return trainer.Permanent(fmt.Errorf("the built-in model's configuration (%s): %w", builtinConfigKey, err))
	}
	train, err := trainer.Builtin(cfg)
	if err != nil {
		return trainer.Permanent(err)
	}
	return train(ctx, w)
}

// useCluster prepares a tuner with a cluster once New has chosen what its
// trials run: a built-in model moves to process workers, and a Go
// training function is refused.
func (t *Tuner) useCluster(builtin bool) error {
	if t.cluster == nil {
		return nil
	}
	if !builtin {
		if t.train != nil {
			return &ConfigError{Key: "trainer", Err: errors.New("a Go training function runs in this process and cannot use the cluster's nodes: register it with trainer.Register and use WithWorkerProcess")}
		}
		return nil
	}
	cfg := t.cfg.Trainer
	for _, p := range []*string{&cfg.Dataset, &cfg.Split} {
		if *p != "" {
			abs, err := filepath.Abs(*p)
			if err != nil {
				return &ConfigError{Key: "trainer.dataset", Err: err}
			}
			*p = abs
		}
	}
	data, err := json.Marshal(cfg)
	if err != nil {
		return &ConfigError{Key: "trainer", Err: err}
	}
	t.builtin = string(data)
	t.process, t.train = builtinProcess, nil
	return nil
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
	if t.builtin != "" {
		config := make(map[string]any, len(spec.Config)+1)
		for k, v := range spec.Config {
			config[k] = v
		}
		config[builtinConfigKey] = t.builtin
		spec.Config = config
	}
}

// clusterPlacer places through the manager and starts each worker on its
// node.
type clusterPlacer struct {
	managerPlacer
	h *workers.Head
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
	h *workers.Head
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
