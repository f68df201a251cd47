package schedulers

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
)

// hyperBand is synchronous HyperBand, after Li et al., "Hyperband: A Novel
// Bandit-Based Approach to Hyperparameter Optimization" (JMLR 2018).
//
// With R = max_t/grace_period and s_max = ⌊log_η R⌋, bracket s (s_max down
// to 0, then round again) takes n = ⌈(s_max+1)/(s+1)·η^s⌉ trials in the
// order they are added, and has rungs at max_t·η^(i−s), i = 0…s. Each trial
// pauses at the bracket's current rung. Once every live trial of a full
// bracket has reached the rung (or ended), successive halving keeps the
// best n_{i+1} = ⌊n_i/η⌋ (at least one) of the live results recorded
// there, where n_0 = n is the bracket's size: the paper's schedule, which a
// trial that failed or ended early does not shrink. A trial tied with the
// last one kept is kept too. The rest stop; the kept trials resume and run
// to the next rung. A bracket that is not full when no more trials will
// come is halved with the trials it has (n_0 is then their number).
//
// A trial that reaches max_t is stopped (unless stop_last_trials is false:
// then it runs on, and is judged at the bracket's current rung like any
// trial that reaches it), and a diverged result (NaN or infinite) stops its
// trial at the rung; either ends the trial, and the rung
// completes without it, as it does when a trial fails or ends early. A
// failed trial that runs again (tuner.WithRerunFailed) is judged at each
// rung halved without it by the cutoff the rung was halved with, so it
// does not get past a cut it missed (see OnTrialAdd).
type hyperBand struct {
	c    Config
	v    view
	sMax int
	st   hbState
}

type hbState struct {
	Brackets []*hbBracket     `json:"brackets"`
	Trials   map[int]*hbTrial `json:"trials"`
	// Orders wait for the loop to collect them with Next.
	Orders []Order `json:"orders,omitempty"`
}

type hbBracket struct {
	S    int `json:"s"`
	Size int `json:"size"`
	// Sealed is set when no more trials will join although the bracket is
	// not full.
	Sealed     bool      `json:"sealed,omitempty"`
	Milestones []float64 `json:"milestones"`
	Members    []int     `json:"members"`
	// Rung is the index of the rung the bracket's trials are running to.
	Rung int `json:"rung"`
	// Nominal is n_i, the number of trials the paper's schedule has at
	// the current rung: the bracket's size at the first, ⌊n_{i−1}/η⌋ after.
	Nominal int `json:"nominal"`
	// Records are the results at the current rung in arrival order.
	Records []hbRecord `json:"records"`
	// Cutoffs holds, for each rung halved so far, the score of the last
	// result kept there (NaN where none was live), for a rerun trial that
	// missed the rung (see judgeLate).
	Cutoffs []fnum `json:"cutoffs,omitempty"`
}

type hbRecord struct {
	Trial int  `json:"trial"`
	Score fnum `json:"score"`
}

type hbTrial struct {
	Bracket int `json:"bracket"`
	// Rung is the index of the highest rung recorded; -1 before the first.
	Rung  int        `json:"rung"`
	State trialState `json:"state"`
}

var (
	_ Scheduler   = (*hyperBand)(nil)
	_ Snapshotter = (*hyperBand)(nil)
)

func newHyperBand(c Config, v view) *hyperBand {
	sMax := 0
	for m := c.GracePeriod * c.ReductionFactor; Reached(c.MaxT, m); m *= c.ReductionFactor {
		sMax++
	}
	return &hyperBand{c: c, v: v, sMax: sMax, st: hbState{Trials: map[int]*hbTrial{}}}
}

// newBracket opens the bracket that follows the last one.
func (h *hyperBand) newBracket() *hbBracket {
	s := h.sMax
	if n := len(h.st.Brackets); n > 0 {
		if s = h.st.Brackets[n-1].S - 1; s < 0 {
			s = h.sMax
		}
	}
	eta := h.c.ReductionFactor
	size := int(math.Ceil(float64(h.sMax+1)/float64(s+1)*math.Pow(eta, float64(s)) - relTol))
	ms := make([]float64, s+1)
	for i := range ms {
		ms[i] = h.c.MaxT / math.Pow(eta, float64(s-i))
	}
	b := &hbBracket{S: s, Size: size, Nominal: size, Milestones: ms}
	h.st.Brackets = append(h.st.Brackets, b)
	return b
}

func (b *hbBracket) open() bool { return !b.Sealed && len(b.Members) < b.Size }

// OnTrialAdd implements Scheduler: a new trial joins the bracket being
// filled. A trial it knows runs again (see Scheduler.OnTrialAdd) in its
// own bracket, which waits for it again at its current rung: when the
// trial has a record there, from before it failed, the record goes, and
// the trial is recorded anew when it gets there. When the bracket has
// halved the trial's last rung since (without it, had it failed there
// before the halving), or a rung it had yet to reach, the trial is judged
// at each such rung when it gets there, against the cutoff the rung was
// halved with (see judgeLate), before it joins the bracket's current rung:
// it does not get past a cut it missed.
func (h *hyperBand) OnTrialAdd(trial int, _ map[string]any) {
	t := h.st.Trials[trial]
	if t == nil {
		h.add(trial)
		return
	}
	if b := h.st.Brackets[t.Bracket]; t.Rung == b.Rung && b.Rung < len(b.Milestones)-1 {
		b.Records = slices.DeleteFunc(b.Records, func(rec hbRecord) bool { return rec.Trial == trial })
		t.Rung--
	} else if t.Rung >= 0 && t.Rung < b.Rung {
		t.Rung--
	}
	t.State = running
}

func (h *hyperBand) add(trial int) *hbTrial {
	var b *hbBracket
	if n := len(h.st.Brackets); n > 0 && h.st.Brackets[n-1].open() {
		b = h.st.Brackets[n-1]
	} else {
		b = h.newBracket()
	}
	b.Members = append(b.Members, trial)
	t := &hbTrial{Bracket: len(h.st.Brackets) - 1, Rung: -1}
	h.st.Trials[trial] = t
	return t
}

// OnResult implements Scheduler.
func (h *hyperBand) OnResult(r Result) Decision {
	t := h.st.Trials[r.Trial]
	if t == nil {
		t = h.add(r.Trial)
	}
	t.State = running
	if Reached(r.Time, h.c.MaxT) && isTrue(h.c.StopLastTrials) {
		h.end(t)
		return Decision{Action: Stop, Rung: h.c.MaxT,
			Reason: fmt.Sprintf("reached max_t (%s ≥ %s)", h.v.timeAttr, num(h.c.MaxT))}
	}
	b := h.st.Brackets[t.Bracket]
	if k := t.Rung + 1; k < b.Rung && Reached(r.Time, b.Milestones[k]) {
		return h.judgeLate(t, b, k, r)
	}
	if t.Rung >= b.Rung || !Reached(r.Time, b.Milestones[b.Rung]) || b.Rung == len(b.Milestones)-1 {
		// Short of the rung, or at max_t with stop_last_trials false.
		return Decision{Action: Continue}
	}
	t.Rung = b.Rung
	if diverged(r.Score) {
		return h.stopDiverged(t, b)
	}
	b.Records = append(b.Records, hbRecord{Trial: r.Trial, Score: fnum(r.Score)})
	if !h.rungDone(b) {
		t.State = paused
		return Decision{Action: Pause, Rung: b.Milestones[b.Rung],
			Reason: fmt.Sprintf("paused at %s of bracket %d with %s %s: waiting for %d more of its trials to get there",
				h.rungName(b, b.Rung), t.Bracket+1, h.v.metric, num(h.v.value(r.Score)), h.waiting(b))}
	}
	d := h.halve(t.Bracket, r.Trial)
	if d.Action == Continue {
		return h.onward(d, r)
	}
	return d
}

// stopDiverged ends trial t, whose result at its rung t.Rung of bracket b
// diverged, and returns the decision that stops it there.
func (h *hyperBand) stopDiverged(t *hbTrial, b *hbBracket) Decision {
	h.end(t)
	return Decision{Action: Stop, Rung: b.Milestones[t.Rung],
		Reason: fmt.Sprintf("stopped at %s of bracket %d: its result diverged (%s NaN or infinite), which never passes a rung",
			h.rungName(b, t.Rung), t.Bracket+1, h.v.metric)}
}

// onward returns the decision for result r of a trial that d promoted
// past a rung: the trial may already be past the next rung too, where
// the decision there stands.
func (h *hyperBand) onward(d Decision, r Result) Decision {
	if again := h.OnResult(r); again.Action != Continue || again.Reason != "" {
		return again
	}
	return d
}

// judgeLate judges trial t, which ran again after failing (see
// OnTrialAdd), at rung k of bracket b, halved without it, by its result
// r there: against the cutoff the rung was halved with, it stops when it
// is worse and goes on when it would have been kept (as it does when no
// result was live at the halving).
func (h *hyperBand) judgeLate(t *hbTrial, b *hbBracket, k int, r Result) Decision {
	t.Rung = k
	if diverged(r.Score) {
		return h.stopDiverged(t, b)
	}
	where := h.rungName(b, k)
	d := Decision{Rung: b.Milestones[k]}
	cutoff := fnum(math.NaN())
	if k < len(b.Cutoffs) {
		cutoff = b.Cutoffs[k]
	}
	d.setCutoff(h.v.value(float64(cutoff)))
	val := num(h.v.value(r.Score))
	if fnum(r.Score) > cutoff {
		h.end(t)
		d.Action = Stop
		d.Reason = fmt.Sprintf("stopped at %s of bracket %d, which was halved while the trial had failed: %s %s is %s than the cutoff %s it was halved with",
			where, t.Bracket+1, h.v.metric, val, h.v.worse(), num(d.Cutoff))
		return d
	}
	d.Action = Continue
	d.Reason = fmt.Sprintf("promoted at %s of bracket %d, which was halved while the trial had failed: %s %s would have been kept", where, t.Bracket+1, h.v.metric, val)
	if d.HasCutoff {
		d.Reason += fmt.Sprintf(" (cutoff %s)", num(d.Cutoff))
	}
	return h.onward(d, r)
}

// setCutoff records cutoff as the score rung i of b was halved with.
func (b *hbBracket) setCutoff(i int, cutoff fnum) {
	for len(b.Cutoffs) < i {
		b.Cutoffs = append(b.Cutoffs, fnum(math.NaN()))
	}
	b.Cutoffs = append(b.Cutoffs[:i], cutoff)
}

// waiting counts the bracket's trials still to report at its rung,
// including those yet to join.
func (h *hyperBand) waiting(b *hbBracket) int {
	n := 0
	for _, m := range b.Members {
		if t := h.st.Trials[m]; t.State != ended && t.Rung < b.Rung {
			n++
		}
	}
	if b.open() {
		n += b.Size - len(b.Members)
	}
	return n
}

// rungDone reports whether every live trial of a full bracket has reached
// its current rung.
func (h *hyperBand) rungDone(b *hbBracket) bool {
	return b.Rung < len(b.Milestones)-1 && h.waiting(b) == 0 && len(b.Records) > 0
}

// halve applies successive halving to the current rung of bracket bi:
// orders for the paused trials are queued, the decision for self (the
// trial deciding now, or -1) is returned.
func (h *hyperBand) halve(bi int, self int) Decision {
	b := h.st.Brackets[bi]
	var live []hbRecord
	for _, rec := range b.Records {
		if h.st.Trials[rec.Trial].State != ended {
			live = append(live, rec)
		}
	}
	slices.SortStableFunc(live, func(x, y hbRecord) int {
		switch {
		case x.Score < y.Score:
			return -1
		case x.Score > y.Score:
			return 1
		}
		return 0
	})
	if len(live) == 0 {
		// Every trial that got here has ended since: the bracket is over.
		b.setCutoff(b.Rung, fnum(math.NaN()))
		b.Rung, b.Records = len(b.Milestones)-1, nil
		return Decision{}
	}
	nominal := max(1, int(float64(b.Nominal)/h.c.ReductionFactor+relTol))
	keep := min(nominal, len(live))
	for keep < len(live) && live[keep].Score == live[keep-1].Score {
		keep++ // a tie with the last one kept goes on too
	}
	rung := b.Milestones[b.Rung]
	cutoff := h.v.value(float64(live[keep-1].Score))
	where := h.rungName(b, b.Rung)
	next := h.rungName(b, b.Rung+1)
	if b.Rung+1 == len(b.Milestones)-1 {
		next = fmt.Sprintf("max_t %s", num(h.c.MaxT))
	}
	bn := bi + 1
	var own Decision
	for i, rec := range live {
		d := Decision{Rung: rung}
		d.setCutoff(cutoff)
		val := num(h.v.value(float64(rec.Score)))
		t := h.st.Trials[rec.Trial]
		if i < keep {
			d.Action = Continue
			d.Reason = fmt.Sprintf("promoted at %s of bracket %d to %s: %s %s is among the best %d of the %s there (cutoff %s)",
				where, bn, next, h.v.metric, val, keep, results(len(live)), num(cutoff))
			if keep > nominal && rec.Score == live[keep-1].Score {
				d.Reason += fmt.Sprintf("; the schedule keeps %d, and trials tied at the cutoff all go on", nominal)
			}
			t.State = running
		} else {
			d.Action = Stop
			d.Reason = fmt.Sprintf("stopped at %s of bracket %d: %s %s is %s than the cutoff %s, the best %d of the %s there",
				where, bn, h.v.metric, val, h.v.worse(), num(cutoff), keep, results(len(live)))
			t.State = ended
		}
		if rec.Trial == self {
			own = d
		} else {
			h.st.Orders = append(h.st.Orders, Order{Trial: rec.Trial, Decision: d})
		}
	}
	b.setCutoff(b.Rung, live[keep-1].Score)
	b.Rung++
	b.Records = nil
	b.Nominal = nominal
	return own
}

func (h *hyperBand) rungName(b *hbBracket, i int) string {
	m := b.Milestones[i]
	return fmt.Sprintf("rung %s (%s ≥ %s)", num(m), h.v.timeAttr, num(m))
}

// OnTrialEnd implements Scheduler. A trial that ends before its rung may
// complete the rung for the others.
func (h *hyperBand) OnTrialEnd(trial int) {
	if t := h.st.Trials[trial]; t != nil && t.State != ended {
		h.end(t)
	}
}

// end ends trial t, whatever ended it; a rung that was waiting only for
// it is halved, queueing the orders for the trials paused there.
func (h *hyperBand) end(t *hbTrial) {
	t.State = ended
	if h.rungDone(h.st.Brackets[t.Bracket]) {
		h.halve(t.Bracket, -1)
	}
}

// Next implements Scheduler: the orders halving produced, stops first.
// Once no more trials will come, a bracket that is not full is sealed and
// halved with the trials it has. Only the last bracket can be open: a new
// one is opened when the last is not, and a bracket never opens again.
func (h *hyperBand) Next(c Capacity) (Order, bool) {
	if last := len(h.st.Brackets) - 1; !c.MoreTrials && last >= 0 {
		if b := h.st.Brackets[last]; b.open() {
			b.Sealed, b.Nominal = true, len(b.Members)
			if h.rungDone(b) {
				h.halve(last, -1)
			}
		}
	}
	i := slices.IndexFunc(h.st.Orders, func(o Order) bool { return o.Action == Stop })
	if i < 0 && c.CanResume && len(h.st.Orders) > 0 {
		i = 0
	}
	if i < 0 {
		return Order{}, false
	}
	o := h.st.Orders[i]
	h.st.Orders = slices.Delete(h.st.Orders, i, i+1)
	return o, true
}

// Snapshot implements Snapshotter.
func (h *hyperBand) Snapshot() ([]byte, error) { return json.Marshal(h.st) }

// Restore implements Snapshotter.
func (h *hyperBand) Restore(data []byte) error {
	var st hbState
	if err := restore("hyperband", data, &st); err != nil {
		return err
	}
	if st.Trials == nil {
		st.Trials = map[int]*hbTrial{}
	}
	h.st = st
	return nil
}
