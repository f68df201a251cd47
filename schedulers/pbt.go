package schedulers

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/gotune/gotune/searchspace"
)

// pbt is asynchronous Population Based Training, after Jaderberg et al.,
// "Population Based Training of Neural Networks" (2017), with Ray's
// PopulationBasedTraining's choices.
//
// Each time a trial's time has advanced perturbation_interval past its last
// perturbation, the live trials with a score are ranked. With q =
// ⌈n·quantile_fraction⌉ (at most ⌊n/2⌋), a trial among the worst q
// exploits: it restarts from the latest checkpoint of one of the best q
// (drawn at random among those that have one) with that trial's
// configuration explored — each mutated parameter is, with probability
// resample_probability, drawn afresh from its domain, otherwise perturbed:
// a number multiplied by one of perturbation_factors (an integer rounded)
// and kept inside its domain, a choice moved to a neighbouring value.
// Conditional parameters follow their conditions: one whose condition no
// longer holds is dropped, and one whose condition a mutation made hold
// is drawn from its domain in the search space, also when
// hyperparam_mutations does not name it.
// Ties in the ranking go to the lower trial number. A trial ranks by its
// latest report (Ray ranks by the score at its last perturbation, which
// can be an interval old); a diverged score (NaN or infinite) ranks last and
// such a trial is never a donor.
//
// The live trials are kept ranked, so that a perturbation costs O(log n)
// however many trials have run; an ended trial is forgotten.
type pbt struct {
	c         Config
	v         view
	mutations []mutation
	resample  float64
	st        pbtState
	// live ranks the live trials with a score, best first, ties to the
	// lower number; a trial with a checkpoint, a possible donor, is
	// marked.
	live *rankTree[pbtRank]
	// space drops the conditional parameters whose conditions an
	// exploration made false; nil without a search space.
	space *searchspace.Space
}

// pbtRank is a live trial's place in the ranking.
type pbtRank struct {
	score fnum
	trial int
}

func betterRank(a, b pbtRank) bool {
	return a.score < b.score || (a.score == b.score && a.trial < b.trial)
}

// ranked reports whether t takes part in the ranking.
func (t *pbtTrial) ranked() bool { return t.State != ended && t.HasScore }

// update applies change to trial n, t, keeping the ranking in step.
func (p *pbt) update(n int, t *pbtTrial, change func()) {
	if t.ranked() {
		p.live.Remove(pbtRank{t.Score, n})
	}
	change()
	if t.ranked() {
		p.live.Insert(pbtRank{t.Score, n}, t.HasCkpt)
	}
}

type mutation struct {
	name   string
	domain searchspace.Domain
}

type pbtState struct {
	Trials map[int]*pbtTrial `json:"trials"`
	Rand   *seededRand       `json:"rand"`
	// Failed holds the time of the last perturbation of each failed trial
	// (see OnTrialFailed), for a rerun to go on from.
	Failed map[int]float64 `json:"failed,omitempty"`
}

type pbtTrial struct {
	Config      typedConfig `json:"config"`
	State       trialState  `json:"state"`
	HasScore    bool        `json:"has_score,omitempty"`
	Score       fnum        `json:"score"`
	LastPerturb float64     `json:"last_perturb"`
	// The latest checkpoint: its time and the score reported with it.
	HasCkpt   bool    `json:"has_ckpt,omitempty"`
	CkptTime  float64 `json:"ckpt_time"`
	CkptScore fnum    `json:"ckpt_score"`
}

var (
	_ Scheduler       = (*pbt)(nil)
	_ Snapshotter     = (*pbt)(nil)
	_ FailureObserver = (*pbt)(nil)
)

func newPBT(c Config, v view, env Env) (*pbt, error) {
	if c.PerturbationInterval == 0 {
		return nil, fieldErr("perturbation_interval", "pbt needs the time between two perturbations of a trial, in %s units", c.TimeAttr)
	}
	if err := positive("perturbation_interval", c.PerturbationInterval); err != nil {
		return nil, err
	}
	if q := c.QuantileFraction; math.IsNaN(q) || q <= 0 || q > 0.5 {
		return nil, fieldErr("quantile_fraction", "must be in (0, 0.5], got %g", q)
	}
	if p := *c.ResampleProbability; math.IsNaN(p) || p < 0 || p > 1 {
		return nil, fieldErr("resample_probability", "must be in [0, 1], got %g", p)
	}
	for _, f := range c.PerturbationFactors {
		if err := positive("perturbation_factors", f); err != nil {
			return nil, err
		}
	}
	p := &pbt{c: c, v: v, resample: *c.ResampleProbability, live: newRankTree(betterRank),
		st: pbtState{Trials: map[int]*pbtTrial{}, Rand: newSeededRand(env.Seed, 0x9b7)}, space: env.Space}
	if len(c.HyperparamMutations) == 0 {
		if env.Space != nil {
			for _, prm := range env.Space.Params() {
				if _, isConst := prm.Domain.(searchspace.Constant); !isConst {
					p.mutations = append(p.mutations, mutation{prm.Name, prm.Domain})
				}
			}
		}
		if len(p.mutations) == 0 {
			return nil, fieldErr("hyperparam_mutations", "pbt needs parameters to mutate: name them here, or give the search space a parameter that is not a constant")
		}
		return p, nil
	}
	for _, name := range slices.Sorted(maps.Keys(c.HyperparamMutations)) {
		key := "hyperparam_mutations." + name
		raw := c.HyperparamMutations[name]
		d, isDomain := raw.(searchspace.Domain)
		if isDomain {
			if err := d.Validate(); err != nil {
				return nil, &FieldError{Key: key, Err: err}
			}
		} else {
			var err error
			if d, err = searchspace.Parse(raw); err != nil {
				return nil, &FieldError{Key: key, Err: err}
			}
		}
		if env.Space != nil && env.Space.Len() > 0 && env.Space.Domain(name) == nil {
			return nil, fieldErr(key, "the search space has no parameter %q", name)
		}
		p.mutations = append(p.mutations, mutation{name, d})
	}
	return p, nil
}

// OnTrialAdd implements Scheduler. A failed trial that runs again keeps
// the time of its last perturbation, as a trial that Ray Tune restarts
// after an error does: the rerun restarts from a checkpoint that trial
// time had reached, and is not perturbed again until the interval from
// then is up.
func (p *pbt) OnTrialAdd(trial int, config map[string]any) {
	if old := p.st.Trials[trial]; old != nil && old.ranked() {
		p.live.Remove(pbtRank{old.Score, trial}) // a number used again
	}
	t := &pbtTrial{Config: maps.Clone(config)}
	if last, ok := p.st.Failed[trial]; ok {
		t.LastPerturb = last
		delete(p.st.Failed, trial)
	}
	p.st.Trials[trial] = t
}

// OnTrialFailed implements FailureObserver: it keeps the failed trial's
// last perturbation time, which OnTrialEnd forgets with the trial, for a
// rerun (see OnTrialAdd).
func (p *pbt) OnTrialFailed(trial int) {
	if t := p.st.Trials[trial]; t != nil {
		if p.st.Failed == nil {
			p.st.Failed = map[int]float64{}
		}
		p.st.Failed[trial] = t.LastPerturb
	}
}

// OnResult implements Scheduler.
func (p *pbt) OnResult(r Result) Decision {
	t := p.st.Trials[r.Trial]
	if t == nil {
		t = &pbtTrial{}
		p.st.Trials[r.Trial] = t
	}
	score := WorstIfDiverged(r.Score)
	p.update(r.Trial, t, func() {
		t.State, t.HasScore, t.Score = running, true, fnum(score)
		if r.Checkpoint {
			t.HasCkpt, t.CkptTime, t.CkptScore = true, r.Time, fnum(score)
		}
	})
	if !Reached(r.Time, t.LastPerturb+p.c.PerturbationInterval) {
		return Decision{Action: Continue}
	}
	t.LastPerturb = r.Time

	n := p.live.Len()
	q := int(math.Ceil(float64(n)*p.c.QuantileFraction - relTol))
	q = min(q, n/2)
	if q == 0 || p.live.Rank(pbtRank{t.Score, r.Trial}) < n-q {
		return Decision{Action: Continue}
	}
	cutoff := float64(p.live.At(n - q).score)
	d := Decision{Rung: r.Time}
	d.setCutoff(p.v.value(cutoff))
	where := fmt.Sprintf("at %s %s, %s %s is in the bottom %d of the %d live trials (cutoff %s)",
		p.v.timeAttr, num(r.Time), p.v.metric, num(p.v.value(score)), q, n, num(p.v.value(cutoff)))
	// The donors are the top q with a checkpoint whose score did not
	// diverge (diverged ones rank last): the trial itself, in the bottom
	// q, is not among them as q ≤ n/2.
	finite := p.live.Rank(pbtRank{fnum(math.Inf(1)), math.MinInt})
	donors := p.live.MarkedBefore(min(q, finite))
	if donors == 0 {
		d.Reason = where + ", but none of the top trials has a checkpoint and a score that did not diverge yet: it continues"
		return d
	}
	top, _ := p.live.MarkedAt(p.st.Rand.IntN(donors))
	from := top.trial
	donor := p.st.Trials[from]
	config, changes := p.explore(donor.Config)
	t.Config = config
	p.update(r.Trial, t, func() {
		t.HasScore, t.Score = true, donor.CkptScore
		t.HasCkpt, t.CkptTime, t.CkptScore = true, donor.CkptTime, donor.CkptScore
	})
	t.LastPerturb = donor.CkptTime
	d.Action = Restart
	d.Exploit = &Exploit{From: from, FromTime: donor.CkptTime, Config: maps.Clone(config)}
	d.Reason = fmt.Sprintf("%s: restarts from trial %d's checkpoint at %s %s (%s %s) with %s",
		where, from, p.v.timeAttr, num(donor.CkptTime), p.v.metric, num(p.v.value(float64(donor.CkptScore))), strings.Join(changes, ", "))
	return d
}

// explore returns a mutated copy of config and a description of each
// change.
func (p *pbt) explore(config map[string]any) (map[string]any, []string) {
	out := maps.Clone(config)
	if out == nil {
		out = map[string]any{}
	}
	rng := p.st.Rand
	var changes []string
	for _, m := range p.mutations {
		old, has := out[m.name]
		var v any
		how := "resampled"
		if !has || rng.Float64() < p.resample {
			v = m.domain.Sample(rng.Rand)
		} else if pv, ph, ok := p.perturb(m.domain, old); ok {
			v, how = pv, ph
		} else {
			v = m.domain.Sample(rng.Rand)
		}
		out[m.name] = v
		if has {
			changes = append(changes, fmt.Sprintf("%s %s→%s (%s)", m.name, searchspace.FormatValue(old), searchspace.FormatValue(v), how))
		} else {
			changes = append(changes, fmt.Sprintf("%s %s (%s)", m.name, searchspace.FormatValue(v), how))
		}
	}
	if p.space == nil || !p.space.Conditional() {
		return out, changes
	}
	// A conditional parameter goes with its condition: it stays only where
	// the condition now holds, and one the mutations do not name is drawn
	// from its domain where a mutation made its condition hold.
	p.space.Prune(out)
	drawn := p.activate(out)
	kept := changes[:0]
	for i, m := range p.mutations {
		if _, ok := out[m.name]; ok {
			kept = append(kept, changes[i])
		}
	}
	for _, prm := range p.space.Params() {
		_, had := config[prm.Name]
		v, has := out[prm.Name]
		switch {
		case had && !has:
			kept = append(kept, prm.Name+" dropped (its condition no longer holds)")
		case slices.Contains(drawn, prm.Name):
			kept = append(kept, fmt.Sprintf("%s %s (drawn: its condition now holds)", prm.Name, searchspace.FormatValue(v)))
		}
	}
	return out, kept
}

// activate draws into cfg, from its domain in the search space, each
// conditional parameter cfg lacks whose condition holds, until none is
// left (one drawn may make another's condition hold), and returns their
// names. cfg has been pruned, so no parameter it has loses its condition.
func (p *pbt) activate(cfg map[string]any) []string {
	var drawn []string
	for added := true; added; {
		added = false
		for _, prm := range p.space.Params() {
			if _, has := cfg[prm.Name]; has || prm.When == nil || p.space.Domain(prm.When.Param) == nil || !prm.When.Holds(cfg) {
				continue
			}
			cfg[prm.Name] = prm.Domain.Sample(p.st.Rand.Rand)
			drawn = append(drawn, prm.Name)
			added = true
		}
	}
	return drawn
}

// perturb moves value within domain; false when the domain or the value
// has no notion of a neighbour, and explore resamples instead.
func (p *pbt) perturb(d searchspace.Domain, value any) (any, string, bool) {
	rng := p.st.Rand
	switch d := d.(type) {
	case searchspace.Uniform, searchspace.LogUniform, searchspace.RandInt:
		x, ok := asFloat(value)
		if !ok {
			return nil, "", false
		}
		f := p.c.PerturbationFactors[rng.IntN(len(p.c.PerturbationFactors))]
		how := "×" + num(f)
		switch d := d.(type) {
		case searchspace.Uniform:
			return math.Min(math.Max(x*f, d.Low), d.High), how, true
		case searchspace.LogUniform:
			return math.Min(math.Max(x*f, d.Low), d.High), how, true
		case searchspace.RandInt:
			return min(max(int64(math.Round(x*f)), d.Low), d.High-1), how, true
		}
	case searchspace.Choice:
		i := slices.Index(d.Values, value)
		if i < 0 {
			return nil, "", false
		}
		if rng.IntN(2) == 0 {
			i--
		} else {
			i++
		}
		i = min(max(i, 0), len(d.Values)-1)
		return d.Values[i], "neighbour", true
	case searchspace.Constant:
		return d.Value, "constant", true
	}
	return nil, "", false
}

func asFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int64:
		return float64(x), true
	}
	return 0, false
}

// OnTrialEnd implements Scheduler: an ended trial no longer ranks, so it
// is never a donor (its checkpoints may be gone), and it reports no more:
// nothing of it is kept.
func (p *pbt) OnTrialEnd(trial int) {
	if t := p.st.Trials[trial]; t != nil {
		p.update(trial, t, func() { t.State = ended })
		delete(p.st.Trials, trial)
	}
}

// Next implements Scheduler: PBT never pauses.
func (p *pbt) Next(Capacity) (Order, bool) { return Order{}, false }

// Snapshot implements Snapshotter.
func (p *pbt) Snapshot() ([]byte, error) { return json.Marshal(p.st) }

// Restore implements Snapshotter.
func (p *pbt) Restore(data []byte) error {
	st := pbtState{Rand: newSeededRand(0, 0)}
	if err := restore("pbt", data, &st); err != nil {
		return err
	}
	if st.Trials == nil {
		st.Trials = map[int]*pbtTrial{}
	}
	p.st = st
	p.live = newRankTree(betterRank)
	for n, t := range st.Trials {
		if t == nil {
			return fmt.Errorf("restore pbt scheduler: trial %d is null", n)
		}
		switch {
		case t.State == ended:
			delete(st.Trials, n) // as OnTrialEnd does
		case t.ranked():
			p.live.Insert(pbtRank{t.Score, n}, t.HasCkpt)
		}
	}
	return nil
}

// typedConfig is a configuration whose JSON keeps each value's type
// (an int64 stays an int64), as {"lr": {"float": 0.01}}.
type typedConfig map[string]any

func (c typedConfig) MarshalJSON() ([]byte, error) {
	out := make(map[string]map[string]any, len(c))
	for k, v := range c {
		switch x := v.(type) {
		case float64:
			out[k] = map[string]any{"float": fnum(x)}
		case int64:
			out[k] = map[string]any{"int": x}
		case string:
			out[k] = map[string]any{"string": x}
		case bool:
			out[k] = map[string]any{"bool": x}
		default:
			return nil, fmt.Errorf("config value %s: type %T cannot be saved (want float64, int64, string or bool)", k, v)
		}
	}
	return json.Marshal(out)
}

func (c *typedConfig) UnmarshalJSON(b []byte) error {
	var raw map[string]map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	out := make(typedConfig, len(raw))
	for k, tv := range raw {
		if len(tv) != 1 {
			return fmt.Errorf("config value %s: want one type key, got %d", k, len(tv))
		}
		for kind, val := range tv {
			var err error
			switch kind {
			case "float":
				var x fnum
				err = json.Unmarshal(val, &x)
				out[k] = float64(x)
			case "int":
				var x int64
				err = json.Unmarshal(val, &x)
				out[k] = x
			case "string":
				var x string
				err = json.Unmarshal(val, &x)
				out[k] = x
			case "bool":
				var x bool
				err = json.Unmarshal(val, &x)
				out[k] = x
			default:
				err = fmt.Errorf("unknown type %q", kind)
			}
			if err != nil {
				return fmt.Errorf("config value %s: %w", k, err)
			}
		}
	}
	*c = out
	return nil
}
