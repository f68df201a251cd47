package schedulers

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
)

// pruner is one of Optuna's pruners as a scheduler: each result of a
// trial past grace_period (Optuna's n_warmup_steps), and then at most once
// per interval (interval_steps), is judged from the trial's own history
// and, for some, from the trials that completed; a trial judged is
// stopped. The kinds:
//
//   - "percentile" (PercentilePruner; MedianPruner is percentile 50): once
//     startup_trials trials have completed, a trial stops when its best
//     score so far is worse than the percentile-th percentile, best
//     first, of the scores the completed trials reported at the same time
//     (linear interpolation, as numpy's percentile), provided at least
//     min_samples_required of them reported then. A tie goes on.
//   - "threshold" (ThresholdPruner): a trial stops when its latest value,
//     in the metric's own units, is below lower or above upper.
//   - "patient" (PatientPruner without a wrapped pruner): a trial stops
//     when the best of its last patience+1 scores is worse than its best
//     before them by more than min_delta.
//   - "wilcoxon" (WilcoxonPruner): a trial stops when a one-sided Wilcoxon
//     signed-rank test of its scores against the best completed trial's,
//     at the times both reported (at least startup_steps of them), says
//     with a p-value below p_threshold that it is worse.
//
// A diverged result (NaN or infinite) is the worst possible: a trial whose
// latest result diverged stops at once (every kind), and diverged scores
// are left out of percentiles. A trial counts as completed when it ended
// without this scheduler stopping it and without failing (see
// FailureObserver): Optuna's PercentilePruner takes the trials in state
// COMPLETE alone for n_startup_trials and its percentiles, and its
// WilcoxonPruner compares with study.best_trial, the best of those; a
// failed trial's partial history is neither.
type pruner struct {
	c  Config
	v  view
	st prunerState
}

type prunerState struct {
	Trials map[int]*prunerTrial `json:"trials"`
	// Completed lists the trials that ended without being stopped here or
	// failing, in the order they ended.
	Completed []int `json:"completed,omitempty"`
}

// prunerTrial is one trial's history: times ascending and each score.
type prunerTrial struct {
	Times  []float64 `json:"times"`
	Scores []fnum    `json:"scores"`
	// bests[i] is the best score of Scores[:i+1] that did not diverge, or
	// +Inf, so that a judgement reads the trial's best so far in O(1)
	// instead of going over its history; rebuilt by Restore.
	bests []float64
	// Judged is the time of the last judgement; -Inf before the first.
	Judged  fnum `json:"judged"`
	Stopped bool `json:"stopped,omitempty"`
	// Failed is set by OnTrialFailed and cleared when the trial runs
	// again; absent from the snapshots of versions that did not know it,
	// whose Completed lists a failed trial.
	Failed bool `json:"failed,omitempty"`
	Ended  bool `json:"ended,omitempty"`
}

var (
	_ Scheduler       = (*pruner)(nil)
	_ Snapshotter     = (*pruner)(nil)
	_ FailureObserver = (*pruner)(nil)
)

func newPruner(c Config, v view) *pruner {
	return &pruner{c: c, v: v, st: prunerState{Trials: map[int]*prunerTrial{}}}
}

func newPrunerTrial() *prunerTrial { return &prunerTrial{Judged: fnum(math.Inf(-1))} }

// OnTrialAdd implements Scheduler. A trial it knows runs again (see
// Scheduler.OnTrialAdd) with the history it had, and has neither
// completed nor failed: its next result, from the checkpoint it restarts
// from, drops the later history, as after any restart.
func (p *pruner) OnTrialAdd(trial int, _ map[string]any) {
	t := p.st.Trials[trial]
	if t == nil {
		p.st.Trials[trial] = newPrunerTrial()
		return
	}
	p.st.Completed = slices.DeleteFunc(p.st.Completed, func(n int) bool { return n == trial })
	t.Ended, t.Failed = false, false
}

// add records a result; a time at or before the last one means the trial
// went back to a checkpoint, and the later history is dropped.
func (t *prunerTrial) add(time, score float64) {
	i := sort.SearchFloat64s(t.Times, time)
	t.Times, t.Scores = append(t.Times[:i], time), append(t.Scores[:i], fnum(score))
	t.bests = t.bests[:i]
	t.appendBest(score)
	if float64(t.Judged) >= time {
		// Judged again at its next result past the grace period.
		t.Judged = fnum(math.Inf(-1))
	}
}

// appendBest extends bests by the last score.
func (t *prunerTrial) appendBest(score float64) {
	b := math.Inf(1)
	if n := len(t.bests); n > 0 {
		b = t.bests[n-1]
	}
	if !diverged(score) {
		b = min(b, score)
	}
	t.bests = append(t.bests, b)
}

// bestOfFirst is the best score of the trial's first n that did not
// diverge, or +Inf.
func (t *prunerTrial) bestOfFirst(n int) float64 {
	if n == 0 {
		return math.Inf(1)
	}
	return t.bests[n-1]
}

// at is the score the trial reported at time, if it reported then.
func (t *prunerTrial) at(time float64) (float64, bool) {
	i := sort.Search(len(t.Times), func(i int) bool { return Reached(t.Times[i], time) })
	if i < len(t.Times) && Reached(time, t.Times[i]) {
		return float64(t.Scores[i]), true
	}
	return 0, false
}

// best is the trial's best score that did not diverge among scores, or
// +Inf.
func best(scores []fnum) float64 {
	b := math.Inf(1)
	for _, x := range scores {
		if !diverged(float64(x)) {
			b = min(b, float64(x))
		}
	}
	return b
}

// OnResult implements Scheduler.
func (p *pruner) OnResult(r Result) Decision {
	t := p.st.Trials[r.Trial]
	if t == nil {
		t = newPrunerTrial()
		p.st.Trials[r.Trial] = t
	}
	score := WorstIfDiverged(r.Score)
	t.add(r.Time, score)
	if !Reached(r.Time, p.c.GracePeriod) || (p.c.Interval > 0 && !Reached(r.Time, float64(t.Judged)+p.c.Interval)) {
		return Decision{Action: Continue}
	}
	t.Judged = fnum(r.Time)
	at := fmt.Sprintf("at %s %s", p.v.timeAttr, num(r.Time))
	if diverged(score) {
		return p.stop(t, Decision{Rung: r.Time,
			Reason: fmt.Sprintf("stopped %s: its %s diverged (NaN or infinite)", at, p.v.metric)})
	}
	switch p.c.Kind {
	case "percentile":
		return p.percentile(t, r.Time, at)
	case "threshold":
		return p.threshold(t, score, r.Time, at)
	case "patient":
		return p.patient(t, r.Time, at)
	case "wilcoxon":
		return p.wilcoxon(r.Trial, t, r.Time, at)
	}
	panic("unreachable: kind checked by New")
}

// stop marks t stopped and returns d as a Stop.
func (p *pruner) stop(t *prunerTrial, d Decision) Decision {
	t.Stopped = true
	d.Action = Stop
	return d
}

func (p *pruner) percentile(t *prunerTrial, time float64, at string) Decision {
	if len(p.st.Completed) < p.c.StartupTrials {
		return Decision{Action: Continue}
	}
	var values []float64
	for _, n := range p.st.Completed {
		if x, ok := p.st.Trials[n].at(time); ok && !diverged(x) {
			values = append(values, x)
		}
	}
	if len(values) < p.c.MinSamplesRequired || len(values) == 0 {
		return Decision{Action: Continue}
	}
	sort.Float64s(values)
	cutoff := quantile(values, p.c.Percentile/100)
	b := t.bestOfFirst(len(t.Scores))
	if b <= cutoff {
		return Decision{Action: Continue}
	}
	d := Decision{Rung: time}
	d.setCutoff(p.v.value(cutoff))
	d.Reason = fmt.Sprintf("stopped %s: best %s %s is %s than %s, the best %s%% of the %d completed trials' values then",
		at, p.v.metric, num(p.v.value(b)), p.v.worse(), num(p.v.value(cutoff)), num(p.c.Percentile), len(values))
	return p.stop(t, d)
}

func (p *pruner) threshold(t *prunerTrial, score, time float64, at string) Decision {
	value := p.v.value(score)
	d := Decision{Rung: time}
	switch {
	case p.c.Lower != nil && value < *p.c.Lower:
		d.setCutoff(*p.c.Lower)
		d.Reason = fmt.Sprintf("stopped %s: %s %s is below the lower threshold %s", at, p.v.metric, num(value), num(*p.c.Lower))
	case p.c.Upper != nil && value > *p.c.Upper:
		d.setCutoff(*p.c.Upper)
		d.Reason = fmt.Sprintf("stopped %s: %s %s is above the upper threshold %s", at, p.v.metric, num(value), num(*p.c.Upper))
	default:
		return Decision{Action: Continue}
	}
	return p.stop(t, d)
}

func (p *pruner) patient(t *prunerTrial, time float64, at string) Decision {
	k := *p.c.Patience + 1
	if len(t.Scores) <= k {
		return Decision{Action: Continue}
	}
	// O(patience), whatever the history's length.
	before, recent := t.bestOfFirst(len(t.Scores)-k), best(t.Scores[len(t.Scores)-k:])
	if diverged(before) || recent <= before+p.c.MinDelta {
		return Decision{Action: Continue}
	}
	d := Decision{Rung: time}
	d.setCutoff(p.v.value(before + p.c.MinDelta))
	d.Reason = fmt.Sprintf("stopped %s: its best %s in the last %d results, %s, is worse than its best before them, %s, by more than min_delta %s",
		at, p.v.metric, k, num(p.v.value(recent)), num(p.v.value(before)), num(p.c.MinDelta))
	return p.stop(t, d)
}

func (p *pruner) wilcoxon(self int, t *prunerTrial, time float64, at string) Decision {
	// The best completed trial: the best final score, ties to the
	// earlier to complete.
	var ref *prunerTrial
	refN, refScore := 0, math.Inf(1)
	for _, n := range p.st.Completed {
		o := p.st.Trials[n]
		if n == self || len(o.Scores) == 0 {
			continue
		}
		if x := float64(o.Scores[len(o.Scores)-1]); x < refScore {
			ref, refN, refScore = o, n, x
		}
	}
	if ref == nil {
		return Decision{Action: Continue}
	}
	var diffs []float64
	for i, x := range t.Times {
		if y, ok := ref.at(x); ok {
			diffs = append(diffs, float64(t.Scores[i])-y)
		}
	}
	if len(diffs) < max(p.c.StartupSteps, 1) || slices.ContainsFunc(diffs, diverged) {
		return Decision{Action: Continue}
	}
	pv := wilcoxonGreater(diffs)
	if pv >= p.c.PThreshold || t.mean() <= refScore {
		// Optuna's safety: a trial whose scores so far average no worse
		// than the best completed trial's final score goes on, however
		// the test comes out.
		return Decision{Action: Continue}
	}
	d := Decision{Rung: time, Reason: fmt.Sprintf("stopped %s: over the %d times both reported, its %s is worse than trial %d's, the best completed, by a Wilcoxon signed-rank test (p = %s < p_threshold %s)",
		at, len(diffs), p.v.metric, refN, num(pv), num(p.c.PThreshold))}
	return p.stop(t, d)
}

// mean is the average of the trial's scores so far.
func (t *prunerTrial) mean() float64 {
	sum := 0.0
	for _, x := range t.Scores {
		sum += float64(x)
	}
	return sum / float64(len(t.Scores))
}

// OnTrialFailed implements FailureObserver: the trial will not count as
// completed when it ends.
func (p *pruner) OnTrialFailed(trial int) {
	if t := p.st.Trials[trial]; t != nil && !t.Ended {
		t.Failed = true
	}
}

// OnTrialEnd implements Scheduler: a trial that ends without this
// scheduler stopping it and without failing has completed.
func (p *pruner) OnTrialEnd(trial int) {
	t := p.st.Trials[trial]
	if t == nil || t.Ended {
		return
	}
	t.Ended = true
	if !t.Stopped && !t.Failed {
		p.st.Completed = append(p.st.Completed, trial)
	}
}

// Next implements Scheduler: pruners never pause.
func (p *pruner) Next(Capacity) (Order, bool) { return Order{}, false }

// Snapshot implements Snapshotter.
func (p *pruner) Snapshot() ([]byte, error) { return json.Marshal(p.st) }

// Restore implements Snapshotter.
func (p *pruner) Restore(data []byte) error {
	var st prunerState
	if err := restore(p.c.Kind, data, &st); err != nil {
		return err
	}
	if st.Trials == nil {
		st.Trials = map[int]*prunerTrial{}
	}
	for n, t := range st.Trials {
		if t == nil {
			return fmt.Errorf("restore %s scheduler: trial %d is null", p.c.Kind, n)
		}
		if len(t.Times) != len(t.Scores) {
			return fmt.Errorf("restore %s scheduler: trial %d has %d times and %d scores", p.c.Kind, n, len(t.Times), len(t.Scores))
		}
		for _, x := range t.Scores {
			t.appendBest(float64(x))
		}
	}
	for _, n := range st.Completed {
		if st.Trials[n] == nil {
			return fmt.Errorf("restore %s scheduler: completed trial %d is unknown", p.c.Kind, n)
		}
	}
	p.st = st
	return nil
}

// wilcoxonGreater is the one-sided p-value of the Wilcoxon signed-rank
// test that the differences d are centred above zero, with zero
// differences split between the signs (scipy's zero_method "zsplit", as
// Optuna's WilcoxonPruner uses) and tied magnitudes given their average
// rank: exact by enumerating the rank sums for up to 50 differences
// without ties or zeros, otherwise the normal approximation with tie
// correction (scipy's defaults, no continuity correction).
func wilcoxonGreater(d []float64) float64 {
	n := len(d)
	abs := make([]float64, n)
	for i, x := range d {
		abs[i] = math.Abs(x)
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return abs[idx[a]] < abs[idx[b]] })
	ranks := make([]float64, n)
	ties := 0.0 // Σ(t³ − t) over groups of tied magnitudes
	exact := true
	for i := 0; i < n; {
		j := i
		for j+1 < n && abs[idx[j+1]] == abs[idx[i]] {
			j++
		}
		for k := i; k <= j; k++ {
			ranks[idx[k]] = float64(i+j)/2 + 1
		}
		if g := float64(j - i + 1); g > 1 {
			ties += g*g*g - g
			exact = false
		}
		i = j + 1
	}
	w := 0.0 // the positive rank sum, zeros counted half
	for i, x := range d {
		switch {
		case x > 0:
			w += ranks[i]
		case x == 0:
			w += ranks[i] / 2
			exact = false
		}
	}
	if exact && n <= 50 {
		// counts[s] is how many sign patterns give the rank sum s.
		total := n * (n + 1) / 2
		counts := make([]float64, total+1)
		counts[0] = 1
		for r := 1; r <= n; r++ {
			for s := total; s >= r; s-- {
				counts[s] += counts[s-r]
			}
		}
		ge := 0.0
		for s := int(math.Ceil(w - 1e-9)); s <= total; s++ {
			ge += counts[s]
		}
		return ge / math.Pow(2, float64(n))
	}
	fn := float64(n)
	mean := fn * (fn + 1) / 4
	sd := math.Sqrt(fn*(fn+1)*(2*fn+1)/24 - ties/48)
	if sd == 0 {
		return 1
	}
	z := (w - mean) / sd
	return 0.5 * math.Erfc(z/math.Sqrt2)
}
