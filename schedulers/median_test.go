package schedulers

import "testing"

func TestMedianRule(t *testing.T) {
	s := mustNew(t, Config{Kind: "median", GracePeriod: 2, MinSamplesRequired: 2}, Env{Metric: "loss"})
	var events []ev
	// Trials 1 and 2 run to time 4. Running averages from the grace period
	// on, at 2: 0.8 and 1.0; at 3: 0.7 and 0.75.
	for i, x := range []float64{1.0, 0.8, 0.6, 0.4} {
		events = append(events, res(1, float64(i+1), x, Continue))
	}
	for i, x := range []float64{2.0, 1.0, 0.5, 0.3} {
		events = append(events, res(2, float64(i+1), x, Continue))
	}
	events = append(events,
		res(3, 1, 3.0, Continue), // within the grace period
		res(3, 2, 1.4, Stop).at(2).cut(0.9).why("best loss 1.4 is higher than 0.9, the median of 2 other trials"),
		// A tie with the median (of 0.8, 1.0 and 1.4) goes on.
		res(4, 2, 1.0, Continue),
		// At 3, trial 3 (last seen at 2) no longer counts: the median of
		// 0.7 and 0.75 is 0.725.
		res(4, 3, 0.7, Continue),
		// Now trial 4 counts too, with (1.0+0.7)/2 = 0.85.
		res(5, 3, 1.1, Stop).at(3).cut(0.75).why("median of 3 other trials"),
		// Too few others have reached 5.
		res(6, 5, 9, Continue),
		// Trial 4 went back to a checkpoint at 2: its later history is
		// dropped, and its best is now 5. At 2 the others are trials 1, 2
		// and 3 (averages 0.8, 1.0, 1.4); 5 and 6 reported nothing from 2
		// to 2.
		res(4, 2, 5, Stop).at(2).cut(1.0).why("median of 3 other trials"),
	)
	play(t, s, events)
}

func TestMedianRuleMax(t *testing.T) {
	s := mustNew(t, Config{Kind: "median", GracePeriod: 1, MinSamplesRequired: 1}, Env{Metric: "acc", Mode: "max"})
	play(t, s, []ev{
		res(1, 1, -0.8, Continue),
		res(2, 1, -0.7, Stop).at(1).cut(0.8).why("best acc 0.7 is lower than 0.8"),
	})
}
