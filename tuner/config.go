package tuner

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gotune/gotune/schedulers"
	"github.com/gotune/gotune/search"
	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/workers"
)

// Config is a sweep: what to optimise, how to search, how to schedule
// trials and what each trial trains. It is what a sweep file decodes into;
// the Go API fills it directly. Zero values mean the documented defaults.
type Config struct {
	// Name identifies the experiment within its database and names its
	// folders (checkpoints/<name>, logs/<name>), so it must be one plain
	// folder name: not empty, "." or "..", without "/", "\" or control
	// characters, valid UTF-8, not starting with "-", at most 200 bytes.
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
	// Constraints bound other reported metrics, such as "mem <= 40" or
	// "latency_ms < 20" (see ParseConstraint): a trial whose last report
	// fails one is infeasible, and the best trial is the best feasible
	// one. TPE models feasibility (see search.TPEConstraints).
	Constraints []string `toml:"constraints" json:"constraints,omitempty"`
	// Metrics and Modes, with two or more metrics, make the sweep
	// multi-objective, as metric = ["f1", "f2"] and mode = ["min", "max"]
	// do in a sweep file: the result is the Pareto front of the trials'
	// last reports (Result.Front), not one best trial. Modes defaults to
	// "min" for each. Metric and Mode are then the first objective's (the
	// one the database's best_metric follows); leave them empty.
	Metrics []string `toml:"-" json:"metrics,omitempty"`
	Modes   []string `toml:"-" json:"modes,omitempty"`
}

// multi reports whether the objective has several metrics.
func (o Objective) multi() bool { return len(o.Metrics) > 1 }

// metricNames lists the objectives' metrics, one for a single-objective
// sweep.
func (o Objective) metricNames() []string {
	if !o.multi() {
		return []string{o.Metric}
	}
	return o.Metrics
}

// objectives lists the objectives, one for a single-objective sweep.
func (o Objective) objectives() []storage.Objective {
	if !o.multi() {
		return []storage.Objective{{Metric: o.Metric, Mode: o.Mode}}
	}
	out := make([]storage.Objective, len(o.Metrics))
	for i, m := range o.Metrics {
		out[i] = storage.Objective{Metric: m, Mode: o.Modes[i]}
	}
	return out
}

// Constraint bounds a reported metric; see Objective.Constraints.
type Constraint = storage.Constraint

// ParseConstraint reads a constraint: a metric name, one of <=, <, >= and
// >, and a finite number, as in "mem <= 40".
func ParseConstraint(s string) (Constraint, error) {
	m := constraintSyntax.FindStringSubmatch(s)
	if m == nil {
		return Constraint{}, fmt.Errorf("%q is not a constraint: want a metric, <=, <, >= or >, and a number, such as \"mem <= 40\"", s)
	}
	bound, err := strconv.ParseFloat(m[3], 64)
	if err != nil || math.IsInf(bound, 0) || math.IsNaN(bound) {
		return Constraint{}, fmt.Errorf("%q: the bound %s is not a finite number", s, m[3])
	}
	return Constraint{Metric: m[1], Op: m[2], Bound: bound}, nil
}

var constraintSyntax = regexp.MustCompile(`^\s*([A-Za-z_][A-Za-z0-9_./-]*)\s*(<=|<|>=|>)\s*(\S+)\s*$`)

// constraints parses the objective's constraints, which Validate has checked.
func (o Objective) constraints() []Constraint {
	var cs []Constraint
	for _, s := range o.Constraints {
		if c, err := ParseConstraint(s); err == nil {
			cs = append(cs, c)
		}
	}
	return cs
}

// SearchConfig says how configurations are chosen: the [search] section of
// a sweep file.
type SearchConfig struct {
	// Algorithm is the searcher: "random" (the default) samples each
	// configuration independently; "grid" is random search over a space
	// that must have grid parameters; "tpe" and "cmaes" learn from finished
	// trials (see search.TPE and search.CMAES; "cmaes" needs a numeric
	// space); "bohb" is TPE fitted to HyperBand's budgets, with
	// [scheduler] kind = "hyperband" (see search.BOHB); "nsga2" evolves a
	// population for several objectives (see search.NSGA2). With every
	// algorithm, grid parameters are expanded: each cell of their cartesian
	// product is tried NumSamples times, as Ray Tune does (see
	// search.GridSearch).
	Algorithm string `toml:"algorithm" json:"algorithm,omitempty"`
	// NumSamples is how many configurations to try for each cell of the
	// grid; the sweep runs NumSamples × cells trials (cells is 1 without
	// grid parameters). Default 1.
	NumSamples int `toml:"num_samples" json:"num_samples,omitempty"`
	// MaxConcurrent bounds the trials running at once: the loop starts no
	// more; 0 means no bound beyond what the resources allow.
	// Model-based searchers suggest better with a small bound, since they
	// learn only from trials that have ended.
	MaxConcurrent int `toml:"max_concurrent" json:"max_concurrent,omitempty"`
	// Seed seeds the searcher; nil means the experiment's Seed. The same
	// seed gives the same configurations with random and grid and, when
	// results arrive in the same order (as when trials run one at a time),
	// with tpe and cmaes; a resumed experiment continues the sequence (see
	// search.Replayer).
	Seed *int64 `toml:"seed" json:"seed,omitempty"`
	// PointsToEvaluate are configurations to try first, in order: trial n
	// gets point n (see search.Points). A point may leave out parameters, which
	// are then drawn at random; it must leave out grid parameters, which
	// the grid sets. The points count among the NumSamples × cells trials.
	PointsToEvaluate []map[string]any `toml:"points_to_evaluate" json:"points_to_evaluate,omitempty"`
	// AllowRepeats lets the searcher suggest a configuration again in a
	// finite space (every parameter discrete), for a noisy objective where
	// a repeat measures something new. By default no searcher suggests
	// one twice, and the sweep ends, with fewer trials, once
	// every configuration was tried. Grid parameters are outside this:
	// with them the sweep tries each cell NumSamples times, and only the
	// grid keeps configurations apart.
	AllowRepeats bool `toml:"allow_repeats" json:"allow_repeats,omitempty"`
	// WarmStart names another experiment of the same database whose
	// finished trials the searcher learns from before its first suggestion
	// (see search.WarmStarter); "" for none. Only a searcher that learns can use
	// them: "tpe", "nsga2" or "cmaes".
	WarmStart string `toml:"warm_start" json:"warm_start,omitempty"`
	// Space is the search space. A sweep file gives it as [search.space].
	// nil is an empty space.
	Space *searchspace.Space `toml:"-" json:"-"`
}

// Algorithms lists the values SearchConfig.Algorithm accepts.
var Algorithms = []string{"random", "grid", "tpe", "cmaes", "nsga2", "bohb"}

// Trials is the number of trials the search runs: NumSamples times the
// number of grid cells, with defaults applied.
func (s SearchConfig) Trials() int {
	n := max(s.NumSamples, 1)
	if s.Space == nil {
		return n
	}
	return n * s.Space.GridSize()
}

// SchedulerConfig is the [scheduler] section: the trial scheduler and its
// settings, defined and validated by package schedulers.
type SchedulerConfig = schedulers.Config

// DefaultStorage is the database file used when Config.Storage is empty.
const DefaultStorage = "gotune.db"

// ConfigError is an invalid setting, named by its dotted key in sweep-file
// terms (for example "search.space.lr" or "trainer.scaling.num_workers").
type ConfigError = search.ConfigError

func fieldErr(key, format string, args ...any) error {
	return &ConfigError{Key: key, Err: fmt.Errorf(format, args...)}
}

var metricName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_./-]*$`)

// maxNameLen is the longest experiment name, in bytes: with what gotune
// adds to it (".lock", ".old-<time>-<n>") it stays a valid file name.
const maxNameLen = 200

// checkName says why name cannot name an experiment, nil when it can. The
// name becomes a folder name (checkpoints/<name>, logs/<name>, and lock
// files beside them), so it must be one plain path component that no file
// system or command line reads otherwise: not empty, not "." or "..",
// without "/" or "\" (no path of folders, on any system), without control
// characters (a line break or an escape code would also garble every
// listing), valid UTF-8, not starting with "-" (commands such as
// "gotune show NAME" would take it for a flag), at most maxNameLen bytes.
// Validate applies it to Config.Name.
func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("the experiment needs a name")
	case name == "." || name == "..":
		return fmt.Errorf("%q is not a name but a reference to a folder: a name must be a plain folder name", name)
	case strings.ContainsAny(name, `/\`):
		return fmt.Errorf("%q holds a %q: a name must be a plain folder name, not a path", name, name[strings.IndexAny(name, `/\`)])
	case !utf8.ValidString(name):
		return fmt.Errorf("%q is not valid UTF-8", name)
	case strings.HasPrefix(name, "-"):
		return fmt.Errorf("%q starts with \"-\", which commands would read as a flag", name)
	case len(name) > maxNameLen:
		return fmt.Errorf("%d bytes long, over the limit of %d", len(name), maxNameLen)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("%q holds the control character %U", name, r)
		}
	}
	return nil
}

// withDefaults returns c with every zero value that has a default filled in.
func (c Config) withDefaults() Config {
	if c.Storage == "" {
		c.Storage = DefaultStorage
	}
	if o := &c.Objective; len(o.Metrics) > 0 {
		if len(o.Modes) == 0 {
			o.Modes = make([]string, len(o.Metrics))
			for i := range o.Modes {
				o.Modes[i] = "min"
			}
		}
		if o.Metric == "" {
			o.Metric = o.Metrics[0]
		}
		if o.Mode == "" {
			o.Mode = o.Modes[0]
		}
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
	if c.Search.Space == nil {
		c.Search.Space = &searchspace.Space{}
	}
	if c.Trainer.Metrics.Collects() && c.Scheduler.TimeAttr == "" {
		// Collected metrics carry their step: progress is counted by it.
		c.Scheduler.TimeAttr = c.Trainer.Metrics.StepName()
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
	env := schedulers.Env{Metric: c.Objective.Metric, Mode: c.Objective.Mode, Space: c.Search.Space, Seed: c.Seed,
		Checkpoints: c.checkpoints()}
	if c.Objective.multi() {
		env.Metrics, env.Modes = c.Objective.Metrics, c.Objective.Modes
	}
	return env
}

// checkpoints reports whether the trials checkpoint, so that a paused
// trial resumes where it stopped and PBT can copy one trial's state into
// another: the built-in models always do, and a command or a Go function
// says it does with a [trainer.checkpoint] section. Without checkpoints the
// tuner still pauses and resumes trials, but a resumed trial starts over.
func (c Config) checkpoints() bool {
	cc := c.Trainer.Checkpoint
	return c.Trainer.Model != "" || cc.NumToKeep > 0 || cc.ScoreAttribute != ""
}

// Validate checks c (with defaults applied) and returns the first problem
// as a *ConfigError naming its key.
func (c Config) Validate() error {
	c = c.withDefaults()
	if err := checkName(c.Name); err != nil {
		return &ConfigError{Key: "name", Err: err}
	}
	switch {
	case c.Objective.Metric == "":
		return fieldErr("objective.metric", "name the metric to optimise")
	case !metricName.MatchString(c.Objective.Metric):
		return fieldErr("objective.metric", "%q is not a metric name (letters, digits, _ . / -)", c.Objective.Metric)
	case c.Objective.Mode != "min" && c.Objective.Mode != "max":
		return fieldErr("objective.mode", "must be \"min\" or \"max\", got %q", c.Objective.Mode)
	case !slices.Contains(Algorithms, c.Search.Algorithm):
		return fieldErr("search.algorithm", "unknown algorithm %q (have %s)", c.Search.Algorithm, strings.Join(Algorithms, ", "))
	case c.Search.NumSamples < 1:
		return fieldErr("search.num_samples", "must be at least 1, got %d", c.Search.NumSamples)
	case c.Search.MaxConcurrent < 0:
		return fieldErr("search.max_concurrent", "must not be negative, got %d", c.Search.MaxConcurrent)
	}
	if err := c.Objective.validateMulti(c.Search.Algorithm); err != nil {
		return err
	}
	for i, cs := range c.Objective.Constraints {
		if _, err := ParseConstraint(cs); err != nil {
			return &ConfigError{Key: fmt.Sprintf("objective.constraints[%d]", i), Err: err}
		}
	}
	if err := c.validateWarmStart(); err != nil {
		return err
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
	if err := c.validateSearch(); err != nil {
		return err
	}
	if err := c.Trainer.Validate(); err != nil {
		var fe *trainer.FieldError
		if errors.As(err, &fe) {
			return &ConfigError{Key: "trainer." + fe.Key, Err: fe.Err}
		}
		return &ConfigError{Key: "trainer", Err: err}
	}
	if m := c.Trainer.Metrics; m.Collects() && c.Scheduler.TimeAttr != m.StepName() {
		return fieldErr("trainer.metrics.step", "collected metrics carry their step as %q, but scheduler.time_attr is %q: a restarted trial could record a step twice (set step = %q, or leave time_attr out)", m.StepName(), c.Scheduler.TimeAttr, c.Scheduler.TimeAttr)
	}
	return c.validateCommand()
}

// validateSearch checks the search space against the algorithm, by
// building the searcher the config describes.
func (c Config) validateSearch() error {
	if err := c.Search.Space.Check(); err != nil {
		var ce *searchspace.ConditionError
		if errors.As(err, &ce) {
			return &ConfigError{Key: "search.space." + ce.Param + ".when", Err: ce.Err}
		}
		return &ConfigError{Key: "search.space", Err: err}
	}
	if c.Search.Algorithm == "grid" && c.Search.Space.Len() == c.Search.Space.WithoutGrid().Len() {
		return fieldErr("search.algorithm", "\"grid\" needs at least one grid parameter in [search.space], such as batch = { grid = [32, 64] }")
	}
	_, err := newSearcher(c.Search, c.searchSeed(), c.Objective, c.Scheduler)
	return err
}

// searchSeed is the searcher's seed: [search] seed, else the experiment's.
func (c Config) searchSeed() int64 {
	if c.Search.Seed != nil {
		return *c.Search.Seed
	}
	return c.Seed
}

// validateCommand checks that every {name} in the trainer's command and
// workdir names a parameter of the search space, and that none is named
// like the trial's folder.
func (c Config) validateCommand() error {
	if c.Search.Space.Domain(trainer.TrialDirPlaceholder) != nil && c.Trainer.Command != nil {
		return fieldErr("search.space."+trainer.TrialDirPlaceholder, "the name is taken: {%s} in a command is the trial's folder", trainer.TrialDirPlaceholder)
	}
	if c.Search.Space.Domain(trainer.SweepDirPlaceholder) != nil && c.Trainer.Command != nil {
		return fieldErr("search.space."+trainer.SweepDirPlaceholder, "the name is taken: {%s} in a command is the sweep file's folder", trainer.SweepDirPlaceholder)
	}
	if w := c.Trainer.Workdir; w != "" {
		for _, name := range trainer.Placeholders([]string{w}) {
			if c.Search.Space.Domain(name) == nil {
				return fieldErr("trainer.workdir", "{%s} names no parameter of [search.space] (write {%s} for the trial's own folder)", name, trainer.TrialDirPlaceholder)
			}
		}
	}
	for i, arg := range c.Trainer.Command {
		for _, name := range trainer.Placeholders([]string{arg}) {
			if p, ok := c.Search.Space.Param(name); ok && p.When != nil {
				return fieldErr("trainer.command", "{%s} in argument %d (%q) names a conditional parameter, absent from the trials where %s does not hold: read it from GOTUNE_CONFIG instead", name, i+1, arg, p.When)
			}
			if c.Search.Space.Domain(name) != nil {
				continue
			}
			names := make([]string, 0, c.Search.Space.Len())
			for _, p := range c.Search.Space.Params() {
				names = append(names, p.Name)
			}
			have := "the space has none"
			if len(names) > 0 {
				have = "have " + strings.Join(names, ", ")
			}
			return fieldErr("trainer.command", "{%s} in argument %d (%q) names no parameter of [search.space] (%s; write {{%s}} for a literal {%s})", name, i+1, arg, have, name, name)
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

// validateWarmStart checks that warm_start names another experiment and
// that the algorithm learns from trials.
func (c Config) validateWarmStart() error {
	switch ws := c.Search.WarmStart; {
	case ws == "":
		return nil
	case ws == c.Name:
		return fieldErr("search.warm_start", "names this experiment itself: name another experiment of the database (resuming this one needs no warm start)")
	case !slices.Contains([]string{"tpe", "nsga2", "cmaes"}, c.Search.Algorithm):
		return fieldErr("search.warm_start", "algorithm %q does not learn from other trials' results: warm start needs \"tpe\", \"nsga2\" or \"cmaes\"", c.Search.Algorithm)
	}
	if err := checkName(c.Search.WarmStart); err != nil {
		return &ConfigError{Key: "search.warm_start", Err: err}
	}
	return nil
}

// validateMulti checks several objectives (with defaults applied) against
// the algorithm.
func (o Objective) validateMulti(algorithm string) error {
	switch {
	case len(o.Metrics) == 0:
		return nil
	case len(o.Metrics) == 1:
		return fieldErr("objective.metric", "one metric in a list: write metric = %q for a single objective", o.Metrics[0])
	case len(o.Modes) != len(o.Metrics):
		return fieldErr("objective.mode", "%d modes for %d metrics: give one mode per metric, or none for all \"min\"", len(o.Modes), len(o.Metrics))
	case o.Metric != o.Metrics[0] || o.Mode != o.Modes[0]:
		return fieldErr("objective.metric", "give the objectives as metrics and modes, and leave metric and mode empty")
	case algorithm == "cmaes":
		return fieldErr("search.algorithm", "cmaes optimises one objective: with several, use \"tpe\" (MOTPE), \"nsga2\" or \"random\"")
	}
	seen := map[string]bool{}
	for i, m := range o.Metrics {
		switch {
		case !metricName.MatchString(m):
			return fieldErr("objective.metric", "%q is not a metric name (letters, digits, _ . / -)", m)
		case seen[m]:
			return fieldErr("objective.metric", "%q is named twice", m)
		case o.Modes[i] != "min" && o.Modes[i] != "max":
			return fieldErr("objective.mode", "must be \"min\" or \"max\", got %q for %s", o.Modes[i], m)
		}
		seen[m] = true
	}
	return nil
}
