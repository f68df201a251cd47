package schedulers

import (
	"slices"
	"testing"
)

func TestHyperBandBrackets(t *testing.T) {
	s := mustNew(t, Config{Kind: "hyperband", MaxT: 27, GracePeriod: 1, ReductionFactor: 3}, Env{Checkpoints: true}).(*hyperBand)
	// Li et al. (2018), Table 1 with R = 27, η = 3: s_max = 3.
	want := []struct {
		s, size    int
		milestones []float64
	}{
		{3, 27, []float64{1, 3, 9, 27}},
		{2, 12, []float64{3, 9, 27}},
		{1, 6, []float64{9, 27}},
		{0, 4, []float64{27}},
		{3, 27, []float64{1, 3, 9, 27}},
	}
	for i, w := range want {
		b := s.newBracket()
		if b.S != w.s || b.Size != w.size || len(b.Milestones) != len(w.milestones) {
			t.Fatalf("bracket %d: got s=%d size=%d milestones %v, want s=%d size=%d %v", i, b.S, b.Size, b.Milestones, w.s, w.size, w.milestones)
		}
		for j, m := range w.milestones {
			if b.Milestones[j] != m {
				t.Errorf("bracket %d: milestones %v, want %v", i, b.Milestones, w.milestones)
			}
		}
	}
}

func TestHyperBandDecisions(t *testing.T) {
	// max_t 4, η 2: s_max = 2. Brackets: 4 trials at rungs 1, 2, 4; then 3
	// at 2, 4; then 3 at 4; then round again.
	s := mustNew(t, Config{Kind: "hyperband", MaxT: 4, GracePeriod: 1, ReductionFactor: 2}, Env{Metric: "loss", Checkpoints: true})
	play(t, s, []ev{
		add(1), add(2), add(3), add(4),
		res(1, 1, 0.4, Pause).at(1).why("waiting for 3 more"),
		res(2, 1, 0.2, Pause).at(1).why("waiting for 2 more"),
		res(3, 1, 0.3, Pause).at(1),
		next(true, true),
		// The last of the bracket completes the rung: the best 2 of 4 go on.
		res(4, 1, 0.5, Stop).at(1).cut(0.3).why("stopped at rung 1 (training_iteration ≥ 1) of bracket 1"),
		// Stops come first, and need no room.
		order(1, Stop, false, true).at(1).cut(0.3),
		next(false, true),
		order(2, Continue, true, true).at(1).cut(0.3).why("to rung 2"),
		order(3, Continue, true, true).at(1).cut(0.3),
		next(true, true),
		add(5), add(6), add(7),
		res(5, 1, 0.9, Continue), // bracket 2 starts at 2
		res(5, 2, 0.6, Pause).at(2).why("bracket 2"),
		res(2, 2, 0.15, Pause).at(2).why("waiting for 1 more"),
		res(3, 2, 0.1, Continue).at(2).cut(0.1).why("to max_t 4"),
		order(2, Stop, true, true).at(2).cut(0.1),
		res(3, 3, 0.08, Continue),
		res(3, 4, 0.05, Stop).at(4).why("reached max_t"),
		end(3),
		res(6, 2, 0.7, Pause).at(2),
		// Trial 7 fails before its rung: the rung is complete without it.
		end(7),
		order(6, Stop, true, true).at(2).cut(0.6),
		order(5, Continue, true, true).at(2).cut(0.6),
		add(8), add(9), add(10), // bracket 3: max_t only
		res(8, 3, 0.3, Continue),
		res(8, 4, 0.3, Stop).at(4),
		add(11), // bracket 4 starts the round again
		res(11, 1, 0.5, Pause).at(1).why("bracket 4 with loss 0.5: waiting for 3 more"),
		// No more trials: the bracket is halved with the one it has.
		order(11, Continue, true, false).at(1).cut(0.5),
		// Trial 11 jumps past the rung at 2; alone, it goes on at once.
		res(11, 3, 0.4, Continue).at(2).cut(0.4),
		res(11, 4, 0.3, Stop).at(4),
	})
}

func TestHyperBandBracketWhoseTrialsAllEnd(t *testing.T) {
	s := mustNew(t, Config{Kind: "hyperband", MaxT: 4, GracePeriod: 1, ReductionFactor: 2}, Env{Checkpoints: true})
	play(t, s, []ev{
		add(1), add(2), add(3), add(4),
		res(1, 1, 0.4, Pause).at(1),
		// The experiment ends: trial 1 ends paused, the others fail before
		// the rung. Nothing is left to halve.
		end(1), end(2), end(3), end(4),
		next(true, false),
	})
}

// TestHyperBandRerunOfAFailedTrial adds a trial that failed again, as the
// tuner does when WithRerunFailed runs it from its latest checkpoint: it
// rejoins its own bracket. A rung the bracket halved without it judges it
// when it gets there, by the cutoff the rung was halved with: it stops
// when it is worse, and otherwise goes on to the rung the bracket waits
// at, which it completes when it gets there or ends again.
func TestHyperBandRerunOfAFailedTrial(t *testing.T) {
	// max_t 4, η 2: the first bracket has 4 trials at rungs 1, 2, 4.
	halved := []ev{
		res(1, 1, 0.1, Pause).at(1),
		res(2, 1, 0.2, Pause).at(1),
		res(3, 1, 0.3, Stop).at(1).cut(0.2),
		order(1, Continue, true, true).at(1).cut(0.2),
		order(2, Continue, true, true).at(1).cut(0.2),
		res(1, 2, 0.05, Pause).at(2).why("waiting for 1 more"),
		add(4), // the rerun
		res(2, 2, 0.1, Pause).at(2).why("bracket 1 with loss 0.1: waiting for 1 more"),
	}
	// Trial 4 fails before rung 1, or at it while the others get there.
	beforeRung := append([]ev{add(1), add(2), add(3), add(4), end(4)}, halved...)
	atRung := append([]ev{add(1), add(2), add(3), add(4), res(4, 1, 0.5, Pause).at(1), end(4)}, halved...)
	const late = "rung 1 (training_iteration ≥ 1) of bracket 1, which was halved while the trial had failed"
	cases := []struct {
		name   string
		start  []ev
		events []ev
	}{
		{"it missed the cut", beforeRung, []ev{
			res(4, 1, 0.5, Stop).at(1).cut(0.2).why("stopped at " + late + ": loss 0.5 is higher than the cutoff 0.2"),
			// Rung 2 no longer waits for it.
			order(2, Stop, false, true).at(2).cut(0.05),
			order(1, Continue, true, true).at(2).cut(0.05),
			next(true, true),
		}},
		{"it missed the cut at its own rung", atRung, []ev{
			res(4, 1, 0.5, Stop).at(1).cut(0.2).why("stopped at " + late),
			order(2, Stop, false, true).at(2).cut(0.05),
			order(1, Continue, true, true).at(2).cut(0.05),
		}},
		{"it would have been kept and gets to the rung", beforeRung, []ev{
			res(4, 1, 0.15, Continue).at(1).cut(0.2).why("promoted at " + late + ": loss 0.15 would have been kept (cutoff 0.2)"),
			res(4, 2, 0.01, Continue).at(2).cut(0.01).why("rung 2 (training_iteration ≥ 2) of bracket 1 to max_t 4"),
			order(1, Stop, false, true).at(2).cut(0.01),
			order(2, Stop, false, true).at(2).cut(0.01),
			next(true, true),
		}},
		{"it would have been kept and fails again", beforeRung, []ev{
			res(4, 1, 0.15, Continue).at(1).cut(0.2),
			end(4),
			order(2, Stop, false, true).at(2).cut(0.05),
			order(1, Continue, true, true).at(2).cut(0.05),
			next(true, true),
		}},
		{"it is past both rungs at once", beforeRung, []ev{
			res(4, 2, 0.01, Continue).at(2).cut(0.01).why("to max_t 4"),
			order(1, Stop, false, true).at(2).cut(0.01),
			order(2, Stop, false, true).at(2).cut(0.01),
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := mustNew(t, Config{Kind: "hyperband", MaxT: 4, GracePeriod: 1, ReductionFactor: 2}, Env{Metric: "loss", Checkpoints: true})
			play(t, s, append(slices.Clip(c.start), c.events...))
		})
	}
}
