package tuner

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/gotune/gotune/schedulers"
	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/workers"
)

// Config is a sweep: what to optimise, how to search, how to schedule
// trials and what each trial trains. It is what a sweep file decodes into;
// the Go API fills it directly. Zero values mean the documented defaults.
type Config struct {
	// Name identifies the experiment within its database.
	Name string `toml:"name" json:"name"`
	// Storage is the SQLite file results go to; default "gotune.db".
	Storage string `toml:"storage" json:"storage,omitempty"`
	// Seed makes sampling and built-in training reproducible.
	Seed int64 `toml:"seed" json:"seed"`

	Objective Objective       `toml:"objective" json:"objective"`
	Search    SearchConfig    `toml:"search" json:"search"`
	Scheduler SchedulerConfig `toml:"scheduler" json:"scheduler"`
	Trainer   trainer.Config  `toml:"trainer" json:"trainer"`
	// Resources declares the nodes to run on; zero means this machine as
	// discovered. See workers.Declared.
	Resources workers.Declared `toml:"resources" json:"resources,omitzero"`
}

// Objective is the metric trials are ranked by.
type Objective struct {
	// Metric names a reported metric.
	Metric string `toml:"metric" json:"metric"`
	// Mode is "min" (lower is better, the default) or "max".
	Mode string `toml:"mode" json:"mode"`
}

// SearchConfig says how configurations are chosen.
type SearchConfig struct {
	// Algorithm is "random" (the default).
	Algorithm string `toml:"algorithm" json:"algorithm,omitempty"`
	// NumSamples is the number of trials; default 1.
	NumSamples int `toml:"num_samples" json:"num_samples,omitempty"`
	// MaxConcurrent bounds the trials running at once; 0 means no bound
	// beyond what the resources allow.
	MaxConcurrent int `toml:"max_concurrent" json:"max_concurrent,omitempty"`
	// Space is the search space. A sweep file gives it as [search.space].
	Space *searchspace.Space `toml:"-" json:"-"`
}

// SchedulerConfig is the [scheduler] section: the trial scheduler and its
// settings, defined and validated by package schedulers.
type SchedulerConfig = schedulers.Config

// DefaultStorage is the database file used when Config.Storage is empty.
const DefaultStorage = "gotune.db"

// ConfigError is an invalid setting, named by its dotted key in sweep-file
// terms (for example "search.space.lr" or "trainer.scaling.num_workers").
type ConfigError struct {
	Key string
	Err error
}

func (e *ConfigError) Error() string { return e.Key + ": " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

func fieldErr(key, format string, args ...any) error {
	return &ConfigError{Key: key, Err: fmt.Errorf(format, args...)}
}

var metricName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_./-]*$`)

// withDefaults returns c with every zero value that has a default filled in.
func (c Config) withDefaults() Config {
	if c.Storage == "" {
		c.Storage = DefaultStorage
	}
	if c.Objective.Mode == "" {
		c.Objective.Mode = "min"
	}
	if c.Search.Algorithm == "" {
		c.Search.Algorithm = "random"
	}
	if c.Search.NumSamples == 0 {
		c.Search.NumSamples = 1
	}
	c.Scheduler = c.Scheduler.WithDefaults()
	return c
}

// TrainingIteration is the time attribute every trial has: its number of reports.
const TrainingIteration = schedulers.DefaultTimeAttr

// schedulerEnv is what the configured scheduler is built against. The
// loop cannot yet pause, resume or restart trials from checkpoints, so
// Checkpoints is false: ASHA runs in its stop mode, and HyperBand, PBT and
// ASHA's promote mode are refused.
func (c Config) schedulerEnv() schedulers.Env {
	return schedulers.Env{Metric: c.Objective.Metric, Mode: c.Objective.Mode, Space: c.Search.Space, Seed: c.Seed}
}

// Validate checks c (with defaults applied) and returns the first problem
// as a *ConfigError naming its key.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Name == "":
		return fieldErr("name", "the experiment needs a name")
	case c.Objective.Metric == "":
		return fieldErr("objective.metric", "name the metric to optimise")
	case !metricName.MatchString(c.Objective.Metric):
		return fieldErr("objective.metric", "%q is not a metric name (letters, digits, _ . / -)", c.Objective.Metric)
	case c.Objective.Mode != "min" && c.Objective.Mode != "max":
		return fieldErr("objective.mode", "must be \"min\" or \"max\", got %q", c.Objective.Mode)
	case c.Search.Algorithm != "random":
		return fieldErr("search.algorithm", "unknown algorithm %q (have random)", c.Search.Algorithm)
	case c.Search.NumSamples < 1:
		return fieldErr("search.num_samples", "must be at least 1, got %d", c.Search.NumSamples)
	case c.Search.MaxConcurrent < 0:
		return fieldErr("search.max_concurrent", "must not be negative, got %d", c.Search.MaxConcurrent)
	}
	if err := c.Scheduler.Validate(c.schedulerEnv()); err != nil {
		return schedulerError(err)
	}
	if err := c.Resources.Validate(); err != nil {
		var se *workers.SettingError
		if errors.As(err, &se) {
			return &ConfigError{Key: "resources." + se.Key, Err: se.Err}
		}
		return &ConfigError{Key: "resources", Err: err}
	}
	if err := c.Trainer.Validate(); err != nil {
		var fe *trainer.FieldError
		if errors.As(err, &fe) {
			return &ConfigError{Key: "trainer." + fe.Key, Err: fe.Err}
		}
		return &ConfigError{Key: "trainer", Err: err}
	}
	for _, name := range trainer.Placeholders(c.Trainer.Command) {
		if c.Search.Space == nil || c.Search.Space.Domain(name) == nil {
			return fieldErr("trainer.command", "{%s} names no parameter of search.space (write {{%s}} for a literal {%s})", name, name, name)
		}
	}
	return nil
}

// schedulerError names a scheduler setting's key in sweep-file terms.
func schedulerError(err error) error {
	var fe *schedulers.FieldError
	if errors.As(err, &fe) {
		return &ConfigError{Key: "scheduler." + fe.Key, Err: fe.Err}
	}
	return &ConfigError{Key: "scheduler", Err: err}
}
