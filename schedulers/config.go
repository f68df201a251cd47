package schedulers

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/gotune/gotune/searchspace"
)

// Config is the sweep file's [scheduler] section: which scheduler runs and
// its settings. Zero values mean the documented defaults; a key that the
// chosen kind does not use is an error, so a setting never silently does
// nothing.
type Config struct {
	// Kind is "fifo" (the default), "asha", "hyperband", "median", "pbt",
	// or one of Optuna's pruners: "percentile", "threshold", "patient",
	// "wilcoxon".
	Kind string `toml:"kind" json:"kind,omitempty"`
	// TimeAttr is the reported counter that measures a trial's progress;
	// default "training_iteration", the number of reports so far. Every
	// other setting in time units (max_t, grace_period,
	// perturbation_interval) is in this counter's units.
	TimeAttr string `toml:"time_attr" json:"time_attr,omitempty"`

	// MaxT (asha, hyperband) is the most time a trial runs; a trial that
	// reaches it is stopped. Default 100.
	MaxT float64 `toml:"max_t" json:"max_t,omitempty"`
	// GracePeriod (asha, hyperband, median) is the least time a trial runs
	// before it can be stopped: ASHA's and HyperBand's first rung, the
	// median rule's start. Default 1.
	GracePeriod float64 `toml:"grace_period" json:"grace_period,omitempty"`
	// ReductionFactor (asha, hyperband) is η: rungs are η times apart in
	// time and keep the best 1/η of their trials. Default 3; must exceed 1.
	ReductionFactor float64 `toml:"reduction_factor" json:"reduction_factor,omitempty"`
	// Brackets (asha) is the number of ASHA brackets, each skipping one
	// more of the lowest rungs; trials are dealt to them in turn. Default 1.
	Brackets int `toml:"brackets" json:"brackets,omitempty"`
	// Mode (asha) is "promote" (trials pause at each rung and resume when
	// they enter its top 1/η, as in the ASHA paper) or "stop" (a trial
	// reaching a rung goes on only if it is in the top 1/η of what the rung
	// has recorded, otherwise it stops, as Ray's AsyncHyperBandScheduler).
	// Default "promote" when trials checkpoint (Env.Checkpoints), else
	// "stop".
	Mode string `toml:"mode" json:"mode,omitempty"`

	// StopLastTrials (asha, hyperband) says whether a trial that reaches
	// max_t is stopped. False lets the trials that survive every rung run
	// on past max_t until they end by themselves, as Ray's option of the
	// same name. Nil means true.
	StopLastTrials *bool `toml:"stop_last_trials" json:"stop_last_trials,omitempty"`

	// MinSamplesRequired (median) is how many other trials must have
	// reached a time before the median rule compares against them there.
	// Default 3.
	MinSamplesRequired int `toml:"min_samples_required" json:"min_samples_required,omitempty"`
	// HardStop (median) says whether a trial the rule judges is stopped.
	// False pauses it instead, as Ray's hard_stop = False: once no new
	// trial will come and no other trial runs, the paused trials resume
	// from their checkpoints one by one, oldest pause first, and run to
	// the end unjudged. Needs trials that checkpoint. Nil means true.
	HardStop *bool `toml:"hard_stop" json:"hard_stop,omitempty"`

	// Percentile (percentile, required) is the percentile, in (0, 100], of
	// the completed trials' values a trial must be within: 50 is Optuna's
	// MedianPruner, 25 keeps the best quarter.
	Percentile float64 `toml:"percentile" json:"percentile,omitempty"`
	// StartupTrials (percentile) is how many trials must complete before
	// any is judged (Optuna's n_startup_trials). Default 5.
	StartupTrials int `toml:"startup_trials" json:"startup_trials,omitempty"`
	// Interval (percentile, threshold, patient, wilcoxon) is the least
	// time between two judgements of a trial (Optuna's interval_steps).
	// Zero, the default, judges every result.
	Interval float64 `toml:"interval" json:"interval,omitempty"`
	// Lower and Upper (threshold; at least one) bound the metric, in its
	// own units: a value below Lower or above Upper stops the trial.
	Lower *float64 `toml:"lower" json:"lower,omitempty"`
	Upper *float64 `toml:"upper" json:"upper,omitempty"`
	// Patience (patient, required) is how many results, besides the
	// latest, the patient pruner looks back: a trial stops when the best
	// of its last patience+1 results is worse than its best before them by
	// more than MinDelta. A pointer so that 0 can be said.
	Patience *int `toml:"patience" json:"patience,omitempty"`
	// MinDelta (patient) is how much worse than before a trial's recent
	// best may be before it stops. Default 0.
	MinDelta float64 `toml:"min_delta" json:"min_delta,omitempty"`
	// PThreshold (wilcoxon) is the p-value under which a trial worse than
	// the best completed one stops. Default 0.1.
	PThreshold float64 `toml:"p_threshold" json:"p_threshold,omitempty"`
	// StartupSteps (wilcoxon) is how many times a trial and the best
	// completed one must both have reported before the test is made
	// (Optuna's n_startup_steps). Default 2.
	StartupSteps int `toml:"startup_steps" json:"startup_steps,omitempty"`

	// PerturbationInterval (pbt, required) is the time between two exploit
	// and explore steps of a trial.
	PerturbationInterval float64 `toml:"perturbation_interval" json:"perturbation_interval,omitempty"`
	// QuantileFraction (pbt) is the fraction of trials in the bottom
	// quantile (which copy from the top quantile) and in the top one.
	// Default 0.25; at most 0.5.
	QuantileFraction float64 `toml:"quantile_fraction" json:"quantile_fraction,omitempty"`
	// ResampleProbability (pbt) is the chance that explore draws a mutated
	// parameter afresh from its domain instead of perturbing it. Nil means
	// 0.25; it is a pointer so that 0 (always perturb) can be said.
	ResampleProbability *float64 `toml:"resample_probability" json:"resample_probability,omitempty"`
	// PerturbationFactors (pbt) are the factors a continuous parameter is
	// multiplied by when perturbed, one drawn at random. Default [1.2, 0.8].
	PerturbationFactors []float64 `toml:"perturbation_factors" json:"perturbation_factors,omitempty"`
	// HyperparamMutations (pbt) names the parameters explore changes and
	// the domain each is resampled from, in [search.space] syntax (for
	// example lr = { loguniform = [1e-4, 0.1] }) or, from Go, as a
	// searchspace.Domain. Empty means every non-constant parameter of the
	// search space, with its search domain.
	HyperparamMutations map[string]any `toml:"hyperparam_mutations" json:"hyperparam_mutations,omitempty"`
}

// Env is what a built-in scheduler is built against besides its Config:
// facts about the experiment that live outside the [scheduler] section.
type Env struct {
	// Metric names the objective metric; it is used in decision reasons.
	Metric string
	// Mode is the objective's "min" or "max". Results arrive with Score
	// already lower-is-better; Mode only turns values back into the
	// metric's own direction for reasons and Decision.Cutoff.
	Mode string
	// Checkpoints is true when trials checkpoint and the tuner can pause a
	// trial and resume it from its latest checkpoint, and copy one trial's
	// checkpoint into another. ASHA then defaults to mode "promote";
	// HyperBand and PBT, which need it, are refused without it.
	Checkpoints bool
	// Space is the search space, or nil. PBT mutates its non-constant
	// parameters unless hyperparam_mutations names others, and checks
	// those names against it.
	Space *searchspace.Space
	// Seed seeds the scheduler's random choices (PBT's donors and
	// perturbations); the same seed and events give the same decisions.
	Seed int64
	// Metrics and Modes, with two or more metrics, are the objectives of
	// a multi-objective experiment, read from each result's Metrics: ASHA
	// then ranks a rung's results by non-dominated sorting (Schmucker et
	// al., "Multi-objective Asynchronous Successive Halving", 2021);
	// HyperBand, median stopping and PBT, which rank by one score, refuse
	// them. Metric and Mode are then the first objective.
	Metrics, Modes []string
}

// DefaultTimeAttr is the time attribute every trial has: its number of
// reports so far.
const DefaultTimeAttr = "training_iteration"

// Kinds lists the scheduler kinds New accepts.
var Kinds = []string{"fifo", "asha", "hyperband", "median", "pbt", "percentile", "threshold", "patient", "wilcoxon"}

// FieldError is an invalid setting, named by its key relative to the
// [scheduler] section (for example "max_t" or
// "hyperparam_mutations.lr").
type FieldError struct {
	Key string
	Err error
}

func (e *FieldError) Error() string { return e.Key + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(key, format string, args ...any) error {
	return &FieldError{Key: key, Err: fmt.Errorf(format, args...)}
}

// WithDefaults returns c with every zero value that has a default for c's
// kind filled in, except ASHA's mode, whose default depends on
// Env.Checkpoints and is settled by New.
func (c Config) WithDefaults() Config {
	if c.Kind == "" {
		c.Kind = "fifo"
	}
	if c.TimeAttr == "" {
		c.TimeAttr = DefaultTimeAttr
	}
	switch c.Kind {
	case "asha", "hyperband":
		c.MaxT = orFloat(c.MaxT, 100)
		c.GracePeriod = orFloat(c.GracePeriod, 1)
		c.ReductionFactor = orFloat(c.ReductionFactor, 3)
		if c.Kind == "asha" && c.Brackets == 0 {
			c.Brackets = 1
		}
	case "median":
		c.GracePeriod = orFloat(c.GracePeriod, 1)
		if c.MinSamplesRequired == 0 {
			c.MinSamplesRequired = 3
		}
	case "percentile":
		if c.StartupTrials == 0 {
			c.StartupTrials = 5
		}
		if c.MinSamplesRequired == 0 {
			c.MinSamplesRequired = 1
		}
	case "wilcoxon":
		c.PThreshold = orFloat(c.PThreshold, 0.1)
		if c.StartupSteps == 0 {
			c.StartupSteps = 2
		}
	case "pbt":
		c.QuantileFraction = orFloat(c.QuantileFraction, 0.25)
		if c.ResampleProbability == nil {
			p := 0.25
			c.ResampleProbability = &p
		}
		if len(c.PerturbationFactors) == 0 {
			c.PerturbationFactors = []float64{1.2, 0.8}
		}
	}
	return c
}

// isTrue reads an optional flag whose default is true.
func isTrue(b *bool) bool { return b == nil || *b }

func orFloat(v, def float64) float64 {
	if v == 0 {
		return def
	}
	return v
}

// Validate checks c against env as New does, without keeping the
// scheduler.
func (c Config) Validate(env Env) error {
	_, err := New(c, env)
	return err
}

var attrName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_./-]*$`)

// New validates cfg (with defaults applied) against env and builds the
// scheduler it describes. Errors are *FieldError naming the key.
func New(cfg Config, env Env) (Scheduler, error) {
	if cfg.Kind == "" {
		cfg.Kind = "fifo"
	}
	if !slices.Contains(Kinds, cfg.Kind) {
		return nil, fieldErr("kind", "unknown scheduler %q (have %s)", cfg.Kind, strings.Join(Kinds, ", "))
	}
	if err := checkApplicable(cfg); err != nil {
		return nil, err
	}
	c := cfg.WithDefaults()
	if !attrName.MatchString(c.TimeAttr) {
		return nil, fieldErr("time_attr", "%q is not a metric name (letters, digits, _ . / -)", c.TimeAttr)
	}
	if env.Mode != "" && env.Mode != "min" && env.Mode != "max" {
		return nil, fmt.Errorf("objective mode must be \"min\" or \"max\", got %q", env.Mode)
	}
	view := newView(env, c.TimeAttr)
	if len(env.Metrics) > 1 && c.Kind != "fifo" && c.Kind != "asha" {
		return nil, fieldErr("kind", "%s ranks trials by one objective, and the experiment has %d: use \"asha\" or \"fifo\"", c.Kind, len(env.Metrics))
	}
	switch c.Kind {
	case "fifo":
		return FIFO{}, nil
	case "asha":
		if err := checkRungs(c); err != nil {
			return nil, err
		}
		if c.Brackets < 1 {
			return nil, fieldErr("brackets", "must be at least 1, got %d", c.Brackets)
		}
		switch c.Mode {
		case "":
			c.Mode = "stop"
			if env.Checkpoints {
				c.Mode = "promote"
			}
		case "promote":
			if !env.Checkpoints {
				return nil, fieldErr("mode", "promote pauses trials at rungs and resumes them from checkpoints, which these trials cannot do: use \"stop\"")
			}
		case "stop":
		default:
			return nil, fieldErr("mode", "must be \"promote\" or \"stop\", got %q", c.Mode)
		}
		a, err := newASHA(c, view)
		if err == nil && len(env.Metrics) > 1 {
			a.metrics, a.modes = env.Metrics, env.Modes
		}
		return a, err
	case "hyperband":
		if err := checkRungs(c); err != nil {
			return nil, err
		}
		if !env.Checkpoints {
			return nil, fieldErr("kind", "hyperband pauses trials at rungs and resumes them from checkpoints, which these trials cannot do: use \"asha\" (its stop mode needs no checkpoints)")
		}
		return newHyperBand(c, view), nil
	case "median":
		if err := positive("grace_period", c.GracePeriod); err != nil {
			return nil, err
		}
		if c.MinSamplesRequired < 1 {
			return nil, fieldErr("min_samples_required", "must be at least 1, got %d", c.MinSamplesRequired)
		}
		if !isTrue(c.HardStop) && !env.Checkpoints {
			return nil, fieldErr("hard_stop", "false pauses trials and resumes them from checkpoints, which these trials cannot do: leave it true")
		}
		return newMedian(c, view), nil
	case "percentile", "threshold", "patient", "wilcoxon":
		if err := checkPruner(c); err != nil {
			return nil, err
		}
		return newPruner(c, view), nil
	case "pbt":
		p, err := newPBT(c, view, env)
		if err == nil && !env.Checkpoints {
			err = fieldErr("kind", "pbt restarts trials from other trials' checkpoints, which these trials cannot do")
		}
		return p, err
	}
	panic("unreachable: kind checked above")
}

// checkApplicable refuses settings that the chosen kind does not use.
func checkApplicable(c Config) error {
	set := []struct {
		key   string
		isSet bool
		kinds []string
	}{
		{"max_t", c.MaxT != 0, []string{"asha", "hyperband"}},
		{"grace_period", c.GracePeriod != 0, []string{"asha", "hyperband", "median", "percentile", "threshold", "patient", "wilcoxon"}},
		{"reduction_factor", c.ReductionFactor != 0, []string{"asha", "hyperband"}},
		{"brackets", c.Brackets != 0, []string{"asha"}},
		{"mode", c.Mode != "", []string{"asha"}},
		{"min_samples_required", c.MinSamplesRequired != 0, []string{"median", "percentile"}},
		{"percentile", c.Percentile != 0, []string{"percentile"}},
		{"startup_trials", c.StartupTrials != 0, []string{"percentile"}},
		{"interval", c.Interval != 0, []string{"percentile", "threshold", "patient", "wilcoxon"}},
		{"lower", c.Lower != nil, []string{"threshold"}},
		{"upper", c.Upper != nil, []string{"threshold"}},
		{"patience", c.Patience != nil, []string{"patient"}},
		{"min_delta", c.MinDelta != 0, []string{"patient"}},
		{"p_threshold", c.PThreshold != 0, []string{"wilcoxon"}},
		{"startup_steps", c.StartupSteps != 0, []string{"wilcoxon"}},
		{"hard_stop", c.HardStop != nil, []string{"median"}},
		{"stop_last_trials", c.StopLastTrials != nil, []string{"asha", "hyperband"}},
		{"perturbation_interval", c.PerturbationInterval != 0, []string{"pbt"}},
		{"quantile_fraction", c.QuantileFraction != 0, []string{"pbt"}},
		{"resample_probability", c.ResampleProbability != nil, []string{"pbt"}},
		{"perturbation_factors", len(c.PerturbationFactors) != 0, []string{"pbt"}},
		{"hyperparam_mutations", len(c.HyperparamMutations) != 0, []string{"pbt"}},
	}
	for _, s := range set {
		if s.isSet && !slices.Contains(s.kinds, c.Kind) {
			return fieldErr(s.key, "not used by kind %q (only by %s)", c.Kind, strings.Join(s.kinds, ", "))
		}
	}
	return nil
}

// checkPruner validates the settings of Optuna's pruners.
func checkPruner(c Config) error {
	if err := nonNegative("grace_period", c.GracePeriod); err != nil {
		return err
	}
	if err := nonNegative("interval", c.Interval); err != nil {
		return err
	}
	switch c.Kind {
	case "percentile":
		if !(c.Percentile > 0 && c.Percentile <= 100) {
			return fieldErr("percentile", "must be in (0, 100], got %g (50 is the median)", c.Percentile)
		}
		if c.StartupTrials < 0 {
			return fieldErr("startup_trials", "must not be negative, got %d", c.StartupTrials)
		}
		if c.MinSamplesRequired < 1 {
			return fieldErr("min_samples_required", "must be at least 1, got %d", c.MinSamplesRequired)
		}
	case "threshold":
		if c.Lower == nil && c.Upper == nil {
			return fieldErr("lower", "threshold needs lower, upper or both")
		}
		if c.Lower != nil && math.IsNaN(*c.Lower) {
			return fieldErr("lower", "must be a number, got NaN")
		}
		if c.Upper != nil && math.IsNaN(*c.Upper) {
			return fieldErr("upper", "must be a number, got NaN")
		}
		if c.Lower != nil && c.Upper != nil && *c.Lower > *c.Upper {
			return fieldErr("lower", "must not exceed upper (%g), got %g", *c.Upper, *c.Lower)
		}
	case "patient":
		if c.Patience == nil {
			return fieldErr("patience", "is required by kind \"patient\": how many results, besides the latest, to look back")
		}
		if *c.Patience < 0 {
			return fieldErr("patience", "must not be negative, got %d", *c.Patience)
		}
		if err := nonNegative("min_delta", c.MinDelta); err != nil {
			return err
		}
	case "wilcoxon":
		if !(c.PThreshold > 0 && c.PThreshold < 1) {
			return fieldErr("p_threshold", "must be in (0, 1), got %g", c.PThreshold)
		}
		if c.StartupSteps < 1 {
			return fieldErr("startup_steps", "must be at least 1, got %d", c.StartupSteps)
		}
	}
	return nil
}

// checkRungs validates the settings ASHA and HyperBand share.
func checkRungs(c Config) error {
	if err := positive("max_t", c.MaxT); err != nil {
		return err
	}
	if err := positive("grace_period", c.GracePeriod); err != nil {
		return err
	}
	if err := finite("reduction_factor", c.ReductionFactor); err != nil {
		return err
	}
	if c.ReductionFactor <= 1 {
		return fieldErr("reduction_factor", "must exceed 1, got %g", c.ReductionFactor)
	}
	if !below(c.GracePeriod, c.MaxT) {
		// Ray accepts it; gotune refuses a scheduler that can never stop
		// a trial early rather than run FIFO under another name.
		return fieldErr("grace_period", "must be below max_t (%g), got %g: with no rung below max_t no trial could stop early (use kind \"fifo\" to run every trial to the end)", c.MaxT, c.GracePeriod)
	}
	if c.Kind == "asha" && c.Brackets > 1 {
		// Bracket s starts at grace·η^s; each needs a rung below max_t.
		last := c.GracePeriod * math.Pow(c.ReductionFactor, float64(c.Brackets-1))
		if !below(last, c.MaxT) {
			most := len(milestones(c.GracePeriod, c.ReductionFactor, c.MaxT, 0))
			return fieldErr("brackets", "%d brackets need max_t above grace_period·reduction_factor^%d = %g; with these settings at most %d (a bracket without a rung below max_t would run its trials to the end)", c.Brackets, c.Brackets-1, last, most)
		}
	}
	return nil
}

func finite(key string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fieldErr(key, "must be a finite number, got %g", v)
	}
	return nil
}

func positive(key string, v float64) error {
	if err := finite(key, v); err != nil {
		return err
	}
	if v <= 0 {
		return fieldErr(key, "must be positive, got %g", v)
	}
	return nil
}

func nonNegative(key string, v float64) error {
	if err := finite(key, v); err != nil {
		return err
	}
	if v < 0 {
		return fieldErr(key, "must not be negative, got %g", v)
	}
	return nil
}

// relTol absorbs the rounding of milestones computed as products of
// floats (0.1·3·3 is 0.9000000000000001): times within it count as equal.
const relTol = 1e-9

// Reached reports whether time t has reached milestone m, a rung or a
// budget, within relTol. Every scheduler, and BOHB for its budgets,
// compares times with it.
func Reached(t, m float64) bool { return t >= reachedFrom(m) }

// reachedFrom is the earliest time that has reached milestone m.
func reachedFrom(m float64) float64 { return m - relTol*math.Max(1, math.Abs(m)) }

// below reports whether a is below b by more than rounding.
func below(a, b float64) bool { return !Reached(a, b) }

// milestones returns the rungs grace·η^(s+k), k ≥ 0, that lie below maxT.
func milestones(grace, eta, maxT float64, s int) []float64 {
	m := grace * math.Pow(eta, float64(s))
	var out []float64
	for ; below(m, maxT); m *= eta {
		out = append(out, m)
	}
	return out
}

// view renders scores for people: in the metric's own direction, named.
type view struct {
	metric, timeAttr string
	max              bool
}

func newView(env Env, timeAttr string) view {
	metric := env.Metric
	if metric == "" {
		metric = "score"
	}
	return view{metric: metric, timeAttr: timeAttr, max: env.Mode == "max"}
}

// value turns a lower-is-better score back into the metric's value.
func (v view) value(score float64) float64 {
	if v.max {
		return -score
	}
	return score
}

// worse is the word for a score that loses: "lower" for a "max" metric.
func (v view) worse() string {
	if v.max {
		return "lower"
	}
	return "higher"
}

// num formats a value for a reason.
func num(x float64) string { return fmt.Sprintf("%.6g", x) }

// HyperBandBudgets returns the times at which HyperBand with c's settings
// judges trials, ascending: max_t/η^k for k = s_max down to 0, every
// bracket's rungs, with max_t last. BOHB fits its model to the results
// at one of them. c must have its defaults applied.
func (c Config) HyperBandBudgets() []float64 {
	sMax := newHyperBand(c, view{}).sMax
	out := make([]float64, sMax+1)
	for k := range out {
		out[k] = c.MaxT / math.Pow(c.ReductionFactor, float64(sMax-k))
	}
	return out
}
