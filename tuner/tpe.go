package tuner

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/c-bata/goptuna"
	"github.com/c-bata/goptuna/tpe"

	"github.com/gotune/gotune/searchspace"
)

// TPEStartupTrials is how many scored trials TPE waits for before it
// models the history; until then it samples at random, as Optuna does.
const TPEStartupTrials = 10

// TPEModelled is the most finished trials, the best ones, that TPE hands
// goptuna's sampler: enough for goptuna's split to pick the same best 25
// as from any longer history.
const TPEModelled = 250

// TPE is the Tree-structured Parzen Estimator (Bergstra et al., "Algorithms
// for Hyper-Parameter Optimization", NeurIPS 2011) of goptuna v0.9.0: for
// each parameter it splits the finished trials into the best ones (the
// best 10%, at most 25) and the rest, fits a Parzen density to the values
// of the best, and draws the new value from it. Parameters are modelled
// independently, as Optuna's default TPESampler does. Trials the scheduler
// stopped early count with their last result, ranked after every trial that
// ran to its end and by how far they got, as Optuna ranks pruned trials.
// Failed trials and trials still running are not learnt from.
//
// The first TPEStartupTrials configurations are drawn at random from the
// space with the seeded generator of RandomSearch.
//
// How gotune drives goptuna's sampler, and why (goptuna v0.9.0,
// tpe/parzen_estimator.go and tpe/sampler.go):
//
//   - The Parzen estimator sorts the observations with gonum's
//     floats.Argsort, which sorts its argument in place, then permutes the
//     sorted values again, so component centres and widths only match when
//     the observations arrive already sorted. gotune hands the sampler the
//     history sorted by the parameter being sampled, which makes the
//     estimator right.
//   - The expected-improvement step should keep, of the candidates drawn
//     from the density of the best trials, the one most likely under it
//     relative to the density of the rest. Its log-density (gmmLogPDF)
//     divides distances by σ² without squaring them, adds up the
//     components' log-densities where it should add their densities, and
//     weighs only one end of the truncation mass, which can make its
//     logarithm NaN; so its ranking does not follow the two densities.
//     gotune asks for one candidate, so each value is a plain draw from
//     the density of the best trials.
//
// Both choices measured better than goptuna's defaults after 200 trials on
// Branin, Hartmann6 and Rosenbrock (go run ./bench/search). They cost the
// expected-improvement ranking that Optuna's TPE has, which leaves
// gotune's TPE behind Optuna's on those functions.
//
// With one candidate, a draw depends only on the best trials, which
// goptuna picks as the best 10% of the history it is given, at most 25.
// So gotune gives it at most the TPEModelled best finished trials: for a
// history of TPEModelled or more, goptuna's split picks the same 25 and the
// draw follows the same density as with the whole history, while a
// suggestion costs the same at 5,000 trials as at 250 (goptuna sorts and
// scans its whole input for every parameter of every suggestion).
//
// Repeatability: the random startup trials repeat with the seed. After
// them, goptuna's TPE picks Parzen components with the process-wide
// math/rand generator, which Go seeds at random and, since Go 1.24, no
// longer lets rand.Seed reseed; so in an ordinary process the same seed
// does not give the same TPE configurations twice. A process started with
// GODEBUG=randautoseed=0 (Go's global generator then starts from a fixed
// state) does repeat them, as long as trials run one at a time and nothing
// else in the process draws from math/rand's global functions.
type TPE struct {
	s       *study
	sampler *tpe.Sampler
	rng     *rand.Rand
	// best holds the TPEModelled best finished trials, best first, in the
	// order goptuna ranks them (see rank).
	best []goptuna.FrozenTrial
	// views holds best sorted by each parameter's value, rebuilt when best
	// has changed since.
	views      map[string][]goptuna.FrozenTrial
	viewsStale bool
}

var _ Searcher = (*TPE)(nil)

// NewTPE returns a TPE searcher over space. It fails, with a *ConfigError
// naming the parameter, on a domain it cannot model (a user-defined
// Domain). Grid parameters are modelled like choices; wrap the searcher in
// a GridSearch over space.WithoutGrid() to expand them instead.
func NewTPE(space *searchspace.Space, seed int64) (*TPE, error) {
	sampler := tpe.NewSampler(
		tpe.SamplerOptionSeed(seed),
		// gotune draws the startup trials itself, from a seeded generator:
		// goptuna's random sampler draws choices from the global one.
		tpe.SamplerOptionNumberOfStartupTrials(0),
		tpe.SamplerOptionNumberOfEICandidates(1),
	)
	s, err := newStudy(space, "tpe", goptuna.StudyOptionSampler(sampler))
	if err != nil {
		return nil, err
	}
	return &TPE{s: s, sampler: sampler, rng: newRand(seed), views: map[string][]goptuna.FrozenTrial{}}, nil
}

// Suggest implements Searcher.
func (t *TPE) Suggest(trial int) (map[string]any, error) {
	id, err := t.s.newTrial(trial)
	if err != nil {
		return nil, err
	}
	cfg := t.s.config()
	startup := len(t.s.store.finished) < TPEStartupTrials
	var frozen goptuna.FrozenTrial
	if !startup {
		if frozen, err = t.s.store.GetTrial(id); err != nil {
			return nil, err
		}
		t.refreshViews()
	}
	for _, p := range t.s.params {
		var v any
		if startup {
			v = p.domain.Sample(t.rng)
		} else {
			t.s.store.view = t.views[p.name]
			x, err := t.sampler.Sample(t.s.study, frozen, p.name, p.dist)
			t.s.store.view = nil
			if err != nil {
				return nil, fmt.Errorf("tpe: sample %s: %w", p.name, err)
			}
			v = p.external(x)
		}
		if err := t.s.set(cfg, id, p, v); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// OnResult implements Searcher. TPE learns from finished trials only; a
// stopped trial's last result comes with OnTrialEnd.
func (t *TPE) OnResult(int, Observation) {}

// OnTrialEnd implements Searcher: the trial joins the history.
func (t *TPE) OnTrialEnd(trial int, end TrialEnd) {
	ft, learnt := t.s.onTrialEnd(trial, end)
	if !learnt {
		return
	}
	// After the trials that rank equal, as goptuna's stable sort of the
	// whole history would place it.
	r := rank(ft)
	i := sort.Search(len(t.best), func(i int) bool { return rankLess(r, rank(t.best[i])) })
	if i == TPEModelled {
		return
	}
	t.best = slices.Insert(t.best, i, ft)
	if len(t.best) > TPEModelled {
		t.best = t.best[:TPEModelled]
	}
	t.viewsStale = true
}

// refreshViews sorts the best trials by each parameter's value.
func (t *TPE) refreshViews() {
	if !t.viewsStale {
		return
	}
	for _, p := range t.s.params {
		v := append(t.views[p.name][:0], t.best...)
		slices.SortStableFunc(v, func(a, b goptuna.FrozenTrial) int {
			return cmp.Compare(a.InternalParams[p.name], b.InternalParams[p.name])
		})
		t.views[p.name] = v
	}
	t.viewsStale = false
}

// rank is the key goptuna's TPE orders finished trials by, lower first: a
// complete trial's is (-Inf, value); a pruned trial's is (-step, value at
// that step) for its last step, so that it comes after every complete
// trial, and the further it got the better.
func rank(t goptuna.FrozenTrial) [2]float64 {
	if t.State == goptuna.TrialStateComplete {
		return [2]float64{math.Inf(-1), t.Value}
	}
	step, ok := t.GetLatestStep()
	if !ok {
		return [2]float64{math.Inf(1), 0}
	}
	return [2]float64{float64(-step), t.IntermediateValues[step]}
}

func rankLess(a, b [2]float64) bool { return a[0] < b[0] || a[0] == b[0] && a[1] < b[1] }
