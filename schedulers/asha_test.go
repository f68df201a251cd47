package schedulers

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func ashaStop(t *testing.T, env Env, brackets int) Scheduler {
	return mustNew(t, Config{Kind: "asha", Mode: "stop", MaxT: 27, GracePeriod: 1, ReductionFactor: 3, Brackets: brackets}, env)
}

// stopSequence is a hand-built run of ASHA's stop mode (η = 3, rungs at 1,
// 3, 9, max_t 27).
func stopSequence() []ev {
	return []ev{
		add(1), add(2), add(3), add(4), add(5),
		res(1, 1, 0.5, Continue).at(1).why("first result recorded there"),
		res(2, 1, 0.7, Stop).at(1).cut(0.5),
		// Records [0.5 0.7]: the 1/3-quantile interpolates to 0.5667.
		res(3, 1, 0.4, Continue).at(1).cut(0.5 + 0.2/3).why("of the 2 results"),
		res(4, 1, 0.6, Stop).at(1).cut(0.4 + 0.1*2/3),
		// Records [0.4 0.5 0.6 0.7]: the cutoff is 0.5 exactly; a tie passes.
		res(5, 1, 0.5, Continue).at(1).cut(0.5),
		res(1, 2, 0.45, Continue),
		res(1, 3, 0.3, Continue).at(3).why("first"),
		res(3, 3, 0.35, Stop).at(3).cut(0.3).why("rung 3 (training_iteration ≥ 3)"),
		// Trial 5 jumps past the rungs at 3 and 9: it is recorded at 9 only.
		res(5, 10, 0.2, Continue).at(9).why("first"),
		res(1, 9, 0.25, Stop).at(9).cut(0.2),
		// Trial 6 never reaches a rung.
		add(6),
		res(6, 0.5, 9, Continue),
		end(6),
		// The rung at 3 holds trials 1 and 3 only: trial 5 jumped it.
		add(7),
		res(7, 3, 0.31, Continue).at(3).cut(0.3 + 0.05/3).why("of the 2 results"),
		res(7, 3, 0.9, Continue), // the same rung again: nothing new
		res(5, 27, 0.1, Stop).at(27).why("reached max_t"),
		// A diverged trial counts as the worst.
		add(8),
		res(8, 1, math.NaN(), Stop).at(1).cut(0.5),
	}
}

func TestASHAStopMode(t *testing.T) {
	play(t, ashaStop(t, Env{Metric: "loss"}, 1), stopSequence())
}

func TestASHAStopModeMax(t *testing.T) {
	play(t, ashaStop(t, Env{Metric: "acc", Mode: "max"}, 1), maxSequence())
}

// maxSequence is stopSequence for a "max" metric: the user's acc values
// are 1 − loss and the tuner feeds the scheduler −acc; the decisions are
// the same and the cutoffs come back as acc.
func maxSequence() []ev {
	var out []ev
	for _, e := range stopSequence() {
		if e.kind == "" {
			if !math.IsNaN(e.score) {
				e.score = -(1 - e.score)
			}
			if e.hasCut {
				e.cutoff = 1 - e.cutoff
			}
		}
		out = append(out, e)
	}
	out[6] = out[6].why("acc 0.3 is lower than the cutoff 0.5")
	return out
}

func TestASHAStopBrackets(t *testing.T) {
	// Bracket 0 has rungs at 1, 3, 9; bracket 1 skips the first: 3, 9.
	// Trials are dealt in turn: 1, 3 to bracket 0; 2, 4 to bracket 1.
	play(t, ashaStop(t, Env{}, 2), []ev{
		add(1), add(2), add(3), add(4),
		res(2, 1, 0.9, Continue),
		res(1, 1, 0.5, Continue).at(1),
		res(3, 1, 0.6, Stop).at(1).cut(0.5),
		res(1, 3, 0.1, Continue).at(3),
		// Bracket 1's rung at 3 is its own: trial 1's 0.1 is not there.
		res(2, 3, 0.8, Continue).at(3).why("first"),
		res(4, 3, 0.9, Stop).at(3).cut(0.8),
	})
}

func ashaPromote(t *testing.T) Scheduler {
	return mustNew(t, Config{Kind: "asha", MaxT: 9, GracePeriod: 1, ReductionFactor: 3}, Env{Checkpoints: true})
}

func TestASHAPromoteMode(t *testing.T) {
	// Rungs at 1 and 3, max_t 9; promote is the default with checkpoints.
	play(t, ashaPromote(t), []ev{
		add(1), add(2), add(3),
		res(1, 1, 0.5, Pause).at(1).why("promotions start when the rung has 3 results (it has 1)"),
		next(true, true),
		res(2, 1, 0.3, Pause).at(1),
		res(3, 1, 0.4, Pause).at(1).cut(0.3).why("needs a place among the best 1 of the 3"),
		order(2, Continue, true, true).at(1).cut(0.3).why("promoted from rung 1 (training_iteration ≥ 1) to the rung at 3"),
		next(true, true),
		// Trial 4 is get_job's choice the moment it arrives: it goes on.
		add(4),
		res(4, 1, 0.1, Continue).at(1).cut(0.1).why("promoted at rung 1"),
		add(5),
		res(5, 1, 0.35, Pause).at(1).cut(0.1),
		add(6),
		res(6, 1, 0.2, Continue).at(1).cut(0.2).why("best 2 of the 6"),
		res(2, 2, 0.28, Continue),
		res(2, 3, 0.25, Pause).at(3),
		res(4, 3, 0.05, Pause).at(3),
		// Trial 4 (paused) is the rung's best: it goes first.
		res(6, 3, 0.15, Pause).at(3).cut(0.05),
		order(4, Continue, true, true).at(3).cut(0.05).why("to max_t 9"),
		next(true, true),
		// A tie goes to the earlier record: trial 6's 0.2 is ahead of 7's.
		add(7),
		res(7, 1, 0.2, Pause).at(1).cut(0.2).why("among the best 2 of the 7"),
		res(4, 9, 0.01, Stop).at(9).why("reached max_t"),
		end(4),
	})
}

func TestASHAPromoteHigherRungFirst(t *testing.T) {
	events := []ev{
		add(1), add(2), add(3),
		res(1, 1, 0.1, Pause).at(1),
		res(2, 1, 0.2, Pause).at(1),
		res(3, 1, 0.3, Pause).at(1).cut(0.1),
		order(1, Continue, true, true).at(1).cut(0.1),
		add(4), res(4, 1, 0.4, Pause).at(1).cut(0.1),
		add(5), res(5, 1, 0.5, Pause).at(1).cut(0.1),
		add(6), res(6, 1, 0.15, Continue).at(1).cut(0.15),
		res(1, 3, 0.3, Pause).at(3),
		res(6, 3, 0.2, Pause).at(3),
		add(7), res(7, 1, 0.6, Pause).at(1).cut(0.15),
		add(8), res(8, 1, 0.7, Pause).at(1).cut(0.15),
		add(9), res(9, 1, 0.12, Continue).at(1).cut(0.15),
		// Rung 3 holds [0.3 0.2 0.25]: trial 6 (paused) is its best.
		res(9, 3, 0.25, Pause).at(3).cut(0.2),
		add(10), res(10, 1, 0.5, Pause).at(1).cut(0.15),
		add(11), res(11, 1, 0.5, Pause).at(1).cut(0.15),
		// Trial 12 enters rung 1's top 4, but trial 6 waits at rung 3.
		add(12), res(12, 1, 0.13, Pause).at(1).cut(0.15).why("a promotion from a higher rung goes first"),
		order(6, Continue, true, true).at(3).cut(0.2),
		order(12, Continue, true, true).at(1).cut(0.15),
		next(true, true),
	}
	play(t, ashaPromote(t), events)
}

func TestASHAPromoteDrains(t *testing.T) {
	// Two trials only: ⌊2/3⌋ = 0 would strand them at the first rung.
	play(t, ashaPromote(t), []ev{
		add(1), add(2),
		res(1, 1, 0.2, Pause).at(1),
		res(2, 1, 0.1, Pause).at(1),
		next(true, true), // more trials may come: wait for them
		order(2, Continue, true, false).at(1).cut(0.1).why("no new trials will come"),
		next(true, false), // trial 2 runs: no draining meanwhile
		res(2, 3, 0.05, Pause).at(3),
		order(2, Continue, true, false).at(3).cut(0.05).why("to max_t 9"),
		res(2, 9, 0.01, Stop).at(9),
		end(2),
		next(true, false), // trial 1 is not in the best ⌈2/3⌉ of rung 1
		end(1),
	})
}

func TestASHAResultBeforeAdd(t *testing.T) {
	// A result from a trial never added joins it as if just added.
	play(t, ashaStop(t, Env{}, 1), []ev{
		res(4, 1, 0.5, Continue).at(1),
		res(9, 1, 0.6, Stop).at(1).cut(0.5),
	})
}

func TestASHAMilestones(t *testing.T) {
	tests := []struct {
		grace, eta, maxT float64
		s                int
		want             []float64
	}{
		{1, 3, 27, 0, []float64{1, 3, 9}},
		{1, 3, 28, 0, []float64{1, 3, 9, 27}},
		{1, 3, 27, 1, []float64{3, 9}},
		{0.1, 3, 0.9, 0, []float64{0.1, 0.30000000000000004}}, // 0.9000000000000001 counts as max_t
		{2, 4, 100, 0, []float64{2, 8, 32}},
		{1, 2.5, 10, 0, []float64{1, 2.5, 6.25}},
	}
	for _, tt := range tests {
		got := milestones(tt.grace, tt.eta, tt.maxT, tt.s)
		if len(got) != len(tt.want) {
			t.Errorf("milestones(%g, %g, %g, %d): got %v, want %v", tt.grace, tt.eta, tt.maxT, tt.s, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("milestones(%g, %g, %g, %d): got %v, want %v", tt.grace, tt.eta, tt.maxT, tt.s, got, tt.want)
			}
		}
	}
}

func TestQuantile(t *testing.T) {
	tests := []struct {
		xs   []float64
		q    float64
		want float64
	}{
		{[]float64{5}, 1.0 / 3, 5},
		{[]float64{1, 2}, 0.5, 1.5},
		{[]float64{1, 2, 3, 4}, 1.0 / 3, 2},
		{[]float64{0, 10, 20}, 0.25, 5},
		{[]float64{1, math.Inf(1)}, 0, 1},
		{[]float64{1, math.Inf(1)}, 0.5, math.Inf(1)},
		{[]float64{math.Inf(1), math.Inf(1)}, 0.5, math.Inf(1)},
	}
	for _, tt := range tests {
		if got := quantile(tt.xs, tt.q); got != tt.want {
			t.Errorf("quantile(%v, %g): got %g, want %g", tt.xs, tt.q, got, tt.want)
		}
	}
}

// TestASHAStopDecisionAtLargeRungs: with tens of thousands of records at a
// rung, each decision is still measured against the exact 1/η-quantile of
// what the rung holds (ties and a snapshot round trip included), and it
// costs no copy of the rung: a decision allocates far less than the rung's
// size.
func TestASHAStopDecisionAtLargeRungs(t *testing.T) {
	const n = 20000
	s := ashaStop(t, Env{Metric: "loss", Mode: "min"}, 1)
	rng := rand.New(rand.NewPCG(1, 2))
	var scores []float64
	decide := func(trial int) Decision {
		score := float64(rng.IntN(1000)) / 1000 // many ties
		s.OnTrialAdd(trial, nil)
		d := s.OnResult(Result{Trial: trial, Time: 1, Score: score})
		scores = append(scores, score)
		return d
	}
	for i := 1; i <= n; i++ {
		d := decide(i)
		if i == n/2 {
			snap, err := s.(Snapshotter).Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			s = ashaStop(t, Env{Metric: "loss", Mode: "min"}, 1)
			if err := s.(Snapshotter).Restore(snap); err != nil {
				t.Fatal(err)
			}
		}
		if i%997 != 0 {
			continue
		}
		before := slices.Sorted(slices.Values(scores[:len(scores)-1]))
		if want := quantile(before, 1.0/3); !d.HasCutoff || math.Abs(d.Cutoff-want) > 1e-12 {
			t.Fatalf("result %d: cutoff %v (%v), want %v", i, d.Cutoff, d.HasCutoff, want)
		}
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	const k = 200
	for i := n + 1; i <= n+k; i++ {
		decide(i)
	}
	runtime.ReadMemStats(&m1)
	if per := (m1.TotalAlloc - m0.TotalAlloc) / k; per > 16<<10 {
		t.Errorf("a decision at a rung of %d records allocates %d bytes, want < 16 KiB", n, per)
	}
}

// TestASHASeveralObjectives ranks rungs by non-dominated sorting: a
// result that is worst in the first objective but best in the second
// passes where ranking by the first alone would stop it; a dominated
// one stops. Promote mode ranks by the same order. HyperBand, median
// stopping and PBT refuse several objectives.
func TestASHASeveralObjectives(t *testing.T) {
	env := Env{Metric: "a", Mode: "min", Metrics: []string{"a", "b"}, Modes: []string{"min", "max"}}
	s := mustNew(t, Config{Kind: "asha", Mode: "stop", MaxT: 8, GracePeriod: 1, ReductionFactor: 2}, env)
	single := mustNew(t, Config{Kind: "asha", Mode: "stop", MaxT: 8, GracePeriod: 1, ReductionFactor: 2}, Env{Metric: "a", Mode: "min"})
	cases := []struct {
		a, b           float64
		multi, byFirst Action
	}{
		{1, 5, Continue, Continue},
		{2, 4, Stop, Stop},     // dominated by the first
		{5, 9, Continue, Stop}, // worst a, best b: on the first front
		{3, 1, Stop, Stop},     // dominated
		{0.5, 6, Continue, Continue},
	}
	for i, c := range cases {
		r := Result{Trial: i + 1, Time: 1, Score: c.a, Metrics: map[string]float64{"a": c.a, "b": c.b}}
		s.OnTrialAdd(i+1, nil)
		single.OnTrialAdd(i+1, nil)
		if d := s.OnResult(r); d.Action != c.multi {
			t.Errorf("trial %d (a %g, b %g): %s (%s), want %s", i+1, c.a, c.b, d.Action, d.Reason, c.multi)
		}
		if d := single.OnResult(r); d.Action != c.byFirst {
			t.Errorf("trial %d by a alone: %s, want %s", i+1, d.Action, c.byFirst)
		}
	}

	// Promote mode picks from the same order: the best front first, by
	// crowding, ties to the earlier; then the next front.
	p := mustNew(t, Config{Kind: "asha", MaxT: 8, GracePeriod: 1, ReductionFactor: 2}, Env{Checkpoints: true, Metric: "a", Mode: "min", Metrics: []string{"a", "b"}, Modes: []string{"min", "max"}}).(*asha)
	for i, m := range []map[string]float64{{"a": 1, "b": 1}, {"a": 2, "b": 0.5}, {"a": 9, "b": 9}} {
		p.OnTrialAdd(i+1, nil)
		p.OnResult(Result{Trial: i + 1, Time: 1, Score: m["a"], Metrics: m})
	}
	var order []int
	for _, r := range p.ranked(p.st.Brackets[0][0], 3) {
		order = append(order, r.Trial)
	}
	if want := []int{1, 3, 2}; !slices.Equal(order, want) {
		t.Errorf("rung order %v, want %v (by a alone it would be 1, 2, 3)", order, want)
	}

	for _, kind := range []string{"hyperband", "median", "pbt"} {
		c := map[string]Config{"hyperband": {Kind: kind, MaxT: 8, GracePeriod: 1}, "median": {Kind: kind, GracePeriod: 1}, "pbt": {Kind: kind, PerturbationInterval: 1}}[kind]
		_, err := New(c, Env{Checkpoints: true, Metrics: []string{"a", "b"}, Modes: []string{"min", "min"}})
		if err == nil || !strings.Contains(err.Error(), "ranks trials by one objective") {
			t.Errorf("%s with two objectives: %v", kind, err)
		}
	}
}

// TestASHARerunOfAFailedTrial adds a trial that failed again, as the tuner
// does when WithRerunFailed runs it from its latest checkpoint: it stays
// in its bracket with its records, is not recorded twice at a rung it
// has reached, and a record it was paused with waits for a promotion as
// before.
func TestASHARerunOfAFailedTrial(t *testing.T) {
	cases := []struct {
		name   string
		s      Scheduler
		events []ev
	}{
		{"stop", mustNew(t, Config{Kind: "asha", Mode: "stop", MaxT: 9, GracePeriod: 1, ReductionFactor: 3}, Env{}), []ev{
			add(1), add(2),
			res(1, 1, 0.5, Continue).at(1).why("first result"),
			res(1, 3, 0.4, Continue).at(3).why("first result"),
			res(1, 4, 0.35, Continue),
			res(1, 5, 0.3, Continue),
			end(1), // it fails after 5; the rerun goes on from its checkpoint of 4
			add(1),
			res(1, 5, 0.3, Continue),
			end(1),
			// Trial 1 counts once at the rung at 3.
			res(2, 3, 0.45, Stop).at(3).cut(0.4).why("the best 1/3 of the 1 result recorded there"),
		}},
		{"promoted, then failed", ashaPromote(t), []ev{
			add(1), add(2), add(3),
			res(1, 1, 0.5, Pause).at(1),
			res(2, 1, 0.3, Pause).at(1),
			res(3, 1, 0.4, Pause).at(1).cut(0.3),
			order(2, Continue, true, true).at(1).cut(0.3),
			res(2, 2, 0.28, Continue),
			end(2), // it fails after 2; the rerun goes on from its checkpoint of 1
			add(2),
			res(2, 2, 0.28, Continue), // promoted from the rung at 1 already
			res(2, 3, 0.25, Pause).at(3).why("promotions start when the rung has 3 results (it has 1)"),
			next(true, true),
		}},
		{"failed as it paused", ashaPromote(t), []ev{
			add(1), add(2), add(3),
			res(1, 1, 0.5, Pause).at(1),
			res(2, 1, 0.3, Pause).at(1),
			res(3, 1, 0.4, Pause).at(1).cut(0.3),
			end(1), // its group failed as it stopped for the pause
			order(2, Continue, true, true).at(1).cut(0.3),
			add(1), // the rerun starts from scratch
			res(1, 1, 0.5, Pause).at(1).cut(0.3).why("needs a place among the best 1 of the 3 results"),
			add(4), add(5), add(6),
			res(4, 1, 0.9, Pause).at(1).cut(0.3),
			res(5, 1, 0.8, Pause).at(1).cut(0.3),
			res(6, 1, 0.7, Pause).at(1).cut(0.4).why("best 2 of the 6"),
			order(3, Continue, true, true).at(1).cut(0.4),
			next(true, true),
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { play(t, c.s, c.events) })
	}
}
