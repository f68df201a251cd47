package trainer

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gotune/gotune/workers"
)

// Config describes what a trial trains and on how many workers. Exactly one
// of Model (a built-in model), Command (any program) or a Go training
// function given to the tuner says what runs.
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

	// Command is a program every worker runs, with its arguments; "{name}"
	// in an argument is replaced by hyperparameter name's value (see
	// ExpandCommand). It follows the command-worker contract: ranks and the
	// trial's configuration in the environment, reports as "@gotune {json}"
	// lines on stdout.
	Command []string `toml:"command" json:"command,omitempty"`
	// Workdir is the folder Command runs in, relative to PathBase; "" is
	// gotune's own working directory (gotune run makes a sweep file's
	// default "{trial_dir}" instead). "{trial_dir}" in it (and in Command) is the trial's own
	// folder: workdir = "{trial_dir}" runs every trial in a folder of its
	// own, so that files the command writes where it runs are the trial's.
	Workdir string `toml:"workdir" json:"workdir,omitempty"`
	// PathBase is the folder the relative paths of this configuration
	// are relative to: Dataset, Split and Workdir (see Path), and
	// Command's paths (see Spec.PathBase). The sweep-file loader sets it to
	// the sweep file's folder; "" is the working directory.
	PathBase string `toml:"-" json:"-"`
	// Isolation is how a built-in model's workers run: "goroutine" (the
	// default: in gotune's own process, with in-memory collectives) or
	// "process" (each worker in a child process, with collectives over
	// TCP, so that a worker that crashes or runs out of memory cannot take
	// the sweep down). Commands always run as processes.
	Isolation string `toml:"isolation" json:"isolation,omitempty"`
	// Env adds variables to every command and process worker's
	// environment, as in env = { HF_HOME = "/data/hf", OMP_NUM_THREADS = "4" }.
	// They replace gotune's own environment's variables of the same name
	// and the defaults OMP_NUM_THREADS and PYTHONUNBUFFERED; the variables
	// of the command-worker contract cannot be set here.
	Env map[string]string `toml:"env" json:"env,omitempty"`
	// KillTimeout is the seconds a process worker is given to exit after
	// SIGTERM before it is killed with SIGKILL; 0 means DefaultKillTimeout.
	KillTimeout float64 `toml:"kill_timeout" json:"kill_timeout,omitempty"`
	// LogMaxBytes caps each worker's log file, as in "64MiB": a line that
	// would take it past the cap first rotates it (worker_0.log becomes
	// worker_0.log.1, the older ones .2 and so on up to LogKeep) and starts
	// a new file. 0 means DefaultLogMaxBytes.
	LogMaxBytes workers.Bytes `toml:"log_max_bytes" json:"log_max_bytes,omitempty"`
	// LogKeep is how many rotated files of a worker's log are kept besides
	// the current one; 0 means DefaultLogKeep, -1 keeps none (the file
	// starts over).
	LogKeep int `toml:"log_keep" json:"log_keep,omitempty"`

	// Metrics says where a command's metrics come from besides its report
	// lines: its output, a file, TensorBoard event files.
	Metrics MetricsConfig `toml:"metrics" json:"metrics,omitzero"`

	Scaling    ScalingConfig    `toml:"scaling" json:"scaling"`
	Failure    FailureConfig    `toml:"failure" json:"failure"`
	Checkpoint CheckpointConfig `toml:"checkpoint" json:"checkpoint"`
}

// DefaultKillTimeout is the grace period between SIGTERM and SIGKILL when
// Config.KillTimeout is 0.
const DefaultKillTimeout = 10 * time.Second

// Kill is the grace period between SIGTERM and SIGKILL with the default applied.
func (c Config) Kill() time.Duration {
	if c.KillTimeout == 0 {
		return DefaultKillTimeout
	}
	return seconds(c.KillTimeout)
}

// Defaults of Config.LogMaxBytes and Config.LogKeep.
const (
	DefaultLogMaxBytes = 64 * workers.MiB
	DefaultLogKeep     = 3
)

// LogLimits are LogMaxBytes and LogKeep with the defaults applied, as
// Spec.LogMaxBytes and Spec.LogKeep take them.
func (c Config) LogLimits() (maxBytes workers.Bytes, keep int) {
	maxBytes, keep = c.LogMaxBytes, c.LogKeep
	if maxBytes == 0 {
		maxBytes = DefaultLogMaxBytes
	}
	switch keep {
	case 0:
		keep = DefaultLogKeep
	case -1:
		keep = 0
	}
	return maxBytes, keep
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// ScalingConfig sizes a trial's training group: a fixed NumWorkers, or an
// elastic group of MinWorkers to MaxWorkers that starts as soon as
// MinWorkers fit and grows toward MaxWorkers when resources free up.
type ScalingConfig struct {
	// NumWorkers is the number of workers of a fixed group; 0 means 1
	// unless MinWorkers and MaxWorkers are set.
	NumWorkers int `toml:"num_workers" json:"num_workers,omitempty"`
	// MinWorkers and MaxWorkers bound an elastic group; set both, or neither.
	MinWorkers int `toml:"min_workers" json:"min_workers,omitempty"`
	MaxWorkers int `toml:"max_workers" json:"max_workers,omitempty"`
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
	// GPUVisibility is what CUDA_VISIBLE_DEVICES shows a command or
	// process worker: GPUViewGroup (the default, as torchrun does) or
	// GPUViewWorker.
	GPUVisibility string `toml:"gpu_visibility" json:"gpu_visibility,omitempty"`
}

// The values of ScalingConfig.GPUVisibility.
const (
	// GPUViewGroup shows every worker the devices of all the group's
	// workers on its node, ordered so that device LOCAL_RANK (cuda:LOCAL_RANK
	// in PyTorch) is the worker's own, its first when it has several; the
	// first devices of the node's workers come first, in local-rank order,
	// then the others. When workers share a device (gpus_per_worker below
	// 1), that node's workers see only their own devices instead, since
	// CUDA cannot list a device twice.
	GPUViewGroup = "group"
	// GPUViewWorker shows every worker only its own devices: its first is
	// cuda:0, whatever its LOCAL_RANK.
	GPUViewWorker = "worker"
)

// Elastic reports whether the group's size may vary.
func (s ScalingConfig) Elastic() bool { return s.MinWorkers > 0 || s.MaxWorkers > 0 }

// Bounds is the smallest and the largest size of the group: both NumWorkers
// (default 1) for a fixed group.
func (s ScalingConfig) Bounds() (lo, hi int) {
	if s.Elastic() {
		return s.MinWorkers, s.MaxWorkers
	}
	n := max(s.NumWorkers, 1)
	return n, n
}

// Workers is the group's largest size: NumWorkers with the default applied,
// or MaxWorkers for an elastic group.
func (s ScalingConfig) Workers() int {
	_, hi := s.Bounds()
	return hi
}

// CPUs is the per-worker CPU reservation with the default applied.
func (s ScalingConfig) CPUs() float64 {
	if s.CPUsPerWorker == 0 {
		return 1
	}
	return s.CPUsPerWorker
}

// FailureConfig says how a group survives failures: a worker that exits
// with an error, is killed, or stops reporting fails its group, which is
// torn down and restarted from the latest committed checkpoint.
type FailureConfig struct {
	// MaxFailures is how many failures a trial survives by restarting; 0
	// (the default) fails the trial at its first failure, -1 restarts
	// without limit.
	MaxFailures int `toml:"max_failures" json:"max_failures,omitempty"`
	// HeartbeatTimeout is the seconds a group may go without a report from
	// any worker (a command worker may also print "@gotune {}" to show it
	// is alive) before it counts as hung and fails; 0 (the default)
	// disables the check. Go goroutine workers are cancelled, but must
	// return on their own: only processes can be killed.
	HeartbeatTimeout float64 `toml:"heartbeat_timeout" json:"heartbeat_timeout,omitempty"`
	// OutputHeartbeat counts every line a process or command worker writes
	// to its log (stdout lines that are not reports, and stderr) as a sign
	// of life for HeartbeatTimeout, like a report: for scripts that print
	// progress but report rarely. It needs the trial's logs, which a sweep
	// always keeps (Spec.LogDir).
	OutputHeartbeat bool `toml:"output_heartbeat" json:"output_heartbeat,omitempty"`
	// FailFast, when true, ends a sweep at its first failed trial (one
	// whose failures exhausted MaxFailures), as Ray Tune's
	// FailureConfig(fail_fast=True) does, instead of running the rest.
	// Unset (nil), a sweep ends once the first trials it launched, as
	// many as run at once and at least 5, all failed the same way, with
	// none completed and more to start: a broken command or environment,
	// which every trial would hit. False runs every trial whatever fails.
	// The trials still running when a sweep ends are interrupted, and
	// continue when it is run again. Groups run on their own (trainer.Run)
	// ignore it.
	FailFast *bool `toml:"fail_fast" json:"fail_fast,omitempty"`
}

// Heartbeat is HeartbeatTimeout as a duration; 0 when disabled.
func (f FailureConfig) Heartbeat() time.Duration { return seconds(f.HeartbeatTimeout) }

// CheckpointConfig says which of a trial's committed checkpoints are kept.
// The latest is always kept, as the one a restart resumes from.
type CheckpointConfig struct {
	// NumToKeep is how many checkpoints to keep besides the latest; 0
	// (the default) keeps every one.
	NumToKeep int `toml:"num_to_keep" json:"num_to_keep,omitempty"`
	// ScoreAttribute is the reported metric that ranks checkpoints for
	// NumToKeep; "" keeps the newest.
	ScoreAttribute string `toml:"score_attribute" json:"score_attribute,omitempty"`
	// Order is "max" (higher ScoreAttribute is better) or "min". When empty,
	// the tuner uses the objective's mode if ScoreAttribute is the
	// objective's metric, and "max" otherwise.
	Order string `toml:"order" json:"order,omitempty"`
}

// Path is path, a path of this configuration, as it is meant: beside
// PathBase when it is relative.
func (c *Config) Path(path string) string {
	if path == "" || filepath.IsAbs(path) || c.PathBase == "" {
		return path
	}
	return filepath.Join(c.PathBase, path)
}

// pathError is err, an error about the file at relative path, with where
// the path was looked for: beside the sweep file, and a hint when the path
// names a file in the working directory instead.
func (c *Config) pathError(path string, err error) error {
	if path == "" || filepath.IsAbs(path) || c.PathBase == "" {
		return err
	}
	why := ": a relative path in a sweep file is relative to the sweep file's folder"
	if _, serr := os.Stat(path); serr == nil {
		if abs, aerr := filepath.Abs(path); aerr == nil {
			path = abs
		}
		why = fmt.Sprintf("; %s is in the current folder, but a relative path in a sweep file is relative to the sweep file's folder", path)
	}
	return fmt.Errorf("%w (looked for it in %s%s)", err, c.PathBase, why)
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
		if c.Command != nil {
			return &FieldError{"command", fmt.Errorf("a trial runs either the built-in model %q or a command, not both", c.Model)}
		}
	}
	if c.Command != nil {
		if len(c.Command) == 0 || c.Command[0] == "" {
			return &FieldError{"command", fmt.Errorf("name the program to run, e.g. [\"python3\", \"train.py\"]")}
		}
	} else if c.Workdir != "" {
		return &FieldError{"workdir", fmt.Errorf("a workdir needs a command")}
	}
	if c.Metrics.Collects() && c.Command == nil {
		return &FieldError{"metrics", errors.New("collecting metrics needs a command (a built-in model reports its own)")}
	}
	if err := c.Metrics.validate(); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(c.Env)) {
		if err := checkEnvName(k); err != nil {
			return &FieldError{"env." + k, err}
		}
	}
	switch c.Isolation {
	case "", IsolationGoroutine:
	case IsolationProcess:
		if c.Model == "" {
			return &FieldError{"isolation", errors.New("\"process\" isolation is for the built-in models (commands always run as processes)")}
		}
	default:
		return &FieldError{"isolation", fmt.Errorf("must be %q or %q, got %q", IsolationGoroutine, IsolationProcess, c.Isolation)}
	}
	if c.KillTimeout < 0 {
		return &FieldError{"kill_timeout", fmt.Errorf("must not be negative, got %g", c.KillTimeout)}
	}
	if c.LogMaxBytes < 0 {
		return &FieldError{"log_max_bytes", fmt.Errorf("must not be negative, got %d", c.LogMaxBytes)}
	}
	if c.LogKeep < -1 {
		return &FieldError{"log_keep", fmt.Errorf("must be -1 (keep no rotated file) or more, got %d", c.LogKeep)}
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
	if err := c.Scaling.validate(); err != nil {
		return err
	}
	if c.Failure.MaxFailures < -1 {
		return &FieldError{"failure.max_failures", fmt.Errorf("must be -1 (no limit) or more, got %d", c.Failure.MaxFailures)}
	}
	if c.Failure.HeartbeatTimeout < 0 {
		return &FieldError{"failure.heartbeat_timeout", fmt.Errorf("must not be negative, got %g", c.Failure.HeartbeatTimeout)}
	}
	if c.Failure.OutputHeartbeat && c.Failure.HeartbeatTimeout == 0 {
		return &FieldError{"failure.output_heartbeat", errors.New("needs a heartbeat_timeout")}
	}
	if c.Checkpoint.NumToKeep < 0 {
		return &FieldError{"checkpoint.num_to_keep", fmt.Errorf("must not be negative, got %d", c.Checkpoint.NumToKeep)}
	}
	switch c.Checkpoint.Order {
	case "", "min", "max":
	default:
		return &FieldError{"checkpoint.order", fmt.Errorf("must be \"min\" or \"max\", got %q", c.Checkpoint.Order)}
	}
	if c.Checkpoint.Order != "" && c.Checkpoint.ScoreAttribute == "" {
		return &FieldError{"checkpoint.order", fmt.Errorf("an order needs a score_attribute to order by")}
	}
	return nil
}

func (s ScalingConfig) validate() error {
	if s.NumWorkers < 0 {
		return &FieldError{"scaling.num_workers", fmt.Errorf("must be at least 1, got %d", s.NumWorkers)}
	}
	if s.Elastic() {
		switch {
		case s.NumWorkers != 0:
			return &FieldError{"scaling.num_workers", fmt.Errorf("set num_workers for a fixed group or min_workers and max_workers for an elastic one, not both")}
		case s.MinWorkers < 1:
			return &FieldError{"scaling.min_workers", fmt.Errorf("must be at least 1, got %d", s.MinWorkers)}
		case s.MaxWorkers < s.MinWorkers:
			return &FieldError{"scaling.max_workers", fmt.Errorf("must be at least min_workers (%d), got %d", s.MinWorkers, s.MaxWorkers)}
		}
	}
	if s.CPUsPerWorker < 0 {
		return &FieldError{"scaling.cpus_per_worker", fmt.Errorf("must not be negative, got %g", s.CPUsPerWorker)}
	}
	if err := workers.ValidateGPUs(s.GPUsPerWorker); err != nil {
		return &FieldError{"scaling.gpus_per_worker", err}
	}
	if err := workers.ValidateMemory(s.MemoryPerWorker); err != nil {
		return &FieldError{"scaling.memory_per_worker", err}
	}
	if err := s.Placement.Validate(); err != nil {
		return &FieldError{"scaling.placement", err}
	}
	switch s.GPUVisibility {
	case "", GPUViewGroup, GPUViewWorker:
	default:
		return &FieldError{"scaling.gpu_visibility", fmt.Errorf("must be %q or %q, got %q", GPUViewGroup, GPUViewWorker, s.GPUVisibility)}
	}
	return nil
}

// EnvList is Env as NAME=value entries, in name order.
func (c Config) EnvList() []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(c.Env)) {
		out = append(out, k+"="+c.Env[k])
	}
	return out
}

// checkEnvName refuses a variable name that cannot be set or that the
// command-worker contract sets.
func checkEnvName(k string) error {
	switch {
	case k == "" || strings.ContainsAny(k, "=\x00"):
		return fmt.Errorf("%q is not a variable name", k)
	case strings.HasPrefix(k, "GOTUNE_") || strings.HasPrefix(k, "TORCHELASTIC_") || contractVars[k]:
		return fmt.Errorf("%s is set by gotune for every worker (see the worker environment in the README)", k)
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
