package search

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/gotune/gotune/searchspace"
)

// maxEnumerated bounds the configurations a configSet lists to find one
// not yet suggested, once random draws keep landing on suggested ones.
const maxEnumerated = 1 << 20

// unseenDraws is how many random configurations a configSet draws before
// it lists the whole space to find one not yet suggested.
const unseenDraws = 64

// configSet remembers the configurations a searcher has suggested over a
// finite space (every parameter discrete: choices, grid values, integers,
// quantised ranges or constants), so that the searcher suggests none of
// them twice: repeating a configuration of a deterministic objective only
// wastes a trial. A space with a continuous parameter needs none, since
// a draw repeats with probability zero.
type configSet struct {
	space *searchspace.Space
	// values lists each parameter's values, in the space's order.
	values [][]any
	seen   map[string]struct{}
	key    strings.Builder
}

// newConfigSet returns a set for space, or nil when space is not finite
// (it has a continuous parameter or one of a user-defined domain) or has
// nothing to search (no parameter of more than one value: every trial
// has the same configuration, which the user then asks to repeat).
func newConfigSet(space *searchspace.Space) *configSet {
	s := &configSet{space: space, seen: map[string]struct{}{}}
	searched := false
	for _, p := range space.Params() {
		vs, ok := domainValues(p.Domain)
		if !ok {
			return nil
		}
		s.values = append(s.values, vs)
		searched = searched || len(vs) > 1
	}
	if !searched {
		return nil
	}
	return s
}

// domainValues lists a discrete domain's values; ok is false for a
// continuous domain or one this package does not know.
func domainValues(d searchspace.Domain) (vs []any, ok bool) {
	switch d := d.(type) {
	case searchspace.Choice:
		return d.Values, true
	case searchspace.Grid:
		return d.Values, true
	case searchspace.Constant:
		return []any{d.Value}, true
	case searchspace.RandInt:
		if d.High-d.Low > maxEnumerated {
			return nil, false
		}
		for k := d.Low; k < d.High; k++ {
			vs = append(vs, k)
		}
		return vs, true
	case searchspace.LogRandInt:
		return domainValues(searchspace.RandInt(d))
	case searchspace.QUniform:
		if d.Steps() >= maxEnumerated {
			return nil, false
		}
		for k := 0; k <= d.Steps(); k++ {
			vs = append(vs, d.Value(k))
		}
		return vs, true
	case searchspace.QLogUniform:
		return domainValues(searchspace.QUniform(d))
	}
	return nil, false
}

// keyOf renders cfg as the set's key: each parameter's value in the
// space's order, with its type, "-" for an absent one.
func (s *configSet) keyOf(cfg map[string]any) string {
	s.key.Reset()
	for _, p := range s.space.Params() {
		if v, ok := cfg[p.Name]; ok {
			fmt.Fprintf(&s.key, "%T:%v;", v, v)
		} else {
			s.key.WriteString("-;")
		}
	}
	return s.key.String()
}

// has reports whether cfg was suggested before.
func (s *configSet) has(cfg map[string]any) bool {
	_, ok := s.seen[s.keyOf(cfg)]
	return ok
}

// add records cfg as suggested.
func (s *configSet) add(cfg map[string]any) { s.seen[s.keyOf(cfg)] = struct{}{} }

// claim records cfg as suggested and returns it, or, when cfg was
// suggested before, records and returns one that was not, drawn from r
// (see unseen; replaced is then true), and ErrExhausted once every
// configuration was. A nil set (a space that is not finite, or repeats
// allowed) returns cfg as it is.
func (s *configSet) claim(cfg map[string]any, r *rand.Rand) (claimed map[string]any, replaced bool, err error) {
	if s == nil {
		return cfg, false, nil
	}
	if s.has(cfg) {
		fresh, ok := s.unseen(r)
		if !ok {
			return nil, false, ErrExhausted
		}
		cfg, replaced = fresh, true
	}
	s.add(cfg)
	return cfg, replaced, nil
}

// claimModelled is claim for a searcher that models configurations as
// params' values: xs, cfg's model-space values, become the replacement's
// when claim replaces cfg. name prefixes an error of the replacement's.
func (s *configSet) claimModelled(cfg map[string]any, xs []float64, params []tpeParam, r *rand.Rand, name string) (map[string]any, []float64, error) {
	cfg, replaced, err := s.claim(cfg, r)
	if err != nil || !replaced {
		return cfg, xs, err
	}
	if xs, err = modelValues(params, cfg); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	return cfg, xs, nil
}

// unseen returns a configuration not suggested before, drawn at random
// from the space, and false when every configuration was suggested. It
// draws up to unseenDraws configurations, then lists the space (at most
// maxEnumerated configurations, then no more are tried) and picks one of
// those left uniformly.
func (s *configSet) unseen(r *rand.Rand) (map[string]any, bool) {
	for range unseenDraws {
		if cfg := s.space.Sample(r); !s.has(cfg) {
			return cfg, true
		}
	}
	var left []map[string]any
	listed := map[string]struct{}{}
	idx := make([]int, len(s.values))
	for count := 0; count < maxEnumerated; count++ {
		cfg := make(map[string]any, len(idx))
		for i, p := range s.space.Params() {
			cfg[p.Name] = s.values[i][idx[i]]
		}
		s.space.Prune(cfg)
		k := s.keyOf(cfg)
		if _, dup := listed[k]; !dup {
			listed[k] = struct{}{}
			if _, ok := s.seen[k]; !ok {
				left = append(left, cfg)
			}
		}
		// The next index of the cartesian product, the last parameter fastest.
		i := len(idx) - 1
		for ; i >= 0; i-- {
			if idx[i]++; idx[i] < len(s.values[i]) {
				break
			}
			idx[i] = 0
		}
		if i < 0 {
			break
		}
	}
	if len(left) == 0 {
		return nil, false
	}
	return left[r.IntN(len(left))], true
}
