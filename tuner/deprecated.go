package tuner

// The searchers moved to package search (and hypervolume to package
// pareto); the names they had here stay for one release, so that Go
// programs written against tuner keep building. Each forwards to its new
// home and is marked deprecated; remove this file in the next release.

import (
	"math/rand/v2"

	"github.com/gotune/gotune/pareto"
	"github.com/gotune/gotune/search"
	"github.com/gotune/gotune/searchspace"
)

// Searcher is the interface a searcher implements.
//
// Deprecated: use search.Searcher.
type Searcher = search.Searcher

// Observation is one result of a trial, as a searcher sees it.
//
// Deprecated: use search.Observation.
type Observation = search.Observation

// TrialEnd is how a trial ended, as a searcher sees it.
//
// Deprecated: use search.TrialEnd.
type TrialEnd = search.TrialEnd

// EndStatus is how a trial ended.
//
// Deprecated: use search.EndStatus.
type EndStatus = search.EndStatus

// Replayer is the optional ability of a Searcher to be told a recorded trial when an experiment resumes.
//
// Deprecated: use search.Replayer.
type Replayer = search.Replayer

// WarmStarter is the optional ability of a Searcher to learn from another experiment's trials.
//
// Deprecated: use search.WarmStarter.
type WarmStarter = search.WarmStarter

// PriorTrial is a finished trial of another experiment, as a searcher learns from it.
//
// Deprecated: use search.PriorTrial.
type PriorTrial = search.PriorTrial

// RandomSearch is the searcher that samples every configuration independently.
//
// Deprecated: use search.RandomSearch.
type RandomSearch = search.RandomSearch

// RandomOption is an option of NewRandomSearch.
//
// Deprecated: use search.RandomOption.
type RandomOption = search.RandomOption

// GridSearch is the searcher that expands a space's grid parameters.
//
// Deprecated: use search.GridSearch.
type GridSearch = search.GridSearch

// Limiter is the searcher that bounds how many trials of an inner searcher run at once.
//
// Deprecated: use search.Limiter.
type Limiter = search.Limiter

// Points is the searcher that runs chosen configurations before an inner searcher's own.
//
// Deprecated: use search.Points.
type Points = search.Points

// TPE is the Tree-structured Parzen Estimator searcher.
//
// Deprecated: use search.TPE.
type TPE = search.TPE

// TPEOption is an option of NewTPE.
//
// Deprecated: use search.TPEOption.
type TPEOption = search.TPEOption

// BOHB is TPE fitted at HyperBand's budgets.
//
// Deprecated: use search.BOHB.
type BOHB = search.BOHB

// CMAES is the CMA-ES searcher.
//
// Deprecated: use search.CMAES.
type CMAES = search.CMAES

// NSGA2 is the NSGA-II searcher.
//
// Deprecated: use search.NSGA2.
type NSGA2 = search.NSGA2

// ScoredConfig is a finished trial's configuration and score, as Importance reads them.
//
// Deprecated: use search.ScoredConfig.
type ScoredConfig = search.ScoredConfig

// ParamImportance is one parameter's share of the importance Importance finds.
//
// Deprecated: use search.ParamImportance.
type ParamImportance = search.ParamImportance

// TrialCompleted means the training function returned without error.
//
// Deprecated: use search.TrialCompleted.
const TrialCompleted = search.TrialCompleted

// TrialStopped means the scheduler stopped the trial early.
//
// Deprecated: use search.TrialStopped.
const TrialStopped = search.TrialStopped

// TrialFailed means the training function failed.
//
// Deprecated: use search.TrialFailed.
const TrialFailed = search.TrialFailed

// TPEStartupTrials is how many finished trials TPE waits for before it
// models the history.
//
// Deprecated: use search.TPEStartupTrials.
const TPEStartupTrials = search.TPEStartupTrials

// NSGA2PopulationSize is the population of NSGA-II.
//
// Deprecated: use search.NSGA2PopulationSize.
const NSGA2PopulationSize = search.NSGA2PopulationSize

// ErrWait is returned by Suggest to start no trial until a running trial
// reports or ends.
//
// Deprecated: use search.ErrWait.
var ErrWait = search.ErrWait

// ErrExhausted is returned by Suggest when the search has no more
// configurations to try.
//
// Deprecated: use search.ErrExhausted.
var ErrExhausted = search.ErrExhausted

// ErrNoWarmStart is returned by WarmStart when the searcher cannot learn
// from another experiment's trials.
//
// Deprecated: use search.ErrNoWarmStart.
var ErrNoWarmStart = search.ErrNoWarmStart

// NewRandomSearch returns a random searcher over space seeded with seed.
//
// Deprecated: use search.NewRandomSearch.
func NewRandomSearch(space *searchspace.Space, seed int64, opts ...RandomOption) *RandomSearch {
	return search.NewRandomSearch(space, seed, opts...)
}

// RandomAllowRepeats lets a random search suggest a configuration of a
// finite space again.
//
// Deprecated: use search.RandomAllowRepeats.
func RandomAllowRepeats() RandomOption { return search.RandomAllowRepeats() }

// TrialRand returns a generator for trial's draws under seed.
//
// Deprecated: use search.TrialRand.
func TrialRand(seed int64, trial int) *rand.Rand { return search.TrialRand(seed, trial) }

// NewGridSearch returns a grid search over space's grid parameters.
//
// Deprecated: use search.NewGridSearch.
func NewGridSearch(space *searchspace.Space, numSamples int, inner Searcher) (*GridSearch, error) {
	return search.NewGridSearch(space, numSamples, inner)
}

// NewLimiter wraps inner so that at most max of its trials run at once.
//
// Deprecated: use search.NewLimiter.
func NewLimiter(inner Searcher, max int) (*Limiter, error) { return search.NewLimiter(inner, max) }

// NewPoints returns a searcher that runs points before inner's own
// suggestions.
//
// Deprecated: use search.NewPoints.
func NewPoints(space *searchspace.Space, points []map[string]any, seed int64, inner Searcher) (*Points, error) {
	return search.NewPoints(space, points, seed, inner)
}

// NewTPE returns a TPE searcher over space.
//
// Deprecated: use search.NewTPE.
func NewTPE(space *searchspace.Space, seed int64, opts ...TPEOption) (*TPE, error) {
	return search.NewTPE(space, seed, opts...)
}

// TPEAllowRepeats lets TPE suggest a configuration of a finite space again.
//
// Deprecated: use search.TPEAllowRepeats.
func TPEAllowRepeats() TPEOption { return search.TPEAllowRepeats() }

// TPEIgnorePending makes TPE model finished trials only.
//
// Deprecated: use search.TPEIgnorePending.
func TPEIgnorePending() TPEOption { return search.TPEIgnorePending() }

// TPEConstraints makes TPE model feasibility under cs.
//
// Deprecated: use search.TPEConstraints.
func TPEConstraints(cs []Constraint) TPEOption { return search.TPEConstraints(searchConstraints(cs)) }

// TPEObjectives makes TPE optimise every objective of o (with defaults
// applied) when it has several.
//
// Deprecated: use search.TPEObjectives.
func TPEObjectives(o Objective) TPEOption { return search.TPEObjectives(searchObjectives(o)) }

// NewBOHB returns a BOHB searcher over space for HyperBand's budgets.
//
// Deprecated: use search.NewBOHB.
func NewBOHB(space *searchspace.Space, seed int64, budgets []float64, opts ...TPEOption) (*BOHB, error) {
	return search.NewBOHB(space, seed, budgets, opts...)
}

// NewCMAES returns a CMA-ES searcher over space.
//
// Deprecated: use search.NewCMAES.
func NewCMAES(space *searchspace.Space, seed int64) (*CMAES, error) {
	return search.NewCMAES(space, seed)
}

// NewNSGA2 returns an NSGA-II searcher over space for the objectives of
// obj (with defaults applied), with constraints.
//
// Deprecated: use search.NewNSGA2.
func NewNSGA2(space *searchspace.Space, seed int64, obj Objective, constraints []Constraint) (*NSGA2, error) {
	return search.NewNSGA2(space, seed, searchObjectives(obj), searchConstraints(constraints))
}

// Importance finds how much each parameter of space matters to trials'
// scores.
//
// Deprecated: use search.Importance.
func Importance(space *searchspace.Space, trials []ScoredConfig, quantile float64) ([]ParamImportance, error) {
	return search.Importance(space, trials, quantile)
}

// Hypervolume is the volume that points dominate below ref, all
// minimised.
//
// Deprecated: use pareto.Hypervolume.
func Hypervolume(points [][]float64, ref []float64) float64 { return pareto.Hypervolume(points, ref) }

// Violation is how far metrics are from meeting every constraint of cs.
//
// Deprecated: use search.Violation.
func Violation(cs []Constraint, metrics map[string]float64) float64 {
	return search.Violation(searchConstraints(cs), metrics)
}
