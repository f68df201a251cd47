package trainer

import (
	"fmt"
	"strings"
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
	// ValFraction is the share of the rows held out for validation; default 0.2.
	ValFraction float64 `toml:"val_fraction" json:"val_fraction,omitempty"`

	// Command, instead of a built-in model, is the program each worker of a
	// trial runs, with its arguments, e.g. ["python3", "train.py",
	// "--lr={lr}"]. A {name} in an argument is replaced by the trial's
	// value of parameter name, argument by argument and never through a
	// shell; a {name} that names no parameter of the search space is a
	// configuration error. Workers report by printing "@gotune {json}" lines.
	Command []string `toml:"command" json:"command,omitempty"`
	// Workdir is the directory a Command runs in; empty means the
	// directory gotune runs in.
	Workdir string `toml:"workdir" json:"workdir,omitempty"`

	Scaling ScalingConfig `toml:"scaling" json:"scaling"`
}

// ScalingConfig sizes a trial's training group.
type ScalingConfig struct {
	// NumWorkers is the number of workers in the group; 0 means 1.
	NumWorkers int `toml:"num_workers" json:"num_workers,omitempty"`
	// CPUsPerWorker is the CPUs reserved for each worker; 0 means 1.
	// Fractions let several light workers share a core.
	CPUsPerWorker float64 `toml:"cpus_per_worker" json:"cpus_per_worker,omitempty"`
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
	if c.Scaling.NumWorkers < 0 {
		return &FieldError{"scaling.num_workers", fmt.Errorf("must be at least 1, got %d", c.Scaling.NumWorkers)}
	}
	if c.Scaling.CPUsPerWorker < 0 {
		return &FieldError{"scaling.cpus_per_worker", fmt.Errorf("must not be negative, got %g", c.Scaling.CPUsPerWorker)}
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
