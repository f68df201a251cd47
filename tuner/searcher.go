package tuner

import (
	"math/rand/v2"

	"github.com/gotune/gotune/searchspace"
)

// Searcher chooses the configuration of each new trial and learns from the
// results. Implement it to plug a custom search into the tuner (see
// WithSearcher). The tuner calls a Searcher from one goroutine only.
type Searcher interface {
	// Suggest returns the configuration for trial number (from 1).
	Suggest(trial int) (map[string]any, error)
	// Observe is told the outcome of a finished trial: its last score
	// (lower is better: the tuner negates "max" metrics) and whether it
	// produced one at all.
	Observe(trial int, score float64, ok bool)
}

// RandomSearch samples every configuration independently from the space.
// The same seed yields the same sequence of configurations.
type RandomSearch struct {
	space *searchspace.Space
	rng   *rand.Rand
}

var _ Searcher = (*RandomSearch)(nil)

// NewRandomSearch returns a random searcher over space seeded with seed.
func NewRandomSearch(space *searchspace.Space, seed int64) *RandomSearch {
	return &RandomSearch{space: space, rng: rand.New(rand.NewPCG(uint64(seed), 0x7e57))}
}

// Suggest implements Searcher.
func (s *RandomSearch) Suggest(int) (map[string]any, error) { return s.space.Sample(s.rng), nil }

// Observe implements Searcher; random search learns nothing.
func (s *RandomSearch) Observe(int, float64, bool) {}
