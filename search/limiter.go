package search

import "fmt"

// Limiter bounds how many trials of an inner searcher run at once: while
// max trials it suggested have not ended, Suggest returns ErrWait.
// Model-based searchers learn more from a small bound, since a suggestion
// made while many trials run cannot use their results. The tuner does not
// wrap its searcher in one: [search] max_concurrent bounds the groups the
// loop runs, whatever the searcher; a Limiter bounds one searcher's trials,
// for a program that composes searchers itself.
type Limiter struct {
	inner   Searcher
	max     int
	running map[int]bool
}

var _ Searcher = (*Limiter)(nil)

// NewLimiter wraps inner so that at most max of its trials run at once.
// max must be at least 1.
func NewLimiter(inner Searcher, max int) (*Limiter, error) {
	if max < 1 {
		return nil, fmt.Errorf("limiter: max must be at least 1, got %d", max)
	}
	return &Limiter{inner: inner, max: max, running: map[int]bool{}}, nil
}

// Suggest implements Searcher: ErrWait while max trials run, else the
// inner searcher's suggestion.
func (l *Limiter) Suggest(trial int) (map[string]any, error) {
	if len(l.running) >= l.max {
		return nil, ErrWait
	}
	cfg, err := l.inner.Suggest(trial)
	if err != nil {
		return nil, err
	}
	l.running[trial] = true
	return cfg, nil
}

// OnResult implements Searcher by passing the result on.
func (l *Limiter) OnResult(trial int, obs Observation) { l.inner.OnResult(trial, obs) }

// OnTrialEnd implements Searcher: the trial no longer counts against the
// bound, and the inner searcher is told.
func (l *Limiter) OnTrialEnd(trial int, end TrialEnd) {
	delete(l.running, trial)
	l.inner.OnTrialEnd(trial, end)
}
