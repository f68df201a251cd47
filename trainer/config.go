package trainer

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gotune/gotune/workers"
)

// Config describes what a trial trains and on how many workers. Exactly one
// of Model (a built-in model) or a Go training function given to the tuner
// says what runs.
type Config struct {
	// Model names a built-in model: see Models.
	Model string `toml:"model" json:"model,omitempty"`
	// Dataset is the CSV file a built-in model trains on.
	Dataset string `toml:"dataset" json:"dataset,omitempty"`
	// Label is the CSV column a built-in model predicts; default "label".
	Label string `toml:"label" json:"label,omitempty"`
	// ValFraction is the share of the rows held out for validation, chosen
	// by a shuffle with a fixed seed (the same rows in every trial); default
	// 0.2. It cannot be combined with Split.
	ValFraction float64 `toml:"val_fraction" json:"val_fraction,omitempty"`
	// Split names a CSV file that assigns every row of Dataset to training
	// or validation (header "row,split"; one line per data row: its 0-based
	// index and "train" or "val"), to compare with another system on the
	// same rows. Empty means a random split by ValFraction.
	Split string `toml:"split" json:"split,omitempty"`
	// Features lists the CSV columns a built-in model reads as inputs;
	// empty means every column but Label.
	Features []string `toml:"features" json:"features,omitempty"`
	// Scale is how a built-in model scales its inputs, fitted on the
	// training rows: "standard" (the default: zero mean, unit variance),
	// "minmax" (to [0, 1]) or "none".
	Scale string `toml:"scale" json:"scale,omitempty"`

	Scaling ScalingConfig `toml:"scaling" json:"scaling"`
}

// ScalingConfig sizes a trial's training group.
type ScalingConfig struct {
	// NumWorkers is the number of workers in the group; 0 means 1.
	NumWorkers int `toml:"num_workers" json:"num_workers,omitempty"`
	// CPUsPerWorker is the CPUs reserved for each worker; 0 means 1.
	// Fractions let several light workers share a core.
	CPUsPerWorker float64 `toml:"cpus_per_worker" json:"cpus_per_worker,omitempty"`
	// GPUsPerWorker is the GPUs reserved for each worker; 0 means none.
	// Below 1 it is a share of one device (workers whose shares add up to
	// at most 1 share a device and see the same one); from 1 up it must be
	// whole.
	GPUsPerWorker float64 `toml:"gpus_per_worker" json:"gpus_per_worker,omitempty"`
	// MemoryPerWorker is the host memory reserved for each worker, as in
	// "4GiB"; 0 means none is accounted.
	MemoryPerWorker workers.Bytes `toml:"memory_per_worker" json:"memory_per_worker,omitempty"`
	// Placement is "pack" (the default: as few nodes as possible) or
	// "spread" (as many nodes as possible).
	Placement workers.Placement `toml:"placement" json:"placement,omitempty"`
}

// Workers is the group size with the default applied.
func (s ScalingConfig) Workers() int { return max(s.NumWorkers, 1) }

// CPUs is the per-worker CPU reservation with the default applied.
func (s ScalingConfig) CPUs() float64 {
	if s.CPUsPerWorker == 0 {
		return 1
	}
	return s.CPUsPerWorker
}

// Validate reports the first setting that cannot work, naming its key.
func (c *Config) Validate() error {
	if c.Model != "" {
		if _, ok := builtinModels[c.Model]; !ok {
			return &FieldError{"model", fmt.Errorf("unknown built-in model %q (have %s)", c.Model, strings.Join(Models(), ", "))}
		}
		if c.Dataset == "" {
			return &FieldError{"dataset", fmt.Errorf("model %q needs a dataset", c.Model)}
		}
	}
	if c.ValFraction < 0 || c.ValFraction >= 1 {
		return &FieldError{"val_fraction", fmt.Errorf("must be in [0, 1), got %g", c.ValFraction)}
	}
	if c.Split != "" && c.ValFraction != 0 {
		return &FieldError{"split", errors.New("a split file fixes the validation rows: drop val_fraction")}
	}
	if c.Scale != "" && !slices.Contains(scalings, c.Scale) {
		return &FieldError{"scale", fmt.Errorf("unknown scaling %q (have %s)", c.Scale, strings.Join(scalings, ", "))}
	}
	if c.Scaling.NumWorkers < 0 {
		return &FieldError{"scaling.num_workers", fmt.Errorf("must be at least 1, got %d", c.Scaling.NumWorkers)}
	}
	if c.Scaling.CPUsPerWorker < 0 {
		return &FieldError{"scaling.cpus_per_worker", fmt.Errorf("must not be negative, got %g", c.Scaling.CPUsPerWorker)}
	}
	if err := workers.ValidateGPUs(c.Scaling.GPUsPerWorker); err != nil {
		return &FieldError{"scaling.gpus_per_worker", err}
	}
	if err := workers.ValidateMemory(c.Scaling.MemoryPerWorker); err != nil {
		return &FieldError{"scaling.memory_per_worker", err}
	}
	if err := c.Scaling.Placement.Validate(); err != nil {
		return &FieldError{"scaling.placement", err}
	}
	return nil
}

// FieldError is a configuration error tied to one key, relative to the
// trainer section (for example "scaling.num_workers").
type FieldError struct {
	Key string
	Err error
}

func (e *FieldError) Error() string { return e.Key + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }
