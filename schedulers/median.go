package schedulers

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
)

// medianRule is the median stopping rule of Golovin et al., "Google
// Vizier: A Service for Black-Box Optimization" (KDD 2017), as Ray's
// MedianStoppingRule applies it: at time t ≥ grace_period, a trial stops
// when its best score so far is strictly worse than the median, over the
// other trials that have reached t (running or ended), of their running
// averages of the scores reported up to t — provided there are at least
// min_samples_required such trials.
type medianRule struct {
	c  Config
	v  view
	st medianState
}

type medianState struct {
	Trials map[int]*medianTrial `json:"trials"`
}

// medianTrial is one trial's history: times ascending, each score, and
// prefix sums of the scores for running averages.
type medianTrial struct {
	Times  []float64 `json:"times"`
	Scores []fnum    `json:"scores"`
	Sums   []fnum    `json:"sums"`
	Best   fnum      `json:"best"`
}

var (
	_ Scheduler   = (*medianRule)(nil)
	_ Snapshotter = (*medianRule)(nil)
)

func newMedian(c Config, v view) *medianRule {
	return &medianRule{c: c, v: v, st: medianState{Trials: map[int]*medianTrial{}}}
}

// OnTrialAdd implements Scheduler.
func (m *medianRule) OnTrialAdd(trial int, _ map[string]any) {
	m.st.Trials[trial] = &medianTrial{}
}

// OnResult implements Scheduler.
func (m *medianRule) OnResult(r Result) Decision {
	t := m.st.Trials[r.Trial]
	if t == nil {
		t = &medianTrial{}
		m.st.Trials[r.Trial] = t
	}
	t.add(r.Time, worstIfNaN(r.Score))
	if !reached(r.Time, m.c.GracePeriod) {
		return Decision{Action: Continue}
	}
	var means []float64
	for n, o := range m.st.Trials {
		if n == r.Trial || len(o.Times) == 0 || !reached(o.Times[len(o.Times)-1], r.Time) {
			continue
		}
		if mean, ok := o.meanUpTo(r.Time); ok {
			means = append(means, mean)
		}
	}
	if len(means) < m.c.MinSamplesRequired {
		return Decision{Action: Continue}
	}
	med := median(means)
	if float64(t.Best) <= med {
		return Decision{Action: Continue}
	}
	d := Decision{Action: Stop, Rung: r.Time}
	d.setCutoff(m.v.value(med))
	d.Reason = fmt.Sprintf("stopped at %s %s: best %s %s is %s than %s, the median of %d other trials' running averages up to then",
		m.v.timeAttr, num(r.Time), m.v.metric, num(m.v.value(float64(t.Best))), m.v.worse(), num(m.v.value(med)), len(means))
	return d
}

// add appends a result. A time at or before the last one means the trial
// went back to a checkpoint: the later history is dropped.
func (t *medianTrial) add(time, score float64) {
	i := sort.SearchFloat64s(t.Times, time)
	truncated := i < len(t.Times)
	t.Times, t.Scores, t.Sums = append(t.Times[:i], time), append(t.Scores[:i], fnum(score)), t.Sums[:i]
	sum := score
	if i > 0 {
		sum += float64(t.Sums[i-1])
	}
	t.Sums = append(t.Sums, fnum(sum))
	if truncated || i == 0 {
		t.Best = slices.Min(t.Scores)
	} else {
		t.Best = min(t.Best, fnum(score))
	}
}

// meanUpTo is the average of the trial's scores reported at or before
// time; false when it reported none by then.
func (t *medianTrial) meanUpTo(time float64) (float64, bool) {
	n := sort.Search(len(t.Times), func(i int) bool { return !reached(time, t.Times[i]) })
	if n == 0 {
		return 0, false
	}
	return float64(t.Sums[n-1]) / float64(n), true
}

// OnTrialEnd implements Scheduler. An ended trial's history stays: later
// trials are measured against it.
func (m *medianRule) OnTrialEnd(int) {}

// Next implements Scheduler: the median rule never pauses.
func (m *medianRule) Next(Capacity) (Order, bool) { return Order{}, false }

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
	return nil
}
