package schedulers

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gotune/gotune/searchspace"
)

// The schedulers keep indexes so that a decision costs O(log n) after n
// trials. The tests here play random histories and check every decision
// against a straightforward computation from the scheduler's plain state:
// sorting a rung's records, scanning every trial.

// sortedRecords is a rung's records best first, ties to the earlier one,
// by sorting them.
func sortedRecords(rg *ashaRung) []*ashaRecord {
	out := slices.Clone(rg.Records)
	slices.SortStableFunc(out, func(x, y *ashaRecord) int { return cmp.Compare(x.Score, y.Score) })
	return out
}

// refGetJob is get_job by a scan of every rung's sorted records.
func refGetJob(a *asha, self int, drain bool) (bracket, rung int, rec *ashaRecord, ok bool) {
	best := -1.0
	for b, rungs := range a.st.Brackets {
		for k := len(rungs) - 1; k >= 0; k-- {
			if ok && rungs[k].Milestone <= best {
				break
			}
			top := slices.DeleteFunc(sortedRecords(rungs[k]), (*ashaRecord).diverged)
			top = top[:a.quota(len(top), drain)]
			for _, r := range top {
				if !r.Promoted && (r.Trial == self || a.st.Trials[r.Trial].State == paused) {
					bracket, rung, rec, ok, best = b, k, r, true, rungs[k].Milestone
					break
				}
			}
		}
	}
	return bracket, rung, rec, ok
}

// refStopCutoff is the cutoff of stop mode at rung rg by sorting the
// records that did not diverge, and whether the rung has one.
func refStopCutoff(a *asha, rg *ashaRung) (float64, bool) {
	var scores []float64
	for _, r := range sortedRecords(rg) {
		if !r.diverged() {
			scores = append(scores, float64(r.Score))
		}
	}
	if len(scores) == 0 {
		return 0, false
	}
	return quantile(scores, 1/a.c.ReductionFactor), true
}

// randomScore draws a score with many ties, and now and then a diverged
// or infinite one.
func randomScore(rng *rand.Rand) float64 {
	switch rng.IntN(20) {
	case 0:
		return math.NaN()
	case 1:
		return math.Inf(1)
	case 2:
		return math.Inf(-1)
	}
	return float64(rng.IntN(30)) / 10
}

func TestASHAIndexesMatchSorting(t *testing.T) {
	for _, mode := range []string{"stop", "promote"} {
		for seed := range uint64(3) {
			rng := rand.New(rand.NewPCG(seed, 11))
			cfg := Config{Kind: "asha", Mode: mode, MaxT: 30, GracePeriod: 1, ReductionFactor: 2 + float64(seed%3), Brackets: 1 + int(seed%2)}
			a := mustNew(t, cfg, Env{Checkpoints: true}).(*asha)
			times := map[int]float64{}
			nextTrial := 1
			for step := range 1500 {
				switch op := rng.IntN(20); {
				case op < 3 || len(times) == 0:
					// A new trial; now and then a number seen before.
					n := nextTrial
					if rng.IntN(30) == 0 && nextTrial > 1 {
						n = 1 + rng.IntN(nextTrial-1)
					} else {
						nextTrial++
					}
					a.OnTrialAdd(n, nil)
					times[n] = 0
				case op < 5:
					n := pickKey(rng, times)
					a.OnTrialEnd(n)
					delete(times, n)
				case op < 8:
					c := Capacity{CanResume: rng.IntN(4) > 0, MoreTrials: rng.IntN(3) > 0}
					drain := !c.MoreTrials && a.running == 0
					_, _, want, wantOK := refGetJob(a, -1, drain)
					o, ok := a.Next(c)
					if mode == "promote" && c.CanResume && (ok != wantOK || ok && (o.Trial != want.Trial || !want.Promoted)) {
						t.Fatalf("%s seed %d step %d: Next ordered %v %+v, want %v trial %v", mode, seed, step, ok, o, wantOK, want)
					}
				default:
					n := pickKey(rng, times)
					// On by one to three rungs' worth, or back a little.
					times[n] = math.Max(0, times[n]+float64(rng.IntN(8)-1))
					r := Result{Trial: n, Time: times[n], Score: randomScore(rng)}
					tr := a.st.Trials[n]
					var rg *ashaRung
					if tr != nil && !Reached(r.Time, a.c.MaxT) {
						rungs := a.st.Brackets[tr.Bracket]
						for k := len(rungs) - 1; k > tr.Rung; k-- {
							if Reached(r.Time, rungs[k].Milestone) {
								rg = rungs[k]
								break
							}
						}
					}
					var cutoff float64
					var hasCutoff bool
					if rg != nil && mode == "stop" {
						cutoff, hasCutoff = refStopCutoff(a, rg)
					}
					d := a.OnResult(r)
					if rg != nil && mode == "stop" {
						pass := !diverged(r.Score) && (!hasCutoff || r.Score <= cutoff)
						if (d.Action == Continue) != pass || d.HasCutoff != (hasCutoff && !math.IsInf(cutoff, 0) && !math.IsNaN(cutoff)) || d.HasCutoff && d.Cutoff != cutoff {
							t.Fatalf("%s seed %d step %d: %s (cutoff %g %v), want pass %v with cutoff %g %v",
								mode, seed, step, d.Action, d.Cutoff, d.HasCutoff, pass, cutoff, hasCutoff)
						}
					}
					if d.Action == Stop {
						a.OnTrialEnd(n)
						delete(times, n)
					}
				}
				checkGetJob(t, a, rng, step)
				if step%250 == 0 {
					// A restored scheduler rebuilds the same indexes.
					data, err := a.Snapshot()
					if err != nil {
						t.Fatal(err)
					}
					b := mustNew(t, cfg, Env{Checkpoints: true}).(*asha)
					if err := b.Restore(data); err != nil {
						t.Fatal(err)
					}
					checkGetJob(t, b, rng, step)
					a = b
				}
			}
		}
	}
}

// checkGetJob compares getJob with refGetJob for a few trials deciding.
func checkGetJob(t *testing.T, a *asha, rng *rand.Rand, step int) {
	t.Helper()
	// The trial deciding is running: none, one drawn, one with records
	// not promoted.
	selves := []int{-1}
	live := map[int]bool{}
	for n, tr := range a.st.Trials {
		if tr.State == running {
			live[n] = true
		}
	}
	if len(live) > 0 {
		selves = append(selves, pickKey(rng, live))
	}
	for n := range a.unpromoted {
		if live[n] {
			selves = append(selves, n)
			break
		}
	}
	if !a.promote {
		selves = nil // getJob is promote mode's
	}
	for _, self := range selves {
		for _, drain := range []bool{false, true} {
			b, k, rec, ok := a.getJob(self, drain)
			wb, wk, wrec, wok := refGetJob(a, self, drain)
			if b != wb || k != wk || rec != wrec || ok != wok {
				t.Fatalf("step %d: getJob(%d, %v) = %d %d %+v %v, want %d %d %+v %v", step, self, drain, b, k, rec, ok, wb, wk, wrec, wok)
			}
		}
	}
	for _, rungs := range a.st.Brackets {
		for _, rg := range rungs {
			sorted := sortedRecords(rg)
			if len(sorted) == 0 {
				continue
			}
			i := rng.IntN(len(sorted))
			if got := a.kth(rg, i); got != sorted[i] {
				t.Fatalf("step %d: kth(%d) = %+v, want %+v", step, i, got, sorted[i])
			}
			if !a.inTop(rg, sorted[i], i+1) || a.inTop(rg, sorted[i], i) {
				t.Fatalf("step %d: inTop puts record %d of %d out of place", step, i, len(sorted))
			}
		}
	}
}

// pickKey draws one of m's keys; m must not be empty.
func pickKey[V any](rng *rand.Rand, m map[int]V) int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys[rng.IntN(len(keys))]
}

func TestPBTRankingMatchesSorting(t *testing.T) {
	space, err := searchspace.New(searchspace.Param{Name: "lr", Domain: searchspace.LogUniform{Low: 1e-4, High: 1e-1}})
	if err != nil {
		t.Fatal(err)
	}
	restarts := 0
	for seed := range int64(4) {
		rng := rand.New(rand.NewPCG(uint64(seed), 13))
		qf := []float64{0.25, 0.5, 0.1, 0.3}[seed]
		p := mustNew(t, Config{Kind: "pbt", PerturbationInterval: 2, QuantileFraction: qf}, Env{Checkpoints: true, Space: space, Seed: seed}).(*pbt)
		times := map[int]float64{}
		nextTrial := 1
		for step := range 2000 {
			switch op := rng.IntN(20); {
			case op < 2 || len(times) == 0:
				n := nextTrial
				if rng.IntN(20) == 0 && len(times) > 0 {
					n = pickKey(rng, times) // a number used again
				} else {
					nextTrial++
				}
				p.OnTrialAdd(n, space.Sample(rng))
				times[n] = 0
			case op < 3:
				n := pickKey(rng, times)
				p.OnTrialEnd(n)
				delete(times, n)
			default:
				n := pickKey(rng, times)
				times[n] += float64(rng.IntN(3))
				r := Result{Trial: n, Time: times[n], Score: randomScore(rng), Checkpoint: rng.IntN(3) == 0}
				// The reference: every live trial ranked by sorting, as if
				// the result had been taken in.
				self := *p.st.Trials[n]
				self.State, self.HasScore, self.Score = running, true, fnum(WorstIfDiverged(r.Score))
				if r.Checkpoint {
					self.HasCkpt = true
				}
				perturbs := Reached(r.Time, self.LastPerturb+p.c.PerturbationInterval)
				var live []int
				for m, o := range p.st.Trials {
					if m == n {
						o = &self
					}
					if o.State != ended && o.HasScore {
						live = append(live, m)
					}
				}
				score := func(m int) fnum {
					if m == n {
						return self.Score
					}
					return p.st.Trials[m].Score
				}
				slices.SortFunc(live, func(a, b int) int {
					if c := cmp.Compare(score(a), score(b)); c != 0 {
						return c
					}
					return a - b
				})
				q := min(int(math.Ceil(float64(len(live))*qf-relTol)), len(live)/2)
				bottom := perturbs && q > 0 && slices.Contains(live[len(live)-q:], n)
				var donors []int
				if bottom {
					for _, m := range live[:q] {
						if m != n && p.st.Trials[m].HasCkpt && !diverged(float64(score(m))) {
							donors = append(donors, m)
						}
					}
				}
				rngState, err := p.st.Rand.MarshalJSON()
				if err != nil {
					t.Fatal(err)
				}
				d := p.OnResult(r)
				switch {
				case !bottom:
					if d.Action != Continue || d.Reason != "" {
						t.Fatalf("seed %d step %d: trial %d outside the bottom %d of %d: %s (%s)", seed, step, n, q, len(live), d.Action, d.Reason)
					}
				case len(donors) == 0:
					if d.Action != Continue || !strings.Contains(d.Reason, "none of the top trials has a checkpoint") {
						t.Fatalf("seed %d step %d: no donor: %s (%s)", seed, step, d.Action, d.Reason)
					}
				default:
					ref := newSeededRand(0, 0)
					if err := ref.UnmarshalJSON(rngState); err != nil {
						t.Fatal(err)
					}
					want := donors[ref.IntN(len(donors))]
					if d.Action != Restart || d.Exploit.From != want {
						t.Fatalf("seed %d step %d: %s from %+v, want a restart from trial %d", seed, step, d.Action, d.Exploit, want)
					}
					restarts++
				}
				if bottom {
					cutoff := float64(score(live[len(live)-q]))
					if c := d.Cutoff; c != cutoff && !(math.IsInf(cutoff, 0) && !d.HasCutoff) {
						t.Fatalf("seed %d step %d: cutoff %g, want %g", seed, step, c, cutoff)
					}
				}
			}
			if step%500 == 0 {
				data, err := p.Snapshot()
				if err != nil {
					t.Fatal(err)
				}
				if err := p.Restore(data); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if restarts < 100 {
		t.Errorf("only %d restarts: the comparison proves little", restarts)
	}
}

// TestHyperBandOnlyTheLastBracketIsOpen plays random histories: a
// decision names its trial's bracket, only the last bracket ever takes
// trials, and once no more trials come none does.
func TestHyperBandOnlyTheLastBracketIsOpen(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 17))
	h := mustNew(t, Config{Kind: "hyperband", MaxT: 9}, Env{Checkpoints: true}).(*hyperBand)
	times := map[int]float64{}
	more := true
	decided := 0
	checkReason := func(step, trial int, d Decision) {
		t.Helper()
		if d.Reason == "" || strings.Contains(d.Reason, "max_t (") {
			return
		}
		decided++
		if want := fmt.Sprintf("of bracket %d", h.st.Trials[trial].Bracket+1); !strings.Contains(d.Reason, want) {
			t.Fatalf("step %d: trial %d: %q does not say %q", step, trial, d.Reason, want)
		}
	}
	for step := range 3000 {
		switch op := rng.IntN(10); {
		case (op < 2 || len(times) == 0) && more:
			n := step + 1
			h.OnTrialAdd(n, nil)
			times[n] = 0
		case op < 3 && len(times) > 0:
			n := pickKey(rng, times)
			h.OnTrialEnd(n)
			delete(times, n)
		case op < 6:
			if step > 2500 {
				more = false
			}
			o, ok := h.Next(Capacity{CanResume: true, MoreTrials: more})
			if ok {
				checkReason(step, o.Trial, o.Decision)
				if o.Action == Stop {
					h.OnTrialEnd(o.Trial)
					delete(times, o.Trial)
				}
			}
			if !more && slices.ContainsFunc(h.st.Brackets, (*hbBracket).open) {
				t.Fatalf("step %d: a bracket is open after no more trials", step)
			}
		case len(times) > 0:
			n := pickKey(rng, times)
			times[n] += float64(1 + rng.IntN(3))
			d := h.OnResult(Result{Trial: n, Time: times[n], Score: randomScore(rng)})
			checkReason(step, n, d)
			if d.Action == Stop {
				h.OnTrialEnd(n)
				delete(times, n)
			}
		}
		for i, b := range h.st.Brackets[:max(0, len(h.st.Brackets)-1)] {
			if b.open() {
				t.Fatalf("step %d: bracket %d of %d is open", step, i+1, len(h.st.Brackets))
			}
		}
	}
	if decided < 100 || len(h.st.Brackets) < 20 {
		t.Errorf("%d decisions over %d brackets: the test proves little", decided, len(h.st.Brackets))
	}
}

// TestMedianIndexMatchesAScan plays random histories — times that recur
// and times that do not, results that go back to a checkpoint, numbers
// used again, diverged scores — and checks every decision against the
// median of a pass over every other trial.
func TestMedianIndexMatchesAScan(t *testing.T) {
	stops, indexed := 0, 0
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 19))
		m := mustNew(t, Config{Kind: "median", GracePeriod: 2, MinSamplesRequired: 1 + int(seed)}, Env{}).(*medianRule)
		times := map[int]float64{}
		nextTrial := 1
		for step := range 4000 {
			switch op := rng.IntN(20); {
			case op < 2 || len(times) == 0:
				n := nextTrial
				if rng.IntN(20) == 0 && nextTrial > 1 {
					n = 1 + rng.IntN(nextTrial-1) // a number used again
				} else {
					nextTrial++
				}
				m.OnTrialAdd(n, nil)
				times[n] = 0
			case op < 3:
				n := pickKey(rng, times)
				m.OnTrialEnd(n)
				delete(times, n)
			default:
				n := pickKey(rng, times)
				switch k := rng.IntN(20); {
				case k == 0:
					times[n] = math.Max(0, times[n]-float64(rng.IntN(4))) // back to a checkpoint
				case k == 1:
					times[n] += rng.Float64() // a time that never recurs
				case k == 2:
					times[n] = math.Round(times[n]) + 1 + relTol/2 // within tolerance of a whole time
				default:
					times[n] = math.Floor(times[n]) + float64(1+rng.IntN(2))
				}
				r := Result{Trial: n, Time: times[n], Score: randomScore(rng)}
				d := m.OnResult(r)
				// The reference, from the state after the result.
				self := m.st.Trials[n]
				var means []float64
				for o, ot := range m.st.Trials {
					if o == n || len(ot.Times) == 0 || !Reached(ot.Times[len(ot.Times)-1], r.Time) {
						continue
					}
					// The average from the grace period on; one with a
					// diverged score in it does not count.
					sum, k, bad := 0.0, 0, false
					for i, x := range ot.Times {
						if Reached(x, m.c.GracePeriod) && Reached(r.Time, x) {
							sum, k, bad = sum+float64(ot.Scores[i]), k+1, bad || diverged(float64(ot.Scores[i]))
						}
					}
					if k > 0 && !bad {
						means = append(means, sum/float64(k))
					}
				}
				want := Continue
				var med float64
				if Reached(r.Time, m.c.GracePeriod) && diverged(r.Score) {
					want = Stop
				} else if Reached(r.Time, m.c.GracePeriod) && len(means) >= m.c.MinSamplesRequired {
					med = median(means)
					if !(float64(self.Best) <= med) {
						want = Stop
					}
				}
				if d.Action != want {
					t.Fatalf("seed %d step %d: trial %d at %g: %s (%s), want %s against the median %g of %d", seed, step, n, r.Time, d.Action, d.Reason, want, med, len(means))
				}
				if want == Stop {
					stops++
					if diverged(r.Score) {
						if !strings.Contains(d.Reason, "diverged") || d.HasCutoff {
							t.Fatalf("seed %d step %d: %q (cutoff %g %v), want a stop for diverging", seed, step, d.Reason, d.Cutoff, d.HasCutoff)
						}
					} else if !strings.Contains(d.Reason, fmt.Sprintf("the median of %d other", len(means))) ||
						d.HasCutoff != (!math.IsNaN(med) && !math.IsInf(med, 0)) || d.HasCutoff && d.Cutoff != med {
						t.Fatalf("seed %d step %d: %q (cutoff %g %v), want the median %g of %d", seed, step, d.Reason, d.Cutoff, d.HasCutoff, med, len(means))
					}
					m.OnTrialEnd(n)
					delete(times, n)
				}
			}
			if step == 2000 {
				indexed += len(m.times)
				data, err := m.Snapshot()
				if err != nil {
					t.Fatal(err)
				}
				if err := m.Restore(data); err != nil {
					t.Fatal(err)
				}
			}
			if step%500 == 0 {
				checkMedianIndex(t, m, step)
			}
		}
		indexed += len(m.times)
	}
	if stops < 200 || indexed < 20 {
		t.Errorf("%d stops, %d times indexed: the comparison proves little", stops, indexed)
	}
}

// checkMedianIndex checks each indexed time's ranking against the trials'
// standings there.
func checkMedianIndex(t *testing.T, m *medianRule, step int) {
	t.Helper()
	entries := 0
	for _, at := range m.times {
		var want []trialMean
		for n, tr := range m.st.Trials {
			if mean, ok := tr.standing(at, m.c.GracePeriod); ok {
				want = append(want, trialMean{mean, n})
			}
		}
		slices.SortFunc(want, func(a, b trialMean) int {
			if lessMean(a, b) {
				return -1
			}
			return 1
		})
		ranked := m.at[at]
		if ranked.Len() != len(want) {
			t.Fatalf("step %d: time %g ranks %d trials, want %d", step, at, ranked.Len(), len(want))
		}
		for i, w := range want {
			if got := ranked.At(i); got.trial != w.trial || !(got.mean == w.mean || math.IsNaN(got.mean) && math.IsNaN(w.mean)) {
				t.Fatalf("step %d: time %g, place %d: %+v, want %+v", step, at, i, got, w)
			}
		}
		entries += len(want)
	}
	if entries != m.entries {
		t.Fatalf("step %d: %d entries counted, want %d", step, m.entries, entries)
	}
	reports := 0
	for _, tr := range m.st.Trials {
		reports += len(tr.Times)
	}
	if reports != m.reports {
		t.Fatalf("step %d: %d results counted, want %d", step, m.reports, reports)
	}
}

// TestPrunersKeepTheBestSoFar plays random histories through the
// percentile and patient pruners — results that go back to a checkpoint,
// diverged scores, a snapshot and restore — and checks every decision
// against the rule computed from the whole history, and each trial's
// kept bests against its scores.
func TestPrunersKeepTheBestSoFar(t *testing.T) {
	for _, cfg := range []Config{
		{Kind: "percentile", Percentile: 40, StartupTrials: 3, MinSamplesRequired: 2},
		{Kind: "patient", Patience: ptr(2), MinDelta: 0.1},
	} {
		stops := 0
		for seed := range uint64(3) {
			rng := rand.New(rand.NewPCG(seed, 23))
			p := mustNew(t, cfg, Env{}).(*pruner)
			times := map[int]float64{}
			next := 1
			for step := range 3000 {
				if rng.IntN(10) == 0 || len(times) == 0 {
					p.OnTrialAdd(next, nil)
					times[next] = 0
					next++
					continue
				}
				n := pickKey(rng, times)
				if rng.IntN(15) == 0 {
					p.OnTrialEnd(n)
					delete(times, n)
					continue
				}
				if rng.IntN(15) == 0 {
					times[n] = math.Max(1, times[n]-float64(rng.IntN(3))) // back to a checkpoint
				} else {
					times[n]++
				}
				score := randomScore(rng)
				d := p.OnResult(Result{Trial: n, Time: times[n], Score: score})
				tr := p.st.Trials[n]
				want := Continue
				switch {
				case diverged(score):
					want = Stop
				case cfg.Kind == "percentile" && len(p.st.Completed) >= cfg.StartupTrials:
					var values []float64
					for _, c := range p.st.Completed {
						if x, ok := p.st.Trials[c].at(times[n]); ok && !diverged(x) {
							values = append(values, x)
						}
					}
					if len(values) >= cfg.MinSamplesRequired {
						slices.Sort(values)
						if best(tr.Scores) > quantile(values, cfg.Percentile/100) {
							want = Stop
						}
					}
				case cfg.Kind == "patient":
					k := *cfg.Patience + 1
					if m := len(tr.Scores); m > k {
						before, recent := best(tr.Scores[:m-k]), best(tr.Scores[m-k:])
						if !diverged(before) && recent > before+cfg.MinDelta {
							want = Stop
						}
					}
				}
				if d.Action != want {
					t.Fatalf("%s seed %d step %d: trial %d at %g: %s (%s), want %s", cfg.Kind, seed, step, n, times[n], d.Action, d.Reason, want)
				}
				if want == Stop {
					stops++
					p.OnTrialEnd(n)
					delete(times, n)
				}
				if step == 1500 {
					data, err := p.Snapshot()
					if err != nil {
						t.Fatal(err)
					}
					if err := p.Restore(data); err != nil {
						t.Fatal(err)
					}
				}
				for c, ct := range p.st.Trials {
					for i := range ct.Scores {
						if got, want := ct.bestOfFirst(i+1), best(ct.Scores[:i+1]); got != want {
							t.Fatalf("%s seed %d step %d: trial %d's best of its first %d scores is %g, want %g", cfg.Kind, seed, step, c, i+1, got, want)
						}
					}
				}
			}
		}
		if stops < 100 {
			t.Errorf("%s: %d stops: the comparison proves little", cfg.Kind, stops)
		}
	}
}

// refMedian is the median rule's comparison for trial self at time by a
// pass over every other trial and their averages added up afresh: how
// many other trials' running averages from the grace period up to time
// count (those that reached time, without a diverged score in the
// average), and their median.
func refMedian(m *medianRule, self int, time float64) (int, float64) {
	var means []float64
	for o, ot := range m.st.Trials {
		if o == self || len(ot.Times) == 0 || !Reached(ot.Times[len(ot.Times)-1], time) {
			continue
		}
		sum, k, bad := 0.0, 0, false
		for i, x := range ot.Times {
			if Reached(x, m.c.GracePeriod) && Reached(time, x) {
				sum, k, bad = sum+float64(ot.Scores[i]), k+1, bad || diverged(float64(ot.Scores[i]))
			}
		}
		if k > 0 && !bad && !diverged(sum/float64(k)) {
			means = append(means, sum/float64(k))
		}
	}
	if len(means) == 0 {
		return 0, 0
	}
	return len(means), median(means)
}

// TestMedianOnContinuousTimeMatchesAScan plays random histories on a
// continuous time attribute — times that never recur, times equal to or
// within Reached's tolerance of another trial's, times below 1, results
// that go back to a checkpoint, results after a trial ended, paused trials
// resumed (hard_stop false), numbers used again, diverged scores, a
// snapshot and restore — and checks every decision against refMedian.
func TestMedianOnContinuousTimeMatchesAScan(t *testing.T) {
	stops, frozenDecisions, blocks := 0, 0, 0
	for seed := range uint64(6) {
		rng := rand.New(rand.NewPCG(seed, 29))
		hardStop := seed%2 == 0
		m := mustNew(t, Config{Kind: "median", GracePeriod: 0.5, MinSamplesRequired: 1 + int(seed%3), HardStop: ptr(hardStop)},
			Env{Checkpoints: true}).(*medianRule)
		times := map[int]float64{} // the trials running, and their last time
		var lasts []float64
		nextTrial := 1
		for step := range 5000 {
			switch op := rng.IntN(20); {
			case op < 2 || len(times) == 0:
				n := nextTrial
				if rng.IntN(15) == 0 && nextTrial > 1 {
					n = 1 + rng.IntN(nextTrial-1) // a number used again
				} else {
					nextTrial++
				}
				m.OnTrialAdd(n, nil)
				times[n] = 0
			case op < 4:
				n := pickKey(rng, times)
				m.OnTrialEnd(n)
				if rng.IntN(4) > 0 {
					delete(times, n)
				} // else it reports again after its end
			case op < 5:
				if o, ok := m.Next(Capacity{CanResume: true, MoreTrials: rng.IntN(3) > 0}); ok {
					times[o.Trial] = m.st.Trials[o.Trial].Times[len(m.st.Trials[o.Trial].Times)-1]
				}
			default:
				n := pickKey(rng, times)
				switch k := rng.IntN(20); {
				case k == 0:
					times[n] = math.Max(0, times[n]-3*rng.Float64()) // back to a checkpoint
				case k < 3 && len(lasts) > 0:
					times[n] = lasts[rng.IntN(len(lasts))] // another trial's time
				case k < 5 && len(lasts) > 0:
					x := lasts[rng.IntN(len(lasts))]
					times[n] = x + (rng.Float64()-0.5)*4*relTol*math.Max(1, math.Abs(x)) // within its tolerance
				default:
					times[n] += 0.2 * rng.Float64()
				}
				lasts = append(lasts, times[n])
				r := Result{Trial: n, Time: times[n], Score: randomScore(rng) - 1}
				d := m.OnResult(r)
				if _, indexed := m.at[r.Time]; !indexed {
					frozenDecisions++
				}
				count, med := refMedian(m, n, r.Time)
				self := m.st.Trials[n]
				want := Continue
				switch {
				case self.Released || !Reached(r.Time, m.c.GracePeriod):
				case diverged(r.Score):
					want = Stop
				case count >= m.c.MinSamplesRequired && !(float64(self.Best) <= med):
					want = Stop
				}
				if !hardStop && want == Stop {
					want = Pause
				}
				if d.Action != want {
					t.Fatalf("seed %d step %d: trial %d at %g: %s (%s), want %s against the median %g of %d", seed, step, n, r.Time, d.Action, d.Reason, want, med, count)
				}
				if want != Continue && !diverged(r.Score) {
					stops++
					if !strings.Contains(d.Reason, fmt.Sprintf("the median of %d other", count)) || d.HasCutoff && d.Cutoff != med {
						t.Fatalf("seed %d step %d: %q (cutoff %g), want the median %g of %d", seed, step, d.Reason, d.Cutoff, med, count)
					}
				}
				if want != Continue {
					delete(times, n)
					if want == Stop {
						m.OnTrialEnd(n)
					}
				}
			}
			if step == 2500 {
				data, err := m.Snapshot()
				if err != nil {
					t.Fatal(err)
				}
				if err := m.Restore(data); err != nil {
					t.Fatal(err)
				}
			}
		}
		blocks += len(m.frozen.blocks)
	}
	if stops < 200 || frozenDecisions < 10000 || blocks < 6 {
		t.Errorf("%d stops, %d decisions at times not indexed, %d blocks of frozen averages: the comparison proves little", stops, frozenDecisions, blocks)
	}
}
