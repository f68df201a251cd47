package tuner

import (
	"math"
	"math/rand/v2"
	"sort"
)

// The Parzen estimators of TPE (Bergstra et al., "Algorithms for
// Hyper-Parameter Optimization", NeurIPS 2011), with the defaults of
// Optuna 3.1's TPESampler (samplers/_tpe/parzen_estimator.py): a prior
// component of weight tpePriorWeight, bandwidths from the distances to the
// neighbouring observations without the domain's endpoints, clipped by the
// "magic clip", and observation weights that ramp down older trials.

const (
	// tpePriorWeight is the weight of the prior component (the whole
	// domain) in every estimator, before normalisation.
	tpePriorWeight = 1.0
	// tpeFlatWeights is how many of the newest observations keep weight 1
	// (Optuna's default_weights); older ones ramp down linearly.
	tpeFlatWeights = 25
	// tpeMaxBelow caps the good group's size (Optuna's default_gamma).
	tpeMaxBelow = 25
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

// parzen is a mixture of truncated normals over the model space of one
// numeric parameter: one component per observation, centred on it, and
// the prior, centred on the domain with its width. The model space is
// the parameter's range, in logarithms for a log-scaled domain.
type parzen struct {
	// low and high bound the model space; every component is truncated
	// to [low, high]. For a quantised domain they extend half a step
	// beyond its extreme values.
	low, high float64
	// step is the quantum of a quantised domain, 0 for a continuous one.
	// The density of a quantised value x is the mass the mixture puts on
	// [x − step/2, x + step/2] (within [low, high]).
	step float64
	// mus, sigmas and weights are the components', weights normalised,
	// in increasing order of mu.
	mus, sigmas, weights []float64
	// accept is each component's mass within [low, high].
	accept []float64
	// coef is weight/(accept·√(2π)) per component: a component's density
	// at x is coef·exp(−z²/2), z = (x − mu)/σ, without the normal's 1/σ,
	// as Optuna 3.1 computes it (see TPE).
	coef []float64
	// cum is the cumulative sum of weights, for drawing a component.
	cum []float64
	// prior is the prior component's index; widest is the largest σ of
	// the others.
	prior  int
	widest float64
}

// Components further than so many of their σ from a value add nothing
// to a float64 log-density there (see logPDF), which spares visiting
// them. The prior component carries the largest weight and spans the
// domain: at every value its density is at least e^−1/8 of its peak, and
// its mass on a quantised value's step at least 1e−12 of its total (a
// quantised domain has at most 2^40 steps); no other component's peak
// exceeds 1.2 times the prior's. A component 12σ away contributes
// e^−72 ≈ 5e−32 of its peak density, one 20σ away Φ(−20) ≈ 3e−89 of its
// mass: below a float64's precision for any number of trials.
const (
	tpeReachDensity = 12
	tpeReachMass    = 20
)

// reset empties p for the observations of a domain modelled on
// [low, high] with the given step (0 for continuous).
func (p *parzen) reset(low, high, step float64) {
	p.low, p.high, p.step = low, high, step
	p.mus, p.weights = p.mus[:0], p.weights[:0]
}

// add appends an observation with its weight (not normalised);
// observations must come in increasing order of value.
func (p *parzen) add(mu, weight float64) {
	p.mus = append(p.mus, mu)
	p.weights = append(p.weights, weight)
}

// fit inserts the prior and computes the components' bandwidths, as
// Optuna 3.1's _calculate_numerical_params does with consider_prior,
// consider_magic_clip and without consider_endpoints.
func (p *parzen) fit() {
	span := p.high - p.low
	priorMu := 0.5 * (p.low + p.high)
	// The prior goes after the observations equal to its centre.
	at := sort.SearchFloat64s(p.mus, math.Nextafter(priorMu, math.Inf(1)))
	p.mus = insertFloat(p.mus, at, priorMu)
	p.weights = insertFloat(p.weights, at, tpePriorWeight)
	m := len(p.mus)

	// A component's bandwidth is the larger distance to its neighbours,
	// the domain's bounds standing in for the missing neighbours of the
	// outermost two; without consider_endpoints, those two take the
	// distance to their one neighbour instead.
	p.sigmas = grow(p.sigmas, m)
	for i := range m {
		left, right := p.low, p.high
		if i > 0 {
			left = p.mus[i-1]
		}
		if i < m-1 {
			right = p.mus[i+1]
		}
		p.sigmas[i] = max(p.mus[i]-left, right-p.mus[i])
	}
	if m >= 2 {
		p.sigmas[0] = p.mus[1] - p.mus[0]
		p.sigmas[m-1] = p.mus[m-1] - p.mus[m-2]
	}
	// The magic clip: no narrower than the span over min(100, m+1)
	// (m counting the prior), no wider than the span.
	minSigma := span / min(100, 1+float64(m))
	for i := range p.sigmas {
		p.sigmas[i] = min(max(p.sigmas[i], minSigma), span)
	}
	p.sigmas[at] = span
	p.prior, p.widest = at, 0
	for i, sigma := range p.sigmas {
		if i != at {
			p.widest = max(p.widest, sigma)
		}
	}

	total := 0.0
	for _, w := range p.weights {
		total += w
	}
	p.accept, p.coef, p.cum = grow(p.accept, m), grow(p.coef, m), grow(p.cum, m)
	cum := 0.0
	for i := range m {
		w := p.weights[i] / total
		p.weights[i] = w
		cum += w
		p.cum[i] = cum
		mu, sigma := p.mus[i], p.sigmas[i]
		a, b := (p.low-mu)/sigma, (p.high-mu)/sigma
		p.accept[i] = 1 // Φ(a) and Φ(−b) below 5e−17 leave 1 − Φ(a) − Φ(−b) at 1
		if a > -8.3 || b < 8.3 {
			p.accept[i] = gaussMass(a, b)
		}
		p.coef[i] = w / (p.accept[i] * sqrt2Pi)
	}
}

const sqrt2Pi = 2.50662827463100050242 // √(2π)

// sample draws a value in [low, high] from the mixture: a component by
// weight, then a value from its truncated normal, by inverting its CDF.
func (p *parzen) sample(r *rand.Rand) float64 {
	u := r.Float64() * p.cum[len(p.cum)-1]
	i := min(sort.SearchFloat64s(p.cum, math.Nextafter(u, math.Inf(1))), len(p.cum)-1)
	mu, sigma := p.mus[i], p.sigmas[i]
	z := truncnormPPF(r.Float64(), (p.low-mu)/sigma, (p.high-mu)/sigma)
	return min(max(mu+sigma*z, p.low), p.high)
}

// logPDF is the logarithm of the mixture's density at x in [low, high]
// or, for a quantised domain, of the mass of x's step. It visits the
// prior and the components centred near enough to x to count (see
// tpeReachDensity), which the order of mus finds by bisection: with many
// observations, each narrow, that is a small share of them.
func (p *parzen) logPDF(x float64) float64 {
	if p.step > 0 {
		lo, hi := max(x-p.step/2, p.low), min(x+p.step/2, p.high)
		return math.Log(p.sum(lo-tpeReachMass*p.widest, hi+tpeReachMass*p.widest, func(i int) float64 {
			mu, sigma := p.mus[i], p.sigmas[i]
			return p.weights[i] * gaussMass((lo-mu)/sigma, (hi-mu)/sigma) / p.accept[i]
		}))
	}
	return math.Log(p.sum(x-tpeReachDensity*p.widest, x+tpeReachDensity*p.widest, func(i int) float64 {
		z := (x - p.mus[i]) / p.sigmas[i]
		return p.coef[i] * math.Exp(-0.5*z*z)
	}))
}

// sum adds f(i) over the prior and the components centred in [from, to].
func (p *parzen) sum(from, to float64, f func(i int) float64) float64 {
	i := sort.SearchFloat64s(p.mus, from)
	end := sort.SearchFloat64s(p.mus, math.Nextafter(to, math.Inf(1)))
	sum := 0.0
	if p.prior < i || p.prior >= end {
		sum = f(p.prior)
	}
	for ; i < end; i++ {
		sum += f(i)
	}
	return sum
}

// catParzen is the estimator of a categorical parameter: each
// observation is a distribution that puts its weight on the observed
// choice plus an even share of the prior, and the prior is the uniform
// distribution (Optuna 3.1's _calculate_categorical_params). Only the
// mixture's probability of each choice matters, so that is what it holds.
type catParzen struct {
	// probs is the mixture's probability of each choice; cum sums it.
	probs, cum []float64
}

// fit computes the mixture from counts, the summed weights (not
// normalised) of the observations of each choice, and n, the number of
// observations.
func (c *catParzen) fit(counts []float64, n int) {
	k := float64(len(counts))
	total := 0.0
	for _, w := range counts {
		total += w
	}
	// An observation's row is (share + [its choice])/(k·share + 1), with
	// share = prior/(n+1); the rows mix with weights w/(total+prior), and
	// the prior's row, uniform, with prior/(total+prior).
	share := tpePriorWeight / float64(n+1)
	norm := total + tpePriorWeight
	c.probs, c.cum = grow(c.probs, len(counts)), grow(c.cum, len(counts))
	sum := 0.0
	for i, w := range counts {
		c.probs[i] = (share*total+w)/(k*share+1)/norm + tpePriorWeight/norm/k
		sum += c.probs[i]
		c.cum[i] = sum
	}
}

// sample draws a choice's index.
func (c *catParzen) sample(r *rand.Rand) int {
	u := r.Float64() * c.cum[len(c.cum)-1]
	return min(sort.SearchFloat64s(c.cum, math.Nextafter(u, math.Inf(1))), len(c.cum)-1)
}

// grow returns s resized to n elements, reusing its array when it can.
func grow(s []float64, n int) []float64 {
	if cap(s) < n {
		return make([]float64, n)
	}
	return s[:n]
}

// insertFloat inserts v at s[i], reusing s's array when it can.
func insertFloat(s []float64, i int, v float64) []float64 {
	s = append(s, 0)
	copy(s[i+1:], s[i:])
	s[i] = v
	return s
}
