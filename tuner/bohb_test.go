package tuner

import (
	"errors"
	"math"
	"reflect"
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
			// budget as their values.
			tpe, err := NewTPE(space, 7)
			if err != nil {
				t.Fatal(err)
			}
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

// TestBOHBNeedsHyperBand: the sweep file's "bohb" refuses another
// scheduler, naming the setting.
func TestBOHBNeedsHyperBand(t *testing.T) {
	cfg := testConfig(t, 4)
	cfg.Search.Algorithm = "bohb"
	cfg.Scheduler = schedulers.Config{Kind: "asha"}
	var ce *ConfigError
	if err := cfg.Validate(); !errors.As(err, &ce) || ce.Key != "search.algorithm" {
		t.Fatalf("bohb under ASHA: %v, want a ConfigError on search.algorithm", err)
	}
}
