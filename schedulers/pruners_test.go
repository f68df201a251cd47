package schedulers

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// Optuna's test_25_percentile_pruner_intermediate_values: five completed
// trials reported 1…5 at step 1; a trial reporting 2.1 (minimize) or 3.9
// (maximize) there is outside the best 25% and stops.
func TestPercentilePrunerCases(t *testing.T) {
	for _, mode := range []string{"min", "max"} {
		t.Run(mode, func(t *testing.T) {
			sign, latest, cut := 1.0, 2.1, 2.0
			if mode == "max" {
				sign, latest, cut = -1, 3.9, 4
			}
			s := mustNew(t, Config{Kind: "percentile", Percentile: 25}, Env{Metric: "v", Mode: mode})
			var events []ev
			for i := 1; i <= 5; i++ {
				events = append(events, add(i), res(i, 1, sign*float64(i), Continue), end(i))
			}
			events = append(events, add(6), res(6, 1, sign*latest, Stop).at(1).cut(cut).why("the best 25% of the 5 completed trials"))
			// A result equal to the cutoff goes on.
			events = append(events, add(7), res(7, 1, sign*cut, Continue))
			play(t, s, events)
		})
	}
	// Too few completed trials (startup_trials 5 by default): none judged.
	s := mustNew(t, Config{Kind: "percentile", Percentile: 25}, Env{Metric: "v"})
	play(t, s, []ev{add(1), res(1, 1, 1, Continue), end(1), add(2), res(2, 1, 9, Continue)})
}

// Optuna's threshold pruner tests: a value above upper, below lower, or
// NaN stops the trial; values inside the bounds go on.
func TestThresholdPrunerCases(t *testing.T) {
	lo, hi := 2.0, 3.0
	play(t, mustNew(t, Config{Kind: "threshold", Upper: &hi}, Env{Metric: "loss"}), []ev{
		res(1, 1, 1, Continue),
		res(1, 2, 3.5, Stop).at(2).cut(3).why("above the upper threshold 3"),
	})
	play(t, mustNew(t, Config{Kind: "threshold", Lower: &lo}, Env{Metric: "acc", Mode: "max"}), []ev{
		res(1, 1, -3, Continue),
		res(1, 2, -1, Stop).at(2).cut(2).why("acc 1 is below the lower threshold 2"),
		res(2, 1, nan, Stop).at(1).why("diverged"),
	})
	// The warm-up (grace_period) and the interval hold judgement back.
	play(t, mustNew(t, Config{Kind: "threshold", Upper: &hi, GracePeriod: 2, Interval: 2}, Env{Metric: "loss"}), []ev{
		res(1, 1, 9, Continue),
		res(1, 2, 1, Continue), // judged at 2
		res(1, 3, 9, Continue), // next judgement at 4
		res(1, 4, 9, Stop).at(4).cut(3),
	})
}

// Optuna's test_patient_pruner_intermediate_values table.
func TestPatientPrunerCases(t *testing.T) {
	tests := []struct {
		patience    int
		minDelta    float64
		mode        string
		values      []float64
		stopsAtStep int // -1: never
	}{
		{0, 0, "max", []float64{1, 0}, 1},
		{1, 0, "max", []float64{2, 1, 0}, 2},
		{0, 0, "min", []float64{0, 1}, 1},
		{1, 0, "min", []float64{0, 1, 2}, 2},
		{0, 1, "max", []float64{1, 0}, -1},
		{1, 1, "max", []float64{3, 2, 1, 0}, 3},
		{0, 1, "min", []float64{0, 1}, -1},
		{1, 1, "min", []float64{0, 1, 2, 3}, 3},
		// Not improving is not getting worse.
		{0, 0, "min", []float64{1, 1, 1}, -1},
	}
	for _, tt := range tests {
		s := mustNew(t, Config{Kind: "patient", Patience: ptr(tt.patience), MinDelta: tt.minDelta}, Env{Metric: "v", Mode: tt.mode})
		var events []ev
		for step, v := range tt.values {
			if tt.mode == "max" {
				v = -v
			}
			e := res(1, float64(step), v, Continue)
			if step == tt.stopsAtStep {
				e.want, e.rung = Stop, float64(step)
				cut := tt.values[0] + tt.minDelta
				if tt.mode == "max" {
					cut = slicesMax(tt.values[:step-tt.patience]) - tt.minDelta
				}
				e = e.cut(cut).why("by more than min_delta")
			}
			events = append(events, e)
			if step == tt.stopsAtStep {
				break
			}
		}
		play(t, s, events)
	}
}

func slicesMax(x []float64) float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, v)
	}
	return m
}

// A trial worse than the best completed one at every step stops once the
// one-sided signed-rank test's p-value, 1/2^n with n steps, falls below
// p_threshold 0.1: at the fourth step (1/16); not at the third (1/8).
func TestWilcoxonPrunerStopsAConsistentlyWorseTrial(t *testing.T) {
	s := mustNew(t, Config{Kind: "wilcoxon"}, Env{Metric: "loss"})
	var events []ev
	events = append(events, add(1))
	for i := 1; i <= 10; i++ {
		events = append(events, res(1, float64(i), 1/float64(i), Continue))
	}
	events = append(events, end(1), add(2),
		res(2, 1, 2, Continue), res(2, 2, 1, Continue), res(2, 3, 0.5, Continue),
		res(2, 4, 0.3, Stop).at(4).why("p = 0.0625 < p_threshold 0.1"),
		// A trial better at most steps goes on.
		add(3), res(3, 1, 0.5, Continue), res(3, 2, 0.4, Continue), res(3, 3, 0.5, Continue), res(3, 4, 0.2, Continue),
	)
	play(t, s, events)
}

// wilcoxonGreater against scipy.stats.wilcoxon(d, zero_method="zsplit",
// alternative="greater") (scipy 1.10), exact and approximate.
func TestWilcoxonPValues(t *testing.T) {
	tests := []struct {
		d    []float64
		want float64
	}{
		{[]float64{1, 2, 3, 4}, 0.0625},
		{[]float64{1, -2, 3, 4, 5}, 0.09375},
		{[]float64{-1, -2, -3}, 1},
		// Ties and a zero: the normal approximation.
		{[]float64{1, 1, -2, 0, 3, 3, 4}, 0.05352897298295963},
	}
	for _, tt := range tests {
		if got := wilcoxonGreater(tt.d); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("wilcoxonGreater(%v) = %v, want %v", tt.d, got, tt.want)
		}
	}
	// The p-value is a probability and falls as the differences rise.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		d := make([]float64, 1+rng.IntN(60))
		for i := range d {
			d[i] = float64(rng.IntN(7) - 3)
		}
		p := wilcoxonGreater(d)
		for i := range d {
			d[i] += 10
		}
		if q := wilcoxonGreater(d); !(p >= 0 && p <= 1 && q <= p) {
			t.Fatalf("p-values %v then %v", p, q)
		}
	}
}

func TestPrunerConfigErrors(t *testing.T) {
	lo, hi := 3.0, 2.0
	tests := []struct {
		cfg      Config
		key, msg string
	}{
		{Config{Kind: "percentile"}, "percentile", "(0, 100]"},
		{Config{Kind: "threshold"}, "lower", "lower, upper or both"},
		{Config{Kind: "threshold", Lower: &lo, Upper: &hi}, "lower", "must not exceed upper"},
		{Config{Kind: "patient"}, "patience", "required"},
		{Config{Kind: "patient", Patience: ptr(-1)}, "patience", "negative"},
		{Config{Kind: "wilcoxon", PThreshold: 1.5}, "p_threshold", "(0, 1)"},
		{Config{Kind: "threshold", Upper: &hi, Patience: ptr(1)}, "patience", "only by patient"},
		{Config{Kind: "asha", Percentile: 50}, "percentile", "only by percentile"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate(Env{})
		fe, ok := err.(*FieldError)
		if !ok || fe.Key != tt.key || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%+v: got %v, want an error on %s saying %q", tt.cfg, err, tt.key, tt.msg)
		}
	}
}

// A pruner's snapshot with a null trial, or with times and scores that do
// not pair up, is refused, saying which.
func TestPrunerRestoreRefusesBrokenTrials(t *testing.T) {
	for _, tt := range []struct{ snapshot, want string }{
		{`{"trials":{"3":null}}`, "trial 3 is null"},
		{`{"trials":{"4":{"times":[1,2],"scores":[0.5],"judged":"-Inf"}}}`, "trial 4 has 2 times and 1 scores"},
	} {
		p := mustNew(t, Config{Kind: "percentile", Percentile: 50}, Env{}).(*pruner)
		if err := p.Restore([]byte(tt.snapshot)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("restore %s: %v, want an error saying %q", tt.snapshot, err, tt.want)
		}
	}
}

// TestPrunerRerunOfAFailedTrial adds a trial that failed again, as the
// tuner does when WithRerunFailed runs it from its latest checkpoint: it
// keeps its history up to there, so its best so far is still its best,
// and it has not completed until it ends again.
func TestPrunerRerunOfAFailedTrial(t *testing.T) {
	s := mustNew(t, Config{Kind: "percentile", Percentile: 50, StartupTrials: 1}, Env{Metric: "loss"})
	play(t, s, []ev{
		add(1), res(1, 1, 1.0, Continue), res(1, 2, 0.5, Continue), end(1),
		add(2), res(2, 1, 0.2, Continue), res(2, 2, 0.9, Continue),
		end(2), // it fails after 2; the rerun goes on from its checkpoint of 1
		add(2),
		res(2, 2, 0.9, Continue), // its best is 0.2, within trial 1's 0.5
		// Trial 2 has not completed: trial 1 alone sets the cutoff at 2.
		add(3), res(3, 1, 0.7, Continue), res(3, 2, 0.6, Stop).at(2).cut(0.5).why("of the 1 completed trials"),
	})
}

// TestWilcoxonPrunerSparesATrialWhoseAverageIsBest is Optuna's
// test_wilcoxon_pruner_if_average_is_best_then_not_prune in gotune's
// terms: a trial worse than the best completed one at every step (p far
// below p_threshold 0.5) goes on while the average of its scores so far
// is no worse than that trial's final score, 4, and stops at the first
// step where it is: the 17th, (10·1 + 7·9)/17 ≈ 4.29.
func TestWilcoxonPrunerSparesATrialWhoseAverageIsBest(t *testing.T) {
	s := mustNew(t, Config{Kind: "wilcoxon", PThreshold: 0.5}, Env{Metric: "loss"})
	best := append(append(slices.Repeat([]float64{0}, 10), slices.Repeat([]float64{8}, 9)...), 4)
	events := []ev{add(1)}
	for i, x := range best {
		events = append(events, res(1, float64(i+1), x, Continue))
	}
	events = append(events, end(1), add(2))
	for i := range 16 {
		x := 1.0
		if i >= 10 {
			x = 9
		}
		events = append(events, res(2, float64(i+1), x, Continue))
	}
	events = append(events, res(2, 17, 9, Stop).at(17).why("worse than trial 1's, the best completed"))
	play(t, s, events)
}

// TestPrunersDoNotCountAFailedTrial fails a trial that reported the best
// values of all (an out-of-memory error midway, say). As in Optuna, whose
// PercentilePruner counts and reads only trials in state COMPLETE and
// whose WilcoxonPruner compares with study.best_trial, a COMPLETE one, it
// counts neither toward startup_trials nor among the values a percentile
// is taken of, nor serves as the best completed trial; once a rerun of it
// ends without failing, it has completed. Threshold and patient read only
// the trial judged.
func TestPrunersDoNotCountAFailedTrial(t *testing.T) {
	var wilcoxon []ev
	wilcoxon = append(wilcoxon, add(1))
	for i := 1; i <= 10; i++ {
		wilcoxon = append(wilcoxon, res(1, float64(i), 1/float64(i), Continue))
	}
	wilcoxon = append(wilcoxon, end(1),
		add(2), res(2, 1, 0.01, Continue), res(2, 2, 0.01, Continue), res(2, 3, 0.01, Continue), res(2, 4, 0.01, Continue),
		fail(2),
		// Better than trial 1 at every step: against trial 2 it would
		// stop at the fourth (p = 1/16).
		add(3), res(3, 1, 0.5, Continue), res(3, 2, 0.4, Continue), res(3, 3, 0.3, Continue), res(3, 4, 0.2, Continue),
		add(4), res(4, 1, 2, Continue), res(4, 2, 1, Continue), res(4, 3, 0.5, Continue),
		res(4, 4, 0.3, Stop).at(4).why("worse than trial 1's, the best completed"),
	)
	tests := []struct {
		name   string
		cfg    Config
		events []ev
	}{
		{"percentile: startup", Config{Kind: "percentile", Percentile: 50, StartupTrials: 1}, []ev{
			add(1), res(1, 1, 0.1, Continue), res(1, 2, 0.1, Continue), fail(1),
			// No trial has completed: none is judged.
			add(2), res(2, 1, 0.9, Continue), res(2, 2, 0.9, Continue), end(2),
			add(3), res(3, 1, 0.95, Stop).at(1).cut(0.9).why("of the 1 completed trials"),
		}},
		{"percentile: values", Config{Kind: "percentile", Percentile: 50, StartupTrials: 1}, []ev{
			add(1), res(1, 1, 0.5, Continue), end(1),
			add(2), res(2, 1, 0.1, Continue), fail(2),
			// Trial 1 alone sets the cutoff: 0.5, not the median 0.3 of
			// 0.1 and 0.5.
			add(3), res(3, 1, 0.4, Continue),
			add(4), res(4, 1, 0.6, Stop).at(1).cut(0.5).why("of the 1 completed trials"),
		}},
		{"percentile: a rerun that completes", Config{Kind: "percentile", Percentile: 50, StartupTrials: 1}, []ev{
			add(1), res(1, 1, 0.5, Continue), res(1, 2, 0.5, Continue), fail(1),
			add(2), res(2, 1, 0.9, Continue),
			add(1), res(1, 2, 0.4, Continue), end(1),
			res(2, 2, 0.9, Stop).at(2).cut(0.4).why("of the 1 completed trials"),
		}},
		{"wilcoxon: the best completed", Config{Kind: "wilcoxon"}, wilcoxon},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			play(t, mustNew(t, tt.cfg, Env{Metric: "loss"}), tt.events)
		})
	}
}

// TestPrunerSnapshotKeepsAFailure restores a snapshot taken between
// OnTrialFailed and OnTrialEnd: the restored pruner does not count the
// trial when it ends. A snapshot from before failures were told apart,
// without the field, restores as it was, its completed trials counted.
func TestPrunerSnapshotKeepsAFailure(t *testing.T) {
	cfg := Config{Kind: "percentile", Percentile: 50, StartupTrials: 1}
	first := mustNew(t, cfg, Env{Metric: "loss"})
	play(t, first, []ev{add(1), res(1, 1, 0.1, Continue)})
	first.(FailureObserver).OnTrialFailed(1)
	data, err := first.(Snapshotter).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	restored := mustNew(t, cfg, Env{Metric: "loss"})
	if err := restored.(Snapshotter).Restore(data); err != nil {
		t.Fatal(err)
	}
	play(t, restored, []ev{end(1), add(2), res(2, 1, 0.9, Continue)})

	old := mustNew(t, cfg, Env{Metric: "loss"})
	if err := old.(Snapshotter).Restore([]byte(`{"trials":{"1":{"times":[1],"scores":[0.5],"judged":1,"ended":true}},"completed":[1]}`)); err != nil {
		t.Fatal(err)
	}
	play(t, old, []ev{add(2), res(2, 1, 0.6, Stop).at(1).cut(0.5).why("of the 1 completed trials")})
}
