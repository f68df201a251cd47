package search

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"github.com/gotune/gotune/schedulers"
	"github.com/gotune/gotune/searchspace"
)

// bohbEvent is one thing a searcher is told about a trial: its
// configuration (suggested or replayed), a result, or its end.
type bohbEvent struct {
	trial  int
	config map[string]any
	obs    *Observation
	end    *TrialEnd
}

// bohbCurve is the score of x at step: the best x is 0.2 at step 1 and
// moves to 0.8 by step 9, so the budgets' models disagree.
func bohbCurve(x, step float64) float64 {
	best := 0.2 + 0.6*math.Min(1, (step-1)/8)
	return (x-best)*(x-best) + 1/step
}

// bohbRun suggests trials 1…n one at a time; trial k reports at steps 1
// up to reach(k) and then ends, stopped below 9. It returns the events in
// order.
func bohbRun(t *testing.T, s Searcher, n int, reach func(k int) int) []bohbEvent {
	t.Helper()
	var events []bohbEvent
	for k := 1; k <= n; k++ {
		cfg, err := s.Suggest(k)
		if err != nil {
			t.Fatalf("trial %d: %v", k, err)
		}
		events = append(events, bohbEvent{trial: k, config: cfg})
		var last *Observation
		for step := 1; step <= reach(k); step++ {
			obs := Observation{Step: float64(step), Score: bohbCurve(cfg["x"].(float64), float64(step))}
			s.OnResult(k, obs)
			last = &obs
			events = append(events, bohbEvent{trial: k, obs: last})
		}
		end := TrialEnd{Status: TrialCompleted, Last: last}
		if reach(k) < 9 {
			end.Status = TrialStopped
		}
		s.OnTrialEnd(k, end)
		events = append(events, bohbEvent{trial: k, end: &end})
	}
	return events
}

// TestBOHBFitsTheLargestBudgetWithEnoughResults feeds BOHB trials that
// reach budgets 1, 3 and 9 in different numbers, and checks which budget
// it models and that its suggestion is TPE's fitted to the results there
// alone: random while no budget has TPEStartupTrials results.
func TestBOHBFitsTheLargestBudgetWithEnoughResults(t *testing.T) {
	space := mustSpace(t, searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: 0, High: 1}})
	budgets := schedulers.Config{Kind: "hyperband", MaxT: 9, ReductionFactor: 3}.WithDefaults().HyperBandBudgets()
	if !reflect.DeepEqual(budgets, []float64{1, 3, 9}) {
		t.Fatalf("HyperBand's budgets at max_t 9, η 3: %v, want [1 3 9]", budgets)
	}
	cases := []struct {
		name string
		n    int
		// reach is how far trial k runs.
		reach func(k int) int
		// budget is the one modelled; 0 for none.
		budget float64
	}{
		{"none has enough", TPEStartupTrials - 1, func(int) int { return 9 }, 0},
		{"only the first", 30, func(k int) int { return 1 + 2*btoi(k%5 == 0) }, 1},
		{"the middle", 30, func(k int) int { return 3 + 6*btoi(k%5 == 0) }, 3},
		{"the last", 30, func(k int) int { return []int{1, 3, 9}[k%3] }, 9},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := NewBOHB(space, 7, budgets)
			if err != nil {
				t.Fatal(err)
			}
			events := bohbRun(t, b, tc.n, func(k int) int { return max(tc.reach(k), 1) })
			budget, ok := b.Budget()
			if ok != (tc.budget > 0) || budget != tc.budget {
				t.Fatalf("BOHB models budget %g (%v), want %g", budget, ok, tc.budget)
			}
			// The TPE BOHB should have fitted: the trials' results at the
			// budget as their values, its candidates drawn widened.
			tpe := mustTPE(t, space, 7, tpeWidenDraws(bohbBandwidthFactor))
			for _, e := range events {
				switch {
				case e.config != nil:
					if err := tpe.Replay(e.trial, e.config); err != nil {
						t.Fatal(err)
					}
				case e.end != nil:
					var at *Observation
					for _, f := range events {
						if f.trial == e.trial && f.obs != nil && f.obs.Step == tc.budget {
							at = f.obs
						}
					}
					if at == nil {
						tpe.OnTrialEnd(e.trial, TrialEnd{Status: TrialFailed})
					} else {
						tpe.OnTrialEnd(e.trial, TrialEnd{Status: TrialCompleted, Last: at})
					}
				}
			}
			want, err := tpe.Suggest(tc.n + 1)
			if err != nil {
				t.Fatal(err)
			}
			got, err := b.Suggest(tc.n + 1)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("BOHB suggests %v, TPE fitted at budget %g %v", got, tc.budget, want)
			}
			if tc.budget == 0 {
				random := space.Sample(TrialRand(7, tc.n+1))
				if !reflect.DeepEqual(got, random) {
					t.Errorf("BOHB without a budget suggests %v, want the random draw %v", got, random)
				}
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestBOHBDivergedResultsRankWorst: a trial whose result at the budget is
// NaN or ±Inf counts there as the worst, not as the best (−Inf) nor left
// out; so BOHB draws away from it.
func TestBOHBDivergedResultsRankWorst(t *testing.T) {
	space := mustSpace(t, searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: 0, High: 1}})
	for _, bad := range []float64{math.NaN(), math.Inf(-1), math.Inf(1)} {
		b, err := NewBOHB(space, 3, []float64{1})
		if err != nil {
			t.Fatal(err)
		}
		for k := 1; k <= 3*TPEStartupTrials; k++ {
			cfg, err := b.Suggest(k)
			if err != nil {
				t.Fatal(err)
			}
			x := cfg["x"].(float64)
			score := math.Abs(x - 0.5)
			if x < 0.2 {
				score = bad // diverges near 0
			}
			obs := Observation{Step: 1, Score: score}
			b.OnResult(k, obs)
			b.OnTrialEnd(k, TrialEnd{Status: TrialCompleted, Last: &obs})
		}
		near := 0
		for k := 3*TPEStartupTrials + 1; k <= 3*TPEStartupTrials+20; k++ {
			cfg, err := b.Suggest(k)
			if err != nil {
				t.Fatal(err)
			}
			b.OnTrialEnd(k, TrialEnd{Status: TrialFailed})
			if cfg["x"].(float64) < 0.2 {
				near++
			}
		}
		if near > 4 {
			t.Errorf("with %g results below x = 0.2, %d of 20 suggestions land there", bad, near)
		}
	}
}

// TestBOHBResumes replays a BOHB's history to a new one, at every moment
// between two trials and inside a trial, as a resumed experiment does,
// and checks that it suggests what the undisturbed one did.
func TestBOHBResumes(t *testing.T) {
	space := mustSpace(t,
		searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: 0, High: 1}},
		searchspace.Param{Name: "c", Domain: searchspace.Choice{Values: []any{"a", "b"}}},
	)
	budgets := []float64{1, 3, 9}
	reach := func(k int) int { return []int{1, 3, 9}[k%3] }
	b, err := NewBOHB(space, 11, budgets)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3 * TPEStartupTrials
	events := bohbRun(t, b, n, reach)
	for cut := 1; cut < len(events); cut++ {
		if events[cut].config == nil {
			continue
		}
		// The run stops before trial events[cut].trial is suggested.
		resumed, err := NewBOHB(space, 11, budgets)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events[:cut] {
			switch {
			case e.config != nil:
				if err := resumed.Replay(e.trial, e.config); err != nil {
					t.Fatal(err)
				}
			case e.obs != nil:
				resumed.OnResult(e.trial, *e.obs)
			default:
				resumed.OnTrialEnd(e.trial, *e.end)
			}
		}
		rest := bohbRun(t, &offset{resumed, events[cut].trial - 1}, n-events[cut].trial+1, func(k int) int { return reach(k + events[cut].trial - 1) })
		for _, e := range rest {
			if e.config == nil {
				continue
			}
			k := e.trial + events[cut].trial - 1
			for _, w := range events {
				if w.trial == k && w.config != nil && !reflect.DeepEqual(w.config, e.config) {
					t.Fatalf("resumed before trial %d: trial %d ran %v, %v undisturbed", events[cut].trial, k, e.config, w.config)
				}
			}
		}
	}
}

// offset numbers a searcher's trials from by+1 on.
type offset struct {
	s  Searcher
	by int
}

func (o *offset) Suggest(k int) (map[string]any, error) { return o.s.Suggest(k + o.by) }
func (o *offset) OnResult(k int, obs Observation)       { o.s.OnResult(k+o.by, obs) }
func (o *offset) OnTrialEnd(k int, end TrialEnd)        { o.s.OnTrialEnd(k+o.by, end) }

// BenchmarkBOHBSuggest times one suggestion after 1,000 and 5,000 trials
// with results, on BenchmarkTPESuggest's space under HyperBand's budgets
// at max_t 27, η 3: every trial reports at budget 1, a third of them on
// at 3, a ninth at 9 and a 27th at 27 (the model budget, with 37 and 185
// results there). Each timed trial then fails, so the results stay the
// same.
func BenchmarkBOHBSuggest(b *testing.B) {
	space := overheadSpace(b)
	budgets := []float64{1, 3, 9, 27}
	for _, n := range []int{1000, 5000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			s, err := NewBOHB(space, 0, budgets)
			if err != nil {
				b.Fatal(err)
			}
			replayRandom(b, s, space, n, func(trial int, cfg map[string]any) {
				v := overheadScore(cfg)
				var last *Observation
				for i, budget := range budgets {
					if i > 0 && trial%int(budget) != 0 {
						break
					}
					last = &Observation{Step: budget, Score: v + 1/budget}
					s.OnResult(trial, *last)
				}
				s.OnTrialEnd(trial, TrialEnd{Status: TrialStopped, Last: last})
			})
			suggestFailing(b, s, n)
		})
	}
}

// TestBOHBKeepsItsModelInStep plays random histories — results at
// random steps, stopped, completed and failed trials, results after an
// end, numbers replayed again, trials running while others are
// suggested — and checks each suggestion against a TPE built afresh from
// the whole history at the model budget, as BOHB built one for every
// suggestion before it kept its model in step.
func TestBOHBKeepsItsModelInStep(t *testing.T) {
	spaces := map[string]*searchspace.Space{
		"continuous": mustSpace(t,
			searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: 0, High: 1}},
			searchspace.Param{Name: "c", Domain: searchspace.Choice{Values: []any{"a", "b", "c"}}},
		),
		// Finite, without repeats: the model's record of what it
		// suggested must match too.
		"finite": mustSpace(t,
			searchspace.Param{Name: "i", Domain: searchspace.RandInt{Low: 0, High: 12}},
			searchspace.Param{Name: "j", Domain: searchspace.RandInt{Low: 0, High: 12}},
		),
	}
	budgets := []float64{1, 3, 9}
	rebuilt := 0
	for name, space := range spaces {
		for seed := range uint64(3) {
			rng := rand.New(rand.NewPCG(seed, 31))
			b, err := NewBOHB(space, int64(seed), budgets)
			if err != nil {
				t.Fatal(err)
			}
			running := map[int]float64{} // trial → its last step
			next := 1
			for step := 0; next <= 120; step++ {
				switch op := rng.IntN(10); {
				case op < 3 || len(running) == 0:
					want, wantErr := bohbReference(t, b, space, next)
					had := b.tpe
					got, err := b.Suggest(next)
					if b.tpe != had {
						rebuilt++
					}
					if !errors.Is(err, wantErr) || !reflect.DeepEqual(got, want) {
						t.Fatalf("%s seed %d, trial %d: suggested %v (%v), a model built afresh %v (%v)", name, seed, next, got, err, want, wantErr)
					}
					if err == nil {
						running[next] = 0
					}
					next++
				case op == 3 && next > 2 && rng.IntN(10) == 0:
					// A number replayed again, with another configuration.
					k := 1 + rng.IntN(next-1)
					if err := b.Replay(k, space.Sample(rng)); err != nil {
						t.Fatal(err)
					}
				case op < 8:
					k := bohbPick(rng, running)
					running[k] += float64(1 + rng.IntN(4))
					score := rng.Float64()
					if rng.IntN(15) == 0 {
						score = math.NaN()
					}
					b.OnResult(k, Observation{Step: running[k], Score: score})
				default:
					k := bohbPick(rng, running)
					status := []EndStatus{TrialCompleted, TrialStopped, TrialFailed}[rng.IntN(3)]
					b.OnTrialEnd(k, TrialEnd{Status: status, Last: &Observation{Step: running[k], Score: rng.Float64()}})
					if rng.IntN(5) > 0 {
						delete(running, k)
					} // else it reports again after its end
				}
			}
		}
	}
	if rebuilt > 720/4 {
		t.Errorf("the model was built afresh for %d of 720 suggestions: the test proves little", rebuilt)
	}
}

// bohbReference is what BOHB would suggest for trial from a TPE built
// afresh from its history at its model budget: every trial replayed,
// those with a result there ended with it, the other ended ones failed.
func bohbReference(t *testing.T, b *BOHB, space *searchspace.Space, trial int) (map[string]any, error) {
	t.Helper()
	tpe := mustTPE(t, space, b.seed, b.opts...)
	at := b.modelBudget()
	for _, k := range b.order {
		if err := tpe.Replay(k, b.configs[k]); err != nil {
			t.Fatal(err)
		}
		if score, ok := b.results[max(at, 0)][k]; ok && at >= 0 {
			tpe.OnTrialEnd(k, TrialEnd{Status: TrialCompleted, Last: &Observation{Step: b.budgets[at], Score: score}})
		} else if b.ended[k] {
			tpe.OnTrialEnd(k, TrialEnd{Status: TrialFailed})
		}
	}
	return tpe.Suggest(trial)
}

// bohbPick is one of the running trials, at random.
func bohbPick(rng *rand.Rand, running map[int]float64) int {
	keys := make([]int, 0, len(running))
	for k := range running {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys[rng.IntN(len(keys))]
}
