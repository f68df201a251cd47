package schedulers

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
)

// asha is asynchronous successive halving, after Li et al., "A System for
// Massively Parallel Hyperparameter Tuning" (MLSys 2020).
//
// Bracket s has rungs at grace·η^(s+k) below max_t; trials are dealt to the
// brackets in turn, in the order they are added. A trial is recorded at
// the highest rung its time has reached and not at the rungs below that it
// jumped past, whose records compare results at a smaller time. Then:
//
//   - mode "stop" (Ray's AsyncHyperBandScheduler): the trial goes on if its
//     score is no worse than the 1/η-quantile of what the rung recorded
//     before it (linear interpolation, as numpy's percentile; a tie with
//     the cutoff goes on, as in Ray), or if it is the first there;
//     otherwise it stops.
//   - mode "promote" (the paper's Algorithm 2): the trial pauses at the
//     rung. When a slot frees, the paper's get_job runs: from the highest
//     rung down, the best trial among the top ⌊n/η⌋ of a rung's n records
//     that has not been promoted yet is promoted (resumed from its
//     checkpoint); when none is, a new trial starts. A trial that is
//     get_job's choice the moment it reaches its rung continues at once
//     instead of pausing. Ties go to the earlier record.
//
// The paper assumes an endless stream of trials; with a finite num_samples
// the last trials would wait at their rungs for ever. So once no new trial
// will come and none is running, the quota becomes ⌈n/η⌉, which promotes
// the best paused trials of each rung until they reach max_t.
//
// A trial that reaches max_t is stopped, unless stop_last_trials is false:
// then it runs on unjudged, as no rung lies beyond.
//
// A diverged result (NaN or infinite; with several objectives, one of them NaN,
// infinite or missing) is the worst possible: it stops its trial at the
// rung in either mode, even as the rung's first, and it is left out of the
// records that cutoffs and quotas are computed from, so it never lifts
// them (Ray likewise leaves NaN out of its cutoff).
//
// With one objective each rung keeps its records ranked, so that a
// decision or a promotion costs O(log n) for n records at a rung. With
// several objectives each rung keeps its records sorted into non-dominated
// fronts as they arrive (paretoFronts), and a decision orders one front by
// crowding distance at most.
type asha struct {
	c       Config
	v       view
	promote bool
	st      ashaState
	// running counts the trials of st.Trials in state running, so that
	// Next knows whether the experiment drains without a pass over them.
	running int
	// unpromoted holds, in promote mode, the records not promoted of each
	// trial that has not ended: they are the ones whose standing changes
	// when the trial pauses or runs again.
	unpromoted map[int][]*ashaRecord
	// metrics and modes are the objectives of a multi-objective
	// experiment; nil for one.
	metrics, modes []string
}

type ashaState struct {
	// Brackets holds each bracket's rungs, lowest first.
	Brackets [][]*ashaRung      `json:"brackets"`
	Trials   map[int]*ashaTrial `json:"trials"`
	// Added counts the trials added, to deal them to brackets in turn.
	Added int `json:"added"`
}

type ashaRung struct {
	Milestone float64 `json:"milestone"`
	// Records are the trials' scores at this rung in arrival order.
	Records []*ashaRecord `json:"records"`
	// byScore holds Records best first by score, ties in arrival order,
	// so that a decision finds the k-th best in O(log n). A record is
	// marked when it is promotable by Next: not promoted, and its trial
	// paused. Diverged records sort last.
	byScore *rankTree[*ashaRecord]
	// diverged counts the diverged records; the others, the first
	// len(Records)−diverged of byScore, are the ones cutoffs and quotas
	// are computed from.
	diverged int
	// fronts sorts the records that did not diverge into non-dominated
	// fronts in a multi-objective experiment; nil otherwise.
	fronts *paretoFronts
}

func newASHARung(milestone float64) *ashaRung {
	return &ashaRung{Milestone: milestone, byScore: newRankTree(betterRecord)}
}

// betterRecord orders a rung's records best first, ties to the earlier.
func betterRecord(x, y *ashaRecord) bool {
	return x.Score < y.Score || (x.Score == y.Score && x.seq < y.seq)
}

// add records rec at the rung.
func (rg *ashaRung) add(rec *ashaRecord) {
	rec.rung, rec.seq = rg, len(rg.Records)
	rg.Records = append(rg.Records, rec)
	rg.byScore.Insert(rec, rec.marked)
	switch {
	case rec.diverged():
		rg.diverged++
	case rec.Scores != nil:
		if rg.fronts == nil {
			rg.fronts = &paretoFronts{}
		}
		rg.fronts.insert(rec)
	}
}

// finite counts the rung's records that did not diverge.
func (rg *ashaRung) finite() int { return len(rg.Records) - rg.diverged }

// diverged reports whether the record is a diverged result: its score is
// NaN or infinite, or with several objectives, one of them is (or is missing).
func (rec *ashaRecord) diverged() bool {
	if rec.Scores != nil {
		return slices.ContainsFunc(rec.Scores, func(x fnum) bool { return diverged(float64(x)) })
	}
	return diverged(float64(rec.Score))
}

type ashaRecord struct {
	Trial int  `json:"trial"`
	Score fnum `json:"score"`
	// Scores are the objectives of a multi-objective experiment, lower is
	// better (+Inf for one the result lacks).
	Scores   []fnum `json:"scores,omitempty"`
	Promoted bool   `json:"promoted,omitempty"`
	// rung is where the record is, seq its place in the rung's Records;
	// marked mirrors its mark in the rung's byScore.
	rung   *ashaRung
	seq    int
	marked bool
}

type ashaTrial struct {
	Bracket int `json:"bracket"`
	// Rung is the index of the highest rung the trial has been recorded
	// at within its bracket; -1 before the first.
	Rung  int        `json:"rung"`
	State trialState `json:"state"`
}

var (
	_ Scheduler   = (*asha)(nil)
	_ Snapshotter = (*asha)(nil)
)

func newASHA(c Config, v view) (*asha, error) {
	a := &asha{c: c, v: v, promote: c.Mode == "promote", st: ashaState{Trials: map[int]*ashaTrial{}},
		unpromoted: map[int][]*ashaRecord{}}
	for s := range c.Brackets {
		var rungs []*ashaRung
		for _, m := range milestones(c.GracePeriod, c.ReductionFactor, c.MaxT, s) {
			rungs = append(rungs, newASHARung(m))
		}
		a.st.Brackets = append(a.st.Brackets, rungs)
	}
	return a, nil
}

// OnTrialAdd implements Scheduler: a new trial joins the next bracket in
// turn. A trial it knows runs again (see Scheduler.OnTrialAdd): it stays
// in its bracket with its records, so that it is recorded at a rung once,
// and at the rungs it has reached it goes on as a trial restarted from an
// earlier checkpoint does.
func (a *asha) OnTrialAdd(trial int, _ map[string]any) {
	if t := a.st.Trials[trial]; t != nil {
		a.setState(trial, t, running)
		return
	}
	a.add(trial)
}

// add deals a new trial to the next bracket in turn.
func (a *asha) add(trial int) *ashaTrial {
	t := &ashaTrial{Bracket: a.st.Added % len(a.st.Brackets), Rung: -1}
	a.st.Added++
	a.st.Trials[trial] = t
	a.running++ // a new trial is running
	return t
}

// setState moves trial t, numbered trial, to state s, keeping count of
// the running trials and marking the trial's unpromoted records
// promotable while it is paused.
func (a *asha) setState(trial int, t *ashaTrial, s trialState) {
	if t.State == running {
		a.running--
	}
	if s == running {
		a.running++
	}
	if t.State == ended && s != ended && a.promote {
		// A trial that runs again: its records are found again.
		a.findUnpromoted(trial)
	}
	if (t.State == paused) != (s == paused) {
		for _, rec := range a.unpromoted[trial] {
			rec.setMarked(s == paused)
		}
	}
	if s == ended {
		// Its records can be promoted no more.
		delete(a.unpromoted, trial)
	}
	t.State = s
}

// findUnpromoted collects trial's records not promoted, by a pass over
// every rung.
func (a *asha) findUnpromoted(trial int) {
	var recs []*ashaRecord
	for _, rungs := range a.st.Brackets {
		for _, rg := range rungs {
			for _, rec := range rg.Records {
				if rec.Trial == trial && !rec.Promoted {
					recs = append(recs, rec)
				}
			}
		}
	}
	if len(recs) > 0 {
		a.unpromoted[trial] = recs
	}
}

// setMarked marks the record promotable or not.
func (rec *ashaRecord) setMarked(m bool) {
	if rec.marked != m {
		rec.marked = m
		rec.rung.byScore.SetMark(rec, m)
	}
}

// record adds rec, a result of trial, at rung rg.
func (a *asha) record(rg *ashaRung, rec *ashaRecord) {
	rg.add(rec)
	if a.promote {
		a.unpromoted[rec.Trial] = append(a.unpromoted[rec.Trial], rec)
	}
}

// promoted marks rec promoted.
func (a *asha) promoted(rec *ashaRecord) {
	rec.Promoted = true
	rec.setMarked(false)
	recs := slices.DeleteFunc(a.unpromoted[rec.Trial], func(x *ashaRecord) bool { return x == rec })
	if len(recs) == 0 {
		delete(a.unpromoted, rec.Trial)
	} else {
		a.unpromoted[rec.Trial] = recs
	}
}

// OnResult implements Scheduler.
func (a *asha) OnResult(r Result) Decision {
	t := a.st.Trials[r.Trial]
	if t == nil {
		// A result before OnTrialAdd: the trial joins as if just added.
		t = a.add(r.Trial)
	}
	a.setState(r.Trial, t, running)
	if Reached(r.Time, a.c.MaxT) && isTrue(a.c.StopLastTrials) {
		return Decision{Action: Stop, Rung: a.c.MaxT,
			Reason: fmt.Sprintf("reached max_t (%s ≥ %s)", a.v.timeAttr, num(a.c.MaxT))}
	}
	rungs := a.st.Brackets[t.Bracket]
	k := -1
	for i, rg := range rungs {
		if Reached(r.Time, rg.Milestone) {
			k = i
		}
	}
	if k < 0 || k < t.Rung || k == t.Rung && a.pausedAt(r.Trial, rungs[k]) == nil {
		// Below the first rung, or at a rung already recorded (a promoted
		// trial, or one that resumed from an earlier checkpoint).
		return Decision{Action: Continue}
	}
	rg := rungs[k]
	if k == t.Rung {
		// A trial that failed as it paused at the rung, run again: its
		// record there waits for a promotion as before.
		return a.promoteOrPause(r.Trial, t, k, a.pausedAt(r.Trial, rg))
	}
	score := WorstIfDiverged(r.Score)
	rec := &ashaRecord{Trial: r.Trial, Score: fnum(score), Scores: a.scores(r.Metrics)}
	t.Rung = k
	if rec.diverged() {
		d := a.divergedDecision(rg, rec)
		a.record(rg, rec)
		return d
	}
	if !a.promote {
		if a.metrics != nil {
			a.record(rg, rec)
			return a.stopDecisionMulti(rg, rec)
		}
		d := a.stopDecision(rg, score)
		a.record(rg, rec)
		return d
	}
	a.record(rg, rec)
	return a.promoteOrPause(r.Trial, t, k, rec)
}

// promoteOrPause decides, in promote mode, about trial t, numbered trial,
// whose record rec at rung k is not promoted: it goes on at once when
// get_job would promote rec now, and pauses otherwise.
func (a *asha) promoteOrPause(trial int, t *ashaTrial, k int, rec *ashaRecord) Decision {
	if b, rk, rec2, ok := a.getJob(trial, false); ok && b == t.Bracket && rk == k && rec2 == rec {
		a.promoted(rec)
		return a.promotion(Continue, t.Bracket, k, rec, false, "promoted at ")
	}
	a.setState(trial, t, paused)
	return a.pauseDecision(t.Bracket, k, rec)
}

// pausedAt returns, in promote mode, trial's record at rung rg when it is
// not promoted, or nil. A running trial has one only when it failed as it
// paused there and runs again.
func (a *asha) pausedAt(trial int, rg *ashaRung) *ashaRecord {
	for _, rec := range a.unpromoted[trial] {
		if rec.rung == rg {
			return rec
		}
	}
	return nil
}

// stopDecision measures a score against the records a rung has so far
// that did not diverge. A score equal to the cutoff passes, as in Ray.
func (a *asha) stopDecision(rg *ashaRung, score float64) Decision {
	where := a.rungName(rg.Milestone)
	d := Decision{Rung: rg.Milestone}
	n := rg.finite()
	if n == 0 {
		d.Reason = fmt.Sprintf("passed %s: %s %s is the first result recorded there%s", where, a.v.metric, num(a.v.value(score)), a.divergedNote(rg))
		return d
	}
	cutoff := a.stopCutoff(rg)
	c := a.v.value(cutoff)
	d.setCutoff(c)
	switch {
	case score < cutoff:
		d.Reason = fmt.Sprintf("passed %s: %s %s is within the best 1/%s of the %s recorded there%s (cutoff %s)",
			where, a.v.metric, num(a.v.value(score)), num(a.c.ReductionFactor), results(n), a.divergedNote(rg), num(c))
		return d
	case score == cutoff:
		d.Reason = fmt.Sprintf("passed %s: %s %s ties with the cutoff, the best 1/%s of the %s recorded there%s, and a tie goes on",
			where, a.v.metric, num(a.v.value(score)), num(a.c.ReductionFactor), results(n), a.divergedNote(rg))
		return d
	}
	d.Action = Stop
	d.Reason = fmt.Sprintf("stopped at %s: %s %s is %s than the cutoff %s, the best 1/%s of the %s recorded there%s",
		where, a.v.metric, num(a.v.value(score)), a.v.worse(), num(c), num(a.c.ReductionFactor), results(n), a.divergedNote(rg))
	return d
}

// stopCutoff is the 1/η-quantile of the scores of a rung's records that
// did not diverge, of which there must be at least one.
func (a *asha) stopCutoff(rg *ashaRung) float64 {
	return quantileAt(rg.finite(), 1/a.c.ReductionFactor, func(i int) float64 { return float64(rg.byScore.At(i).Score) })
}

// results counts n results in a decision's reason: "1 result", "3 results".
func results(n int) string {
	if n == 1 {
		return "1 result"
	}
	return fmt.Sprintf("%d results", n)
}

// divergedNote tells, for a reason, how many of a rung's records diverged
// and were left out of its count.
func (a *asha) divergedNote(rg *ashaRung) string {
	if rg.diverged == 0 {
		return ""
	}
	return fmt.Sprintf(" (besides %d that diverged)", rg.diverged)
}

// divergedDecision stops a trial whose result at rung rg diverged: it is
// the worst possible result, in either mode.
func (a *asha) divergedDecision(rg *ashaRung, rec *ashaRecord) Decision {
	d := Decision{Action: Stop, Rung: rg.Milestone}
	switch {
	case a.metrics != nil:
	case a.promote && a.quota(rg.finite(), false) > 0:
		d.setCutoff(a.v.value(float64(a.kth(rg, a.quota(rg.finite(), false)-1).Score)))
	case !a.promote && rg.finite() > 0:
		d.setCutoff(a.v.value(a.stopCutoff(rg)))
	}
	what := fmt.Sprintf("%s %s", a.v.metric, num(a.v.value(float64(rec.Score))))
	if a.metrics != nil {
		what = "an objective that is NaN, infinite or missing"
	} else if math.IsInf(float64(rec.Score), 1) {
		what = fmt.Sprintf("%s NaN or infinite", a.v.metric)
	}
	d.Reason = fmt.Sprintf("stopped at %s: its result diverged (%s), which never passes a rung", a.rungName(rg.Milestone), what)
	return d
}

// scores returns a result's objectives, lower is better, for a
// multi-objective experiment; nil otherwise.
func (a *asha) scores(metrics map[string]float64) []fnum {
	if a.metrics == nil {
		return nil
	}
	out := make([]fnum, len(a.metrics))
	for i, m := range a.metrics {
		v, ok := metrics[m]
		switch {
		case !ok || math.IsNaN(v):
			v = math.Inf(1)
		case a.modes[i] == "max":
			v = -v
		}
		out[i] = fnum(v)
	}
	return out
}

// stopDecisionMulti is stopDecision with several objectives, for rec just
// recorded at rung rg: the result passes when non-dominated sorting (then
// crowding distance) of the rung's results, its own included, puts it
// within the best 1/η of them. The fronts are kept as records arrive;
// crowding distance is computed for rec's front only, and only when the
// front straddles the cut.
func (a *asha) stopDecisionMulti(rg *ashaRung, rec *ashaRecord) Decision {
	where := a.rungName(rg.Milestone)
	d := Decision{Rung: rg.Milestone}
	n := rg.finite()
	keep := max(1, int(math.Ceil(float64(n)/a.c.ReductionFactor-relTol)))
	f := rg.fronts.frontOf(rec)
	before := 0
	for _, front := range rg.fronts.fronts[:f] {
		before += len(front)
	}
	pass := before+len(rg.fronts.fronts[f]) <= keep
	if !pass && before < keep {
		pass = before+slices.Index(byCrowding(rg.fronts.fronts[f]), rec) < keep
	}
	if pass {
		d.Reason = fmt.Sprintf("passed %s: on front %d, within the best %d of the %s recorded there by non-dominated sorting of %s",
			where, f+1, keep, results(n), strings.Join(a.metrics, ", "))
		return d
	}
	d.Action = Stop
	d.Reason = fmt.Sprintf("stopped at %s: on front %d, outside the best %d of the %s recorded there by non-dominated sorting of %s",
		where, f+1, keep, results(n), strings.Join(a.metrics, ", "))
	return d
}

// ranked returns the q best records of a rung of a multi-objective
// experiment, best first, by non-dominated sorting; diverged records are
// never among them.
func (a *asha) ranked(rg *ashaRung, q int) []*ashaRecord {
	if rg.fronts == nil {
		return nil
	}
	return rg.fronts.top(q)
}

// kth returns the (i+1)-th best record of a rung: by score, ties to the
// earlier one; with several objectives, by non-dominated sorting.
func (a *asha) kth(rg *ashaRung, i int) *ashaRecord {
	if a.metrics != nil {
		return a.ranked(rg, i+1)[i]
	}
	return rg.byScore.At(i)
}

// inTop reports whether rec is among the q best records of its rung.
func (a *asha) inTop(rg *ashaRung, rec *ashaRecord, q int) bool {
	if a.metrics != nil {
		return slices.Contains(a.ranked(rg, q), rec)
	}
	return rg.byScore.Rank(rec) < q
}

// quota is how many of a rung's n records that did not diverge may be
// promoted: ⌊n/η⌋, or ⌈n/η⌉ when the experiment is draining. Diverged
// records are never promoted and do not count.
func (a *asha) quota(n int, drain bool) int {
	q := int(float64(n)/a.c.ReductionFactor + relTol)
	if drain && float64(q)*a.c.ReductionFactor < float64(n)-relTol {
		q++
	}
	return q
}

// getJob is the paper's get_job: the promotable record of the highest rung
// (across brackets; ties to the lower bracket), best first. A record is
// promotable when it is in its rung's top quota, not yet promoted, and its
// trial is paused or is self (the trial deciding now).
//
// With one objective it looks at O(log n) records of each rung: the best
// record marked promotable, and self's unpromoted ones.
func (a *asha) getJob(self int, drain bool) (bracket, rung int, rec *ashaRecord, ok bool) {
	best := -1.0
	for b, rungs := range a.st.Brackets {
		for k := len(rungs) - 1; k >= 0; k-- {
			if ok && rungs[k].Milestone <= best {
				break
			}
			if r := a.promotable(rungs[k], self, drain); r != nil {
				bracket, rung, rec, ok, best = b, k, r, true, rungs[k].Milestone
			}
		}
	}
	return bracket, rung, rec, ok
}

// promotable returns the best promotable record of rung rg, or nil.
func (a *asha) promotable(rg *ashaRung, self int, drain bool) *ashaRecord {
	q := a.quota(rg.finite(), drain)
	if a.metrics != nil {
		for _, r := range a.ranked(rg, q) {
			if !r.Promoted && (r.Trial == self || a.st.Trials[r.Trial].State == paused) {
				return r
			}
		}
		return nil
	}
	var found *ashaRecord
	at := q // only a place within the quota counts
	if rg.byScore.Marked() > 0 {
		if r, i := rg.byScore.MarkedAt(0); i < at {
			found, at = r, i
		}
	}
	for _, r := range a.unpromoted[self] {
		if r.rung == rg {
			if i := rg.byScore.Rank(r); i < at {
				found, at = r, i
			}
		}
	}
	return found
}

// pauseDecision explains why a trial waits at rung k.
func (a *asha) pauseDecision(b, k int, rec *ashaRecord) Decision {
	rg := a.st.Brackets[b][k]
	n := rg.finite()
	q := a.quota(n, false)
	d := Decision{Action: Pause, Rung: rg.Milestone}
	where := a.rungName(rg.Milestone)
	val := num(a.v.value(float64(rec.Score)))
	if q == 0 {
		d.Reason = fmt.Sprintf("paused at %s with %s %s: promotions start when the rung has %d results (it has %d)",
			where, a.v.metric, val, int(a.c.ReductionFactor+1-relTol), n)
		return d
	}
	c := a.v.value(float64(a.kth(rg, q-1).Score))
	d.setCutoff(c)
	if a.inTop(rg, rec, q) {
		d.Reason = fmt.Sprintf("paused at %s with %s %s, among the best %d of the %s recorded there (cutoff %s): a promotion from a higher rung goes first",
			where, a.v.metric, val, q, results(n), num(c))
		return d
	}
	d.Reason = fmt.Sprintf("paused at %s with %s %s: a promotion needs a place among the best %d of the %s recorded there (cutoff %s)",
		where, a.v.metric, val, q, results(n), num(c))
	return d
}

// promotion explains a promotion from rung k.
func (a *asha) promotion(act Action, b, k int, rec *ashaRecord, drain bool, verb string) Decision {
	rungs := a.st.Brackets[b]
	rg := rungs[k]
	n := rg.finite()
	q := a.quota(n, drain)
	next := fmt.Sprintf("max_t %s", num(a.c.MaxT))
	if k+1 < len(rungs) {
		next = fmt.Sprintf("the rung at %s", num(rungs[k+1].Milestone))
	}
	d := Decision{Action: act, Rung: rg.Milestone}
	c := a.v.value(float64(a.kth(rg, q-1).Score))
	d.setCutoff(c)
	d.Reason = fmt.Sprintf("%s%s to %s: %s %s is among the best %d of the %s recorded there (cutoff %s)",
		verb, a.rungName(rg.Milestone), next, a.v.metric, num(a.v.value(float64(rec.Score))), q, results(n), num(c))
	if drain {
		d.Reason += "; no new trials will come, so the best ⌈n/η⌉ go on"
	}
	return d
}

func (a *asha) rungName(m float64) string {
	return fmt.Sprintf("rung %s (%s ≥ %s)", num(m), a.v.timeAttr, num(m))
}

// OnTrialEnd implements Scheduler. The trial's records stay: later trials
// are still measured against them.
func (a *asha) OnTrialEnd(trial int) {
	if t := a.st.Trials[trial]; t != nil {
		a.setState(trial, t, ended)
	}
}

// Next implements Scheduler: in promote mode, the paper's get_job.
func (a *asha) Next(c Capacity) (Order, bool) {
	if !a.promote || !c.CanResume {
		return Order{}, false
	}
	drain := !c.MoreTrials && a.running == 0
	b, k, rec, ok := a.getJob(-1, drain)
	if !ok {
		return Order{}, false
	}
	a.promoted(rec)
	a.setState(rec.Trial, a.st.Trials[rec.Trial], running)
	return Order{Trial: rec.Trial, Decision: a.promotion(Continue, b, k, rec, drain, "promoted from ")}, true
}

// Snapshot implements Snapshotter.
func (a *asha) Snapshot() ([]byte, error) { return json.Marshal(a.st) }

// Restore implements Snapshotter.
func (a *asha) Restore(data []byte) error {
	var st ashaState
	if err := restore("asha", data, &st); err != nil {
		return err
	}
	if len(st.Brackets) != len(a.st.Brackets) {
		return fmt.Errorf("restore asha scheduler: the snapshot has %d brackets, the config %d", len(st.Brackets), len(a.st.Brackets))
	}
	if st.Trials == nil {
		st.Trials = map[int]*ashaTrial{}
	}
	a.st = st
	a.running = 0
	for _, t := range st.Trials {
		if t.State == running {
			a.running++
		}
	}
	a.unpromoted = map[int][]*ashaRecord{}
	for _, rungs := range st.Brackets {
		for k, rg := range rungs {
			if rg == nil {
				return fmt.Errorf("restore asha scheduler: rung %d of a bracket is null", k)
			}
			records := rg.Records
			rg.Records, rg.byScore = nil, newRankTree(betterRecord)
			for _, rec := range records {
				if rec == nil {
					return fmt.Errorf("restore asha scheduler: rung %s has a null record", num(rg.Milestone))
				}
				rec.marked = false
				if a.promote && !rec.Promoted {
					t := st.Trials[rec.Trial]
					if t == nil {
						return fmt.Errorf("restore asha scheduler: a record of rung %s names trial %d, which it does not know", num(rg.Milestone), rec.Trial)
					}
					if t.State != ended {
						rec.marked = t.State == paused
						a.unpromoted[rec.Trial] = append(a.unpromoted[rec.Trial], rec)
					}
				}
				rg.add(rec)
			}
		}
	}
	return nil
}
