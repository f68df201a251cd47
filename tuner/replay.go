package tuner

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/gotune/gotune/searchspace"
)

// Replayer is an optional ability of a Searcher, used when an interrupted
// experiment is resumed. Each recorded trial is replayed in trial order:
// Replay is told the configuration the trial ran with, in place of the
// Suggest that produced it, and then the searcher gets the trial's
// recorded results (OnResult) and, for a trial that ended, its end
// (OnTrialEnd), as if it were running now.
//
// A searcher without Replay is asked Suggest for each recorded trial
// instead and its answer is discarded, which continues a seeded random or
// grid search exactly where it stopped. Model-based searchers (TPE,
// CMA-ES) implement Replay, since their suggestions cannot be reproduced.
type Replayer interface {
	Replay(trial int, config map[string]any) error
}

// replay tells s that trial ran with config (see Replayer).
func replay(s Searcher, trial int, config map[string]any) error {
	if r, ok := s.(Replayer); ok {
		return r.Replay(trial, config)
	}
	_, err := s.Suggest(trial)
	return err
}

// Replay implements Replayer. CMA-ES keeps its generations in goptuna's
// trial records, which a replay cannot rebuild: replayed trials inform the
// history, and the evolution strategy starts a fresh generation.
func (c *CMAES) Replay(trial int, config map[string]any) error { return c.s.replay(trial, config) }

// replay records trial in the study with the values config gives its
// parameters.
func (s *study) replay(trial int, config map[string]any) error {
	id, err := s.newTrial(trial)
	if err != nil {
		return err
	}
	cfg := s.config()
	for _, p := range s.params {
		v, ok := config[p.name]
		if !ok {
			return fmt.Errorf("replay trial %d: it has no value for %s", trial, p.name)
		}
		if err := s.set(cfg, id, p, v); err != nil {
			return fmt.Errorf("replay trial %d: %s = %v: %w", trial, p.name, v, err)
		}
	}
	return nil
}

// Replay implements Replayer: the trial takes the next grid cell, and the
// inner searcher replays the rest of its configuration.
func (g *GridSearch) Replay(trial int, config map[string]any) error {
	if g.issued == g.total {
		return ErrExhausted
	}
	g.issued++
	return replay(g.inner, trial, config)
}

// Replay implements Replayer: the trial counts as running.
func (l *Limiter) Replay(trial int, config map[string]any) error {
	if err := replay(l.inner, trial, config); err != nil {
		return err
	}
	l.running[trial] = true
	return nil
}

// restoreTypes gives the values of a recorded configuration the Go types
// the space's domains yield: the database keeps configurations as JSON,
// where an integer parameter reads back as a float64 and a choice's value
// must be the very value the domain holds.
func restoreTypes(space *searchspace.Space, config map[string]any) map[string]any {
	out := make(map[string]any, len(config))
	for k, v := range config {
		out[k] = v
	}
	probe := rand.New(rand.NewPCG(0, 0))
	for _, p := range space.Params() {
		v, ok := out[p.Name]
		if !ok {
			continue
		}
		var values []any
		switch d := p.Domain.(type) {
		case searchspace.Choice:
			values = d.Values
		case searchspace.Grid:
			values = d.Values
		}
		if values != nil {
			for _, choice := range values {
				if searchspace.FormatValue(choice) == searchspace.FormatValue(v) {
					out[p.Name] = choice
					break
				}
			}
			continue
		}
		if f, isFloat := v.(float64); isFloat && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			if _, isInt := p.Domain.Sample(probe).(int64); isInt {
				out[p.Name] = int64(f)
			}
		}
	}
	return out
}
