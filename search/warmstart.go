package search

import "errors"

// WarmStarter is an optional ability of a Searcher: learning from the
// finished trials of another experiment before its first suggestion, as
// [search] warm_start asks. TPE, NSGA2 and CMAES have it; GridSearch,
// Points and Limiter pass it on to the searcher they wrap.
type WarmStarter interface {
	// WarmStart tells the searcher trials, in the order they were
	// numbered in their experiment. The tuner calls it once, before any
	// Suggest or Replay, also when it resumes an experiment (with the
	// same trials as the first run). It returns ErrNoWarmStart when the
	// searcher (or the one it wraps) cannot learn from them.
	WarmStart(trials []PriorTrial) error
}

// ErrNoWarmStart is returned by WarmStart when the searcher cannot learn
// from another experiment's trials.
var ErrNoWarmStart = errors.New("the searcher cannot learn from another experiment's trials")

// PriorTrial is a finished trial of another experiment, as a searcher
// learns from it.
type PriorTrial struct {
	// Number is the trial's number in its own experiment.
	Number int
	// Config holds a value for every parameter of this experiment's space
	// (each conditional one where its condition holds), with the Go types
	// its domains yield.
	Config map[string]any
	// End is how the trial ended, its last result scored by this
	// experiment's objective.
	End TrialEnd
}

// WarmStart passes trials to s when it is a WarmStarter, and returns
// ErrNoWarmStart when it is not.
func WarmStart(s Searcher, trials []PriorTrial) error {
	if w, ok := s.(WarmStarter); ok {
		return w.WarmStart(trials)
	}
	return ErrNoWarmStart
}

// WarmStart implements WarmStarter by passing the trials to the inner searcher.
func (g *GridSearch) WarmStart(trials []PriorTrial) error { return WarmStart(g.inner, trials) }

// WarmStart implements WarmStarter by passing the trials to the inner searcher.
func (p *Points) WarmStart(trials []PriorTrial) error { return WarmStart(p.inner, trials) }

// WarmStart implements WarmStarter by passing the trials to the inner searcher.
func (l *Limiter) WarmStart(trials []PriorTrial) error { return WarmStart(l.inner, trials) }
