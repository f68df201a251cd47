package search

import (
	"fmt"
	"math"
	"slices"

	"github.com/c-bata/goptuna"

	"github.com/gotune/gotune/searchspace"
)

// study is the goptuna side of CMA-ES.
//
// goptuna v0.9.0 has no Study-level ask/tell: its Study only runs an
// objective function in a loop. So gotune drives the study's storage
// itself: a suggestion creates a trial in the storage and asks the sampler
// for its parameters; a result is written to that trial; the sampler reads
// the history back through Study.GetTrials.
type study struct {
	params []param
	consts map[string]any
	store  *history
	study  *goptuna.Study
	// ids maps a gotune trial number to its goptuna trial ID.
	ids map[int]int
}

// param is one searched parameter as goptuna sees it.
type param struct {
	name string
	// dist is the goptuna distribution, a value type as goptuna's samplers expect.
	dist any
	// external turns a goptuna internal value into the configuration value;
	// internal does the reverse for a value of the domain.
	external func(x float64) any
	internal func(v any) float64
}

func newStudy(space *searchspace.Space, algorithm string, opts ...goptuna.StudyOption) (*study, error) {
	s := &study{consts: map[string]any{}, store: newHistory(), ids: map[int]int{}}
	for _, p := range space.Params() {
		if c, ok := p.Domain.(searchspace.Constant); ok {
			s.consts[p.Name] = c.Value
			continue
		}
		gp, err := toGoptuna(p)
		if err != nil {
			return nil, &ConfigError{Key: "search.space." + p.Name, Err: fmt.Errorf("%s: %w", algorithm, err)}
		}
		s.params = append(s.params, gp)
	}
	opts = append([]goptuna.StudyOption{goptuna.StudyOptionStorage(s.store), goptuna.StudyOptionLogger(nil)}, opts...)
	st, err := goptuna.CreateStudy("gotune", opts...)
	if err != nil {
		return nil, err
	}
	s.study = st
	return s, nil
}

// toGoptuna maps a numeric gotune domain onto the goptuna distribution
// that models it.
func toGoptuna(p searchspace.Param) (param, error) {
	gp := param{name: p.Name}
	asFloat := func(v any) float64 { return v.(float64) }
	asInt := func(v any) float64 { return float64(v.(int64)) }
	switch d := p.Domain.(type) {
	case searchspace.Uniform:
		gp.dist = goptuna.UniformDistribution{Low: d.Low, High: d.High}
		gp.external = func(x float64) any { return halfOpen(x, d.Low, d.High) }
		gp.internal = asFloat
	case searchspace.LogUniform:
		gp.dist = goptuna.LogUniformDistribution{Low: d.Low, High: d.High}
		gp.external = func(x float64) any { return halfOpen(x, d.Low, d.High) }
		gp.internal = asFloat
	case searchspace.QUniform:
		gp.dist = goptuna.DiscreteUniformDistribution{Low: d.Low, High: d.Value(d.Steps()), Q: d.Q}
		gp.external = func(x float64) any { return d.Round(x) }
		gp.internal = asFloat
	case searchspace.QLogUniform:
		gp.dist = goptuna.LogUniformDistribution{Low: d.Low, High: d.Top()}
		gp.external = func(x float64) any { return d.Round(x) }
		gp.internal = asFloat
	case searchspace.RandInt:
		gp.dist = goptuna.IntUniformDistribution{Low: int(d.Low), High: int(d.High - 1)}
		gp.external = func(x float64) any { return min(max(int64(math.Round(x)), d.Low), d.High-1) }
		gp.internal = asInt
	case searchspace.LogRandInt:
		// Integer k owns [k-0.5, k+0.5); CMA-ES searches [Low-0.5,
		// High-0.5) on a log scale.
		gp.dist = goptuna.LogUniformDistribution{Low: float64(d.Low) - 0.5, High: float64(d.High) - 0.5}
		gp.external = func(x float64) any { return min(max(int64(math.Round(x)), d.Low), d.High-1) }
		gp.internal = asInt
	default:
		return param{}, fmt.Errorf("cannot model a domain of type %T: use random search, or one of the searchspace domains", p.Domain)
	}
	return gp, nil
}

// halfOpen clamps x into [low, high): a sampler may return a bound itself.
func halfOpen(x, low, high float64) float64 {
	return min(max(x, low), math.Nextafter(high, low))
}

// newTrial creates the goptuna trial of a gotune trial.
func (s *study) newTrial(trial int) (int, error) {
	id, err := s.store.CreateNewTrial(s.study.ID)
	if err != nil {
		return 0, err
	}
	s.ids[trial] = id
	return id, nil
}

// set records the value of p chosen for goptuna trial id in cfg and in
// the trial, snapped to the domain so that the history holds what ran.
func (s *study) set(cfg map[string]any, id int, p param, v any) error {
	cfg[p.name] = v
	return s.store.SetTrialParam(id, p.name, p.internal(v), p.dist)
}

// config starts a configuration with the space's constants.
func (s *study) config() map[string]any {
	cfg := make(map[string]any, len(s.params)+len(s.consts))
	for k, v := range s.consts {
		cfg[k] = v
	}
	return cfg
}

// onTrialEnd finishes the goptuna trial: a completed or stopped trial as
// COMPLETE with its last score (goptuna's CMA-ES ignores pruned trials,
// and a generation must fill when the scheduler stops most trials), a
// failed or scoreless one as FAIL.
//
// goptuna's in-memory storage refuses a write only to an unknown or
// finished trial, which the tuner's call order rules out; such a failure
// is a bug in gotune, so it panics.
func (s *study) onTrialEnd(trial int, end TrialEnd) {
	id, ok := s.ids[trial]
	if !ok {
		return
	}
	delete(s.ids, trial)
	if err := s.finish(id, end); err != nil {
		panic(fmt.Sprintf("search: goptuna storage refused to finish trial %d: %v", trial, err))
	}
}

func (s *study) finish(id int, end TrialEnd) error {
	value, scored := end.value()
	if !scored {
		return s.store.finish(id, goptuna.TrialStateFail)
	}
	if err := s.store.SetTrialValue(id, value); err != nil {
		return err
	}
	return s.store.finish(id, goptuna.TrialStateComplete)
}

// history is the storage of a gotune-driven study: goptuna's in-memory
// storage, plus the finished trials that the sampler reads.
//
// goptuna's InMemoryStorage copies every trial, running ones included,
// each time a sampler reads the history. history keeps the completed
// trials, which are all the sampler learns from, and hands them out
// without copying: the historyWindow most recent of them.
type history struct {
	*goptuna.InMemoryStorage
	// finished holds the completed trials, in the order they finished;
	// at most 2·historyWindow of them.
	finished []goptuna.FrozenTrial
}

// historyWindow is how many of the most recently completed trials a
// sampler reads. goptuna's CMA-ES reads the history on every suggestion
// to find the finished members of its current generation, which are
// among the latest to finish (a generation is at most a few dozen
// trials): the window keeps a suggestion's cost flat however long the
// history.
const historyWindow = 1000

func newHistory() *history { return &history{InMemoryStorage: goptuna.NewInMemoryStorage()} }

// GetAllTrials implements goptuna.Storage: the historyWindow most
// recently completed trials. The slice is shared: samplers only read it.
func (h *history) GetAllTrials(int) ([]goptuna.FrozenTrial, error) {
	f := h.finished[max(0, len(h.finished)-historyWindow):]
	return f[:len(f):len(f)], nil
}

// finish moves trial id to state and, when it completed, adds it to the
// history.
func (h *history) finish(id int, state goptuna.TrialState) error {
	if err := h.SetTrialState(id, state); err != nil {
		return err
	}
	if state != goptuna.TrialStateComplete {
		return nil
	}
	t, err := h.GetTrial(id)
	if err != nil {
		return err
	}
	if len(h.finished) >= 2*historyWindow {
		// A sampler may still hold the old slice: copy, never shift.
		h.finished = slices.Clone(h.finished[len(h.finished)-historyWindow:])
	}
	h.finished = append(h.finished, t)
	return nil
}
