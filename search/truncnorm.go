package search

import "math"

// The standard normal distribution's CDF, its logarithm and inverse, and
// the probability mass of an interval, as TPE's truncated normal
// components need them. They follow the numerics of Optuna 3.1's
// samplers/_tpe/_truncnorm.py (itself from SciPy): mass in the far tails
// is computed from the tail it lies in, and logarithms from asymptotic
// series where the CDF underflows.

// ndtr is the standard normal CDF Φ(a).
func ndtr(a float64) float64 {
	x := a / math.Sqrt2
	switch {
	case x < -1/math.Sqrt2:
		return 0.5 * math.Erfc(-x)
	case x < 1/math.Sqrt2:
		return 0.5 + 0.5*math.Erf(x)
	default:
		return 1 - 0.5*math.Erfc(x)
	}
}

// logNdtr is log Φ(a), finite down to a = −1e150 or so.
func logNdtr(a float64) float64 {
	if a > 6 {
		return -ndtr(-a) // log(1 − ε) ≈ −ε
	}
	if a > -20 {
		return math.Log(ndtr(a))
	}
	// Φ(a) ≈ φ(a)/(−a) · (1 − 1/a² + 3/a⁴ − 15/a⁶ + …), summed until it stops changing.
	logLHS := -0.5*a*a - math.Log(-a) - 0.5*math.Log(2*math.Pi)
	last, rhs, numerator, denom := 0.0, 1.0, 1.0, 1.0
	sign := 1.0
	for i := 1; math.Abs(last-rhs) > 0x1p-52; i++ {
		last = rhs
		sign = -sign
		denom /= a * a
		numerator *= float64(2*i - 1)
		rhs += sign * numerator * denom
	}
	return logLHS + math.Log(rhs)
}

// gaussMass is Φ(b) − Φ(a) for a ≤ b, computed in the tail the interval
// lies in so that mass far from the centre keeps its precision.
func gaussMass(a, b float64) float64 {
	switch {
	case b <= 0:
		return ndtr(b) - ndtr(a)
	case a > 0:
		return ndtr(-a) - ndtr(-b)
	default:
		return 1 - ndtr(a) - ndtr(-b)
	}
}

// logGaussMass is log(Φ(b) − Φ(a)) for a ≤ b, finite far into the tails.
func logGaussMass(a, b float64) float64 {
	switch {
	case b <= 0:
		return logDiff(logNdtr(b), logNdtr(a))
	case a > 0:
		return logDiff(logNdtr(-a), logNdtr(-b))
	default:
		return math.Log1p(-ndtr(a) - ndtr(-b))
	}
}

// logDiff is log(exp(p) − exp(q)) for q ≤ p.
func logDiff(p, q float64) float64 { return p + math.Log1p(-math.Exp(q-p)) }

// ndtriLog is Φ⁻¹(exp(y)) for y ≤ 0: the standard normal quantile of a
// probability given by its logarithm, so that probabilities too small
// for a float64 keep their quantile. It evaluates Wichura's rational
// approximations (Algorithm AS 241, PPND16, Applied Statistics 37(3),
// 1988), accurate to about 1e-16, on the tail the probability lies in.
func ndtriLog(y float64) float64 {
	switch {
	case y >= 0:
		return math.Inf(1)
	case math.IsInf(y, -1):
		return math.Inf(-1)
	}
	p := math.Exp(y)
	if q := p - 0.5; math.Abs(q) <= 0.425 {
		r := 0.180625 - q*q
		return q * poly(ppndA[:], r) / poly(ppndB[:], r)
	}
	// r = sqrt(−log min(p, 1−p)), from y itself on the lower tail.
	var r float64
	lower := p < 0.5
	if lower {
		r = math.Sqrt(-y)
	} else {
		r = math.Sqrt(-math.Log(-math.Expm1(y)))
	}
	var x float64
	if r <= 5 {
		r -= 1.6
		x = poly(ppndC[:], r) / poly(ppndD[:], r)
	} else {
		r -= 5
		x = poly(ppndE[:], r) / poly(ppndF[:], r)
	}
	if lower {
		return -x
	}
	return x
}

// poly evaluates c[0] + c[1]·x + … by Horner's rule.
func poly(c []float64, x float64) float64 {
	y := 0.0
	for i := len(c) - 1; i >= 0; i-- {
		y = y*x + c[i]
	}
	return y
}

// The coefficients of AS 241's PPND16.
var (
	ppndA = [8]float64{3.3871328727963666080e0, 1.3314166789178437745e+2, 1.9715909503065514427e+3,
		1.3731693765509461125e+4, 4.5921953931549871457e+4, 6.7265770927008700853e+4,
		3.3430575583588128105e+4, 2.5090809287301226727e+3}
	ppndB = [8]float64{1, 4.2313330701600911252e+1, 6.8718700749205790830e+2, 5.3941960214247511077e+3,
		2.1213794301586595867e+4, 3.9307895800092710610e+4, 2.8729085735721942674e+4,
		5.2264952788528545610e+3}
	ppndC = [8]float64{1.42343711074968357734e0, 4.63033784615654529590e0, 5.76949722146069140550e0,
		3.64784832476320460504e0, 1.27045825245236838258e0, 2.41780725177450611770e-1,
		2.27238449892691845833e-2, 7.74545014278341407640e-4}
	ppndD = [8]float64{1, 2.05319162663775882187e0, 1.67638483018380384940e0, 6.89767334985100004550e-1,
		1.48103976427480074590e-1, 1.51986665636164571966e-2, 5.47593808499534494600e-4,
		1.05075007164441684324e-9}
	ppndE = [8]float64{6.65790464350110377720e0, 5.46378491116411436990e0, 1.78482653991729133580e0,
		2.96560571828504891230e-1, 2.65321895265761230930e-2, 1.24266094738807843860e-3,
		2.71155556874348757815e-5, 2.01033439929228813265e-7}
	ppndF = [8]float64{1, 5.99832206555887937690e-1, 1.36929880922735805310e-1, 1.48753612908506148525e-2,
		7.86869131145613259100e-4, 1.84631831751005468180e-5, 1.42151175831644588870e-7,
		2.04426310338993978564e-15}
)

// truncnormPPF is the u-quantile of the standard normal truncated to
// [a, b], 0 ≤ u ≤ 1, computed as Optuna 3.1's truncnorm.ppf does: through
// log Φ on the side of the interval that keeps precision.
func truncnormPPF(u, a, b float64) float64 {
	switch {
	case u == 0:
		return a
	case u == 1:
		return b
	}
	logMass := logGaussMass(a, b)
	if a < 0 {
		return ndtriLog(logAddExp(logNdtr(a), math.Log(u)+logMass))
	}
	return -ndtriLog(logAddExp(logNdtr(-b), math.Log1p(-u)+logMass))
}

// logAddExp is log(exp(p) + exp(q)).
func logAddExp(p, q float64) float64 {
	if p < q {
		p, q = q, p
	}
	if math.IsInf(q, -1) {
		return p
	}
	return p + math.Log1p(math.Exp(q-p))
}
