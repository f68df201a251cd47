package schedulers

import (
	"math"
	"strings"
	"testing"
)

// The tests in this file are cases of Ray Tune's scheduler tests
// (python/ray/tune/tests/test_trial_scheduler.py) and Optuna's pruner
// tests (tests/pruners_tests), restated as event sequences. Where gotune
// decides differently from the peer on purpose, the comment says so.

var nan = math.NaN()

// Ray's testAsyncHBNanPercentile: trial 1 reports 450 throughout, trial 2
// NaN throughout (max mode, η 2, rungs at 1, 2, 4, 8). Ray leaves NaN out
// of the cutoff, so a later 260 stops against 450. Unlike Ray, which lets
// the NaN trial run on, gotune stops it at its first rung: a diverged
// result never passes a rung.
func TestASHANaNNeverLiftsTheCutoff(t *testing.T) {
	s := mustNew(t, Config{Kind: "asha", Mode: "stop", MaxT: 10, GracePeriod: 1, ReductionFactor: 2}, Env{Metric: "reward", Mode: "max"})
	var events []ev
	for i := range 10 {
		e := res(1, float64(i), -450, Continue)
		if m := map[int]float64{1: 1, 2: 2, 4: 4, 8: 8}[i]; m != 0 {
			e = e.at(m)
		}
		events = append(events, e)
	}
	events = append(events,
		add(2),
		res(2, 0, nan, Continue),
		res(2, 1, nan, Stop).at(1).cut(450).why("diverged"),
		end(2),
		add(3),
		res(3, 1, -260, Stop).at(1).cut(450).why("reward 260 is lower than the cutoff 450, the best 1/2 of the 1 result recorded there (besides 1 that diverged)"),
	)
	play(t, s, events)
}

// The min-mode case with η 3: records {0.5, NaN} let every later
// trial through, another NaN and a 9.0 included.
func TestASHANaNStopsInEveryMode(t *testing.T) {
	for _, mode := range []string{"stop", "promote"} {
		t.Run(mode, func(t *testing.T) {
			s := mustNew(t, Config{Kind: "asha", Mode: mode, MaxT: 9, GracePeriod: 1, ReductionFactor: 3}, Env{Metric: "loss", Checkpoints: true})
			first, cut := Continue, func(e ev) ev { return e.cut(0.5) }
			if mode == "promote" {
				// ⌊1/3⌋ = 0 promotions: no cutoff yet.
				first, cut = Pause, func(e ev) ev { return e }
			}
			events := []ev{
				add(1), add(2),
				// A diverged result is stopped even as the first at a rung.
				res(2, 1, nan, Stop).at(1).why("diverged (loss NaN or infinite)"),
				end(2),
				res(1, 1, 0.5, first).at(1),
				add(3),
				cut(res(3, 1, nan, Stop).at(1).why("never passes a rung")),
				end(3),
				add(4),
				cut(res(4, 1, math.Inf(1), Stop).at(1).why("diverged")),
				end(4),
			}
			if mode == "stop" {
				events = append(events, add(5), res(5, 1, 9.0, Stop).at(1).cut(0.5))
			} else {
				// Diverged records leave the quota at ⌊1/3⌋ = 0: nobody is
				// promoted for them, and the draining quota ⌈1/3⌉ promotes
				// trial 1 only.
				events = append(events,
					next(true, true),
					order(1, Continue, true, false).at(1).cut(0.5),
				)
			}
			play(t, s, events)
		})
	}
}

func hyperBand4(t *testing.T) Scheduler {
	// max_t 4, η 2: the first bracket has 4 trials and rungs at 1, 2, 4.
	return mustNew(t, Config{Kind: "hyperband", MaxT: 4, GracePeriod: 1, ReductionFactor: 2}, Env{Metric: "loss", Checkpoints: true})
}

// A bracket completes whatever its members do (Ray's testTrialErrored,
// testTrialEndedEarly and the overshoot): here the last member
// jumps past max_t, is stopped there, and the three paused at rung 1 are
// halved at once: ⌊4/2⌋ = 2 go on.
func TestHyperBandBracketCompletesWhenAMemberOvershootsMaxT(t *testing.T) {
	play(t, hyperBand4(t), []ev{
		add(1), add(2), add(3), add(4),
		res(1, 1, 0.4, Pause).at(1),
		res(2, 1, 0.2, Pause).at(1),
		res(3, 1, 0.3, Pause).at(1),
		res(4, 4, 0.1, Stop).at(4).why("reached max_t"),
		end(4),
		order(1, Stop, false, true).at(1).cut(0.3),
		order(2, Continue, true, true).at(1).cut(0.3),
		order(3, Continue, true, true).at(1).cut(0.3),
		next(true, true),
	})
}

// Ray's testHyperbandNanInf, decided as everywhere in gotune: a diverged
// result stops its trial at the rung, and the rung completes without it.
func TestHyperBandDivergedResultStopsAtTheRung(t *testing.T) {
	play(t, hyperBand4(t), []ev{
		add(1), add(2), add(3), add(4),
		res(1, 1, nan, Stop).at(1).why("diverged"),
		end(1),
		res(2, 1, 0.2, Pause).at(1),
		res(3, 1, math.Inf(1), Stop).at(1).why("diverged"),
		end(3),
		// Trial 4 completes the rung; n_1 = ⌊4/2⌋ = 2, and only 2 are live.
		res(4, 1, 0.5, Continue).at(1).cut(0.5),
		order(2, Continue, true, true).at(1).cut(0.5),
		next(true, true),
	})
}

// Li et al.'s schedule: n_{i+1} = ⌊n_i/η⌋ of the bracket's size, not of
// the results that reached the rung. A 9-trial bracket (max_t 9, η 3)
// keeps 3 at rung 1 although one trial failed before it; keeping ⌊8/3⌋ = 2
// would let one failure cost a survivor its place.
func TestHyperBandKeepsTheSchedulesCount(t *testing.T) {
	s := mustNew(t, Config{Kind: "hyperband", MaxT: 9, GracePeriod: 1, ReductionFactor: 3}, Env{Metric: "loss", Checkpoints: true})
	var events []ev
	for i := 1; i <= 9; i++ {
		events = append(events, add(i))
	}
	events = append(events, end(9))
	for i := 1; i <= 7; i++ {
		events = append(events, res(i, 1, float64(i)/10, Pause).at(1))
	}
	events = append(events,
		res(8, 1, 0.8, Stop).at(1).cut(0.3).why("the best 3 of the 8 results there"),
		order(4, Stop, false, true).at(1).cut(0.3),
		order(5, Stop, false, true).at(1).cut(0.3),
		order(6, Stop, false, true).at(1).cut(0.3),
		order(7, Stop, false, true).at(1).cut(0.3),
		order(1, Continue, true, true).at(1).cut(0.3),
		order(2, Continue, true, true).at(1).cut(0.3),
		order(3, Continue, true, true).at(1).cut(0.3).why("among the best 3"),
		// Rung 3 keeps ⌊3/3⌋ = 1.
		res(1, 3, 0.1, Pause).at(3),
		res(2, 3, 0.2, Pause).at(3),
		res(3, 3, 0.3, Stop).at(3).cut(0.1),
	)
	play(t, s, events)
}

// Two trials tied at the cutoff both go on, as in Ray's ASHA (a result
// equal to the cutoff continues); the reason says so instead of calling
// the later one worse than a cutoff it equals.
func TestHyperBandTiesAtTheCutoffBothGoOn(t *testing.T) {
	play(t, hyperBand4(t), []ev{
		add(1), add(2), add(3), add(4),
		res(1, 1, 10, Pause).at(1),
		res(2, 1, 10, Pause).at(1),
		res(3, 1, 5, Pause).at(1),
		res(4, 1, 20, Stop).at(1).cut(10).why("loss 20 is higher than the cutoff 10, the best 3 of the 4 results there"),
		order(3, Continue, true, true).at(1).cut(10),
		order(1, Continue, true, true).at(1).cut(10).why("trials tied at the cutoff all go on"),
		order(2, Continue, true, true).at(1).cut(10).why("trials tied at the cutoff all go on"),
		next(true, true),
	})
}

// ASHA's stop mode: a result equal to the cutoff passes, and the reason
// says it ties (the "10 is lower than the cutoff 10").
func TestASHATieAtTheCutoffPasses(t *testing.T) {
	s := mustNew(t, Config{Kind: "asha", Mode: "stop", MaxT: 9, GracePeriod: 1, ReductionFactor: 2}, Env{Metric: "acc", Mode: "max"})
	play(t, s, []ev{
		add(1), add(2),
		res(1, 1, -10, Continue).at(1),
		res(2, 1, -10, Continue).at(1).cut(10).why("acc 10 ties with the cutoff"),
	})
}

// Ray's rule averages from the grace period on (its testMedianStopping
// cases with a grace period): a trial reporting 1000, 1000, 0 at 1, 2, 3
// with grace 2.5 has the running average 0 at 3, so a rival whose best is
// 100 goes on (max mode). Averaging from the start gives 666.7 and stops
// it.
func TestMedianAveragesFromTheGracePeriod(t *testing.T) {
	s := mustNew(t, Config{Kind: "median", GracePeriod: 2.5, MinSamplesRequired: 1}, Env{Metric: "reward", Mode: "max"})
	play(t, s, []ev{
		res(1, 1, -1000, Continue),
		res(1, 2, -1000, Continue),
		res(1, 3, 0, Continue),
		res(2, 1, -100, Continue),
		res(2, 3, -100, Continue),
		// The median of trial 1's average 0 and trial 2's 100 is 50.
		res(3, 3, -40, Stop).at(3).cut(50).why("reward 40 is lower than 50"),
	})
}

// Optuna's median pruner prunes a trial whose values are NaN
// (test_median_pruner_with_nan and the percentile pruner's NaN cases):
// gotune stops it past the grace period whatever the others did, and a
// diverged rival never lifts the median.
func TestMedianStopsDivergedTrials(t *testing.T) {
	s := mustNew(t, Config{Kind: "median", GracePeriod: 1, MinSamplesRequired: 1}, Env{Metric: "loss"})
	play(t, s, []ev{
		// Stopped even with nobody to compare with.
		res(1, 1, nan, Stop).at(1).why("its loss diverged"),
		res(2, 1, nan, Stop).at(1).why("its loss diverged"),
		// Trials 1 and 2 do not count: nobody to compare with yet.
		res(3, 1, 0.5, Continue),
		// Trial 1's NaN does not count: the median of trial 3's 0.5 alone.
		res(4, 1, 0.6, Stop).at(1).cut(0.5).why("median of 1 other trials"),
	})
}

// Ray accepts brackets without a rung (testAsyncHBAllCompletes: 10
// brackets at max_t 10) and HyperBand at max_t 1; such a bracket runs its
// trials to the end, FIFO under another name. gotune refuses them and
// says what to use instead.
func TestRunglessSettingsAreRefused(t *testing.T) {
	tests := []struct {
		cfg  Config
		key  string
		want string
	}{
		{Config{Kind: "asha", MaxT: 10, Brackets: 10}, "brackets", "would run its trials to the end"},
		{Config{Kind: "hyperband", MaxT: 1}, "grace_period", `use kind "fifo"`},
		{Config{Kind: "asha", MaxT: 1}, "grace_period", `use kind "fifo"`},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate(Env{Checkpoints: true})
		fe, ok := err.(*FieldError)
		if !ok || fe.Key != tt.key || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: got %v, want an error on %s saying %q", tt.cfg, err, tt.key, tt.want)
		}
	}
}

// Ray's HyperBand halves a bracket once every live trial reached the rung,
// full or not. gotune keeps the paper's bracket of n trials: while more
// trials will come, a lone trial at the rung waits for the members still
// to join (the loop starts them, as a paused trial frees its place), and
// only a bracket whose other members ended, or that no trial will join
// any more, is halved with what it has.
func TestHyperBandLoneTrialWaitsForTheBracket(t *testing.T) {
	play(t, hyperBand4(t), []ev{
		add(1),
		res(1, 1, 0.4, Pause).at(1).why("waiting for 3 more"),
		next(true, true),
		add(2), add(3), add(4),
		end(2), end(3),
		// Trial 4 completes the rung; n_1 = 2 and both live trials go on.
		res(4, 1, 0.5, Continue).at(1).cut(0.5),
		order(1, Continue, true, true).at(1).cut(0.5),
	})
	play(t, hyperBand4(t), []ev{
		add(1), add(2), add(3), add(4),
		end(2), end(3), end(4),
		// The others ended: n_1 = ⌊4/2⌋ = 2, and trial 1 goes on at once.
		res(1, 1, 0.4, Continue).at(1).cut(0.4).why("among the best 1 of the 1 result there"),
	})
}

// Optuna's successive halving judges a first report at step 7 (η 2) at
// every rung it passes, 1, 2 and 4. gotune and Ray record it at the
// highest only, where the results it is compared with are the nearest in
// budget: here the first at rung 4, it passes although rung 1 holds a
// better result.
func TestASHAJudgesAtTheHighestRungPassed(t *testing.T) {
	s := mustNew(t, Config{Kind: "asha", Mode: "stop", MaxT: 16, GracePeriod: 1, ReductionFactor: 2}, Env{Metric: "loss"})
	play(t, s, []ev{
		add(1), add(2),
		res(1, 1, 0.1, Continue).at(1),
		res(2, 7, 0.5, Continue).at(4).why("first result recorded there"),
		add(3),
		res(3, 1, 0.5, Stop).at(1).cut(0.1),
	})
}

// PBT ranks by each trial's latest report; Ray ranks by the score at the
// trial's last perturbation. Trial 1 was the best at time 4 but reports
// 0.9 at 5: trial 4's 0.45 at 8 is not the bottom of the four any more.
func TestPBTRanksByTheLatestReport(t *testing.T) {
	s := mustNew(t, Config{Kind: "pbt", PerturbationInterval: 4, ResampleProbability: ptr(0.0)},
		Env{Metric: "loss", Checkpoints: true, Space: pbtSpace(t), Seed: 1})
	for n := 1; n <= 4; n++ {
		s.OnTrialAdd(n, map[string]any{"lr": 0.01, "act": "relu", "layers": int64(2), "epochs": int64(10)})
	}
	play(t, s, []ev{
		res(4, 4, 0.4, Continue).checkpointed(),
		res(3, 4, 0.3, Continue).checkpointed(),
		res(2, 4, 0.2, Continue).checkpointed(),
		res(1, 4, 0.1, Continue).checkpointed(),
		res(1, 5, 0.9, Continue),
		res(4, 8, 0.45, Continue).checkpointed(),
	})
}

// A diverged trial ranks last in PBT and is never a donor, even where the
// top quantile would otherwise reach it.
func TestPBTNeverCopiesADivergedTrial(t *testing.T) {
	s := mustNew(t, Config{Kind: "pbt", PerturbationInterval: 1, QuantileFraction: 0.5},
		Env{Metric: "loss", Checkpoints: true, Space: pbtSpace(t), Seed: 1})
	for n := 1; n <= 2; n++ {
		s.OnTrialAdd(n, map[string]any{"lr": 0.01, "act": "relu", "layers": int64(2), "epochs": int64(10)})
	}
	play(t, s, []ev{
		res(1, 1, nan, Continue).checkpointed(),
		// Both diverged: the top one has a checkpoint but is no donor.
		res(2, 1, nan, Continue).checkpointed().at(1).why("did not diverge"),
	})
}

// Ray's testMedianStoppingSoftStop: with hard_stop false the rule pauses
// the trial it judges, and the paused trial resumes, unjudged, once no
// new trial will come and the others are done.
func TestMedianSoftStopPausesThenResumes(t *testing.T) {
	s := mustNew(t, Config{Kind: "median", GracePeriod: 0.5, MinSamplesRequired: 1, HardStop: ptr(false)},
		Env{Metric: "reward", Mode: "max", Checkpoints: true})
	var events []ev
	for i := range 10 {
		events = append(events, res(1, float64(i), -100*float64(i), Continue))
	}
	for i := range 5 {
		events = append(events, res(2, float64(i), -450, Continue))
	}
	events = append(events,
		res(1, 10, -1000, Continue), end(1),
		// Trial 1's average from 0.5 to 5 is 300, to 6 350: 450 goes on.
		res(2, 5, -450, Continue),
		res(2, 6, 0, Continue),
		// To 10 it is 550.
		res(2, 10, -450, Pause).at(10).cut(550).why("hard_stop = false"),
		next(true, true),          // more trials may come
		add(3), next(true, false), // trial 3 runs
		res(3, 1, -2000, Continue), end(3),
		order(2, Continue, true, false).why("runs to the end"),
		res(2, 11, 0, Continue), // unjudged now
		next(true, false),
	)
	play(t, s, events)
}

// Ray's testAsyncHBNonStopTrials: with stop_last_trials false the trial
// that survives the rungs runs on past max_t, even after it falls below
// the cutoff.
func TestASHAStopLastTrialsFalse(t *testing.T) {
	s := mustNew(t, Config{Kind: "asha", Mode: "stop", MaxT: 3, GracePeriod: 1, ReductionFactor: 2, StopLastTrials: ptr(false)},
		Env{Metric: "metric", Mode: "max"})
	play(t, s, []ev{
		add(1), add(2), add(3), add(4),
		res(1, 2, -10, Continue).at(2),
		res(2, 2, -8, Stop).at(2).cut(10),
		res(3, 2, -6, Stop).at(2).cut(9),
		res(4, 2, -4, Stop).at(2).cut(8),
		res(1, 4, -10, Continue),
		res(1, 8, -10, Continue),
		res(1, 14, -1, Continue),
	})
}

// HyperBand's stop_last_trials false: the trial kept at the bracket's
// last rung runs on past max_t.
func TestHyperBandStopLastTrialsFalse(t *testing.T) {
	// max_t 2, η 2: the first bracket has 2 trials and rungs at 1 and 2.
	s := mustNew(t, Config{Kind: "hyperband", MaxT: 2, GracePeriod: 1, ReductionFactor: 2, StopLastTrials: ptr(false)},
		Env{Metric: "loss", Checkpoints: true})
	play(t, s, []ev{
		add(1), add(2),
		res(1, 1, 0.4, Pause).at(1),
		res(2, 1, 0.2, Continue).at(1).cut(0.2),
		order(1, Stop, false, true).at(1).cut(0.2),
		res(2, 2, 0.1, Continue),
		res(2, 5, 0.05, Continue),
	})
}

func TestNewOptionsForPeersUsers(t *testing.T) {
	tests := []struct {
		cfg      Config
		env      Env
		key, msg string
	}{
		{Config{Kind: "median", HardStop: ptr(false)}, Env{}, "hard_stop", "cannot do"},
		{Config{Kind: "asha", HardStop: ptr(false)}, Env{}, "hard_stop", "only by median"},
		{Config{Kind: "median", StopLastTrials: ptr(false)}, Env{}, "stop_last_trials", "only by asha, hyperband"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate(tt.env)
		fe, ok := err.(*FieldError)
		if !ok || fe.Key != tt.key || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%+v: got %v, want an error on %s saying %q", tt.cfg, err, tt.key, tt.msg)
		}
	}
}
