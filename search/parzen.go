package search

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
)

// The Parzen estimators of TPE (Bergstra et al., "Algorithms for
// Hyper-Parameter Optimization", NeurIPS 2011). Each is a mixture over
// the whole search space, as Optuna's TPESampler builds with
// multivariate=True: a component per observation, with one kernel per
// parameter, and a prior component spanning the domain. The kernels'
// widths are those of Optuna 3.1's univariate estimator with
// consider_endpoints and the "magic clip"; older observations of the
// other trials weigh less, as in Optuna's default_weights.

const (
	// tpePriorWeight is the weight of the prior component (the whole
	// domain) in every estimator, before normalisation, the observations'
	// weights averaging 1.
	tpePriorWeight = 1.0
	// tpeFlatWeights is how many of the newest observations keep weight 1
	// (Optuna's default_weights); older ones ramp down linearly.
	tpeFlatWeights = 25
	// tpeMaxBelow caps the good group's size (Optuna's default_gamma).
	tpeMaxBelow = 25
	// tpeMinImprovement is the least improvement a good trial is weighted
	// by, so that one level with the threshold still counts a little.
	tpeMinImprovement = 1e-12
)

// tpeGamma is the size of the good group among n observations: 10% of
// them, rounded up, at most 25 (Optuna's default_gamma).
func tpeGamma(n int) int { return min(int(math.Ceil(0.1*float64(n))), tpeMaxBelow) }

// tpeWeight is the weight of the k-th oldest (from 0) of m observations
// (Optuna's default_weights): 1 for the newest 25, and for the m−25 older
// ones a ramp from 1/m up to 1, computed as numpy.linspace computes it.
func tpeWeight(k, m int) float64 {
	num := m - tpeFlatWeights
	if k >= num {
		return 1
	}
	start := 1 / float64(m)
	if num == 1 {
		return start
	}
	if k == num-1 {
		return 1
	}
	return float64(k)*((1-start)/float64(num-1)) + start
}

// kde is a Parzen estimator over the model space of a search space (see
// tpeParam): a mixture of components, each a product of one kernel per
// parameter. Component i < n is centred on observation i; the last one
// is the prior.
type kde struct {
	// logW is each component's log weight, normalised; cum is the
	// cumulative sum of the weights, for drawing a component; weights
	// are the observations' weights they come from.
	logW, cum, weights []float64
	dims               []kdeDim
	// independent makes sample choose a component for each parameter
	// on its own, rather than one for the whole point: a draw then
	// recombines the values of several observations.
	independent bool
	// widen, when above 1, multiplies the width of every numeric kernel
	// sample draws from (at most the domain's width); logPDF's densities
	// stay those of the fitted widths.
	widen float64
	// order and acc are scratch space: the components by value, and each
	// component's log density at the point logPDF evaluates; sorter
	// sorts order.
	order  []int32
	acc    []float64
	sorter valueSorter
}

// kdeDim is one parameter's kernels, one per component.
type kdeDim struct {
	// low, high and step are the parameter's model space (see tpeParam).
	low, high, step float64
	// mus and sigmas are a numeric parameter's kernels: normals truncated
	// to [low, high]. logNorm is each kernel's log normalising constant:
	// −log(σ·√(2π)·mass in [low, high]) for a continuous parameter,
	// −log(mass in [low, high]) for a quantised one, whose density at x
	// is the mass of x's step.
	mus, sigmas, logNorm []float64
	// choices is a categorical parameter's number of choices, 0 for a
	// numeric one. An observation's kernel gives its choice, picks[i],
	// the probability (share+1)/(choices·share+1) and every choice
	// share/(choices·share+1) (Optuna's categorical estimator); the
	// prior's is uniform.
	choices             int
	picks               []int
	share               float64
	own, other, uniform float64
	// byChoice[c] is, once logPDF has met choice c since the last fit
	// (choiceReady[c]), each component's log probability of c: one pass
	// over the components for each choice met, instead of one for each
	// point.
	byChoice    [][]float64
	choiceReady []bool
	// byLevel[l] is, in the same way, each component's log mass of the
	// step of level l of a quantised parameter (levels from low), once
	// logPDF has met it at levelAt[l] since the last fit (levelReady[l]),
	// for a parameter of at most maxCachedLevels levels; scratch holds
	// the masses of a value outside them.
	byLevel    [][]float64
	levelAt    []float64
	levelReady []bool
	scratch    []float64
	// norms caches a numeric kernel's logNorm by observation: the kernel
	// fitNumeric last gave it and that kernel's logNorm, reused while the
	// kernel stays the same (from one suggestion to the next, a new
	// observation changes only its neighbours' widths). normsFor is the
	// model space (low, high, step) they were computed in.
	norms    []kernelNorm
	normsFor [3]float64
}

// kernelNorm is a numeric kernel, its centre and width, and its log
// normalising constant.
type kernelNorm struct{ mu, sigma, logNorm float64 }

// fit makes k the estimator of observations ids, whose values in model
// space are cols[p][id] for parameter p, weighted by weights (in the
// order of ids, not normalised; the prior weighs tpePriorWeight).
func (k *kde) fit(params []tpeParam, cols [][]float64, ids []int32, weights []float64) {
	n := len(ids)
	m := n + 1
	// g's weights depend on the number of observations only, the same
	// from one suggestion to the next once its window is full.
	if len(k.logW) != m || !slices.Equal(k.weights, weights) {
		k.setWeights(weights)
	}
	if cap(k.dims) < len(params) {
		k.dims = make([]kdeDim, len(params))
	}
	k.dims = k.dims[:len(params)]
	for p := range params {
		d, col := &k.dims[p], cols[p]
		if params[p].choices != nil {
			d.fitCategorical(len(params[p].choices), col, ids)
			continue
		}
		d.low, d.high, d.step, d.choices = params[p].low, params[p].high, params[p].step, 0
		d.mus = grow(d.mus, m)
		for i, id := range ids {
			d.mus[i] = col[id]
		}
		d.mus[n] = 0.5 * (d.low + d.high)
		// An observation without the parameter (NaN: a conditional one
		// absent) has no say in the widths.
		k.order = k.order[:0]
		for i := range m {
			if !math.IsNaN(d.mus[i]) {
				k.order = append(k.order, int32(i))
			}
		}
		// Equal values in the order of ids, as a stable sort leaves them.
		k.sorter.sort(k.order, d.mus)
		d.fitNumeric(k.order, ids)
		d.resetLevels()
	}
}

// maxCachedLevels bounds the levels of a quantised parameter whose masses
// logPDF keeps from one point to the next (see byLevel).
const maxCachedLevels = 1024

// resetLevels forgets the masses of the levels met since the last fit.
func (d *kdeDim) resetLevels() {
	levels := 0
	if d.step > 0 {
		if n := math.Round((d.high - d.low) / d.step); n <= maxCachedLevels {
			levels = int(n)
		}
	}
	d.levelReady = grow(d.levelReady, levels)
	clear(d.levelReady)
	d.levelAt = grow(d.levelAt, levels)
	if len(d.byLevel) < levels {
		d.byLevel = append(d.byLevel, make([][]float64, levels-len(d.byLevel))...)
	}
}

// logMasses returns each component's log mass of the step around v of
// a quantised parameter (its kernel's logNorm included), the prior's
// last: computed once for each level met, as logProbs does for a choice.
func (d *kdeDim) logMasses(v float64) []float64 {
	l := int(math.Floor((v - d.low) / d.step))
	var out []float64
	cached := l >= 0 && l < len(d.levelReady)
	if cached {
		if d.levelReady[l] && d.levelAt[l] == v {
			return d.byLevel[l]
		}
		out = grow(d.byLevel[l], len(d.mus))
		d.byLevel[l], d.levelAt[l], d.levelReady[l] = out, v, true
	} else {
		d.scratch = grow(d.scratch, len(d.mus))
		out = d.scratch
	}
	lo, hi := max(v-d.step/2, d.low), min(v+d.step/2, d.high)
	for i, mu := range d.mus {
		sigma := d.sigmas[i]
		out[i] = logGaussMass((lo-mu)/sigma, (hi-mu)/sigma) + d.logNorm[i]
	}
	return out
}

// setWeights sets logW and cum from the observations' weights (not
// normalised; the prior weighs tpePriorWeight), and keeps a copy of them.
func (k *kde) setWeights(weights []float64) {
	n := len(weights)
	m := n + 1
	total := tpePriorWeight
	for _, w := range weights {
		total += w
	}
	k.logW, k.cum = grow(k.logW, m), grow(k.cum, m)
	cum := 0.0
	for i := range m {
		w := tpePriorWeight
		if i < n {
			w = weights[i]
		}
		w /= total
		k.logW[i] = math.Log(w)
		cum += w
		k.cum[i] = cum
	}
	k.weights = append(k.weights[:0], weights...)
}

// fitNumeric computes the kernels' widths and normalising constants,
// the centres in mus ascending in order, the prior's last in mus. A
// kernel is as wide as the larger gap to its neighbouring centres, the
// domain's bounds standing in for the outermost two's missing neighbours,
// clipped to between the domain's width over min(100, components+1) and
// the width; the prior is as wide as the domain (Optuna 3.1's
// _calculate_numerical_params with consider_prior, consider_magic_clip
// and consider_endpoints).
//
// An observation absent from order (one without the parameter) gets the
// prior's kernel: it says nothing about the parameter. ids are the
// observations of the components before the prior, by which norms
// remembers their normalising constants.
func (d *kdeDim) fitNumeric(order, ids []int32) {
	m := len(order)
	span := d.high - d.low
	minSigma := span / min(100, 1+float64(m))
	d.sigmas, d.logNorm = grow(d.sigmas, len(d.mus)), grow(d.logNorm, len(d.mus))
	for i, mu := range d.mus {
		if math.IsNaN(mu) {
			d.mus[i], d.sigmas[i] = 0.5*(d.low+d.high), span
		}
	}
	for j, i := range order {
		left, right := d.low, d.high
		if j > 0 {
			left = d.mus[order[j-1]]
		}
		if j < m-1 {
			right = d.mus[order[j+1]]
		}
		d.sigmas[i] = min(max(d.mus[i]-left, right-d.mus[i], minSigma), span)
	}
	d.sigmas[len(d.mus)-1] = span
	if space := [3]float64{d.low, d.high, d.step}; space != d.normsFor {
		d.norms, d.normsFor = d.norms[:0], space
	}
	for i, id := range ids {
		for int(id) >= len(d.norms) {
			d.norms = append(d.norms, kernelNorm{mu: math.NaN()})
		}
		kn := &d.norms[id]
		mu, sigma := d.mus[i], d.sigmas[i]
		if math.Float64bits(kn.mu) != math.Float64bits(mu) || math.Float64bits(kn.sigma) != math.Float64bits(sigma) {
			*kn = kernelNorm{mu, sigma, d.kernelLogNorm(mu, sigma)}
		}
		d.logNorm[i] = kn.logNorm
	}
	prior := len(d.mus) - 1
	d.logNorm[prior] = d.kernelLogNorm(d.mus[prior], d.sigmas[prior])
}

// kernelLogNorm is the log normalising constant of the kernel centred on
// mu, sigma wide (see logNorm).
func (d *kdeDim) kernelLogNorm(mu, sigma float64) float64 {
	logNorm := -logGaussMass((d.low-mu)/sigma, (d.high-mu)/sigma)
	if d.step == 0 {
		logNorm -= math.Log(sigma * sqrt2Pi)
	}
	return logNorm
}

const sqrt2Pi = 2.50662827463100050242 // √(2π)

// fitCategorical sets the kernels of a parameter with the given number
// of choices from observations ids of col (choice indices), as Optuna
// 3.1's _calculate_categorical_params does with a prior of weight 1.
func (d *kdeDim) fitCategorical(choices int, col []float64, ids []int32) {
	d.choices = choices
	d.picks = slices.Grow(d.picks[:0], len(ids))
	for _, id := range ids {
		// −1: the observation lacks the parameter, and its kernel is the
		// prior's.
		pick := -1
		if !math.IsNaN(col[id]) {
			pick = int(col[id])
		}
		d.picks = append(d.picks, pick)
	}
	d.share = tpePriorWeight / float64(len(ids)+1)
	norm := float64(choices)*d.share + 1
	d.own, d.other = math.Log((d.share+1)/norm), math.Log(d.share/norm)
	d.uniform = -math.Log(float64(choices))
	d.choiceReady = grow(d.choiceReady, choices)
	clear(d.choiceReady)
	if len(d.byChoice) < choices {
		d.byChoice = append(d.byChoice, make([][]float64, choices-len(d.byChoice))...)
	}
}

// logProbs returns each component's log probability of choice c, the
// prior's last.
func (d *kdeDim) logProbs(c int) []float64 {
	probs := grow(d.byChoice[c], len(d.picks)+1)
	d.byChoice[c] = probs
	if d.choiceReady[c] {
		return probs
	}
	for i, pick := range d.picks {
		switch pick {
		case c:
			probs[i] = d.own
		case -1:
			probs[i] = d.uniform
		default:
			probs[i] = d.other
		}
	}
	probs[len(d.picks)] = d.uniform
	d.choiceReady[c] = true
	return probs
}

// sample draws a point from the mixture into x, one model-space value
// per parameter (a choice's index for a categorical one): a component by
// weight (with independent set, one for each parameter), then each
// parameter from its kernel, a numeric one by inverting its truncated
// normal's CDF.
func (k *kde) sample(r *rand.Rand, x []float64) {
	c := k.component(r)
	for p := range k.dims {
		d := &k.dims[p]
		if k.independent && p > 0 {
			c = k.component(r)
		}
		prior := c == len(k.cum)-1
		if d.choices > 0 {
			// An observation's kernel is its choice with weight 1 plus
			// share on every choice, normalised.
			v := r.Float64()
			if prior || d.picks[c] < 0 {
				x[p] = float64(min(int(v*float64(d.choices)), d.choices-1))
				continue
			}
			// Mass 1 on its choice, then share on each choice in turn.
			v *= float64(d.choices)*d.share + 1
			if v < 1 {
				x[p] = float64(d.picks[c])
			} else {
				x[p] = float64(min(int((v-1)/d.share), d.choices-1))
			}
			continue
		}
		mu, sigma := d.mus[c], d.sigmas[c]
		if k.widen > 1 {
			sigma = min(sigma*k.widen, d.high-d.low)
		}
		z := truncnormPPF(r.Float64(), (d.low-mu)/sigma, (d.high-mu)/sigma)
		x[p] = min(max(mu+sigma*z, d.low), d.high)
	}
}

// component draws a component by weight.
func (k *kde) component(r *rand.Rand) int {
	u := r.Float64() * k.cum[len(k.cum)-1]
	return min(sort.SearchFloat64s(k.cum, math.Nextafter(u, math.Inf(1))), len(k.cum)-1)
}

// logPDF is the logarithm of the mixture's density at x (model-space
// values, one per parameter; NaN for one x lacks, which is left out),
// the mass of x's step standing for the
// density of a quantised parameter and x's probability for a
// categorical one.
func (k *kde) logPDF(x []float64) float64 {
	m := len(k.logW)
	k.acc = grow(k.acc, m)
	copy(k.acc, k.logW)
	for p := range k.dims {
		d, v := &k.dims[p], x[p]
		switch {
		case math.IsNaN(v):
			// x lacks the parameter: the density is over the others.
		case d.choices > 0:
			for i, lp := range d.logProbs(int(v)) {
				k.acc[i] += lp
			}
		case d.step > 0:
			for i, lm := range d.logMasses(v) {
				k.acc[i] += lm
			}
		default:
			for i, mu := range d.mus {
				z := (v - mu) / d.sigmas[i]
				k.acc[i] += d.logNorm[i] - 0.5*z*z
			}
		}
	}
	// The largest, or NaN if one is (as slices.Max has it).
	top := k.acc[0]
	for _, a := range k.acc[1:] {
		if a > top || a != a {
			top = a
		}
	}
	sum := 0.0
	for _, a := range k.acc {
		// A component below e^−40 of the largest changes the sum by less
		// than 1e−17 of it, each: skip its exp.
		if a-top > -40 {
			sum += math.Exp(a - top)
		}
	}
	return top + math.Log(sum)
}

// grow returns s resized to n elements, reusing its array when it can.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// valueSorter sorts indices by the values they index, stably: an LSD
// radix sort on the values' bits, a byte a pass, which for the thousand
// or so components of g takes a fraction of a comparison sort's time.
// Its buffers are reused from one sort to the next.
type valueSorter struct {
	keys, keysTmp []uint64
	idx, idxTmp   []int32
}

// sort reorders order (indices into values, none NaN) so that their
// values ascend, equal ones keeping their order in order. −0 and +0 are
// equal, as cmp.Compare has them.
func (s *valueSorter) sort(order []int32, values []float64) {
	n := len(order)
	if n < 2 {
		return
	}
	s.keys, s.keysTmp = grow(s.keys, n), grow(s.keysTmp, n)
	s.idx, s.idxTmp = append(s.idx[:0], order...), grow(s.idxTmp, n)
	var counts [8][256]int32
	for j, i := range order {
		key := orderedBits(values[i])
		s.keys[j] = key
		for b := range counts {
			counts[b][byte(key>>(8*b))]++
		}
	}
	keys, idx, keysTmp, idxTmp := s.keys, s.idx, s.keysTmp, s.idxTmp
	for b := range counts {
		c := &counts[b]
		// A pass where every key has the same byte would not move one.
		if c[byte(keys[0]>>(8*b))] == int32(n) {
			continue
		}
		at := int32(0)
		for v, k := range c {
			c[v], at = at, at+k
		}
		for j, key := range keys {
			v := byte(key >> (8 * b))
			keysTmp[c[v]], idxTmp[c[v]] = key, idx[j]
			c[v]++
		}
		keys, idx, keysTmp, idxTmp = keysTmp, idxTmp, keys, idx
	}
	copy(order, idx)
}

// orderedBits maps a float64 other than NaN to a uint64 of the same
// order, −0 and +0 to the same one.
func orderedBits(x float64) uint64 {
	if x == 0 {
		x = 0 // −0 as +0
	}
	b := math.Float64bits(x)
	if b>>63 == 1 {
		return ^b // negative: the larger the magnitude, the smaller
	}
	return b | 1<<63
}
