package search

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/gotune/gotune/pareto"
	"github.com/gotune/gotune/searchspace"
)

// TPEStartupTrials is how many finished trials TPE waits for before it
// models the history; until then it samples at random, as Optuna does.
const TPEStartupTrials = 10

// tpeCandidates is how many configurations TPE draws from the good
// trials' density, keeping the one most likely under it relative to the
// other trials' density (Optuna's n_ei_candidates).
const tpeCandidates = 24

// TPE is the Tree-structured Parzen Estimator (Bergstra et al.,
// "Algorithms for Hyper-Parameter Optimization", NeurIPS 2011), modelling
// the parameters jointly. It splits the finished trials into the good
// ones, the best 10% (rounded up, at most 25), and the rest; fits a
// Parzen estimator l(x) to the good trials' configurations and g(x) to
// the others'; draws 24 candidates from l and keeps the one with the
// largest log l(x) − log g(x), the one expected to improve most.
//
// It starts from Optuna 3.1's TPESampler and departs from its defaults
// in four ways. Together they find better optima than Optuna's default
// TPE on all three of bench/search's functions (see the README); the
// first two make the difference:
//   - Multivariate: an estimator's component is a whole configuration,
//     a product of one kernel per parameter, so a candidate keeps the
//     combination of values a good trial had (as Optuna's
//     multivariate=True does; Falkner et al., BOHB, ICML 2018).
//   - Improvement weights: a good trial weighs in l by how much its
//     score improves on the best of the other trials, normalised to
//     average 1 (the "EI" weighting of Watanabe, "Tree-Structured Parzen
//     Estimator: Understanding Its Algorithm Components", 2023). The
//     better a trial, the more candidates come from near it.
//   - In a finite space without repeats, with one objective, half of
//     the suggestions (all while trials run, once the model has enough
//     results) are a good trial's most promising untried neighbour (the
//     best trial's while it has one, then those of the good trials far
//     from it, then the rest; once the good trials' are all tried, those
//     of the best trials far from the best, then a running neighbour's)
//     instead of the best draw (see suggestNeighbour).
//   - Kernel widths follow Optuna's univariate heuristic with
//     consider_endpoints (each parameter's gap to the neighbouring
//     values, the domain's bounds included), and a kernel's density has
//     the normal's 1/σ, as Optuna releases after 3.1 have it: without
//     it, the error would compound over the parameters of a component.
//
// The estimators (see kde) have one component per trial plus a prior
// component over the whole domain (of weight 1). A numeric kernel is a
// normal truncated to the domain, centred on the trial's value, as wide
// as the larger gap to its neighbouring values (the domain's bounds for
// the outermost two), clipped to between the domain's
// width/min(100, components+1) and its width. In g, the 25 newest
// trials weigh 1 and older ones ramp down linearly to 1/count.
// Log-scaled domains (loguniform, qloguniform, lograndint) are modelled
// in log space; quantised and integer domains (quniform, randint) on
// their range widened by half a step, scoring a candidate by the mass of
// its step, and rounded; lograndint and qloguniform are continuous in
// log space and rounded, as Optuna does for a log-scaled integer.
// Choices (and grid parameters, when TPE samples them) get Optuna's
// categorical kernel: a trial's kernel puts weight 1 on its choice plus
// an even share of the prior.
//
// Until TPEStartupTrials trials have finished it draws each parameter at
// random from its domain. Trials the scheduler stopped early count, as
// Optuna counts pruned trials: after every trial that ran to its end,
// the further they got the better, then by their last score; a stopped
// trial without a score ranks last. The good trials weigh the same when
// a stopped trial is among them or next after them, or a score is
// infinite: improvements are comparable only between completed trials.
// Failed trials, completed trials without a score (or with a NaN one)
// and trials still running do not count as results. Trials still
// running shape the next suggestion all the same: in a finite space
// their configurations, like every one suggested before, are never
// suggested again (unless TPEAllowRepeats), and they join g as
// constant liars (see appendPending) that in a finite space weigh
// nothing (see gWeight).
//
// Trial n draws from a generator of its own, TrialRand(seed, n), so what
// it draws does not depend on how many suggestions came before it: the
// same seed, with the same trials finished when each is suggested (as
// when trials run one at a time), gives the same configurations, and a
// resumed experiment (see Replayer) continues as if never interrupted.
//
// At most the tpeWindow (1,000) newest of the other trials make up g, so
// that a suggestion's cost stays flat however many trials have finished:
// O(m·p) to fit the estimators (a radix sort orders the kernels) and
// O(24·m·p) to score the candidates, for m = min(n, 1,025) of n
// finished trials and p parameters (about 0.25 ms at 3 parameters). The
// good trials are always the best of the whole history.
type TPE struct {
	params []tpeParam
	consts map[string]any
	seed   int64
	// space decides which conditional parameters a configuration has;
	// conditional is whether it has any.
	space       *searchspace.Space
	conditional bool
	// constraints decide a finished trial's feasibility; nil for none.
	constraints []Constraint
	// objs are the objectives of a multi-objective sweep; nil otherwise.
	objs []Objective
	// pending holds the model-space values of each trial suggested or
	// replayed and not yet ended.
	pending map[int][]float64
	h       tpeHistory
	// suggested holds the configurations suggested, replayed or warm
	// started, in a finite space that allows no repeats; nil otherwise.
	suggested *configSet
	// liar: pending trials join g (see appendPending); false only to
	// measure without it.
	liar bool

	// Scratch space, reused across suggestions: ids and weights list the
	// observations an estimator is fitted to, and their weights; cand is
	// a candidate; inGood marks the good observations for others.
	ids     []int32
	weights []float64
	cand    []float64
	inGood  []bool
	l, g    kde
}

var _ Searcher = (*TPE)(nil)

// tpeParam is one searched parameter as TPE models it.
type tpeParam struct {
	name   string
	domain searchspace.Domain
	// choices are a categorical parameter's values; nil for a numeric one.
	choices []any
	// low, high and step describe a numeric parameter's model space (see
	// kdeDim).
	low, high, step float64
	// snap maps a model-space draw onto the domain: the configuration
	// value and its own model-space value.
	snap func(x float64) (any, float64)
	// model maps a configuration value to model space; ok is false when
	// v is not a value of the domain's type.
	model func(v any) (x float64, ok bool)
	// conditional: the parameter may be absent from a configuration
	// (NaN in model space). blind: its condition names a parameter TPE
	// does not search (a grid parameter), so TPE cannot tell when it is
	// present and does not model it: it is always NaN in model space,
	// and drawn from the prior.
	conditional, blind bool
}

// NewTPE returns a TPE searcher over space whose trials draw from
// generators derived from seed (see TrialRand). It fails, with a *ConfigError naming the parameter,
// on a domain it cannot model (a user-defined Domain). Grid parameters
// are modelled like choices; wrap the searcher in a GridSearch over
// space.WithoutGrid() to expand them instead.
func NewTPE(space *searchspace.Space, seed int64, opts ...TPEOption) (*TPE, error) {
	t := &TPE{consts: map[string]any{}, seed: seed, pending: map[int][]float64{}, space: space, conditional: space.Conditional(),
		suggested: newConfigSet(space), liar: true}
	for _, o := range opts {
		o(t)
	}
	for _, p := range space.Params() {
		if c, ok := p.Domain.(searchspace.Constant); ok {
			t.consts[p.Name] = c.Value
			continue
		}
		tp, err := newTPEParam(p)
		if err != nil {
			return nil, &ConfigError{Key: "search.space." + p.Name, Err: fmt.Errorf("tpe: %w", err)}
		}
		tp.conditional = p.When != nil
		tp.blind = p.When != nil && space.Domain(p.When.Param) == nil
		t.params = append(t.params, tp)
	}
	t.h.cols = make([][]float64, len(t.params))
	return t, nil
}

// TPEOption customises a TPE searcher.
type TPEOption func(*TPE)

// TPEAllowRepeats lets TPE suggest a configuration of a finite space
// again, for a noisy objective where a repeat measures something new.
func TPEAllowRepeats() TPEOption { return func(t *TPE) { t.suggested = nil } }

// TPEIgnorePending makes TPE model finished trials only, leaving out the
// trials still running (see fit): the way TPE suggested before it knew
// of them, kept to measure what they bring.
func TPEIgnorePending() TPEOption { return func(t *TPE) { t.liar = false } }

// tpeWidenDraws makes TPE draw its candidates from l with every
// numeric kernel factor times as wide (at most its domain's width),
// scoring them with l and g as fitted (see BOHB).
func tpeWidenDraws(factor float64) TPEOption { return func(t *TPE) { t.l.widen = factor } }

// TPEConstraints makes TPE model feasibility, as Optuna's TPESampler does
// with a constraints_func: a finished trial whose last result fails one
// of cs (see Violation) ranks after every feasible trial, stopped ones
// included, the infeasible ones by how far they miss. So the good group
// holds feasible trials whenever there are enough, and TPE draws from
// where they are.
func TPEConstraints(cs []Constraint) TPEOption { return func(t *TPE) { t.constraints = cs } }

// TPEObjectives makes TPE optimise every objective of objs when there are
// several, as MOTPE does (see goodMulti): a trial's
// objectives are its last result's metrics, and the good trials the first
// ones in Pareto order. Suggestions then take turns: an odd-numbered
// trial draws each parameter on its own (suggestMarginal), an even one
// draws configurations that recombine the good trials' values and keeps
// the best of them jointly (fit). With one objective it changes nothing.
//
// Each way alone falls behind on some problem: in bench/search, drawing
// each parameter on its own (as Optuna's default TPESampler does)
// reaches a much larger hypervolume on DTLZ2 (3 objectives, the good
// trials spread over a surface) and a smaller one on ZDT1 and ZDT2 than
// drawing whole configurations; taking turns keeps nearly all of the
// gain on DTLZ2 and is ahead of both on ZDT1 and ZDT2.
func TPEObjectives(objs []Objective) TPEOption {
	return func(t *TPE) {
		if len(objs) > 1 {
			t.objs = objs
		}
	}
}

func newTPEParam(p searchspace.Param) (tpeParam, error) {
	tp := tpeParam{name: p.Name, domain: p.Domain}
	asFloat := func(v any) (float64, bool) { x, ok := v.(float64); return x, ok }
	logFloat := func(v any) (float64, bool) { x, ok := v.(float64); return math.Log(x), ok && x > 0 }
	asInt := func(v any) (float64, bool) { k, ok := v.(int64); return float64(k), ok }
	logInt := func(v any) (float64, bool) { k, ok := v.(int64); return math.Log(float64(k)), ok && k > 0 }
	switch d := p.Domain.(type) {
	case searchspace.Uniform:
		tp.low, tp.high, tp.model = d.Low, d.High, asFloat
		tp.snap = func(x float64) (any, float64) { v := halfOpen(x, d.Low, d.High); return v, v }
	case searchspace.LogUniform:
		tp.low, tp.high, tp.model = math.Log(d.Low), math.Log(d.High), logFloat
		tp.snap = func(x float64) (any, float64) { v := halfOpen(math.Exp(x), d.Low, d.High); return v, math.Log(v) }
	case searchspace.QUniform:
		tp.low, tp.high, tp.step, tp.model = d.Low-d.Q/2, d.Value(d.Steps())+d.Q/2, d.Q, asFloat
		tp.snap = func(x float64) (any, float64) { v := d.Round(x); return v, v }
	case searchspace.QLogUniform:
		tp.low, tp.high, tp.model = math.Log(d.Low), math.Log(d.High), logFloat
		tp.snap = func(x float64) (any, float64) { v := d.Round(math.Exp(x)); return v, math.Log(v) }
	case searchspace.RandInt:
		tp.low, tp.high, tp.step, tp.model = float64(d.Low)-0.5, float64(d.High-1)+0.5, 1, asInt
		tp.snap = func(x float64) (any, float64) { k := roundInt(x, d.Low, d.High-1); return k, float64(k) }
	case searchspace.LogRandInt:
		tp.low, tp.high, tp.model = math.Log(float64(d.Low)-0.5), math.Log(float64(d.High-1)+0.5), logInt
		tp.snap = func(x float64) (any, float64) {
			k := roundInt(math.Exp(x), d.Low, d.High-1)
			return k, math.Log(float64(k))
		}
	case searchspace.Choice:
		tp.choices = d.Values
	case searchspace.Grid:
		tp.choices = d.Values
	default:
		return tpeParam{}, fmt.Errorf("cannot model a domain of type %T: use random search, or one of the searchspace domains", p.Domain)
	}
	if tp.choices != nil {
		tp.model = func(v any) (float64, bool) { i := slices.Index(tp.choices, v); return float64(i), i >= 0 }
		tp.snap = func(x float64) (any, float64) { return tp.choices[int(x)], x }
	}
	return tp, nil
}

// roundInt rounds x half to even, as numpy does, into [low, high].
func roundInt(x float64, low, high int64) int64 {
	return int64(min(max(math.RoundToEven(x), float64(low)), float64(high)))
}

// modelValue maps a configuration value to model space, clamped into
// the model's bounds (a scheduler's perturbation may reach a closed
// bound of a half-open range).
func (p *tpeParam) modelValue(v any) (float64, error) {
	x, ok := p.model(v)
	if !ok || math.IsNaN(x) {
		return 0, fmt.Errorf("%s = %v (%T) is not a value of %s", p.name, v, v, p.domain)
	}
	if p.choices != nil {
		return x, nil
	}
	return min(max(x, p.low), p.high), nil
}

// modelValues maps a configuration to model space, parameter by
// parameter: NaN for a parameter that is not modelled, or absent because
// its condition does not hold.
func modelValues(params []tpeParam, config map[string]any) ([]float64, error) {
	xs := make([]float64, len(params))
	for i := range params {
		p := &params[i]
		v, ok := config[p.name]
		switch {
		case p.blind || !ok && p.conditional:
			xs[i] = math.NaN()
			continue
		case !ok:
			return nil, fmt.Errorf("the configuration has no value for %s", p.name)
		}
		x, err := p.modelValue(v)
		if err != nil {
			return nil, err
		}
		xs[i] = x
	}
	return xs, nil
}

// Suggest implements Searcher.
func (t *TPE) Suggest(trial int) (map[string]any, error) {
	cfg := make(map[string]any, len(t.params)+len(t.consts))
	for k, v := range t.consts {
		cfg[k] = v
	}
	xs := make([]float64, len(t.params))
	r := TrialRand(t.seed, trial)
	n := len(t.h.trial)
	if n < TPEStartupTrials {
		for i := range t.params {
			p := &t.params[i]
			v := p.domain.Sample(r)
			x, err := p.modelValue(v)
			if err != nil {
				return nil, fmt.Errorf("tpe: %w", err)
			}
			cfg[p.name], xs[i] = v, x
		}
	} else if len(t.objs) > 1 && trial%2 == 1 {
		if err := t.suggestMarginal(r, cfg, xs); err != nil {
			return nil, err
		}
	} else {
		t.suggestJoint(r, cfg, xs)
		t.suggestNeighbour(r, cfg, xs)
	}
	if t.conditional {
		t.prune(cfg, xs)
	}
	// Where every candidate was suggested before: one that was not, at random.
	cfg, xs, err := t.suggested.claimModelled(cfg, xs, t.params, r, "tpe")
	if err != nil {
		return nil, err
	}
	t.pending[trial] = xs
	return cfg, nil
}

// tpeMoreCandidates is how many candidates suggestJoint draws from l at
// most, in a finite space, to find one not suggested before once the
// first tpeCandidates all were.
const tpeMoreCandidates = 10 * tpeCandidates

// suggestJoint sets cfg and xs to the best of tpeCandidates
// configurations drawn from l: the one with the largest log l − log g.
// In a finite space that allows no repeats, a candidate suggested
// before does not count; when all tpeCandidates were, it draws on, up
// to tpeMoreCandidates, until one was not (and leaves cfg a repeat,
// for Suggest to replace, when none is found).
func (t *TPE) suggestJoint(r *rand.Rand, cfg map[string]any, xs []float64) {
	t.fit()
	t.cand = grow(t.cand, len(t.params))
	values := make([]any, len(t.params))
	best := math.Inf(-1)
	found := false
	var cand map[string]any
	for c := 0; c < tpeCandidates || t.suggested != nil && !found && c < tpeMoreCandidates; c++ {
		t.l.sample(r, t.cand)
		for i := range t.params {
			values[i], t.cand[i] = t.params[i].snap(t.cand[i])
		}
		if t.conditional || t.suggested != nil {
			// Score a candidate on the parameters it has.
			cand = t.configOf(values)
			if t.conditional {
				t.prune(cand, t.cand)
			}
		}
		seen := t.suggested != nil && t.suggested.has(cand)
		if seen && (found || c > 0) {
			continue
		}
		if score := t.l.logPDF(t.cand) - t.g.logPDF(t.cand); c == 0 || !found && !seen || score > best {
			best, found = score, !seen
			copy(xs, t.cand)
			for i := range t.params {
				cfg[t.params[i].name] = values[i]
			}
		}
	}
}

// tpeNeighbourShare is the share of suggestions, each trial drawing for
// itself, that suggestNeighbour may replace with a neighbour of a good
// trial, but for those made while trials run (see neighbourShare).
const tpeNeighbourShare = 0.5

// neighbourShare is the share of suggestions that suggestNeighbour may
// replace: all of them while trials run, as long as at most half as many
// run as have finished; tpeNeighbourShare otherwise (one trial at a time,
// and in the first rounds of a batch, which the model knows too little to
// aim).
//
// The neighbours of the good trials are many where the best one's are
// few, and trials that run at once share them out, each taking one not
// suggested before. In bench/search's tabular benchmarks (seeds 0–59 and
// 60–119, 8 and 32 trials at once, synchronous and asynchronous, after
// 100 and 200 trials) a run with it ends with the lower regret than one
// without it in 49–53% of pairs on the first seeds and 49–53% on the
// others, 51.6% and 51.2% on average; with every suggestion made while
// trials run, even in the first rounds, 32 synchronous trials fell behind
// after 100 (47.9%).
func (t *TPE) neighbourShare() float64 {
	if running := len(t.pending); running > 0 && 2*running <= len(t.h.trial) {
		return 1
	}
	return tpeNeighbourShare
}

// suggestNeighbour replaces the suggestion in cfg and xs, drawn by
// suggestJoint, for a share of trials (see neighbourShare; drawn from r),
// with a neighbour of a good trial, in a finite space without repeats,
// with one objective and no conditional parameters (BOHB, which draws
// from widened kernels to explore, keeps its own suggestion): of the
// good trials, best first but for those far from the best one, which
// come right after it (see farFirst), the first with a neighbour not
// suggested before gives its neighbour with the largest log l − log g. A
// neighbour differs from its trial in one parameter: an integer or
// quantised range's next value up or down, or another of a choice's
// values; a log-scaled range, or one of more than maxNeighbourLevels
// values, has none. When every good trial's neighbours were suggested,
// the good trials are local optima of what was tried, and the best
// trials far from the best one (see farFrom), as many as there are good
// trials, give theirs: local searches in other basins. When theirs were
// too, the running trials that are a good trial's neighbours (the best
// trial's first, then in trial order) give theirs in turn: a step
// further in a direction the search is already taking, before its
// results are in. When theirs were too, the suggestion stays: TPE's own
// draw goes on from there.
//
// TPE's draws from l land near good trials, but on a grid of a few
// levels the nearest untried configuration is often a step in one
// parameter, which a product of kernels as wide as the gaps between
// values rarely draws. In bench/search's seven tabular benchmarks (seeds
// 0–59, 420 runs per setting) the runs at a table's optimum after 100
// trials went from 98 to 226 one trial at a time, from 134 to 214 with 8
// trials at once and from 89 to 117 with 32 (synchronous batches), and
// after 200 trials from 198 to 274, 239 to 263 and 229 to 234, with the
// best trial's neighbours alone. Going on to the next good trial once
// the best one's neighbours were all tried, a local search from each
// good trial in turn, took the runs at the optimum after 200 trials
// further, to 296, 288 and 271 (after 100: 213, 212 and 113, level).
// Replacing every suggestion, instead of half, did about as well one at
// a time and worse with 8 at once; keeping the neighbour only when it
// scored above TPE's own draw gained less. Going on from the running
// trials next to good ones (one at a time, none run) took the runs at
// the optimum after 200 trials with 8 asynchronous from 293 to 307 (265
// to 290 on seeds 60–119), the other settings level; searching around
// those running trials right after their good trial, before the next
// good trial's neighbours, gained with 32 synchronous after 100 trials
// (112 to 133) and lost after 200 (288 to 256).
//
// Going on from the best trials far from the best once the good ones'
// neighbours were tried, before the running trials', and searching
// around the good trials far from the best before those near it, took
// the runs at the optimum after 200 trials from 296 to 305 one at a
// time, 294 to 317 with 8 synchronous, 314 to 323 with 8 asynchronous,
// 288 to 312 with 32 synchronous and 255 to 267 with 32 asynchronous
// (seeds 0–59; on seeds 60–119, 300 to 313, 283 to 314, 298 to 303, 266
// to 291 and 259 to 264), most on Rosenbrock, whose valley holds a local
// search; against the same setting without it, a run with it ends lower
// in 50.5–53.7% of pairs after 200 trials and 49.2–51.7% after 100.
// With the far trials after the running ones' neighbours instead, the
// runs with trials at once gained less (306, 315 and 263 after 200
// trials with 32 synchronous, 8 and 32 asynchronous, seeds 0–59).
func (t *TPE) suggestNeighbour(r *rand.Rand, cfg map[string]any, xs []float64) {
	if t.suggested == nil || len(t.objs) > 1 || t.conditional || t.l.widen > 1 || len(t.h.best) == 0 || r.Float64() >= t.neighbourShare() {
		return
	}
	best := t.h.point(t.h.best[0], make([]float64, len(t.params)))
	if t.patternMove(best, cfg, xs) {
		return
	}
	good := t.farFirst(t.h.best[:tpeGamma(len(t.h.trial))], best)
	at := make([]float64, len(t.params))
	for _, id := range good {
		if t.untriedNeighbour(t.h.point(id, at), cfg, xs) {
			return
		}
	}
	// Every good trial is a local optimum of what was tried: the best
	// trials of other basins are searched around next, of the tpeWindow
	// best, so that the cost stays flat however long the history.
	far := 0
	for _, id := range t.h.best[1:min(len(t.h.best), tpeWindow)] {
		if far == len(good) {
			break
		}
		if farFrom(best, t.h.point(id, at)) {
			far++
			if t.untriedNeighbour(at, cfg, xs) {
				return
			}
		}
	}
	running := t.runningTrials()
	for _, id := range good {
		t.h.point(id, at)
		for _, trial := range running {
			if x := t.pending[trial]; t.stepFrom(x, at) >= 0 && t.untriedNeighbour(x, cfg, xs) {
				return
			}
		}
	}
}

// patternMove sets cfg and xs to the best trial moved at once by the
// steps that improved on the trial it improved on, and reports whether
// it found such a move not suggested before. That trial, q, is the best
// of the tpeMaxBelow+1 best trials that is a neighbour of the best one
// (see stepFrom), and a step that improved on it is a better trial
// that is q's neighbour in another parameter than the one in which the
// best trial differs from q (the best such trial for each parameter,
// taken best first). With k such steps the best trial takes the best k,
// then the best k−1, down to 2 (one step is a neighbour, for
// untriedNeighbour): the first combination not suggested before. A
// pattern move, as Hooke and Jeeves's search makes, after the steps a
// batch tried around q in parallel; one trial at a time, the best trial
// changes at the first improving step, and there is rarely a second.
//
// In bench/search's seven tabular benchmarks (-tabular-against), it
// took the runs at the optimum after 100 trials with 32 synchronous from
// 121 to 143 of 420 (seeds 0–59; 117 to 126 on seeds 60–119) and with
// 32 asynchronous from 63 to 69 (70 to 74), and a run with it ends with
// the lower regret than one without in 52.8% and 51.6% of pairs there
// (52.1% and 51.5% on seeds 60–119); the other settings, and every
// setting after 200 trials, were level (49.7–50.7%). Moving by every
// step in turn from each of the good trials, not only the best, lost
// with 8 at once (49.0%, seeds 0–59); a second step in the direction the
// best trial took from q gained one at a time on seeds 0–59 (50.9%) and
// lost on seeds 60–99 (49.2%).
func (t *TPE) patternMove(best []float64, cfg map[string]any, xs []float64) bool {
	top := t.h.best
	at := make([]float64, len(t.params))
	var q []float64
	var qi, qAt int
	for k, id := range top[1:] {
		if i := t.stepFrom(best, t.h.point(id, at)); i >= 0 {
			q, qi, qAt = slices.Clone(at), i, k+1
			break
		}
	}
	if q == nil {
		return false
	}
	// The better trials one step from q, best first: the steps, one per
	// parameter.
	type step struct {
		param int
		value float64
	}
	var steps []step
	for _, id := range top[1:qAt] {
		i := t.stepFrom(t.h.point(id, at), q)
		if i >= 0 && i != qi && !slices.ContainsFunc(steps, func(s step) bool { return s.param == i }) {
			steps = append(steps, step{i, at[i]})
		}
	}
	values := make([]any, len(t.params))
	for k := len(steps); k >= 2; k-- {
		copy(at, best)
		for _, s := range steps[:k] {
			at[s.param] = s.value
		}
		if cand := t.untriedAt(at, values); cand != nil {
			for name, v := range cand {
				cfg[name] = v
			}
			copy(xs, at)
			return true
		}
	}
	return false
}

// farFirst returns the good trials, best first, in the order
// suggestNeighbour searches around them: the best one (whose model-space
// point is best), then those far from it (see farFrom), then the rest,
// each group best first.
func (t *TPE) farFirst(good []int32, best []float64) []int32 {
	at := make([]float64, len(t.params))
	order := make([]int32, 1, len(good))
	order[0] = good[0]
	var near []int32
	for _, id := range good[1:] {
		if farFrom(best, t.h.point(id, at)) {
			order = append(order, id)
		} else {
			near = append(near, id)
		}
	}
	return append(order, near...)
}

// farFrom reports whether the model-space point x differs from best in
// more than three quarters of the parameters: a point of another basin
// than best's rather than a step or two from it.
func farFrom(best, x []float64) bool {
	differ := 0
	for i := range best {
		if x[i] != best[i] {
			differ++
		}
	}
	return 4*differ > 3*len(best)
}

// untriedNeighbour sets cfg and xs to the neighbour of the model-space
// point at not suggested before that has the largest log l − log g, and
// reports whether it had one.
func (t *TPE) untriedNeighbour(at []float64, cfg map[string]any, xs []float64) bool {
	x := make([]float64, len(t.params))
	values := make([]any, len(t.params))
	bestScore := math.Inf(-1)
	var bestX []float64
	var bestCfg map[string]any
	for i := range t.params {
		p := &t.params[i]
		for _, v := range p.neighbours(at[i]) {
			copy(x, at)
			x[i] = v
			cand := t.untriedAt(x, values)
			if cand == nil {
				continue
			}
			if score := t.l.logPDF(x) - t.g.logPDF(x); score > bestScore {
				bestScore, bestX, bestCfg = score, slices.Clone(x), cand
			}
		}
	}
	if bestCfg == nil {
		return false
	}
	for k, v := range bestCfg {
		cfg[k] = v
	}
	copy(xs, bestX)
	return true
}

// untriedAt snaps the model-space point x, in place, to values of the
// domains, which it sets in values, and returns its configuration; nil
// when that was suggested before.
func (t *TPE) untriedAt(x []float64, values []any) map[string]any {
	for i := range t.params {
		values[i], x[i] = t.params[i].snap(x[i])
	}
	cand := t.configOf(values)
	if t.suggested.has(cand) {
		return nil
	}
	return cand
}

// stepFrom returns the parameter in which the model-space point x is a
// neighbour of at: the one parameter in which they differ, x's value
// being one of at's neighbours there; −1 when x is not a neighbour.
func (t *TPE) stepFrom(x, at []float64) int {
	differ := -1
	for i := range t.params {
		if x[i] != at[i] {
			if differ >= 0 {
				return -1
			}
			differ = i
		}
	}
	if differ < 0 || !slices.Contains(t.params[differ].neighbours(at[differ]), x[differ]) {
		return -1
	}
	return differ
}

// runningTrials returns the numbers of the trials still running (see
// pending), in increasing order.
func (t *TPE) runningTrials() []int {
	trials := make([]int, 0, len(t.pending))
	for trial := range t.pending {
		trials = append(trials, trial)
	}
	slices.Sort(trials)
	return trials
}

// configOf returns the configuration of the constants and of values,
// the searched parameters' values in the order of t.params.
func (t *TPE) configOf(values []any) map[string]any {
	cfg := make(map[string]any, len(t.consts)+len(t.params))
	for k, v := range t.consts {
		cfg[k] = v
	}
	for i := range t.params {
		cfg[t.params[i].name] = values[i]
	}
	return cfg
}

// maxNeighbourLevels bounds the values of an integer or quantised range
// whose next value up or down is a neighbour: in a wider one (hidden
// units from 32 to 1024, say) the next value is all but the same
// configuration, and TPE's draws serve better.
const maxNeighbourLevels = 64

// neighbours returns the model-space values next to x: for a choice
// every other one, for an integer or quantised range of at most
// maxNeighbourLevels values the next value up and down that the domain
// has; none for a wider, continuous or log-scaled one.
func (p *tpeParam) neighbours(x float64) []float64 {
	if p.choices != nil {
		out := make([]float64, 0, len(p.choices)-1)
		for k := range p.choices {
			if float64(k) != x {
				out = append(out, float64(k))
			}
		}
		return out
	}
	var out []float64
	if p.step > 0 && (p.high-p.low)/p.step <= maxNeighbourLevels {
		for _, v := range []float64{x - p.step, x + p.step} {
			if v > p.low && v < p.high {
				out = append(out, v)
			}
		}
	}
	return out
}

// tpeWindow bounds the other trials g is fitted to: the tpeWindow newest
// of them by trial number. Older ones already weigh little in g (see
// tpeWeight), and the bound keeps a suggestion's cost flat however long
// the history: below tpeWindow + 25 finished trials every one counts.
const tpeWindow = 1000

// prune drops from cfg the parameters whose conditions do not hold and
// marks them, and those TPE does not model, NaN in xs.
func (t *TPE) prune(cfg map[string]any, xs []float64) {
	t.space.Prune(cfg)
	for i := range t.params {
		p := &t.params[i]
		if _, ok := cfg[p.name]; !ok || p.blind {
			xs[i] = math.NaN()
		}
	}
}

// fit fits l to the good trials, weighted by improvement (see
// improvements), and g to the newest tpeWindow of the others, weighted
// by age: the order of their trial numbers, the running trials last
// (see appendPending).
//
// The running trials stay out of l. In a finite space they once joined
// it with no weight while at most a quarter as many ran as had
// finished, to narrow the kernels of the good trials beside them; with
// the neighbour moves (see suggestNeighbour) that no longer helped. In
// bench/search's seven tabular benchmarks, leaving them out took the
// runs at the optimum after 100 and 200 trials with 8 asynchronous from
// 197 to 204 and 307 to 314 of 420 (seeds 0–59; 182 to 187 and 290 to
// 298 on seeds 60–119), and it ended with the lower regret in 51% of
// pairs there; the other settings were level.
//
// With several objectives, l draws each parameter from a component of
// its own (see kde.independent), so that a candidate can recombine the
// values of several good trials, which lie along a front rather than
// around one optimum.
func (t *TPE) fit() {
	n := len(t.h.trial)
	var good []int32
	t.l.independent = len(t.objs) > 1
	if len(t.objs) > 1 {
		good = t.goodMulti()
		t.l.fit(t.params, t.h.cols, good, t.contributions(good))
	} else {
		good = t.h.best[:tpeGamma(n)]
	}
	t.others(good)
	t.appendPending()
	defer t.dropPending()
	if len(t.objs) <= 1 {
		t.l.fit(t.params, t.h.cols, good, t.improvements(good))
	}
	t.weights = grow(t.weights, len(t.ids))
	for k, id := range t.ids {
		t.weights[k] = t.gWeight(k, id, len(t.ids))
	}
	t.g.fit(t.params, t.h.cols, t.ids, t.weights)
}

// appendPending adds the trials still running (suggested or replayed,
// not yet ended) to g's observations, after the others as the newest, in
// trial order: Optuna's constant liar (TPESampler's constant_liar), which
// counts a running trial as if it had the worst value. g then has
// density where running trials are, so the candidates' l/g is lower
// there, and trials suggested while others run spread out instead of
// landing on the same configuration. Their values go at the end of h's
// columns, past its observations, until dropPending. In a finite space
// without repeats they weigh nothing in g (see gWeight).
//
// In bench/search's tabular benchmarks, TPE without it (and allowing
// repeats) had 19 to 101 of 200 suggestions repeat a configuration still
// running, with 8 and 32 trials at once.
func (t *TPE) appendPending() {
	if !t.liar || len(t.pending) == 0 {
		return
	}
	for _, trial := range t.runningTrials() {
		t.ids = append(t.ids, int32(len(t.h.cols[0])))
		for p, x := range t.pending[trial] {
			t.h.cols[p] = append(t.h.cols[p], x)
		}
	}
}

// gWeight is the weight in g of observation id, the k-th oldest of m:
// tpeWeight's, but nothing for a running trial (see appendPending) in a
// finite space without repeats. There a running trial's configuration
// is already barred from every later suggestion (see suggested), and
// the liar's density would push the rest of a batch away from the good
// trials as well. Weighing nothing, a running trial still counts as the
// newest observation: the finished ones age by the trials running (with
// 25 or more running, every finished trial weighs less than 1, and g
// leans on the newest of them and on its prior), and its value narrows
// the kernels of the finished trials beside it.
//
// In bench/search's seven tabular benchmarks (20 seeds; 8 and 32 trials
// at once, synchronous and asynchronous; after 100 and after 200
// trials), TPE's median regret was worse than its own one trial at a
// time in 27 of 56 comparisons with the liar's full weight, 28 with a
// quarter of it, and 18 with none (27 with the running trials left out
// of g altogether: what helps is their place in g, not their density).
func (t *TPE) gWeight(k int, id int32, m int) float64 {
	if t.suggested != nil && int(id) >= len(t.h.trial) {
		return 0
	}
	return tpeWeight(k, m)
}

// dropPending removes what appendPending added to h's columns.
func (t *TPE) dropPending() {
	for p := range t.h.cols {
		t.h.cols[p] = t.h.cols[p][:len(t.h.trial)]
	}
}

// others sets t.ids to the observations g is fitted to: the newest
// tpeWindow of those not in good, in increasing trial number.
func (t *TPE) others(good []int32) {
	t.inGood = grow(t.inGood, len(t.h.trial))
	for _, id := range good {
		t.inGood[id] = true
	}
	t.ids = t.ids[:0]
	for k := len(t.h.byTrial) - 1; k >= 0 && len(t.ids) < tpeWindow; k-- {
		if id := t.h.byTrial[k]; !t.inGood[id] {
			t.ids = append(t.ids, id)
		}
	}
	for _, id := range good {
		t.inGood[id] = false
	}
	slices.Reverse(t.ids)
}

// tpeMarginalCandidates is how many values suggestMarginal draws for
// each parameter. Fewer than the joint draws' tpeCandidates: the best
// ratio of a single parameter's densities is a sharper pick than the
// best of joint configurations, and with more draws the values crowd
// where l/g peaks, which loses the spread along the front. In
// bench/search (ZDT1, ZDT2 and DTLZ2 after 100 and 200 trials, three sets
// of five seeds), 3 was ahead of 4 in 13 of 18 comparisons, behind it on
// ZDT2 in 4 of 6; 2 and 6 were behind 3 on ZDT1 and DTLZ2 in most, and
// 24 fell behind on DTLZ2.
const tpeMarginalCandidates = 3

// suggestMarginal sets cfg and xs to a configuration of a multi-objective
// sweep drawn parameter by parameter (the univariate TPE of Optuna's
// default TPESampler): for each parameter, l and g are fitted to its own
// values among the good trials (goodMulti, weighted as in fit) and among
// the others that have it, and of tpeMarginalCandidates draws from l the
// one with the largest log l − log g is kept. A parameter TPE cannot see
// (blind) is drawn from its domain.
func (t *TPE) suggestMarginal(r *rand.Rand, cfg map[string]any, xs []float64) error {
	good := t.goodMulti()
	goodW := slices.Clone(t.contributions(good))
	t.others(good)
	t.appendPending()
	defer t.dropPending()
	var ids []int32
	var weights []float64
	x := []float64{0}
	for i := range t.params {
		p := &t.params[i]
		if p.blind {
			v := p.domain.Sample(r)
			mx, err := p.modelValue(v)
			if err != nil {
				return fmt.Errorf("tpe: %w", err)
			}
			cfg[p.name], xs[i] = v, mx
			continue
		}
		col := t.h.cols[i : i+1]
		// The observations that have the parameter.
		ids, weights = ids[:0], weights[:0]
		for k, id := range good {
			if !math.IsNaN(col[0][id]) {
				ids, weights = append(ids, id), append(weights, goodW[k])
			}
		}
		t.l.independent = false
		t.l.fit(t.params[i:i+1], col, ids, weights)
		ids = ids[:0]
		for _, id := range t.ids {
			if !math.IsNaN(col[0][id]) {
				ids = append(ids, id)
			}
		}
		weights = weights[:0]
		for k := range ids {
			weights = append(weights, t.gWeight(k, ids[k], len(ids)))
		}
		t.g.fit(t.params[i:i+1], col, ids, weights)
		best := math.Inf(-1)
		for c := range tpeMarginalCandidates {
			t.l.sample(r, x)
			v, mx := p.snap(x[0])
			x[0] = mx
			if score := t.l.logPDF(x) - t.g.logPDF(x); c == 0 || score > best {
				best, cfg[p.name], xs[i] = score, v, mx
			}
		}
	}
	return nil
}

// goodMulti returns the good observations of a multi-objective history
// (MOTPE: Ozaki et al., "Multiobjective Tree-Structured Parzen Estimator
// for Computationally Expensive Optimization Problems", GECCO 2020): the
// first tpeGamma(n) in Pareto order (pareto.Order: by non-dominated front,
// then by crowding distance within the front that does not fit whole;
// infeasible ones after, by violation), trials that ran to their end
// before those the scheduler stopped.
func (t *TPE) goodMulti() []int32 {
	h := &t.h
	var groups [2][]int
	for id := range h.trial {
		g := 0
		if h.stopped[id] {
			g = 1
		}
		groups[g] = append(groups[g], id)
	}
	good := make([]int32, 0, tpeGamma(len(h.trial)))
	for _, ids := range groups {
		points, viol := make([][]float64, len(ids)), make([]float64, len(ids))
		for i, id := range ids {
			points[i], viol[i] = h.vecs[id], h.violation[id]
		}
		order, rank := pareto.Order(points, viol)
		for start := 0; start < len(order) && len(good) < cap(good); {
			// The next front, or the infeasible tail, in order.
			end := start + 1
			for end < len(order) && rank[order[end]] == rank[order[start]] && viol[order[start]] == 0 {
				end++
			}
			front := order[start:end]
			if left := cap(good) - len(good); len(front) > left && viol[front[0]] == 0 {
				front = pareto.SelectByHypervolume(points, front, left)
			}
			for _, i := range front {
				if len(good) == cap(good) {
					break
				}
				good = append(good, int32(ids[i]))
			}
			start = end
		}
	}
	return good
}

// contributions returns the good observations' weights in l with
// several objectives: each one's exclusive hypervolume contribution to
// the good group (what the group loses without it), against a reference
// point just beyond the group's worst values, over their mean, at least
// 1e-3 of the mean (as Optuna's MOTPE weighs its good trials). They all
// weigh 1 when the group has no volume (one point, or infeasible ones).
func (t *TPE) contributions(good []int32) []float64 {
	h := &t.h
	t.weights = grow(t.weights, len(good))
	points := make([][]float64, len(good))
	for i, id := range good {
		points[i] = h.vecs[id]
		t.weights[i] = 1
		if h.violation[id] > 0 {
			return t.weights
		}
	}
	if len(points) < 2 {
		return t.weights
	}
	m := len(points[0])
	ref := make([]float64, m)
	for j := range m {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, p := range points {
			lo, hi = min(lo, p[j]), max(hi, p[j])
		}
		ref[j] = hi + max(0.1*(hi-lo), 1e-12)
	}
	total := pareto.Hypervolume(points, ref)
	sum := 0.0
	rest := make([][]float64, 0, len(points)-1)
	for i := range points {
		rest = append(append(rest[:0], points[:i]...), points[i+1:]...)
		t.weights[i] = total - pareto.Hypervolume(rest, ref)
		sum += t.weights[i]
	}
	if !(sum > 0) {
		for i := range t.weights {
			t.weights[i] = 1
		}
		return t.weights
	}
	mean := sum / float64(len(points))
	for i := range t.weights {
		t.weights[i] = max(t.weights[i]/mean, 1e-3)
	}
	return t.weights
}

// improvements returns the good observations' weights in l: each one's
// improvement on the best of the others (at least tpeMinImprovement),
// over their mean. They all weigh 1 where the improvements are not
// comparable: the best of the others is a stopped trial (and so may be
// some of the good ones), or a score is infinite.
func (t *TPE) improvements(good []int32) []float64 {
	h := &t.h
	t.weights = grow(t.weights, len(good))
	for i := range t.weights {
		t.weights[i] = 1
	}
	if len(h.best) <= len(good) {
		return t.weights
	}
	threshold := h.rank[h.best[len(good)]]
	if threshold[0] != math.Inf(-1) || math.IsInf(threshold[1], 0) || math.IsInf(h.rank[good[0]][1], 0) {
		return t.weights
	}
	sum := 0.0
	for i, id := range good {
		t.weights[i] = max(threshold[1]-h.rank[id][1], tpeMinImprovement)
		sum += t.weights[i]
	}
	for i := range t.weights {
		if math.IsInf(sum, 0) {
			t.weights[i] = 1
		} else {
			t.weights[i] /= sum / float64(len(good))
		}
	}
	return t.weights
}

// OnResult implements Searcher. TPE learns from finished trials only; a
// stopped trial's last result comes with OnTrialEnd.
func (t *TPE) OnResult(int, Observation) {}

// OnTrialEnd implements Searcher: a completed or stopped trial with a
// score joins the history.
func (t *TPE) OnTrialEnd(trial int, end TrialEnd) {
	xs, ok := t.pending[trial]
	if !ok {
		return
	}
	delete(t.pending, trial)
	t.learn(trial, end, xs)
}

// learn adds a finished trial to the history, when TPE learns from it.
func (t *TPE) learn(trial int, end TrialEnd, xs []float64) {
	if len(t.objs) > 1 {
		if end.Status == TrialFailed || end.Last == nil {
			return
		}
		vec, ok := objectiveScores(t.objs, end.Last.Metrics)
		if !ok || slices.ContainsFunc(vec, math.IsNaN) {
			return
		}
		t.h.add(trial, [2]float64{}, xs)
		t.h.vecs = append(t.h.vecs, vec)
		t.h.violation = append(t.h.violation, Violation(t.constraints, end.Last.Metrics))
		t.h.stopped = append(t.h.stopped, end.Status == TrialStopped)
		return
	}
	if r, counted := t.rank(end); counted {
		t.h.add(trial, r, xs)
	}
}

// Replay implements Replayer: the trial counts as running with the
// configuration it ran with, and joins the history when it ends. Since
// each trial draws from its own generator, nothing needs re-drawing.
func (t *TPE) Replay(trial int, config map[string]any) error {
	xs, err := modelValues(t.params, config)
	if err != nil {
		return fmt.Errorf("tpe: %w", err)
	}
	t.pending[trial] = xs
	if t.suggested != nil {
		t.suggested.add(config)
	}
	return nil
}

// WarmStart implements WarmStarter: the trials join the history before
// any of this experiment's, as if they had been its oldest trials, so
// that they count towards TPEStartupTrials and weigh least in g.
func (t *TPE) WarmStart(trials []PriorTrial) error {
	for i, pt := range trials {
		xs := make([]float64, len(t.params))
		for j := range t.params {
			p := &t.params[j]
			v, ok := pt.Config[p.name]
			switch {
			case p.blind || !ok && p.conditional:
				xs[j] = math.NaN()
				continue
			case !ok:
				return fmt.Errorf("tpe: warm start trial %d has no value for %s", pt.Number, p.name)
			}
			x, err := p.modelValue(v)
			if err != nil {
				return fmt.Errorf("tpe: warm start trial %d: %w", pt.Number, err)
			}
			xs[j] = x
		}
		// Numbers below 1, in the trials' order, rank them oldest.
		t.learn(i-len(trials), pt.End, xs)
		if t.suggested != nil {
			t.suggested.add(pt.Config)
		}
	}
	return nil
}

// rank is tpeRank, with an infeasible trial ranked (2, violation): after
// every other.
func (t *TPE) rank(end TrialEnd) ([2]float64, bool) {
	r, counted := tpeRank(end)
	if counted && len(t.constraints) > 0 {
		if end.Last == nil {
			return [2]float64{2, math.Inf(1)}, true
		}
		if v := Violation(t.constraints, end.Last.Metrics); v > 0 {
			return [2]float64{2, v}, true
		}
	}
	return r, counted
}

// tpeRank is the key TPE ranks a finished trial by, lower first, as
// Optuna 3.1 ranks trials (_get_observation_pairs): (−∞, score) for a
// completed trial; (−step, score) for a stopped one, after every
// completed trial and the further it got the better, a NaN score ranking
// last at its step; (1, 0) for a stopped trial without a score. counted
// is false for a trial TPE does not learn from: a failed one, or a
// completed one without a score or with a NaN one (Optuna fails a trial
// whose value is NaN).
func tpeRank(end TrialEnd) (r [2]float64, counted bool) {
	switch end.Status {
	case TrialCompleted:
		if end.Last == nil || math.IsNaN(end.Last.Score) {
			return r, false
		}
		return [2]float64{math.Inf(-1), end.Last.Score}, true
	case TrialStopped:
		if end.Last == nil {
			return [2]float64{1, 0}, true
		}
		score := end.Last.Score
		if math.IsNaN(score) {
			score = math.Inf(1)
		}
		return [2]float64{-end.Last.Step, score}, true
	}
	return r, false
}

// tpeHistory is the finished trials TPE learns from, each an
// observation numbered by arrival, kept in the orders a suggestion
// reads them in.
type tpeHistory struct {
	// trial, rank and cols (by parameter, then observation) hold each
	// observation's trial number, rank key and model-space values.
	trial []int
	rank  [][2]float64
	cols  [][]float64
	// byTrial holds the observations in increasing trial number.
	byTrial []int32
	// vecs, violation and stopped hold, with several objectives, each
	// observation's scores (lower is better), its constraint violation
	// and whether the scheduler stopped its trial.
	vecs      [][]float64
	violation []float64
	stopped   []bool
	// best holds the tpeMaxBelow+1 best observations, best first: the
	// largest good group and the best of the others. Equal ranks go by
	// trial number, as Optuna's stable sort of trials in number order
	// leaves them.
	best []int32
}

// add records a finished trial's observation: O(n) to keep the order by
// trial number.
func (h *tpeHistory) add(trial int, r [2]float64, xs []float64) {
	id := int32(len(h.trial))
	h.trial = append(h.trial, trial)
	h.rank = append(h.rank, r)
	for p, x := range xs {
		h.cols[p] = append(h.cols[p], x)
	}
	at := sort.Search(len(h.byTrial), func(i int) bool { return h.trial[h.byTrial[i]] > trial })
	h.byTrial = slices.Insert(h.byTrial, at, id)
	at = sort.Search(len(h.best), func(i int) bool { return h.before(id, h.best[i]) })
	if at <= tpeMaxBelow {
		h.best = slices.Insert(h.best, at, id)
		h.best = h.best[:min(len(h.best), tpeMaxBelow+1)]
	}
}

// before reports whether observation a ranks before b.
func (h *tpeHistory) before(a, b int32) bool {
	ra, rb := h.rank[a], h.rank[b]
	if ra != rb {
		return ra[0] < rb[0] || ra[0] == rb[0] && ra[1] < rb[1]
	}
	return h.trial[a] < h.trial[b]
}

// point sets dst to observation id's model-space values and returns it.
func (h *tpeHistory) point(id int32, dst []float64) []float64 {
	for p := range h.cols {
		dst[p] = h.cols[p][id]
	}
	return dst
}
