package tuner

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
		Name   string `json:"name"`
		Domain struct {
			Kind string    `json:"kind"`
			Args []float64 `json:"args"`
		} `json:"domain"`
		Observations []float64 `json:"observations"`
		Points       []float64 `json:"points"`
		Low          float64   `json:"low"`
		High         float64   `json:"high"`
		Mus          []float64 `json:"mus"`
		Sigmas       []float64 `json:"sigmas"`
		Weights      []float64 `json:"weights"`
		LogPDF       []float64 `json:"log_pdf"`
	} `json:"numeric"`
	Categorical []struct {
		Name         string    `json:"name"`
		Choices      []any     `json:"choices"`
		Observations []any     `json:"observations"`
		Probs        []float64 `json:"probs"`
	} `json:"categorical"`
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
func refDomain(t *testing.T, kind string, a []float64) searchspace.Domain {
	t.Helper()
	switch kind {
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
	}
	t.Fatalf("unknown domain kind %q", kind)
	return nil
}

// refValue converts a JSON number to the type domain d yields.
func refValue(d searchspace.Domain, x float64) any {
	switch d.(type) {
	case searchspace.RandInt, searchspace.LogRandInt:
		return int64(x)
	}
	return x
}

// TestParzenMatchesOptuna fits the estimator to observations in trial
// order, weighted by age as TPE weighs the other trials, and compares its
// components and log-densities with Optuna 3.1's _ParzenEstimator.
func TestParzenMatchesOptuna(t *testing.T) {
	ref := loadTPEReference(t)
	for _, c := range ref.Numeric {
		t.Run(c.Name, func(t *testing.T) {
			d := refDomain(t, c.Domain.Kind, c.Domain.Args)
			p, err := newTPEParam(searchspace.Param{Name: "x", Domain: d})
			if err != nil {
				t.Fatal(err)
			}
			if !closeTo(p.low, c.Low, 1e-12) || !closeTo(p.high, c.High, 1e-12) {
				t.Errorf("model bounds [%v, %v], want [%v, %v]", p.low, p.high, c.Low, c.High)
			}
			type obs struct{ x, w float64 }
			var sorted []obs
			for k, v := range c.Observations {
				x, err := p.modelValue(refValue(d, v))
				if err != nil {
					t.Fatal(err)
				}
				sorted = append(sorted, obs{x, tpeWeight(k, len(c.Observations))})
			}
			slices.SortStableFunc(sorted, func(a, b obs) int { return cmp.Compare(a.x, b.x) })
			var pe parzen
			pe.reset(p.low, p.high, p.step)
			for _, o := range sorted {
				pe.add(o.x, o.w)
			}
			pe.fit()

			type comp struct{ mu, sigma, w float64 }
			var got []comp
			for i := range pe.mus {
				got = append(got, comp{pe.mus[i], pe.sigmas[i], pe.weights[i]})
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
				x, err := p.modelValue(refValue(d, v))
				if err != nil {
					t.Fatal(err)
				}
				if got := pe.logPDF(x); !closeTo(got, c.LogPDF[i], 1e-9) {
					t.Errorf("log pdf at %v: %v, want %v", v, got, c.LogPDF[i])
				}
			}
		})
	}
}

func TestCatParzenMatchesOptuna(t *testing.T) {
	ref := loadTPEReference(t)
	for _, c := range ref.Categorical {
		t.Run(c.Name, func(t *testing.T) {
			// JSON numbers decode as float64; a choice of numbers compares
			// by value either way.
			counts := make([]float64, len(c.Choices))
			for k, v := range c.Observations {
				i := slices.Index(c.Choices, v)
				if i < 0 {
					t.Fatalf("observation %v is not a choice", v)
				}
				counts[i] += tpeWeight(k, len(c.Observations))
			}
			var pe catParzen
			pe.fit(counts, len(c.Observations))
			for i, want := range c.Probs {
				if !closeTo(pe.probs[i], want, 1e-12) {
					t.Errorf("p(%v) = %v, want %v", c.Choices[i], pe.probs[i], want)
				}
			}
		})
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
		h := tpeHistory{cols: [][]float64{nil}, byValue: [][]int32{nil}}
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

// TestParzenLogPDFSkipsOnlyNegligibleComponents checks that the
// log-density, which visits only the components near enough to count,
// equals the sum over every component, with 2,000 narrow
// components, clustered and spread, continuous and quantised.
func TestParzenLogPDFSkipsOnlyNegligibleComponents(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, step := range []float64{0, 0.01} {
		// Observations over the whole domain, or all near 0.3.
		for _, spread := range []float64{1, 0.02} {
			centre := 0.5
			if spread < 1 {
				centre = 0.3
			}
			var pe parzen
			pe.reset(-0.005, 1.005, step)
			xs := make([]float64, 2000)
			for i := range xs {
				xs[i] = centre + spread*(r.Float64()-0.5)
				if step > 0 {
					xs[i] = math.Round(xs[i]/step) * step
				}
			}
			slices.Sort(xs)
			for i, x := range xs {
				pe.add(x, tpeWeight(i, len(xs)))
			}
			pe.fit()
			for k := range 100 {
				x := -0.005 + 1.01*float64(k)/99
				if step > 0 {
					x = float64(k%101) * 0.01
				}
				want := 0.0
				for i := range pe.mus {
					mu, sigma := pe.mus[i], pe.sigmas[i]
					if step > 0 {
						lo, hi := max(x-step/2, pe.low), min(x+step/2, pe.high)
						want += pe.weights[i] * gaussMass((lo-mu)/sigma, (hi-mu)/sigma) / pe.accept[i]
					} else {
						z := (x - mu) / sigma
						want += pe.coef[i] * math.Exp(-0.5*z*z)
					}
				}
				if got := pe.logPDF(x); !closeTo(got, math.Log(want), 1e-12) {
					t.Errorf("step %v spread %v: log pdf at %v = %v, want %v", step, spread, x, got, math.Log(want))
				}
			}
		}
	}
}
