package search

import (
	"fmt"
	"slices"

	"github.com/gotune/gotune/searchspace"
)

// Points runs configurations the user chose before an inner searcher's
// own: trial n, for n up to the number of points, gets point n, in
// order, the way [search] points_to_evaluate (and Optuna's enqueue_trial,
// Ray Tune's points_to_evaluate) seeds a search with known good settings.
// A point may leave parameters out: they are drawn at random from their
// domains, from TrialRand(seed, n), as a start-up trial's would be, and
// conditional ones are then present only where their conditions hold.
//
// The inner searcher learns from a point's trial as from its own: Points
// tells it the trial ran with the point's configuration through Replay
// (see Replayer), so TPE models it, CMA-ES counts it in its generation,
// and a random search's stream stands where it would after a suggestion.
// Trials after the points are the inner searcher's. A resumed experiment
// replays every recorded trial through Points to the inner searcher in
// the same way, so it neither runs a point again nor repeats a
// configuration.
type Points struct {
	space  *searchspace.Space
	points []map[string]any
	seed   int64
	inner  Searcher
}

var _ Searcher = (*Points)(nil)
var _ Replayer = (*Points)(nil)

// NewPoints returns a searcher that suggests points first, then what inner
// suggests; space is the space inner searches and seed draws the values
// points leave out. Each point's keys must name parameters of space and
// their values be values of those domains (Member gives them the domain's
// types); a bad one is a *ConfigError whose key is
// search.points_to_evaluate[i].name, i counting from 0.
func NewPoints(space *searchspace.Space, points []map[string]any, seed int64, inner Searcher) (*Points, error) {
	checked := make([]map[string]any, len(points))
	for i, pt := range points {
		names := make([]string, 0, len(pt))
		for k := range pt {
			names = append(names, k)
		}
		slices.Sort(names)
		checked[i] = make(map[string]any, len(pt))
		for _, k := range names {
			key := fmt.Sprintf("search.points_to_evaluate[%d].%s", i, k)
			d := space.Domain(k)
			if d == nil {
				return nil, fieldErr(key, "names no parameter the search samples (have %s)", paramNames(space))
			}
			v, err := searchspace.Member(d, pt[k])
			if err != nil {
				return nil, &ConfigError{Key: key, Err: err}
			}
			checked[i][k] = v
		}
		// A conditional parameter the point gives must be present: its
		// parent given too, and the condition holding.
		for _, k := range names {
			prm, _ := space.Param(k)
			if prm.When == nil || space.Domain(prm.When.Param) == nil {
				continue
			}
			key := fmt.Sprintf("search.points_to_evaluate[%d].%s", i, k)
			if _, ok := checked[i][prm.When.Param]; !ok {
				return nil, fieldErr(key, "%s is conditional (when %s): give %s too", k, prm.When, prm.When.Param)
			}
			if !prm.When.Holds(checked[i]) {
				return nil, fieldErr(key, "%s is absent from this point, since its condition %s does not hold", k, prm.When)
			}
		}
	}
	return &Points{space: space, points: checked, seed: seed, inner: inner}, nil
}

// paramNames lists space's parameters, or says it has none.
func paramNames(space *searchspace.Space) string {
	if space.Len() == 0 {
		return "none"
	}
	names := make([]string, 0, space.Len())
	for _, p := range space.Params() {
		names = append(names, p.Name)
	}
	return fmt.Sprint(names)
}

// Suggest implements Searcher: point trial while there is one, completed
// with random draws and told to the inner searcher; then the inner
// searcher's suggestion.
func (p *Points) Suggest(trial int) (map[string]any, error) {
	if trial < 1 || trial > len(p.points) {
		return p.inner.Suggest(trial)
	}
	pt := p.points[trial-1]
	r := TrialRand(p.seed, trial)
	cfg := make(map[string]any, p.space.Len())
	for _, prm := range p.space.Params() {
		// Every parameter draws, given or not, so that a value drawn for
		// one parameter does not depend on which others the point gives.
		v := prm.Domain.Sample(r)
		if given, ok := pt[prm.Name]; ok {
			v = given
		}
		cfg[prm.Name] = v
	}
	p.space.Prune(cfg)
	if err := Replay(p.inner, trial, cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Replay implements Replayer: the inner searcher is told the recorded
// configuration, whether a point or its own suggestion made it, as
// Suggest tells it a point's.
func (p *Points) Replay(trial int, config map[string]any) error {
	return Replay(p.inner, trial, config)
}

// OnResult implements Searcher by passing the result to the inner searcher.
func (p *Points) OnResult(trial int, obs Observation) { p.inner.OnResult(trial, obs) }

// OnTrialEnd implements Searcher by passing the end to the inner searcher.
func (p *Points) OnTrialEnd(trial int, end TrialEnd) { p.inner.OnTrialEnd(trial, end) }
