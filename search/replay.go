package search

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/gotune/gotune/searchspace"
)

// Replayer is an optional ability of a Searcher, used when an interrupted
// experiment is resumed. The resumed run builds a new searcher and replays
// each recorded trial to it in trial order: Replay is told the
// configuration the trial ran with, in place of the Suggest that produced
// it, and then the searcher gets the trial's recorded results (OnResult)
// and, for a trial that ended, its end (OnTrialEnd). Then the run goes on
// with Suggest for the next trial number.
//
// Replay must leave the searcher as Suggest(trial) would have left it had
// it returned config: the trial counts as suggested and running with
// config (the recorded values, which are what ran, not a new draw), and
// every seeded random stream stands where that suggestion left it, so
// that no later trial draws what an earlier one drew. There are two ways
// to keep the streams right:
//   - draw each suggestion from a generator of the trial's own,
//     TrialRand(seed, trial), as TPE does: trial n's draws do not depend
//     on the suggestions before it, and Replay has nothing to re-draw;
//   - or keep one generator and have Replay draw, and discard, exactly
//     what Suggest would have drawn in the same state, as CMA-ES does
//     (and as a RandomSearch gets through the fallback below).
//
// Replay may return ErrExhausted where Suggest would have: the run starts
// no more trials. Any other error ends the resume.
//
// A searcher without Replay is asked Suggest(trial) for each recorded
// trial instead, and its answer is discarded. That continues a searcher
// whose draws do not depend on results, such as RandomSearch and
// GridSearch around it, exactly. A searcher that learns keeps its own
// answer, not the recorded configuration, as the trial's, and its draws
// follow the state the replay puts it in: implement Replay to resume it
// exactly.
//
// With the same seed, a resumed run then suggests what an undisturbed run
// suggests:
//   - always, for random and grid search, whose draws do not depend on
//     results;
//   - for TPE, CMA-ES and a searcher that follows this contract, when
//     trials run one at a time (max_concurrent = 1): the replay tells the
//     searcher everything in the order it happened.
//
// With several trials at a time, what a learning searcher suggests depends
// on which trials had ended when it was asked, which is a matter of timing
// in any run, interrupted or not; and the replay tells each trial's end
// before the next trial's Replay. TPE's random start-up trials are still
// the same, since trial n draws from TrialRand(seed, n), and so is each
// modelled trial that sees the same ended trials as in the undisturbed
// run; CMA-ES may cut its generations differently. In every case no
// built-in searcher suggests a configuration it drew for an earlier trial
// again.
type Replayer interface {
	// Replay tells the searcher that trial, numbered as Suggest numbers
	// it, ran with config, as the database recorded it (with the Go types
	// the space's domains give).
	Replay(trial int, config map[string]any) error
}

// Replay tells s that trial ran with config: through its Replay when it
// is a Replayer, else by asking it Suggest(trial) and discarding the
// answer (see Replayer).
func Replay(s Searcher, trial int, config map[string]any) error {
	if r, ok := s.(Replayer); ok {
		return r.Replay(trial, config)
	}
	_, err := s.Suggest(trial)
	return err
}

// record sets the values config gives the parameters of trial, whose
// goptuna trial is id.
func (s *study) record(trial, id int, config map[string]any) error {
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
	return Replay(g.inner, trial, config)
}

// Replay implements Replayer: the trial counts as running.
func (l *Limiter) Replay(trial int, config map[string]any) error {
	if err := Replay(l.inner, trial, config); err != nil {
		return err
	}
	l.running[trial] = true
	return nil
}

// RestoreTypes gives the values of a recorded configuration the Go types
// the space's domains yield: the database keeps configurations as JSON,
// where an integer parameter reads back as a float64 and a choice's value
// must be the very value the domain holds. Replay expects a recorded
// configuration restored so.
func RestoreTypes(space *searchspace.Space, config map[string]any) map[string]any {
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
