package searchspace

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
)

// Param is one named hyperparameter and its domain.
type Param struct {
	Name   string
	Domain Domain
}

// Space is a set of hyperparameters, kept sorted by name so that sampling
// with the same seed always yields the same configurations.
type Space struct {
	params []Param
}

// New builds a space from params; it fails on a duplicate name or a domain
// that does not validate.
func New(params ...Param) (*Space, error) {
	s := &Space{}
	for _, p := range params {
		if err := s.Add(p.Name, p.Domain); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Add validates d and adds it under name.
func (s *Space) Add(name string, d Domain) error {
	if name == "" {
		return fmt.Errorf("parameter name must not be empty")
	}
	if err := d.Validate(); err != nil {
		return fmt.Errorf("parameter %q: %w", name, err)
	}
	i := sort.Search(len(s.params), func(i int) bool { return s.params[i].Name >= name })
	if i < len(s.params) && s.params[i].Name == name {
		return fmt.Errorf("parameter %q defined twice", name)
	}
	s.params = slices.Insert(s.params, i, Param{name, d})
	return nil
}

// Params returns the parameters sorted by name. The slice must not be modified.
func (s *Space) Params() []Param { return s.params }

// Len is the number of parameters.
func (s *Space) Len() int { return len(s.params) }

// Domain returns the domain of name, or nil when the space has no such parameter.
func (s *Space) Domain(name string) Domain {
	i := sort.Search(len(s.params), func(i int) bool { return s.params[i].Name >= name })
	if i < len(s.params) && s.params[i].Name == name {
		return s.params[i].Domain
	}
	return nil
}

// Sample draws a complete configuration, parameters in name order.
func (s *Space) Sample(r *rand.Rand) map[string]any {
	cfg := make(map[string]any, len(s.params))
	for _, p := range s.params {
		cfg[p.Name] = p.Domain.Sample(r)
	}
	return cfg
}

// MaxGridCells bounds the cartesian product of a space's grid parameters.
const MaxGridCells = 1 << 20

// GridSize is the number of cells of the cartesian product of the grid
// parameters: 1 when the space has none. A product larger than
// MaxGridCells is reported as MaxGridCells+1.
func (s *Space) GridSize() int {
	n := 1
	for _, p := range s.params {
		if g, ok := p.Domain.(Grid); ok {
			n *= len(g.Values)
			if n > MaxGridCells {
				return MaxGridCells + 1
			}
		}
	}
	return n
}

// GridCells expands the grid parameters into their cartesian product: one
// map from grid parameter to value per cell. Parameters vary in name
// order, the last name fastest; values in the order they were given. A
// space without grid parameters has one empty cell. It panics when the
// product exceeds MaxGridCells: check GridSize first.
func (s *Space) GridCells() []map[string]any {
	if n := s.GridSize(); n > MaxGridCells {
		panic(fmt.Sprintf("searchspace: grid of more than %d cells", MaxGridCells))
	}
	cells := []map[string]any{{}}
	for _, p := range s.params {
		g, ok := p.Domain.(Grid)
		if !ok {
			continue
		}
		next := make([]map[string]any, 0, len(cells)*len(g.Values))
		for _, c := range cells {
			for _, v := range g.Values {
				cell := make(map[string]any, len(c)+1)
				for k, x := range c {
					cell[k] = x
				}
				cell[p.Name] = v
				next = append(next, cell)
			}
		}
		cells = next
	}
	return cells
}

// WithoutGrid returns the space of the parameters that are not grids: what
// a searcher samples while grid expansion fixes the others.
func (s *Space) WithoutGrid() *Space {
	out := &Space{}
	for _, p := range s.params {
		if _, ok := p.Domain.(Grid); !ok {
			out.params = append(out.params, p)
		}
	}
	return out
}
