package tuner

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/gotune/gotune/searchspace"
)

// TPEStartupTrials is how many finished trials TPE waits for before it
// models the history; until then it samples at random, as Optuna does.
const TPEStartupTrials = 10

// tpeCandidates is how many values TPE draws from the good trials'
// density for each parameter, keeping the one most likely under it
// relative to the other trials' density (Optuna's n_ei_candidates).
const tpeCandidates = 24

// TPE is the Tree-structured Parzen Estimator (Bergstra et al.,
// "Algorithms for Hyper-Parameter Optimization", NeurIPS 2011) as
// Optuna 3.1's TPESampler runs it with its default options. It splits
// the finished trials into the good ones, the best 10% (rounded up, at
// most 25), and the rest; then, for each parameter independently, it
// fits a Parzen estimator l(x) to the good trials' values and g(x) to the
// others', draws 24 candidates from l and keeps the one with the largest
// log l(x) − log g(x), the one expected to improve most.
//
// The estimators (see parzen and catParzen) are mixtures with one
// component per trial plus a prior component over the whole domain (of
// weight 1). A numeric component is a normal truncated to the domain,
// centred on the trial's value, as wide as the larger gap to its
// neighbouring values (the outermost two take their one gap), clipped to
// between the domain's width/min(100, components+1) and its width. In g,
// the 25 newest trials weigh 1 and older ones ramp down linearly to
// 1/count. Log-scaled domains (loguniform, qloguniform, lograndint) are
// modelled in log space; quantised and integer domains (quniform,
// randint) on their range widened by half a step, scoring a candidate by
// the mass of its step, and rounded; lograndint and qloguniform are
// continuous in log space and rounded, as Optuna does for a log-scaled
// integer. Choices (and grid parameters, when TPE samples them) get
// Optuna's categorical estimator: each trial puts its weight on its
// choice plus an even share of the prior.
//
// Like Optuna 3.1, it leaves the 1/σ out of a truncated normal
// component's density (optuna/optuna#5109, changed in later Optuna
// releases), which favours the wide components; with the 1/σ, TPE found
// worse optima on bench/search's Hartmann6 and 10-D Rosenbrock (medians
// over 300 seeds).
//
// Until TPEStartupTrials trials have finished it draws each parameter at
// random from its domain. Trials the scheduler stopped early count, as
// Optuna counts pruned trials: after every trial that ran to its end,
// the further they got the better, then by their last score; a stopped
// trial without a score ranks last. Failed trials, completed trials
// without a score (or with a NaN one) and trials still running do not
// count.
//
// A TPE draws from its own generator, seeded by NewTPE's seed: the same
// seed, with the same results arriving in the same order (as when
// trials run one at a time), gives the same configurations.
//
// A suggestion costs O(n) per numeric parameter to fit g and O(24·n) to
// score the candidates, for n finished trials; each parameter's
// observations are kept sorted as trials finish, so a suggestion sorts
// nothing but the good trials' values.
type TPE struct {
	params []tpeParam
	consts map[string]any
	rng    *rand.Rand
	// pending holds the model-space values of each trial suggested or
	// replayed and not yet ended.
	pending map[int][]float64
	h       tpeHistory

	// Scratch space, reused across suggestions: below marks the good
	// trials and weight holds the others' weights, both by observation.
	below  []bool
	weight []float64
	vals   []float64
	counts []float64
	l, g   parzen
	lc, gc catParzen
}

var _ Searcher = (*TPE)(nil)

// tpeParam is one searched parameter as TPE models it.
type tpeParam struct {
	name   string
	domain searchspace.Domain
	// choices are a categorical parameter's values; nil for a numeric one.
	choices []any
	// low, high and step describe a numeric parameter's model space (see
	// parzen).
	low, high, step float64
	// snap maps a model-space draw onto the domain: the configuration
	// value and its own model-space value.
	snap func(x float64) (any, float64)
	// model maps a configuration value to model space; ok is false when
	// v is not a value of the domain's type.
	model func(v any) (x float64, ok bool)
}

// NewTPE returns a TPE searcher over space, drawing from a generator
// seeded with seed. It fails, with a *ConfigError naming the parameter,
// on a domain it cannot model (a user-defined Domain). Grid parameters
// are modelled like choices; wrap the searcher in a GridSearch over
// space.WithoutGrid() to expand them instead.
func NewTPE(space *searchspace.Space, seed int64) (*TPE, error) {
	t := &TPE{consts: map[string]any{}, rng: newRand(seed), pending: map[int][]float64{}}
	for _, p := range space.Params() {
		if c, ok := p.Domain.(searchspace.Constant); ok {
			t.consts[p.Name] = c.Value
			continue
		}
		tp, err := newTPEParam(p)
		if err != nil {
			return nil, &ConfigError{Key: "search.space." + p.Name, Err: fmt.Errorf("tpe: %w", err)}
		}
		t.params = append(t.params, tp)
	}
	t.h.cols = make([][]float64, len(t.params))
	t.h.byValue = make([][]int32, len(t.params))
	return t, nil
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

// Suggest implements Searcher.
func (t *TPE) Suggest(trial int) (map[string]any, error) {
	cfg := make(map[string]any, len(t.params)+len(t.consts))
	for k, v := range t.consts {
		cfg[k] = v
	}
	xs := make([]float64, len(t.params))
	n := len(t.h.trial)
	if n < TPEStartupTrials {
		for i := range t.params {
			p := &t.params[i]
			v := p.domain.Sample(t.rng)
			x, err := p.modelValue(v)
			if err != nil {
				return nil, fmt.Errorf("tpe: %w", err)
			}
			cfg[p.name], xs[i] = v, x
		}
	} else {
		t.split()
		for i := range t.params {
			cfg[t.params[i].name], xs[i] = t.suggest(i)
		}
		for _, id := range t.h.best[:tpeGamma(n)] {
			t.below[id] = false
		}
	}
	t.pending[trial] = xs
	return cfg, nil
}

// split marks the good trials in below and gives the others their
// weights, by age: the order of their trial numbers.
func (t *TPE) split() {
	n := len(t.h.trial)
	good := tpeGamma(n)
	t.below = slices.Grow(t.below[:0], n)[:n]
	t.weight = grow(t.weight, n)
	for _, id := range t.h.best[:good] {
		t.below[id] = true
	}
	k, m := 0, n-good
	for _, id := range t.h.byTrial {
		if !t.below[id] {
			t.weight[id] = tpeWeight(k, m)
			k++
		}
	}
}

// suggest chooses parameter i's value: the configuration value and its
// model-space value.
func (t *TPE) suggest(i int) (any, float64) {
	p := &t.params[i]
	col := t.h.cols[i]
	good := t.h.best[:tpeGamma(len(t.h.trial))]
	if p.choices != nil {
		t.counts = grow(t.counts, len(p.choices))
		clear(t.counts)
		for _, id := range good {
			t.counts[int(col[id])]++
		}
		t.lc.fit(t.counts, len(good))
		clear(t.counts)
		for _, id := range t.h.byTrial {
			if !t.below[id] {
				t.counts[int(col[id])] += t.weight[id]
			}
		}
		t.gc.fit(t.counts, len(t.h.trial)-len(good))
		best, bestScore := 0, math.Inf(-1)
		for c := range tpeCandidates {
			k := t.lc.sample(t.rng)
			if score := math.Log(t.lc.probs[k]) - math.Log(t.gc.probs[k]); c == 0 || score > bestScore {
				best, bestScore = k, score
			}
		}
		return p.choices[best], float64(best)
	}

	t.vals = t.vals[:0]
	for _, id := range good {
		t.vals = append(t.vals, col[id])
	}
	slices.Sort(t.vals)
	t.l.reset(p.low, p.high, p.step)
	for _, x := range t.vals {
		t.l.add(x, 1)
	}
	t.l.fit()
	t.g.reset(p.low, p.high, p.step)
	for _, id := range t.h.byValue[i] {
		if !t.below[id] {
			t.g.add(col[id], t.weight[id])
		}
	}
	t.g.fit()

	var best any
	bestX, bestScore := 0.0, math.Inf(-1)
	for c := range tpeCandidates {
		v, x := p.snap(t.l.sample(t.rng))
		if score := t.l.logPDF(x) - t.g.logPDF(x); c == 0 || score > bestScore {
			best, bestX, bestScore = v, x, score
		}
	}
	return best, bestX
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
	if r, counted := tpeRank(end); counted {
		t.h.add(trial, r, xs)
	}
}

// Replay implements Replayer: the trial counts as running with the
// configuration it ran with, and joins the history when it ends.
func (t *TPE) Replay(trial int, config map[string]any) error {
	xs := make([]float64, len(t.params))
	for i := range t.params {
		p := &t.params[i]
		v, ok := config[p.name]
		if !ok {
			return fmt.Errorf("tpe: the configuration has no value for %s", p.name)
		}
		x, err := p.modelValue(v)
		if err != nil {
			return fmt.Errorf("tpe: %w", err)
		}
		xs[i] = x
	}
	t.pending[trial] = xs
	return nil
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
	// byValue holds, for each parameter, the observations in increasing
	// value, equal values in arrival order.
	byValue [][]int32
	// best holds the tpeMaxBelow best observations, best first; equal
	// ranks by trial number, as Optuna's stable sort of trials in number
	// order leaves them.
	best []int32
}

// add records a finished trial's observation: O(n) to keep the orders.
func (h *tpeHistory) add(trial int, r [2]float64, xs []float64) {
	id := int32(len(h.trial))
	h.trial = append(h.trial, trial)
	h.rank = append(h.rank, r)
	for p, x := range xs {
		h.cols[p] = append(h.cols[p], x)
	}
	at := sort.Search(len(h.byTrial), func(i int) bool { return h.trial[h.byTrial[i]] > trial })
	h.byTrial = slices.Insert(h.byTrial, at, id)
	for p, x := range xs {
		col, ids := h.cols[p], h.byValue[p]
		at := sort.Search(len(ids), func(i int) bool { return col[ids[i]] > x })
		h.byValue[p] = slices.Insert(ids, at, id)
	}
	at = sort.Search(len(h.best), func(i int) bool { return h.before(id, h.best[i]) })
	if at < tpeMaxBelow {
		h.best = slices.Insert(h.best, at, id)
		h.best = h.best[:min(len(h.best), tpeMaxBelow)]
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
