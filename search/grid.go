package search

import (
	"fmt"

	"github.com/gotune/gotune/searchspace"
)

// maxTrials bounds the trials of one experiment (NumSamples × grid cells).
const maxTrials = 1_000_000

// GridSearch expands a space's grid parameters: it tries every cell of
// their cartesian product numSamples times, taking the other parameters
// from an inner searcher, as Ray Tune does. Trials go through the cells
// in order, the whole grid once per sample: with a grid of 2 cells and
// numSamples 3, trials 1..6 get cells 1, 2, 1, 2, 1, 2. After
// cells × numSamples suggestions it returns ErrExhausted.
//
// The inner searcher sees every result, so a model-based searcher learns
// across cells (it does not model the grid parameters themselves). A
// parameter conditional on a grid parameter is dropped from a cell's
// configuration where its condition does not hold.
type GridSearch struct {
	space  *searchspace.Space
	cells  []map[string]any
	total  int
	issued int
	inner  Searcher
}

var _ Searcher = (*GridSearch)(nil)

// NewGridSearch returns a grid search over space's grid parameters that
// takes the rest of each configuration from inner, which should search
// space.WithoutGrid(). numSamples must be at least 1, and numSamples ×
// cells at most a million; otherwise the error is a *ConfigError on
// search.num_samples.
func NewGridSearch(space *searchspace.Space, numSamples int, inner Searcher) (*GridSearch, error) {
	if numSamples < 1 {
		return nil, fieldErr("search.num_samples", "must be at least 1, got %d", numSamples)
	}
	if n := space.GridSize(); n > searchspace.MaxGridCells || n*numSamples > maxTrials {
		cells := fmt.Sprint(n)
		if n > searchspace.MaxGridCells {
			cells = fmt.Sprintf("more than %d", searchspace.MaxGridCells)
		}
		return nil, fieldErr("search.num_samples", "%d samples × %s grid cells is more than %d trials", numSamples, cells, maxTrials)
	}
	cells := space.GridCells()
	return &GridSearch{space: space, cells: cells, total: len(cells) * numSamples, inner: inner}, nil
}

// Suggest implements Searcher: the next cell, merged into the inner
// searcher's configuration.
func (g *GridSearch) Suggest(trial int) (map[string]any, error) {
	if g.issued == g.total {
		return nil, ErrExhausted
	}
	cfg, err := g.inner.Suggest(trial)
	if err != nil {
		return nil, err
	}
	out := make(map[string]any, len(cfg)+len(g.cells[0]))
	for k, v := range cfg {
		out[k] = v
	}
	for k, v := range g.cells[g.issued%len(g.cells)] {
		out[k] = v
	}
	// Conditions on grid parameters are decided now that the cell is known.
	g.space.Prune(out)
	g.issued++
	return out, nil
}

// OnResult implements Searcher by passing the result to the inner searcher.
func (g *GridSearch) OnResult(trial int, obs Observation) { g.inner.OnResult(trial, obs) }

// OnTrialEnd implements Searcher by passing the end to the inner searcher.
func (g *GridSearch) OnTrialEnd(trial int, end TrialEnd) { g.inner.OnTrialEnd(trial, end) }
