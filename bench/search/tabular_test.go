package main

import (
	"math"
	"testing"
)

func TestWinShare(t *testing.T) {
	for _, tt := range []struct {
		name string
		a, b []float64
		want float64
	}{
		{"always ahead", []float64{0, 1}, []float64{2, 3}, 1},
		{"always behind", []float64{2, 3}, []float64{0, 1}, 0},
		{"all tied", []float64{1, 1}, []float64{1}, 0.5},
		// Pairs (0,0) tie, (0,2) win, (3,0) loss, (3,2) loss.
		{"mixed", []float64{0, 3}, []float64{0, 2}, 0.375},
	} {
		if got := winShare(tt.a, tt.b); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("%s: winShare(%v, %v) = %v, want %v", tt.name, tt.a, tt.b, got, tt.want)
		}
	}
}

func TestRegretsAtAnExhaustedRun(t *testing.T) {
	runs := []tabularRun{{regret: []float64{3, 2, 1}}, {regret: []float64{5, 4}}}
	got := regretsAt(runs, 3)
	if got[0] != 1 || got[1] != 4 {
		t.Errorf("regretsAt(…, 3) = %v, want [1 4]: a run that ended sooner keeps its last regret", got)
	}
}

func TestBehindOwnK1(t *testing.T) {
	tables := []table{{Name: "a"}, {Name: "b"}}
	runs := map[string][]tabularRun{
		// On a, the runs at once have median 2 against 1 one at a time:
		// behind, and ahead in none of the 4 pairs (one tie at 1).
		"s/a/sync8": {{regret: []float64{2}}, {regret: []float64{1}}, {regret: []float64{3}}},
		"s/a/k1":    {{regret: []float64{1}}},
		// On b, median 0 against 1: not behind, ahead in every pair.
		"s/b/sync8": {{regret: []float64{0}}},
		"s/b/k1":    {{regret: []float64{1}}, {regret: []float64{1}}},
	}
	behind, share := behindOwnK1(runs, "s", tables, pendingSetting{k: 8}, 1)
	if len(behind) != 1 || behind[0] != "a" {
		t.Errorf("behind = %v, want [a]", behind)
	}
	// a: 0.5/3 of its pairs (the tie); b: all of them; averaged.
	if want := (0.5/3 + 1) / 2; math.Abs(share-want) > 1e-12 {
		t.Errorf("share = %v, want %v", share, want)
	}
}

func TestK1EquivalentTrials(t *testing.T) {
	tables := []table{{Name: "reached"}, {Name: "never"}, {Name: "first"}}
	runs := map[string][]tabularRun{
		// One at a time, the median regret is 4, 3, 2, 2, 0 after 1–5
		// trials; 8 at once reach a median of 2 after 5: as one at a
		// time after 3.
		"s/reached/k1":    {{regret: []float64{4, 3, 2, 2, 0}}, {regret: []float64{4, 3, 2, 1, 0}}, {regret: []float64{5, 4, 3, 2, 0}}},
		"s/reached/sync8": {{regret: []float64{9, 9, 9, 9, 2}}},
		// Below anything one at a time reaches.
		"s/never/k1":    {{regret: []float64{3, 2, 1}}},
		"s/never/sync8": {{regret: []float64{2, 1, 0}}},
		// Level with one at a time's first trial.
		"s/first/k1":    {{regret: []float64{1, 0}}},
		"s/first/sync8": {{regret: []float64{1, 1}}},
	}
	got := k1EquivalentTrials(runs, "s", tables, pendingSetting{k: 8}, 5)
	want := map[string]int{"reached": 3, "never": -1, "first": 1}
	for name, n := range want {
		if got[name] != n {
			t.Errorf("%s: %d trials one at a time, want %d (all: %v)", name, got[name], n, got)
		}
	}
}
