package searchspace

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Param is one named hyperparameter and its domain.
type Param struct {
	Name   string
	Domain Domain
	// When, when not nil, makes the parameter conditional: it is present
	// in a configuration only when When holds (see Condition and Prune).
	When *Condition
}

// String renders the parameter's domain in sweep-file syntax, with its
// condition, e.g. "{ uniform = [0.0, 0.99], when = \"opt == 'sgd'\" }".
func (p Param) String() string {
	d := p.Domain.String()
	if p.When == nil {
		return d
	}
	when := "when = " + strconv.Quote(p.When.String())
	if strings.HasPrefix(d, "{") && strings.HasSuffix(d, " }") {
		return strings.TrimSuffix(d, " }") + ", " + when + " }"
	}
	return "{ value = " + d + ", " + when + " }"
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
		if err := s.AddParam(p); err != nil {
			return nil, err
		}
	}
	if err := s.Check(); err != nil {
		return nil, err
	}
	return s, nil
}

// Add validates d and adds it under name.
func (s *Space) Add(name string, d Domain) error { return s.AddParam(Param{Name: name, Domain: d}) }

// AddParam validates p's domain and adds it. Its condition is checked
// against the space by Check, once every parameter has been added.
func (s *Space) AddParam(p Param) error {
	name, d := p.Name, p.Domain
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
	s.params = slices.Insert(s.params, i, p)
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

// Sample draws a configuration: every parameter, in name order, then
// Prune drops those whose conditions do not hold. Drawing every
// parameter keeps a value's draw independent of which others are present.
func (s *Space) Sample(r *rand.Rand) map[string]any {
	cfg := make(map[string]any, len(s.params))
	for _, p := range s.params {
		cfg[p.Name] = p.Domain.Sample(r)
	}
	s.Prune(cfg)
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

// Prune deletes from cfg each parameter of the space whose condition does
// not hold, a parameter whose parent was deleted included. A condition
// whose parent is not a parameter of this space (a grid parameter, in
// the space WithoutGrid returns) is left for the whole space to decide.
func (s *Space) Prune(cfg map[string]any) {
	for changed := true; changed; {
		changed = false
		for _, p := range s.params {
			if _, present := cfg[p.Name]; !present || p.When == nil || s.Domain(p.When.Param) == nil {
				continue
			}
			if !p.When.Holds(cfg) {
				delete(cfg, p.Name)
				changed = true
			}
		}
	}
}

// Conditional reports whether any parameter of the space has a condition.
func (s *Space) Conditional() bool {
	for _, p := range s.params {
		if p.When != nil {
			return true
		}
	}
	return false
}

// ConditionError is a condition that does not fit its space, naming the
// conditional parameter.
type ConditionError struct {
	Param string
	Err   error
}

func (e *ConditionError) Error() string {
	if e.Param == "" {
		return "when: " + e.Err.Error()
	}
	return fmt.Sprintf("parameter %q: when: %v", e.Param, e.Err)
}
func (e *ConditionError) Unwrap() error { return e.Err }

// Check checks every condition against the space: its parent is another
// parameter of the space, a choice, a grid or a constant, whose domain
// holds each value it compares with (the values take the parent's types);
// a grid parameter has no condition, since every cell of the grid runs;
// and conditions form no cycle. It returns the first problem as a
// *ConditionError.
func (s *Space) Check() error {
	for i, p := range s.params {
		c := p.When
		if c == nil {
			continue
		}
		fail := func(format string, args ...any) error {
			return &ConditionError{Param: p.Name, Err: fmt.Errorf(format, args...)}
		}
		if _, isGrid := p.Domain.(Grid); isGrid {
			return fail("a grid parameter runs in every cell of the grid and cannot be conditional: make it a choice")
		}
		parent := s.Domain(c.Param)
		switch parent.(type) {
		case nil:
			if c.Param == p.Name {
				return fail("%s cannot depend on itself", p.Name)
			}
			return fail("%s names no parameter of the space", c.Param)
		case Choice, Grid, Constant:
		default:
			return fail("%s is %s; a condition compares a choice or a grid parameter's values", c.Param, parent)
		}
		if c.Param == p.Name {
			return fail("%s cannot depend on itself", p.Name)
		}
		vals := make([]any, len(c.Values))
		for k, v := range c.Values {
			m, err := Member(parent, v)
			if err != nil {
				return fail("%s can never be %s: %v", c.Param, literal(v), err)
			}
			vals[k] = m
		}
		s.params[i].When = &Condition{Param: c.Param, Op: c.Op, Values: vals}
		// Follow the parents up: a cycle comes back to p.
		seen := map[string]bool{p.Name: true}
		for q := s.param(c.Param); q.When != nil; q = s.param(q.When.Param) {
			if seen[q.Name] {
				return fail("conditions form a cycle through %s", q.Name)
			}
			seen[q.Name] = true
			if s.Domain(q.When.Param) == nil {
				break
			}
		}
	}
	return nil
}

// Param returns the parameter name and whether the space has it.
func (s *Space) Param(name string) (Param, bool) {
	i := sort.Search(len(s.params), func(i int) bool { return s.params[i].Name >= name })
	if i < len(s.params) && s.params[i].Name == name {
		return s.params[i], true
	}
	return Param{}, false
}

// param returns the parameter name, which must be in the space.
func (s *Space) param(name string) Param {
	p, _ := s.Param(name)
	return p
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
