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
