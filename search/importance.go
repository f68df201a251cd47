package search

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/gotune/gotune/searchspace"
)

// ScoredConfig is a finished trial's configuration and its score, lower
// is better, as Importance reads them.
type ScoredConfig struct {
	Config map[string]any
	Score  float64
}

// ParamImportance is one parameter's share of the importance Importance
// finds: the shares of a space's parameters add up to 1.
type ParamImportance struct {
	Name       string  `json:"param"`
	Importance float64 `json:"importance"`
	// Trials is how many trials had the parameter (fewer than all for a
	// conditional one).
	Trials int `json:"trials"`
}

// importanceSteps is the grid a numeric parameter's densities are
// compared on, as in PED-ANOVA's discretisation.
const importanceSteps = 50

// Importance ranks the parameters of space by how much they matter to
// the score, by PED-ANOVA (Watanabe, Bansal and Hutter, "PED-ANOVA:
// Efficiently Quantifying Hyperparameter Importance in Arbitrary
// Subspaces", IJCAI 2023): a parameter matters as far as the
// distribution of its values among the best trials (the best quantile of
// them, e.g. 0.1) departs from its distribution among all trials, the
// departure measured by the Pearson divergence of the two, each a Parzen
// estimator of the values (for a numeric parameter, Gaussian kernels of
// Scott's bandwidth on its range, in log space for a log-scaled domain,
// on a grid of 50 points; for a choice, the frequencies smoothed by a
// uniform prior). A parameter with one value, a constant, gets 0. The
// shares are normalised to add up to 1 and returned largest first.
//
// A conditional parameter is judged on the trials that have it. The
// importance is local to what was sampled: a parameter the search never
// varied is not found important, whatever its effect elsewhere.
//
// It needs at least two trials, and quantile in (0, 1]; a score that is
// NaN is left out, and so is a value outside its parameter's domain.
func Importance(space *searchspace.Space, trials []ScoredConfig, quantile float64) ([]ParamImportance, error) {
	if !(quantile > 0 && quantile <= 1) {
		return nil, fmt.Errorf("importance: quantile must be in (0, 1], got %g", quantile)
	}
	var valid []ScoredConfig
	for _, t := range trials {
		if !math.IsNaN(t.Score) {
			valid = append(valid, t)
		}
	}
	if len(valid) < 2 {
		return nil, fmt.Errorf("importance: %d scored trials, need at least 2", len(valid))
	}
	var out []ParamImportance
	total := 0.0
	for _, p := range space.Params() {
		if _, isConst := p.Domain.(searchspace.Constant); isConst {
			continue
		}
		tp, err := newTPEParam(p)
		if err != nil {
			return nil, fmt.Errorf("importance: %s: %w", p.Name, err)
		}
		var xs, scores []float64
		for _, t := range valid {
			v, ok := t.Config[p.Name]
			if !ok {
				continue
			}
			// A configuration read back from JSON has float64 integers.
			v, err := searchspace.Member(p.Domain, v)
			if err != nil {
				continue
			}
			x, err := tp.modelValue(v)
			if err != nil {
				continue
			}
			xs, scores = append(xs, x), append(scores, t.Score)
		}
		imp := 0.0
		if len(xs) >= 2 {
			imp = pedDivergence(&tp, xs, scores, quantile)
		}
		out = append(out, ParamImportance{Name: p.Name, Importance: imp, Trials: len(xs)})
		total += imp
	}
	if len(out) == 0 {
		return nil, errors.New("importance: the space has no parameter that varies")
	}
	for i := range out {
		if total > 0 {
			out[i].Importance /= total
		}
	}
	slices.SortStableFunc(out, func(a, b ParamImportance) int {
		switch {
		case a.Importance > b.Importance:
			return -1
		case a.Importance < b.Importance:
			return 1
		}
		return 0
	})
	return out, nil
}

// ImportanceTop is how many of n trials Importance counts as the best
// quantile of them: at least one.
func ImportanceTop(n int, quantile float64) int {
	return max(1, int(math.Ceil(quantile*float64(n))))
}

// pedDivergence is the Pearson divergence of the distribution of xs among
// the best quantile of them (by score) from their distribution among
// all, both as probabilities over the same grid (or choices).
func pedDivergence(p *tpeParam, xs, scores []float64, quantile float64) float64 {
	order := make([]int, len(xs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return scores[order[a]] < scores[order[b]] })
	top := make([]float64, 0, len(xs))
	for _, i := range order[:ImportanceTop(len(xs), quantile)] {
		top = append(top, xs[i])
	}
	var pTop, pAll []float64
	if p.choices != nil {
		pTop, pAll = choicePMF(top, len(p.choices)), choicePMF(xs, len(p.choices))
	} else {
		grid := make([]float64, importanceSteps)
		for i := range grid {
			grid[i] = p.low + (p.high-p.low)*float64(i)/float64(importanceSteps-1)
		}
		pTop, pAll = gridPMF(top, grid, p.high-p.low), gridPMF(xs, grid, p.high-p.low)
	}
	d := 0.0
	for i := range pAll {
		if pAll[i] > 0 {
			r := pTop[i]/pAll[i] - 1
			d += pAll[i] * r * r
		}
	}
	return d
}

// choicePMF is the frequency of each choice index among xs, with one
// pseudo-observation spread evenly over the choices.
func choicePMF(xs []float64, n int) []float64 {
	pmf := make([]float64, n)
	for i := range pmf {
		pmf[i] = 1 / float64(n)
	}
	for _, x := range xs {
		pmf[int(x)]++
	}
	for i := range pmf {
		pmf[i] /= float64(len(xs) + 1)
	}
	return pmf
}

// gridPMF is a Gaussian Parzen estimator of xs, with Scott's bandwidth
// (at least a grid step), evaluated on grid and normalised to add up to 1.
func gridPMF(xs, grid []float64, span float64) []float64 {
	mean := 0.0
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	variance := 0.0
	for _, x := range xs {
		variance += (x - mean) * (x - mean)
	}
	sigma := math.Sqrt(variance / float64(max(len(xs)-1, 1)))
	h := max(1.059*sigma*math.Pow(float64(len(xs)), -0.2), span/float64(len(grid)-1))
	pmf := make([]float64, len(grid))
	sum := 0.0
	for i, g := range grid {
		for _, x := range xs {
			z := (g - x) / h
			pmf[i] += math.Exp(-0.5 * z * z)
		}
		sum += pmf[i]
	}
	for i := range pmf {
		pmf[i] /= sum
	}
	return pmf
}
