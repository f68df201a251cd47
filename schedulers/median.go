package schedulers

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
)

// medianRule is the median stopping rule of Golovin et al., "Google
// Vizier: A Service for Black-Box Optimization" (KDD 2017), as Ray's
// MedianStoppingRule applies it: at time t ≥ grace_period, a trial stops
// when its best score so far is strictly worse than the median, over the
// other trials that have reached t (running or ended), of their running
// averages of the scores reported from grace_period up to t — provided
// there are at least min_samples_required such trials. A tie with the
// median goes on.
//
// Diverged results (NaN or infinite) are the worst possible: a running average
// that takes one in is left out of the median and of the count, so it
// never lifts the median; a trial whose result diverged stops (once past
// grace_period) whatever the others did, as Optuna's pruners prune a NaN.
//
// With hard_stop false (Ray's option), a judged trial pauses instead of
// stopping; once no new trial will come and none runs, the paused trials
// resume one by one, oldest pause first, and run to the end unjudged.
//
// A decision at a time the rule has compared at before costs O(log n)
// after n trials: for each such time (up to maxIndexedTimes of them, and
// while the index holds no more than about two entries per result kept)
// the rule keeps the running averages of the trials that reached it
// ranked, and updates them as results come. Indexing a time costs one
// pass over every trial. At a time not indexed — the first comparison
// there, or any on a time attribute so fine-grained that times seldom
// recur, such as seconds — the trials it is not hearing from (ended or
// paused) are read from frozenMeans, and only those still running are
// gone over: O(r·log R + 64·log N) for r running trials of up to R results
// and N results in all (and a list of at most frozenRecent pieces),
// however many trials have ended. The decisions are the same either way.
type medianRule struct {
	c  Config
	v  view
	st medianState
	// at holds the indexed times' rankings; times lists them in order.
	at    map[float64]*rankTree[trialMean]
	times []float64
	// once holds times compared at once and not indexed: the next
	// comparison there indexes them.
	once map[float64]bool
	// entries counts the rankings' entries, reports the results kept.
	entries, reports int
	// frozen holds the running averages of the trials in isFrozen; live
	// holds the other trials with results.
	frozen   frozenMeans
	isFrozen map[int]bool
	live     map[int]bool
}

// maxIndexedTimes bounds the number of times the median rule indexes;
// maxOnce the times it remembers as compared at once.
const (
	maxIndexedTimes = 1024
	maxOnce         = 4096
)

// trialMean is a trial's running average at a time, as ranked there.
type trialMean struct {
	mean  float64
	trial int
}

// lessMean orders running averages as sort.Float64s does (a NaN first),
// ties to the lower trial number.
func lessMean(a, b trialMean) bool {
	an, bn := math.IsNaN(a.mean), math.IsNaN(b.mean)
	switch {
	case an != bn:
		return an
	case !an && a.mean != b.mean:
		return a.mean < b.mean
	}
	return a.trial < b.trial
}

type medianState struct {
	Trials map[int]*medianTrial `json:"trials"`
	// Paused lists the trials paused by the rule (hard_stop false), oldest
	// pause first.
	Paused []int `json:"paused,omitempty"`
	// Draining is set once the paused trials started to resume: the
	// trials resumed run on unjudged.
	Draining bool `json:"draining,omitempty"`
}

// medianTrial is one trial's history: times ascending, each score, and
// for running averages from the grace period on, prefix sums of the finite
// scores reported from then and prefix counts of the infinite ones. Scores
// before the grace period add nothing, so that an average is one prefix
// sum, added up in the order of the reports, never a difference of two.
type medianTrial struct {
	Times  []float64 `json:"times"`
	Scores []fnum    `json:"scores"`
	Best   fnum      `json:"best"`
	// State is where the trial stands; a trial resumed while the rule
	// drains is Released and is not judged again.
	State    trialState `json:"state,omitempty"`
	Released bool       `json:"released,omitempty"`
	// sums[i] adds up the finite scores of Times[:i+1] from the grace
	// period on; bad[i] counts those that diverged. Both are rebuilt by
	// Restore.
	sums []float64
	bad  []int
}

var (
	_ Scheduler   = (*medianRule)(nil)
	_ Snapshotter = (*medianRule)(nil)
)

func newMedian(c Config, v view) *medianRule {
	m := &medianRule{c: c, v: v, st: medianState{Trials: map[int]*medianTrial{}}}
	m.resetIndex()
	m.resetFrozen()
	return m
}

// resetIndex forgets every indexed time.
func (m *medianRule) resetIndex() {
	m.at, m.times, m.once, m.entries = map[float64]*rankTree[trialMean]{}, nil, map[float64]bool{}, 0
}

// resetFrozen forgets every frozen trial.
func (m *medianRule) resetFrozen() {
	m.frozen, m.isFrozen, m.live = frozenMeans{}, map[int]bool{}, map[int]bool{}
}

// freeze moves trial n, t, which the rule will not hear from until it
// reports again, from the live trials to frozen; a trial with a time that
// is not finite stays live.
func (m *medianRule) freeze(n int, t *medianTrial) {
	if m.isFrozen[n] {
		return
	}
	pieces, ok := t.pieces(m.c.GracePeriod)
	if !ok {
		return
	}
	m.frozen.add(pieces, false)
	m.isFrozen[n] = true
	delete(m.live, n)
}

// thaw takes frozen trial n, t, out of frozen, before its history changes.
func (m *medianRule) thaw(n int, t *medianTrial) {
	if !m.isFrozen[n] {
		return
	}
	pieces, _ := t.pieces(m.c.GracePeriod)
	m.frozen.add(pieces, true)
	delete(m.isFrozen, n)
}

// OnTrialAdd implements Scheduler. A trial it knows runs again (see
// Scheduler.OnTrialAdd) with the history it had: its next result, from
// the checkpoint it restarts from, drops the later one, as after any
// restart.
func (m *medianRule) OnTrialAdd(trial int, _ map[string]any) {
	t := m.st.Trials[trial]
	if t == nil {
		m.st.Trials[trial] = &medianTrial{}
		return
	}
	if t.State == paused {
		m.st.Paused = slices.DeleteFunc(m.st.Paused, func(n int) bool { return n == trial })
	}
	t.State = running
}

// OnResult implements Scheduler.
func (m *medianRule) OnResult(r Result) Decision {
	t := m.st.Trials[r.Trial]
	if t == nil {
		t = &medianTrial{}
		m.st.Trials[r.Trial] = t
	}
	t.State = running
	m.thaw(r.Trial, t)
	m.live[r.Trial] = true
	m.addResult(r.Trial, t, r.Time, WorstIfDiverged(r.Score))
	if !Reached(r.Time, m.c.GracePeriod) || t.Released {
		return Decision{Action: Continue}
	}
	if diverged(r.Score) {
		return m.judged(r.Trial, t, Decision{Rung: r.Time,
			Reason: fmt.Sprintf("at %s %s: its %s diverged (NaN or infinite)", m.v.timeAttr, num(r.Time), m.v.metric)})
	}
	count, med := m.otherMedian(r.Trial, t, r.Time)
	if count < m.c.MinSamplesRequired {
		return Decision{Action: Continue}
	}
	if float64(t.Best) <= med {
		return Decision{Action: Continue}
	}
	d := Decision{Rung: r.Time}
	d.setCutoff(m.v.value(med))
	d.Reason = fmt.Sprintf("at %s %s: best %s %s is %s than %s, the median of %d other trials' running averages up to then",
		m.v.timeAttr, num(r.Time), m.v.metric, num(m.v.value(float64(t.Best))), m.v.worse(), num(m.v.value(med)), count)
	return m.judged(r.Trial, t, d)
}

// judged turns the rule's verdict on trial t, numbered n, into a stop, or
// with hard_stop false, a pause.
func (m *medianRule) judged(n int, t *medianTrial, d Decision) Decision {
	if isTrue(m.c.HardStop) {
		d.Action, d.Reason = Stop, "stopped "+d.Reason
		return d
	}
	d.Action, d.Reason = Pause, "paused "+d.Reason+"; it resumes once the other trials are done (hard_stop = false)"
	t.State = paused
	m.st.Paused = append(m.st.Paused, n)
	m.freeze(n, t)
	return d
}

// otherMedian is the median, over the trials other than self (t) that
// reached time, of their running averages up to time, and how many they
// are: from the ranking kept for time; else, when time was compared at
// before, from a pass over every trial that indexes it; else from the
// frozen and live trials (frozenMedian), or for a time that is not
// finite, a pass over every trial.
func (m *medianRule) otherMedian(self int, t *medianTrial, time float64) (int, float64) {
	if ranked := m.at[time]; ranked != nil {
		// Diverged averages rank last and do not count.
		finite := ranked.Rank(trialMean{math.Inf(1), math.MinInt})
		// The trial itself reached time: skip its place in the ranking.
		own := finite + 1 // it is not among the finite ones
		if mean, ok := t.standing(time, m.c.GracePeriod); ok && !diverged(mean) {
			own = ranked.Rank(trialMean{mean, self})
		}
		count := finite
		if own <= count {
			count--
		}
		if count == 0 {
			return 0, 0
		}
		return count, quantileAt(count, 0.5, func(i int) float64 {
			if i >= own {
				i++
			}
			return ranked.At(i).mean
		})
	}
	finite := !math.IsInf(time, 0) && !math.IsNaN(time)
	// Indexing needs at most an entry per trial.
	index := m.once[time] && len(m.times) < maxIndexedTimes && finite && m.entries+len(m.st.Trials) <= 2*m.reports+maxOnce
	if !index {
		if len(m.once) >= maxOnce {
			clear(m.once)
		}
		m.once[time] = true
		if finite {
			return m.frozenMedian(self, time)
		}
	}
	var means []float64
	var all []trialMean
	for n, o := range m.st.Trials {
		mean, ok := o.standing(time, m.c.GracePeriod)
		if !ok {
			continue
		}
		if index {
			all = append(all, trialMean{mean, n})
		}
		if n != self && !diverged(mean) {
			means = append(means, mean)
		}
	}
	if index {
		ranked := newRankTree(lessMean)
		for _, e := range all {
			ranked.Insert(e, false)
		}
		m.at[time] = ranked
		i, _ := slices.BinarySearch(m.times, time)
		m.times = slices.Insert(m.times, i, time)
		m.entries += len(all)
		delete(m.once, time)
	}
	if len(means) == 0 {
		return 0, 0
	}
	return len(means), median(means)
}

// frozenMedian is otherMedian from the frozen trials' averages and a pass
// over the live ones: self is live, having just reported.
func (m *medianRule) frozenMedian(self int, time float64) (int, float64) {
	var plus []uint64
	for n := range m.live {
		if n == self {
			continue
		}
		if mean, ok := m.st.Trials[n].standing(time, m.c.GracePeriod); ok && !diverged(mean) {
			plus = append(plus, meanKey(mean))
		}
	}
	plus, minus := m.frozen.recentAt(time, plus, nil)
	slices.Sort(plus)
	slices.Sort(minus)
	count := m.frozen.count(time) + len(plus) - len(minus)
	if count == 0 {
		return 0, 0
	}
	return count, quantileAt(count, 0.5, func(i int) float64 { return keyMean(m.frozen.kth(time, plus, minus, i)) })
}

// addResult adds a result of trial n, t, keeping the rankings of the
// indexed times it changes in step.
func (m *medianRule) addResult(n int, t *medianTrial, time, score float64) {
	m.reports -= len(t.Times)
	affected := m.times
	if last := time; len(m.times) > 0 {
		if len(t.Times) > 0 {
			last = t.Times[len(t.Times)-1]
		}
		// The trial's standing changes at most between its last time and
		// this one, each widened by more than reached's tolerance.
		lo, hi := min(time, last), max(time, last)
		if !math.IsInf(lo, 0) && !math.IsInf(hi, 0) && !math.IsNaN(lo) && !math.IsNaN(hi) {
			lo -= 4 * relTol * math.Max(1, math.Abs(lo))
			hi += 4 * relTol * math.Max(1, math.Abs(hi))
			i := sort.SearchFloat64s(m.times, lo)
			j := sort.Search(len(m.times), func(j int) bool { return m.times[j] > hi })
			affected = m.times[i:j]
		}
	}
	for _, at := range affected {
		if mean, ok := t.standing(at, m.c.GracePeriod); ok {
			m.at[at].Remove(trialMean{mean, n})
			m.entries--
		}
	}
	t.add(time, score, m.c.GracePeriod)
	for _, at := range affected {
		if mean, ok := t.standing(at, m.c.GracePeriod); ok {
			m.at[at].Insert(trialMean{mean, n}, false)
			m.entries++
		}
	}
	m.reports += len(t.Times)
}

// standing is the trial's running average from grace up to time if it
// has reached time; false when it has not, or reported nothing in that
// span.
func (t *medianTrial) standing(time, grace float64) (float64, bool) {
	if len(t.Times) == 0 || !Reached(t.Times[len(t.Times)-1], time) {
		return 0, false
	}
	return t.meanBetween(grace, time)
}

// add appends a result. A time at or before the last one means the trial
// went back to a checkpoint: the later history is dropped.
func (t *medianTrial) add(time, score, grace float64) {
	i := sort.SearchFloat64s(t.Times, time)
	truncated := i < len(t.Times)
	t.Times, t.Scores = append(t.Times[:i], time), append(t.Scores[:i], fnum(score))
	t.sums, t.bad = t.sums[:i], t.bad[:i]
	t.appendSums(time, score, grace)
	if truncated || i == 0 {
		t.Best = slices.Min(t.Scores)
	} else {
		t.Best = min(t.Best, fnum(score))
	}
}

// appendSums extends the prefix sums and counts by the last result, score
// at time.
func (t *medianTrial) appendSums(time, score, grace float64) {
	sum, bad := 0.0, 0
	if n := len(t.sums); n > 0 {
		sum, bad = t.sums[n-1], t.bad[n-1]
	}
	switch {
	case !Reached(time, grace):
	case diverged(score):
		bad++
	default:
		sum += score
	}
	t.sums, t.bad = append(t.sums, sum), append(t.bad, bad)
}

// meanBetween is the average of the trial's scores reported at times from
// grace to time, +Inf when one of them diverged; false when it reported
// none then. Ray's rule averages from the grace period on: what a trial
// did before it is not held against it, nor in its favour.
func (t *medianTrial) meanBetween(grace, time float64) (float64, bool) {
	from := sort.Search(len(t.Times), func(i int) bool { return Reached(t.Times[i], grace) })
	to := sort.Search(len(t.Times), func(i int) bool { return !Reached(time, t.Times[i]) })
	if to <= from {
		return 0, false
	}
	if t.bad[to-1] > 0 {
		return math.Inf(1), true
	}
	return t.sums[to-1] / float64(to-from), true
}

// OnTrialEnd implements Scheduler. An ended trial's history stays: later
// trials are measured against it.
func (m *medianRule) OnTrialEnd(trial int) {
	if t := m.st.Trials[trial]; t != nil {
		if t.State == paused {
			m.st.Paused = slices.DeleteFunc(m.st.Paused, func(n int) bool { return n == trial })
		}
		t.State = ended
		m.freeze(trial, t)
	}
}

// Next implements Scheduler: with hard_stop false, once no new trial will
// come and no trial runs, the paused trials resume, oldest pause first.
func (m *medianRule) Next(c Capacity) (Order, bool) {
	if len(m.st.Paused) == 0 || !c.CanResume {
		return Order{}, false
	}
	if !m.st.Draining {
		if c.MoreTrials {
			return Order{}, false
		}
		for _, t := range m.st.Trials {
			if t.State == running {
				return Order{}, false
			}
		}
		m.st.Draining = true
	}
	n := m.st.Paused[0]
	m.st.Paused = m.st.Paused[1:]
	t := m.st.Trials[n]
	t.State, t.Released = running, true
	return Order{Trial: n, Decision: Decision{Action: Continue,
		Reason: "resumed: the other trials are done, so a trial the median rule paused runs to the end (hard_stop = false)"}}, true
}

// Snapshot implements Snapshotter.
func (m *medianRule) Snapshot() ([]byte, error) { return json.Marshal(m.st) }

// Restore implements Snapshotter.
func (m *medianRule) Restore(data []byte) error {
	var st medianState
	if err := restore("median", data, &st); err != nil {
		return err
	}
	if st.Trials == nil {
		st.Trials = map[int]*medianTrial{}
	}
	m.st = st
	m.resetIndex()
	m.resetFrozen()
	m.reports = 0
	for n, t := range st.Trials {
		if t == nil {
			return fmt.Errorf("restore median scheduler: trial %d is null", n)
		}
		if len(t.Scores) != len(t.Times) {
			return fmt.Errorf("restore median scheduler: trial %d has %d times and %d scores", n, len(t.Times), len(t.Scores))
		}
		for i, x := range t.Scores {
			t.appendSums(t.Times[i], float64(x), m.c.GracePeriod)
		}
		m.reports += len(t.Times)
	}
	// The trials the rule is not hearing from, frozen at once: one block.
	var pieces []meanPiece
	for n, t := range st.Trials {
		if len(t.Times) == 0 {
			continue
		}
		m.live[n] = true
		if t.State == running {
			continue
		}
		if p, ok := t.pieces(m.c.GracePeriod); ok {
			pieces = append(pieces, p...)
			m.isFrozen[n] = true
			delete(m.live, n)
		}
	}
	m.frozen.add(pieces, false)
	return nil
}
