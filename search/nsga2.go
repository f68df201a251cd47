package search

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/gotune/gotune/pareto"
	"github.com/gotune/gotune/searchspace"
)

// NSGA2PopulationSize is the population of NSGA-II: how many of the best
// finished trials breed the next ones, and how many random trials start
// the search (Optuna's default population_size).
const NSGA2PopulationSize = 50

// NSGA-II's variation operators, as in Deb et al.'s paper: simulated
// binary crossover with distribution index 20 on 90% of the children, a
// per-parameter swap of 0.5, and polynomial mutation with index 20 of
// each parameter with probability 1/parameters.
const (
	nsgaCrossoverProb = 0.9
	nsgaEtaCrossover  = 20.0
	nsgaEtaMutation   = 20.0
)

// NSGA2 is the non-dominated sorting genetic algorithm II (Deb, Pratap,
// Agarwal and Meyarivan, "A fast and elitist multiobjective genetic
// algorithm: NSGA-II", IEEE Transactions on Evolutionary Computation,
// 2002), for one or several objectives, asynchronously: the first
// NSGA2PopulationSize trials are drawn at random; after that, each trial
// is the child of two parents chosen by binary tournaments from the
// population, the NSGA2PopulationSize best finished trials in Pareto
// order (by non-dominated front, then crowding distance; infeasible
// trials after feasible ones, by violation, as Deb's constrained
// domination has it). Numeric parameters, in the model space TPE uses
// (log-scaled domains in log space), cross by simulated binary crossover
// and mutate by polynomial mutation; a choice takes either parent's
// value and mutates to a random one. Conditional parameters come from
// the parents that have them, and are dropped where their conditions fail.
//
// A trial's objectives are its last result's metrics; trials the
// scheduler stopped early count like the others, failed ones and those
// missing an objective do not. Warm-started (see WarmStart), the trials
// of another experiment join the population from the start. Trial n draws from TrialRand(seed, n), so
// a resumed experiment continues as TPE does (see Replayer).
type NSGA2 struct {
	params      []tpeParam
	consts      map[string]any
	space       *searchspace.Space
	seed        int64
	objs        []Objective
	constraints []Constraint
	pending     map[int][]float64
	// done holds the finished trials learnt from: their model-space
	// values (NaN where absent), scores and violations.
	done []nsgaMember
	// warm counts the trials of another experiment learnt from (see
	// WarmStart); they take the place of as many random first trials.
	warm int
	// suggested holds the configurations suggested, replayed or warm
	// started from, in a finite space unless NSGA2AllowRepeats; nil
	// otherwise.
	suggested *configSet
}

// NSGA2Option is an option of NewNSGA2.
type NSGA2Option func(*NSGA2)

// NSGA2AllowRepeats lets NSGA-II suggest a configuration of a finite space
// again. By default a child that was suggested before is bred again (up
// to nsgaRebreeds times) and then replaced by a configuration not yet
// suggested, drawn at random; once every configuration was suggested,
// Suggest returns ErrExhausted.
func NSGA2AllowRepeats() NSGA2Option { return func(s *NSGA2) { s.suggested = nil } }

// nsgaRebreeds is how many more children NSGA-II breeds, in a finite
// space, when a child repeats a configuration, before it draws one not
// yet suggested at random.
const nsgaRebreeds = 8

type nsgaMember struct {
	xs        []float64
	scores    []float64
	violation float64
}

var _ Searcher = (*NSGA2)(nil)
var _ Replayer = (*NSGA2)(nil)
var _ WarmStarter = (*NSGA2)(nil)

// NewNSGA2 returns an NSGA-II searcher over space for objs (one or
// several), with constraints. It fails,
// with a *ConfigError naming the parameter, on a domain it cannot model
// (a user-defined Domain).
func NewNSGA2(space *searchspace.Space, seed int64, objs []Objective, constraints []Constraint, opts ...NSGA2Option) (*NSGA2, error) {
	// The same model space as TPE's.
	tpe, err := NewTPE(space, seed)
	if err != nil {
		return nil, err
	}
	s := &NSGA2{params: tpe.params, consts: tpe.consts, space: space, seed: seed, objs: objs,
		constraints: constraints, pending: map[int][]float64{}, suggested: newConfigSet(space)}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// Suggest implements Searcher.
func (s *NSGA2) Suggest(trial int) (map[string]any, error) {
	r := TrialRand(s.seed, trial)
	cfg, xs, err := s.child(trial, r)
	for i := 0; err == nil && s.suggested != nil && s.suggested.has(cfg) && i < nsgaRebreeds; i++ {
		cfg, xs, err = s.child(trial, r)
	}
	if err != nil {
		return nil, err
	}
	cfg, xs, err = s.suggested.claimModelled(cfg, xs, s.params, r, "nsga2")
	if err != nil {
		return nil, err
	}
	s.pending[trial] = xs
	return cfg, nil
}

// child draws trial's configuration from r, and its model-space values
// (NaN where absent): at random in the first generation, else bred.
func (s *NSGA2) child(trial int, r *rand.Rand) (map[string]any, []float64, error) {
	cfg := make(map[string]any, len(s.params)+len(s.consts))
	for k, v := range s.consts {
		cfg[k] = v
	}
	xs := make([]float64, len(s.params))
	if trial+s.warm <= NSGA2PopulationSize || len(s.done) < 2 {
		for i := range s.params {
			p := &s.params[i]
			v := p.domain.Sample(r)
			x, err := p.modelValue(v)
			if err != nil {
				return nil, nil, fmt.Errorf("nsga2: %w", err)
			}
			cfg[p.name], xs[i] = v, x
		}
	} else {
		pop := s.population()
		a, b := s.tournament(r, pop), s.tournament(r, pop)
		child := s.breed(r, s.done[a].xs, s.done[b].xs)
		for i := range s.params {
			p := &s.params[i]
			var v any
			if math.IsNaN(child[i]) {
				v = p.domain.Sample(r)
				x, err := p.modelValue(v)
				if err != nil {
					return nil, nil, fmt.Errorf("nsga2: %w", err)
				}
				child[i] = x
			} else {
				v, child[i] = p.snap(child[i])
			}
			cfg[p.name], xs[i] = v, child[i]
		}
	}
	s.space.Prune(cfg)
	for i := range s.params {
		if _, ok := cfg[s.params[i].name]; !ok || s.params[i].blind {
			xs[i] = math.NaN()
		}
	}
	return cfg, xs, nil
}

// population returns the indices into done of the parents: the best
// NSGA2PopulationSize in Pareto order, best first.
func (s *NSGA2) population() []int {
	points, viol := make([][]float64, len(s.done)), make([]float64, len(s.done))
	for i, m := range s.done {
		points[i], viol[i] = m.scores, m.violation
	}
	order, _ := pareto.Order(points, viol)
	return order[:min(len(order), NSGA2PopulationSize)]
}

// tournament picks two members of pop at random and returns the better
// one's index into done (pop is best first).
func (s *NSGA2) tournament(r *rand.Rand, pop []int) int {
	i, j := r.IntN(len(pop)), r.IntN(len(pop))
	return pop[min(i, j)]
}

// breed returns a child of parents a and b in model space: simulated
// binary crossover, then polynomial mutation (Deb and Agrawal, 1995; Deb
// and Goyal, 1996). NaN marks a parameter neither parent has.
func (s *NSGA2) breed(r *rand.Rand, a, b []float64) []float64 {
	child := make([]float64, len(s.params))
	cross := r.Float64() < nsgaCrossoverProb
	mutate := 1 / float64(max(len(s.params), 1))
	for i := range s.params {
		p := &s.params[i]
		x, y := a[i], b[i]
		if r.Float64() < 0.5 {
			x, y = y, x
		}
		switch {
		case math.IsNaN(x):
			x = y
		case math.IsNaN(y):
		case p.choices != nil:
			// x is already either parent's choice.
		case cross:
			x = sbx(r, x, y, p.low, p.high)
		}
		if !math.IsNaN(x) && r.Float64() < mutate {
			if p.choices != nil {
				x = float64(r.IntN(len(p.choices)))
			} else {
				x = polynomialMutation(r, x, p.low, p.high)
			}
		}
		child[i] = x
	}
	return child
}

// sbx is one child of simulated binary crossover of x and y within [low, high].
func sbx(r *rand.Rand, x, y, low, high float64) float64 {
	if math.Abs(x-y) < 1e-14 {
		return x
	}
	y1, y2 := min(x, y), max(x, y)
	u := r.Float64()
	spread := func(beta float64) float64 {
		alpha := 2 - math.Pow(beta, -(nsgaEtaCrossover+1))
		if u <= 1/alpha {
			return math.Pow(u*alpha, 1/(nsgaEtaCrossover+1))
		}
		return math.Pow(1/(2-u*alpha), 1/(nsgaEtaCrossover+1))
	}
	c1 := 0.5 * (y1 + y2 - spread(1+2*(y1-low)/(y2-y1))*(y2-y1))
	c2 := 0.5 * (y1 + y2 + spread(1+2*(high-y2)/(y2-y1))*(y2-y1))
	c := c1
	if r.Float64() < 0.5 {
		c = c2
	}
	return min(max(c, low), high)
}

// polynomialMutation moves x within [low, high].
func polynomialMutation(r *rand.Rand, x, low, high float64) float64 {
	span := high - low
	d1, d2 := (x-low)/span, (high-x)/span
	u := r.Float64()
	var dq float64
	if u < 0.5 {
		dq = math.Pow(2*u+(1-2*u)*math.Pow(1-d1, nsgaEtaMutation+1), 1/(nsgaEtaMutation+1)) - 1
	} else {
		dq = 1 - math.Pow(2*(1-u)+2*(u-0.5)*math.Pow(1-d2, nsgaEtaMutation+1), 1/(nsgaEtaMutation+1))
	}
	return min(max(x+dq*span, low), high)
}

// OnResult implements Searcher; NSGA-II learns from finished trials.
func (s *NSGA2) OnResult(int, Observation) {}

// OnTrialEnd implements Searcher: a trial that ended with every
// objective joins the trials parents are chosen from.
func (s *NSGA2) OnTrialEnd(trial int, end TrialEnd) {
	xs, ok := s.pending[trial]
	if !ok {
		return
	}
	delete(s.pending, trial)
	s.learn(end, xs)
}

// learn adds a finished trial to those parents are chosen from, when it
// ended with every objective; it reports whether it did.
func (s *NSGA2) learn(end TrialEnd, xs []float64) bool {
	if end.Status == TrialFailed || end.Last == nil {
		return false
	}
	scores, ok := objectiveScores(s.objs, end.Last.Metrics)
	if !ok || slices.ContainsFunc(scores, math.IsNaN) {
		return false
	}
	s.done = append(s.done, nsgaMember{xs: xs, scores: scores, violation: Violation(s.constraints, end.Last.Metrics)})
	return true
}

// WarmStart implements WarmStarter: the trials that ended with every
// objective join those parents are chosen from, and stand in for as many
// of the random first generation. With NSGA2PopulationSize or more of
// them, the first trial is already a child of the best of them; with
// fewer, the first NSGA2PopulationSize − k trials are random and the
// next ones breed from the k trials and those.
func (s *NSGA2) WarmStart(trials []PriorTrial) error {
	for _, pt := range trials {
		xs, err := modelValues(s.params, pt.Config)
		if err != nil {
			return fmt.Errorf("nsga2: warm start trial %d: %w", pt.Number, err)
		}
		if s.learn(pt.End, xs) {
			s.warm++
		}
		if s.suggested != nil {
			s.suggested.add(pt.Config)
		}
	}
	return nil
}

// Replay implements Replayer: the trial counts as running with config.
// Each trial draws from its own generator, so nothing is re-drawn.
func (s *NSGA2) Replay(trial int, config map[string]any) error {
	xs, err := modelValues(s.params, config)
	if err != nil {
		return fmt.Errorf("nsga2: %w", err)
	}
	s.pending[trial] = xs
	if s.suggested != nil {
		s.suggested.add(config)
	}
	return nil
}
