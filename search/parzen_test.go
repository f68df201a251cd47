package search

import (
	"cmp"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/gotune/gotune/searchspace"
)

// tpeReference is testdata/tpe_reference.json: values computed by
// Optuna 3.1's TPE internals (testdata/tpe_reference.py regenerates it).
type tpeReference struct {
	Gamma   map[string]int       `json:"gamma"`
	Weights map[string][]float64 `json:"weights"`
	Numeric []struct {
		Name         string        `json:"name"`
		Domain       refDomainSpec `json:"domain"`
		Observations []any         `json:"observations"`
		Points       []float64     `json:"points"`
		Low          float64       `json:"low"`
		High         float64       `json:"high"`
		Mus          []float64     `json:"mus"`
		Sigmas       []float64     `json:"sigmas"`
		Weights      []float64     `json:"weights"`
		LogPDF       []float64     `json:"log_pdf"`
	} `json:"numeric"`
	Categorical []struct {
		Name         string    `json:"name"`
		Choices      []any     `json:"choices"`
		Observations []any     `json:"observations"`
		Probs        []float64 `json:"probs"`
	} `json:"categorical"`
	Joint []struct {
		Name         string          `json:"name"`
		Domains      []refDomainSpec `json:"domains"`
		Observations [][]any         `json:"observations"`
		Weights      []float64       `json:"weights"`
		Points       [][]any         `json:"points"`
		LogPDF       []float64       `json:"log_pdf"`
	} `json:"joint"`
	Trials []struct {
		State string   `json:"state"`
		Step  *float64 `json:"step"`
		Value *float64 `json:"value"`
	} `json:"trials"`
	Splits []struct {
		N     int   `json:"n"`
		Below []int `json:"below"`
	} `json:"splits"`
	PPF []struct {
		Q, A, B, X float64
	} `json:"ppf"`
	LogGaussMass []struct {
		A, B, Log float64
	} `json:"log_gauss_mass"`
	LogNdtr []struct {
		A, Log float64
	} `json:"log_ndtr"`
}

// refDomainSpec names a gotune domain: its kind and arguments.
type refDomainSpec struct {
	Kind string `json:"kind"`
	Args []any  `json:"args"`
}

func loadTPEReference(t *testing.T) tpeReference {
	t.Helper()
	b, err := os.ReadFile("testdata/tpe_reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref tpeReference
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	return ref
}

// closeTo reports whether got is within tol of want, relative to want's
// size where that is above 1.
func closeTo(got, want, tol float64) bool {
	if math.IsInf(want, 0) {
		return got == want
	}
	return math.Abs(got-want) <= tol*max(1, math.Abs(want))
}

func TestTPEGamma(t *testing.T) {
	ref := loadTPEReference(t)
	for n, want := range ref.Gamma {
		k, _ := strconv.Atoi(n)
		if got := tpeGamma(k); got != want {
			t.Errorf("tpeGamma(%d) = %d, want %d", k, got, want)
		}
	}
}

func TestTPEWeights(t *testing.T) {
	ref := loadTPEReference(t)
	for m, want := range ref.Weights {
		n, _ := strconv.Atoi(m)
		for k, w := range want {
			if got := tpeWeight(k, n); got != w {
				t.Errorf("tpeWeight(%d, %d) = %v, want %v", k, n, got, w)
			}
		}
	}
}

// refDomain builds the gotune domain a reference case names.
func refDomain(t *testing.T, spec refDomainSpec) searchspace.Domain {
	t.Helper()
	a := make([]float64, len(spec.Args))
	for i, v := range spec.Args {
		a[i], _ = v.(float64)
	}
	switch spec.Kind {
	case "uniform":
		return searchspace.Uniform{Low: a[0], High: a[1]}
	case "loguniform":
		return searchspace.LogUniform{Low: a[0], High: a[1]}
	case "quniform":
		return searchspace.QUniform{Low: a[0], High: a[1], Q: a[2]}
	case "qloguniform":
		return searchspace.QLogUniform{Low: a[0], High: a[1], Q: a[2]}
	case "randint":
		return searchspace.RandInt{Low: int64(a[0]), High: int64(a[1])}
	case "lograndint":
		return searchspace.LogRandInt{Low: int64(a[0]), High: int64(a[1])}
	case "choice":
		return searchspace.Choice{Values: spec.Args}
	}
	t.Fatalf("unknown domain kind %q", spec.Kind)
	return nil
}

// refValue converts a JSON value to the type domain d yields.
func refValue(d searchspace.Domain, v any) any {
	switch d.(type) {
	case searchspace.RandInt, searchspace.LogRandInt:
		return int64(v.(float64))
	}
	return v
}

// refParams builds the TPE parameters of reference domains, named p0,
// p1, … in the order given.
func refParams(t *testing.T, specs ...refDomainSpec) []tpeParam {
	t.Helper()
	params := make([]tpeParam, len(specs))
	for i, spec := range specs {
		p, err := newTPEParam(searchspace.Param{Name: "p" + strconv.Itoa(i), Domain: refDomain(t, spec)})
		if err != nil {
			t.Fatal(err)
		}
		params[i] = p
	}
	return params
}

// refModel maps reference configurations to model space, by parameter
// then configuration.
func refModel(t *testing.T, params []tpeParam, configs [][]any) [][]float64 {
	t.Helper()
	cols := make([][]float64, len(params))
	for _, cfg := range configs {
		for i := range params {
			x, err := params[i].modelValue(refValue(params[i].domain, cfg[i]))
			if err != nil {
				t.Fatal(err)
			}
			cols[i] = append(cols[i], x)
		}
	}
	return cols
}

// fitByAge fits the estimator of one parameter to observations in trial
// order, weighted by age as TPE weighs the other trials.
func fitByAge(t *testing.T, params []tpeParam, observations []any) *kde {
	t.Helper()
	configs := make([][]any, len(observations))
	weights := make([]float64, len(observations))
	for k, v := range observations {
		configs[k] = []any{v}
		weights[k] = tpeWeight(k, len(observations))
	}
	var k kde
	k.fit(params, refModel(t, params, configs), ids(len(observations)), weights)
	return &k
}

// ids returns 0, 1, …, n−1.
func ids(n int) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = int32(i)
	}
	return s
}

// TestKDEMatchesOptuna fits the estimator of one numeric parameter to
// observations in trial order, weighted by age as TPE weighs the other
// trials, and compares its components and log-densities with Optuna
// 3.1's _ParzenEstimator.
func TestKDEMatchesOptuna(t *testing.T) {
	ref := loadTPEReference(t)
	for _, c := range ref.Numeric {
		t.Run(c.Name, func(t *testing.T) {
			params := refParams(t, c.Domain)
			p := &params[0]
			if !closeTo(p.low, c.Low, 1e-12) || !closeTo(p.high, c.High, 1e-12) {
				t.Errorf("model bounds [%v, %v], want [%v, %v]", p.low, p.high, c.Low, c.High)
			}
			k := fitByAge(t, params, c.Observations)

			type comp struct{ mu, sigma, w float64 }
			var got []comp
			d := &k.dims[0]
			for i := range d.mus {
				got = append(got, comp{d.mus[i], d.sigmas[i], math.Exp(k.logW[i])})
			}
			slices.SortFunc(got, func(a, b comp) int {
				return cmp.Or(cmp.Compare(a.mu, b.mu), cmp.Compare(a.sigma, b.sigma), cmp.Compare(a.w, b.w))
			})
			if len(got) != len(c.Mus) {
				t.Fatalf("%d components, want %d", len(got), len(c.Mus))
			}
			for i, g := range got {
				if !closeTo(g.mu, c.Mus[i], 1e-12) || !closeTo(g.sigma, c.Sigmas[i], 1e-12) || !closeTo(g.w, c.Weights[i], 1e-12) {
					t.Errorf("component %d: mu %v σ %v weight %v, want %v %v %v", i, g.mu, g.sigma, g.w, c.Mus[i], c.Sigmas[i], c.Weights[i])
				}
			}
			for i, v := range c.Points {
				x, err := p.modelValue(refValue(p.domain, v))
				if err != nil {
					t.Fatal(err)
				}
				if got := k.logPDF([]float64{x}); !closeTo(got, c.LogPDF[i], 1e-9) {
					t.Errorf("log pdf at %v: %v, want %v", v, got, c.LogPDF[i])
				}
			}
		})
	}
}

// TestKDECategoricalMatchesOptuna compares the probabilities of a
// categorical parameter's choices with Optuna 3.1's.
func TestKDECategoricalMatchesOptuna(t *testing.T) {
	ref := loadTPEReference(t)
	for _, c := range ref.Categorical {
		t.Run(c.Name, func(t *testing.T) {
			params := refParams(t, refDomainSpec{Kind: "choice", Args: c.Choices})
			k := fitByAge(t, params, c.Observations)
			for i, want := range c.Probs {
				if got := math.Exp(k.logPDF([]float64{float64(i)})); !closeTo(got, want, 1e-12) {
					t.Errorf("p(%v) = %v, want %v", c.Choices[i], got, want)
				}
			}
		})
	}
}

// TestKDEJointMatchesOptuna fits one estimator to whole configurations
// of five parameters of every kind, with given weights, and compares its
// log-density at other configurations with Optuna's joint estimator.
func TestKDEJointMatchesOptuna(t *testing.T) {
	ref := loadTPEReference(t)
	for _, c := range ref.Joint {
		t.Run(c.Name, func(t *testing.T) {
			params := refParams(t, c.Domains...)
			cols := refModel(t, params, c.Observations)
			var k kde
			k.fit(params, cols, ids(len(c.Observations)), c.Weights)
			points := refModel(t, params, c.Points)
			x := make([]float64, len(params))
			for j, want := range c.LogPDF {
				for i := range params {
					x[i] = points[i][j]
				}
				if got := k.logPDF(x); !closeTo(got, want, 1e-9) {
					t.Errorf("log pdf at %v: %v, want %v", c.Points[j], got, want)
				}
			}
		})
	}
}

// TestKDESamples draws from an estimator and checks that each component
// is drawn as often as it weighs and its values stay near it: a
// chi-squared test of the components' counts and of the choices drawn.
func TestKDESamples(t *testing.T) {
	params := refParams(t,
		refDomainSpec{Kind: "uniform", Args: []any{0.0, 1.0}},
		refDomainSpec{Kind: "choice", Args: []any{"a", "b", "c", "d"}},
	)
	// Three observations far apart, of weights 1, 2 and 5.
	cols := [][]float64{{0.1, 0.5, 0.9}, {0, 1, 3}}
	var k kde
	k.fit(params, cols, ids(3), []float64{1, 2, 5})
	r := rand.New(rand.NewPCG(8, 9))
	const n = 40000
	x := make([]float64, 2)
	var choices [4]float64
	var near [3]float64
	for range n {
		k.sample(r, x)
		if x[0] < 0 || x[0] > 1 {
			t.Fatalf("sample %v outside [0, 1]", x[0])
		}
		choices[int(x[1])]++
		for i, mu := range cols[0] {
			if math.Abs(x[0]-mu) < 0.05 {
				near[i]++
			}
		}
	}
	// A choice's probability: each observation's kernel gives its own
	// choice (1+share)/(4·share+1) and the others share/(4·share+1),
	// share = 1/4; the prior (weight 1 of 9) is uniform.
	share := 0.25
	var want [4]float64
	for i, w := range []float64{1, 2, 5} {
		for c := range want {
			p := share / (4*share + 1)
			if c == int(cols[1][i]) {
				p = (1 + share) / (4*share + 1)
			}
			want[c] += w / 9 * p
		}
	}
	chi2 := 0.0
	for c := range want {
		want[c] += 1.0 / 9 / 4
		e := want[c] * n
		chi2 += (choices[c] - e) * (choices[c] - e) / e
	}
	// 3 degrees of freedom: P(χ² > 16.27) = 0.001.
	if chi2 > 16.27 {
		t.Errorf("choices drawn %v, want proportions %v (χ² = %.1f)", choices, want, chi2)
	}
	// Values near an observation come mostly from its component, so
	// their counts rank as the weights do.
	if !(near[0] < near[1] && near[1] < near[2]) {
		t.Errorf("samples near 0.1, 0.5, 0.9: %v; want increasing with the weights 1, 2, 5", near)
	}
}

// TestKDEWidenedSamples draws from an estimator whose observations all
// sit at 500 in [0, 1000], so that its kernels are the narrowest it
// allows (σ = 10), and checks that widen multiplies the spread of the
// draws (their median distance to 500 is 0.6745σ for a normal) and not
// the density logPDF scores.
func TestKDEWidenedSamples(t *testing.T) {
	params := refParams(t, refDomainSpec{Kind: "uniform", Args: []any{0.0, 1000.0}})
	cols := [][]float64{slices.Repeat([]float64{500}, 200)}
	weights := slices.Repeat([]float64{1}, 200)
	for _, widen := range []float64{0, 1, 3, 6} {
		var k kde
		k.widen = widen
		k.fit(params, cols, ids(200), weights)
		r := rand.New(rand.NewPCG(8, 9))
		dists := make([]float64, 20000)
		x := make([]float64, 1)
		for i := range dists {
			k.sample(r, x)
			dists[i] = math.Abs(x[0] - 500)
		}
		slices.Sort(dists)
		sigma := 10 * max(widen, 1)
		// The prior (weight 1 of 201) adds about 0.1σ to the median.
		if got := dists[len(dists)/2] / 0.6745; math.Abs(got-sigma) > 0.05*sigma+1 {
			t.Errorf("widen %g: draws spread as a normal of σ %.2f, want %g", widen, got, sigma)
		}
		var plain kde
		plain.fit(params, cols, ids(200), weights)
		for _, v := range []float64{480, 500, 530, 900} {
			if got, want := k.logPDF([]float64{v}), plain.logPDF([]float64{v}); got != want {
				t.Errorf("widen %g: log density at %g %v, want the fitted estimator's %v", widen, v, got, want)
			}
		}
	}
}

// TestTPESplitMatchesOptuna feeds completed and stopped trials to the
// history and checks that the good group is the one Optuna 3.1's
// _split_observation_pairs picks from the same trials.
func TestTPESplitMatchesOptuna(t *testing.T) {
	ref := loadTPEReference(t)
	ends := make([]TrialEnd, len(ref.Trials))
	for i, tr := range ref.Trials {
		switch {
		case tr.State == "complete":
			ends[i] = TrialEnd{Status: TrialCompleted, Last: &Observation{Step: 9, Score: *tr.Value}}
		case tr.Step == nil:
			ends[i] = TrialEnd{Status: TrialStopped}
		default:
			ends[i] = TrialEnd{Status: TrialStopped, Last: &Observation{Step: *tr.Step, Score: *tr.Value}}
		}
	}
	for _, s := range ref.Splits {
		h := tpeHistory{cols: [][]float64{nil}}
		// Trials finish in reverse order: the split ranks by trial number.
		for i := s.N - 1; i >= 0; i-- {
			r, counted := tpeRank(ends[i])
			if !counted {
				t.Fatalf("trial %d not counted", i)
			}
			h.add(i, r, []float64{float64(i)})
		}
		var got []int
		for _, id := range h.best[:tpeGamma(s.N)] {
			got = append(got, h.trial[id])
		}
		slices.Sort(got)
		if !slices.Equal(got, s.Below) {
			t.Errorf("%d trials: good group %v, want %v", s.N, got, s.Below)
		}
	}
}

func TestTruncnormMatchesOptuna(t *testing.T) {
	ref := loadTPEReference(t)
	for _, c := range ref.PPF {
		if got := truncnormPPF(c.Q, c.A, c.B); !closeTo(got, c.X, 1e-9) {
			t.Errorf("ppf(%v) on [%v, %v] = %v, want %v", c.Q, c.A, c.B, got, c.X)
		}
	}
	for _, c := range ref.LogGaussMass {
		if got := logGaussMass(c.A, c.B); !closeTo(got, c.Log, 1e-12) {
			t.Errorf("log mass of [%v, %v] = %v, want %v", c.A, c.B, got, c.Log)
		}
		if c.Log > -700 {
			if got := math.Log(gaussMass(c.A, c.B)); !closeTo(got, c.Log, 1e-9) {
				t.Errorf("log of the mass of [%v, %v] = %v, want %v", c.A, c.B, got, c.Log)
			}
		}
	}
	for _, c := range ref.LogNdtr {
		if got := logNdtr(c.A); math.Abs(got-c.Log) > 1e-12*math.Abs(c.Log) {
			t.Errorf("log Φ(%v) = %v, want %v", c.A, got, c.Log)
		}
	}
}

// TestValueSorter checks the radix sort that orders a numeric kernel's
// centres against a stable comparison sort: values ascending, equal ones
// (−0 and +0 among them) in their given order, over sets with many ties,
// negatives, infinities and values spanning many exponents.
func TestValueSorter(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	sets := map[string]func() float64{
		"uniform":   r.Float64,
		"ties":      func() float64 { return float64(r.IntN(5)) / 4 },
		"signed":    func() float64 { return r.NormFloat64() * math.Pow(10, float64(r.IntN(20)-10)) },
		"zeros":     func() float64 { return []float64{0, math.Copysign(0, -1), 1, -1}[r.IntN(4)] },
		"infinites": func() float64 { return []float64{math.Inf(1), math.Inf(-1), 2, -2, 0}[r.IntN(5)] },
	}
	var s valueSorter
	for name, draw := range sets {
		for _, n := range []int{0, 1, 2, 3, 17, 1000} {
			values := make([]float64, n+3)
			for i := range values {
				values[i] = draw()
			}
			// Indices of all but a few values, in a shuffled order.
			order := make([]int32, 0, n)
			for _, i := range r.Perm(n + 3)[:n] {
				order = append(order, int32(i))
			}
			want := slices.Clone(order)
			slices.SortStableFunc(want, func(a, b int32) int { return cmp.Compare(values[a], values[b]) })
			s.sort(order, values)
			if !slices.Equal(order, want) {
				t.Errorf("%s, %d values: got %v, want %v", name, n, order, want)
			}
		}
	}
}

// TestKDEReusesNorms fits one estimator again and again, as TPE does
// from one suggestion to the next (a window sliding over the
// observations, observations whose values change as running trials'
// slots do, a dimension refitted to another parameter as the marginal
// suggestions do), and checks each fit's log normalising constants bit
// for bit against a fresh estimator's.
func TestKDEReusesNorms(t *testing.T) {
	var params []tpeParam
	for _, d := range []searchspace.Domain{
		searchspace.Uniform{Low: 0, High: 1},
		searchspace.QUniform{Low: 0, High: 1, Q: 0.125},
		searchspace.LogUniform{Low: 1e-3, High: 1},
	} {
		p, err := newTPEParam(searchspace.Param{Name: "x", Domain: d})
		if err != nil {
			t.Fatal(err)
		}
		params = append(params, p)
	}
	r := rand.New(rand.NewPCG(3, 4))
	const n = 300
	cols := make([][]float64, len(params))
	for p := range cols {
		for range n {
			cols[p] = append(cols[p], params[p].low+r.Float64()*(params[p].high-params[p].low))
		}
	}
	var reused kde
	check := func(what string, params []tpeParam, cols [][]float64, ids []int32) {
		t.Helper()
		weights := make([]float64, len(ids))
		for i := range weights {
			weights[i] = 1
		}
		var fresh kde
		fresh.fit(params, cols, ids, weights)
		reused.fit(params, cols, ids, weights)
		for p := range params {
			got, want := reused.dims[p].logNorm, fresh.dims[p].logNorm
			for i := range want {
				if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
					t.Fatalf("%s, parameter %d, component %d: logNorm %v, want %v", what, p, i, got[i], want[i])
				}
			}
		}
	}
	window := func(from, to int) []int32 { return ids(to)[from:] }
	for start := 0; start+150 <= n; start += 10 {
		check("sliding window", params, cols, window(start, start+150))
	}
	for range 5 {
		// The newest observations take other values, as the slots after
		// the history do for the running trials.
		for p := range cols {
			for id := n - 20; id < n; id++ {
				cols[p][id] = params[p].low + r.Float64()*(params[p].high-params[p].low)
			}
		}
		check("changed values", params, cols, window(n-150, n))
	}
	for p := range params {
		check("one parameter", params[p:p+1], cols[p:p+1], window(50, 250))
	}
	for p := range params {
		// The same values in each parameter's model space in turn.
		check("another parameter's space", params[p:p+1], cols[:1], window(50, 250))
	}
	check("few observations", params, cols, window(0, 12))
}
