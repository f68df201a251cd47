package tuner

import (
	"fmt"
	"math"
	"slices"

	"github.com/c-bata/goptuna"

	"github.com/gotune/gotune/searchspace"
)

// study is the goptuna side of a model-based searcher (TPE, CMA-ES).
//
// goptuna v0.9.0 has no Study-level ask/tell: its Study only runs an
// objective function in a loop. So gotune drives the study's storage
// itself: a suggestion creates a trial in the storage and asks the sampler
// for its parameters; a result is written to that trial; the samplers read
// the history back through Study.GetTrials.
type study struct {
	params []param
	consts map[string]any
	store  *history
	study  *goptuna.Study
	// ids maps a gotune trial number to its goptuna trial ID.
	ids map[int]int
	// prunedAsComplete records a stopped trial as COMPLETE instead of
	// PRUNED, for samplers that ignore pruned trials (goptuna's CMA-ES).
	prunedAsComplete bool
}

// param is one searched parameter as goptuna sees it.
type param struct {
	name   string
	domain searchspace.Domain
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

// toGoptuna maps a gotune domain onto the goptuna distribution that
// models it.
func toGoptuna(p searchspace.Param) (param, error) {
	gp := param{name: p.Name, domain: p.Domain}
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
		// Integer k owns [k-0.5, k+0.5); TPE and CMA-ES search
		// [Low-0.5, High-0.5) on a log scale.
		gp.dist = goptuna.LogUniformDistribution{Low: float64(d.Low) - 0.5, High: float64(d.High) - 0.5}
		gp.external = func(x float64) any { return min(max(int64(math.Round(x)), d.Low), d.High-1) }
		gp.internal = asInt
	case searchspace.Choice:
		gp.dist, gp.external, gp.internal = categorical(d.Values)
	case searchspace.Grid:
		gp.dist, gp.external, gp.internal = categorical(d.Values)
	default:
		return param{}, fmt.Errorf("cannot model a domain of type %T: use random search, or one of the searchspace domains", p.Domain)
	}
	return gp, nil
}

// halfOpen clamps x into [low, high): CMA-ES may return a bound itself.
func halfOpen(x, low, high float64) float64 {
	return min(max(x, low), math.Nextafter(high, low))
}

// categorical maps a choice onto goptuna's categorical distribution, whose
// internal value is the index of the choice.
func categorical(values []any) (any, func(float64) any, func(any) float64) {
	names := make([]string, len(values))
	for i, v := range values {
		names[i] = searchspace.FormatValue(v)
	}
	external := func(x float64) any { return values[min(max(int(x), 0), len(values)-1)] }
	internal := func(v any) float64 { return float64(slices.Index(values, v)) }
	return goptuna.CategoricalDistribution{Choices: names}, external, internal
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

// onTrialEnd finishes the goptuna trial: a completed trial with its last
// score, a stopped one as PRUNED with its last result as the value at its
// last step (goptuna's TPE ranks it, as Optuna does, after every complete
// trial and by how far it got), a failed or scoreless one as FAIL. It
// returns the finished trial when samplers learn from it.
//
// goptuna's in-memory storage refuses a write only to an unknown or
// finished trial, which the tuner's call order rules out; such a failure
// is a bug in gotune, so it panics.
func (s *study) onTrialEnd(trial int, end TrialEnd) (goptuna.FrozenTrial, bool) {
	id, ok := s.ids[trial]
	if !ok {
		return goptuna.FrozenTrial{}, false
	}
	delete(s.ids, trial)
	t, learnt, err := s.finish(id, end)
	if err != nil {
		panic(fmt.Sprintf("tuner: goptuna storage refused to finish trial %d: %v", trial, err))
	}
	return t, learnt
}

func (s *study) finish(id int, end TrialEnd) (goptuna.FrozenTrial, bool, error) {
	value, scored := end.value()
	state := goptuna.TrialStateFail
	switch {
	case !scored:
	case end.Status == TrialStopped && !s.prunedAsComplete:
		state = goptuna.TrialStatePruned
		if err := s.store.SetTrialIntermediateValue(id, int(math.Round(end.Last.Step)), value); err != nil {
			return goptuna.FrozenTrial{}, false, err
		}
	default:
		state = goptuna.TrialStateComplete
	}
	if scored {
		if err := s.store.SetTrialValue(id, value); err != nil {
			return goptuna.FrozenTrial{}, false, err
		}
	}
	return s.store.finish(id, state)
}

// history is the storage of a gotune-driven study: goptuna's in-memory
// storage, plus the finished trials that the samplers read.
//
// goptuna's InMemoryStorage copies every trial, running ones included,
// each time a sampler reads the history, which TPE does once per parameter
// per suggestion. history keeps the trials that samplers learn from
// (complete and pruned) and hands them out without copying; running and
// failed trials, which goptuna's samplers skip anyway, are left out.
type history struct {
	*goptuna.InMemoryStorage
	// finished holds the trials samplers learn from, in the order they finished.
	finished []goptuna.FrozenTrial
	// view, when not nil, is what GetAllTrials returns instead of
	// finished: a searcher's choice of what a sampler sees (see TPE).
	view []goptuna.FrozenTrial
}

func newHistory() *history { return &history{InMemoryStorage: goptuna.NewInMemoryStorage()} }

// GetAllTrials implements goptuna.Storage. The slice is shared: samplers
// only read it.
func (h *history) GetAllTrials(int) ([]goptuna.FrozenTrial, error) {
	ts := h.finished
	if h.view != nil {
		ts = h.view
	}
	return ts[:len(ts):len(ts)], nil
}

// finish moves trial id to state and, when samplers learn from that
// state, adds it to the history and returns it.
func (h *history) finish(id int, state goptuna.TrialState) (goptuna.FrozenTrial, bool, error) {
	if err := h.SetTrialState(id, state); err != nil {
		return goptuna.FrozenTrial{}, false, err
	}
	if state != goptuna.TrialStateComplete && state != goptuna.TrialStatePruned {
		return goptuna.FrozenTrial{}, false, nil
	}
	t, err := h.GetTrial(id)
	if err != nil {
		return goptuna.FrozenTrial{}, false, err
	}
	h.finished = append(h.finished, t)
	return t, true, nil
}
