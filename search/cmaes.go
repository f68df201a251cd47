package search

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/c-bata/goptuna"
	"github.com/c-bata/goptuna/cmaes"

	"github.com/gotune/gotune/searchspace"
)

// CMAES is the covariance matrix adaptation evolution strategy (Hansen,
// "The CMA Evolution Strategy: A Tutorial", arXiv:1604.00772) of goptuna
// v0.9.0: it samples each generation from a multivariate normal over the
// numeric parameters and moves the normal towards the best of the
// generation once enough of its trials have ended. Log-scaled domains are
// searched in log space; quantised and integer ones are rounded.
//
// It searches numeric spaces only: uniform, loguniform, quniform,
// qloguniform, randint and lograndint parameters, at least two of them.
// Constants are passed through. A parameter may be conditional on a grid
// parameter (a condition on a choice has no choice here to name): the
// strategy draws it in every trial, and GridSearch drops it from the
// configurations where its condition fails. A choice has no order to move along, so
// NewCMAES refuses it.
//
// A trial the scheduler stopped early counts with its last result as a
// member of its generation (goptuna's CMA-ES ignores pruned trials, so
// gotune records it as complete); otherwise a sweep whose scheduler stops
// most trials would never finish a generation. Failed trials do not count:
// the generation is filled by later trials.
//
// Each suggestion reads the 1,000 most recently completed trials (see
// historyWindow), where the current generation's members are, so that its
// cost stays flat however long the history.
//
// Warm-started (see WarmStart), its first generation is centred on the
// best trials of another experiment.
//
// The same seed gives the same sequence of configurations when results
// arrive in the same order, as they do when trials run one at a time; a
// resumed experiment then goes on with the sequence (see Replay).
type CMAES struct {
	s       *study
	sampler *cmaes.Sampler
	space   *searchspace.Space
	seed    int64
	dists   map[string]any
	// conditional names the parameters that may be absent from a
	// configuration: those conditional on a grid parameter.
	conditional map[string]bool
	// suggested holds the configurations suggested or replayed, in a
	// finite space (integer and quantised parameters only) unless
	// CMAESAllowRepeats; nil otherwise.
	suggested *configSet
}

// CMAESOption is an option of NewCMAES.
type CMAESOption func(*CMAES)

// CMAESAllowRepeats lets CMA-ES suggest a configuration of a finite space
// again. By default a draw that rounds to a configuration suggested
// before is replaced by one not yet suggested, drawn at random, which the
// strategy learns as the trial's point; once every configuration was
// suggested, Suggest returns ErrExhausted.
func CMAESAllowRepeats() CMAESOption { return func(c *CMAES) { c.suggested = nil } }

var _ Searcher = (*CMAES)(nil)

// NewCMAES returns a CMA-ES searcher over space. It fails with a
// *ConfigError naming the parameter when space has a choice, a grid or a
// domain it cannot model, and when fewer than two numeric parameters are
// left to search. Wrap it in a GridSearch over space.WithoutGrid() to
// cross it with grid parameters.
func NewCMAES(space *searchspace.Space, seed int64, opts ...CMAESOption) (*CMAES, error) {
	numeric := 0
	for _, p := range space.Params() {
		switch p.Domain.(type) {
		case searchspace.Choice, searchspace.Grid:
			return nil, &ConfigError{Key: "search.space." + p.Name, Err: fmt.Errorf(
				"cmaes searches numeric spaces only, and %q is a %s: use algorithm \"tpe\" or \"random\", or make it numeric (randint, quniform)",
				p.Name, kindName(p.Domain))}
		case searchspace.Constant:
		default:
			numeric++
		}
	}
	if numeric < 2 {
		return nil, &ConfigError{Key: "search.algorithm", Err: fmt.Errorf(
			"cmaes needs at least two numeric parameters to search, the space has %d: use \"tpe\" or \"random\"", numeric)}
	}
	sampler := cmaes.NewSampler(cmaes.SamplerOptionSeed(seed))
	s, err := newStudy(space, "cmaes", goptuna.StudyOptionRelativeSampler(sampler))
	if err != nil {
		return nil, err
	}
	dists := make(map[string]any, len(s.params))
	for _, p := range s.params {
		dists[p.name] = p.dist
	}
	conditional := map[string]bool{}
	for _, p := range space.Params() {
		if p.When != nil {
			conditional[p.Name] = true
		}
	}
	c := &CMAES{s: s, sampler: sampler, space: space, seed: seed, dists: dists, conditional: conditional,
		suggested: newConfigSet(space)}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

var _ WarmStarter = (*CMAES)(nil)

// cmaesWarmFraction is the share of another experiment's trials, the
// best, that place the first normal of a warm-started CMA-ES (the
// fraction WS-CMA-ES, Nomura et al., AAAI 2021, takes by default).
const cmaesWarmFraction = 0.1

// WarmStart implements WarmStarter: the strategy's first normal is
// centred on the mean of the best tenth (at least two) of the trials
// that ended with a score, in the space it searches (log-scaled domains
// in log space), rather than on the middle of the domain. Its step size
// is goptuna's default (a sixth of the narrowest parameter's range)
// times how tightly those trials cluster: their standard deviation in
// each parameter over that of values spread evenly across its range,
// averaged over the parameters, at least 0.1. goptuna's CMA-ES takes no
// initial covariance, so this is WS-CMA-ES's mean and a single step size,
// not its full normal. Trials without a value for a parameter (one whose
// condition failed) are left out; with fewer than two left, the strategy
// starts as it would cold.
func (c *CMAES) WarmStart(trials []PriorTrial) error {
	type scored struct {
		score float64
		xs    []float64
	}
	var ranked []scored
	for _, pt := range trials {
		score, ok := pt.End.value()
		if !ok || math.IsNaN(score) {
			continue
		}
		xs := make([]float64, len(c.s.params))
		for i, p := range c.s.params {
			v, ok := pt.Config[p.name]
			if !ok {
				xs = nil
				break
			}
			xs[i] = cmaesCoordinate(p.dist, p.internal(v))
		}
		if xs != nil {
			ranked = append(ranked, scored{score, xs})
		}
	}
	if len(ranked) < 2 {
		return nil
	}
	slices.SortStableFunc(ranked, func(a, b scored) int { return cmp.Compare(a.score, b.score) })
	best := ranked[:max(2, int(math.Ceil(cmaesWarmFraction*float64(len(ranked)))))]
	mean := make(map[string]float64, len(c.s.params))
	narrowest, spread := math.Inf(1), 0.0
	for i, p := range c.s.params {
		m := 0.0
		for _, b := range best {
			m += b.xs[i] / float64(len(best))
		}
		variance := 0.0
		for _, b := range best {
			variance += (b.xs[i] - m) * (b.xs[i] - m) / float64(len(best))
		}
		low, high := cmaesBounds(p.dist)
		mean[p.name] = m
		narrowest = min(narrowest, high-low)
		if high > low {
			// The standard deviation of a uniform over [low, high] is (high − low)/√12.
			spread += math.Sqrt(variance) / ((high - low) / math.Sqrt(12)) / float64(len(c.s.params))
		}
	}
	sigma := narrowest / 6 * min(max(spread, 0.1), 1)
	sampler := cmaes.NewSampler(cmaes.SamplerOptionSeed(c.seed), cmaes.SamplerOptionInitialMean(mean), cmaes.SamplerOptionInitialSigma(sigma))
	s, err := newStudy(c.space, "cmaes", goptuna.StudyOptionRelativeSampler(sampler))
	if err != nil {
		return err
	}
	c.s, c.sampler = s, sampler
	return nil
}

// cmaesCoordinate is where goptuna's CMA-ES places a parameter's internal
// value x: its logarithm for a log-scaled distribution.
func cmaesCoordinate(dist any, x float64) float64 {
	if _, ok := dist.(goptuna.LogUniformDistribution); ok {
		return math.Log(x)
	}
	return x
}

// cmaesBounds is the range goptuna's CMA-ES searches for a distribution,
// in its coordinates (see cmaesCoordinate).
func cmaesBounds(dist any) (low, high float64) {
	switch d := dist.(type) {
	case goptuna.UniformDistribution:
		return d.Low, d.High
	case goptuna.LogUniformDistribution:
		return math.Log(d.Low), math.Log(d.High)
	case goptuna.DiscreteUniformDistribution:
		return d.Low, d.High
	case goptuna.IntUniformDistribution:
		return float64(d.Low), float64(d.High)
	}
	panic(fmt.Sprintf("search: no CMA-ES bounds for distribution %T", dist))
}

func kindName(d searchspace.Domain) string {
	if _, ok := d.(searchspace.Grid); ok {
		return "grid"
	}
	return "choice"
}

// Suggest implements Searcher.
func (c *CMAES) Suggest(trial int) (map[string]any, error) {
	id, xs, err := c.draw(trial)
	if err != nil {
		return nil, err
	}
	cfg := c.s.config()
	for _, p := range c.s.params {
		x, ok := xs[p.name]
		if !ok {
			return nil, fmt.Errorf("cmaes: goptuna returned no value for %s", p.name)
		}
		cfg[p.name] = p.external(x)
	}
	if cfg, _, err = c.suggested.claim(cfg, TrialRand(c.seed, trial)); err != nil {
		return nil, err
	}
	if err := c.recordDraw(trial, id, xs, cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Replay implements Replayer. The evolution strategy's state (its
// generator, its generation and the trials that belong to it) lives in
// goptuna's sampler and cannot be set, so Replay re-draws: it asks the
// sampler for the trial as Suggest does, which moves the strategy on
// exactly as the suggestion did, and records the configuration the trial
// ran with in place of the draw. Replayed in the order they were
// suggested and told, as a sequential run's trials are, the trials leave
// the strategy where it was, in the middle of its generation; otherwise
// the generations may be cut differently, but the strategy never draws
// the same point twice.
//
// A parameter conditional on a grid parameter is absent from the
// configurations where its condition fails; the strategy learns the value
// it drew for it all the same (the objective does not depend on it), so
// Replay records its draw where the configuration lacks it, as the
// suggestion had it.
func (c *CMAES) Replay(trial int, config map[string]any) error {
	id, xs, err := c.draw(trial)
	if err != nil {
		return fmt.Errorf("replay trial %d: %w", trial, err)
	}
	if c.suggested != nil {
		c.suggested.add(config)
	}
	return c.recordDraw(trial, id, xs, config)
}

// recordDraw records config as goptuna trial id's point, with the draw xs
// standing for the conditional parameters config lacks.
func (c *CMAES) recordDraw(trial, id int, xs map[string]float64, config map[string]any) error {
	full := make(map[string]any, len(config)+len(c.conditional))
	for k, v := range config {
		full[k] = v
	}
	for _, p := range c.s.params {
		if _, ok := full[p.name]; !ok && c.conditional[p.name] {
			full[p.name] = p.external(xs[p.name])
		}
	}
	return c.s.record(trial, id, full)
}

// draw creates the goptuna trial of a gotune trial and asks the sampler
// for its internal parameter values.
func (c *CMAES) draw(trial int) (int, map[string]float64, error) {
	id, err := c.s.newTrial(trial)
	if err != nil {
		return 0, nil, err
	}
	frozen, err := c.s.store.GetTrial(id)
	if err != nil {
		return 0, nil, err
	}
	xs, err := c.sampler.SampleRelative(c.s.study, frozen, c.dists)
	if err != nil {
		return 0, nil, fmt.Errorf("cmaes: %w", err)
	}
	return id, xs, nil
}

// OnResult implements Searcher. CMA-ES learns from finished trials only; a
// stopped trial's last result comes with OnTrialEnd.
func (c *CMAES) OnResult(int, Observation) {}

// OnTrialEnd implements Searcher: the trial counts towards its generation.
func (c *CMAES) OnTrialEnd(trial int, end TrialEnd) { c.s.onTrialEnd(trial, end) }
