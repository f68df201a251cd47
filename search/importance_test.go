package search

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gotune/gotune/searchspace"
)

// TestImportance samples 300 random configurations of a function that
// depends strongly on x, less on lr and opt, and not at all on noise (its
// variance splits about 0.93, 0.06, 0.005 and 0 between them):
// PED-ANOVA ranks them so, gives noise a small share, and the shares add
// up to 1. A constant gets no entry; bad input is refused.
func TestImportance(t *testing.T) {
	space := mustSpace(t,
		searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: 0, High: 1}},
		searchspace.Param{Name: "lr", Domain: searchspace.LogUniform{Low: 1e-4, High: 1}},
		searchspace.Param{Name: "opt", Domain: searchspace.Choice{Values: []any{"sgd", "adam", "rmsprop"}}},
		searchspace.Param{Name: "noise", Domain: searchspace.Uniform{Low: 0, High: 1}},
		searchspace.Param{Name: "epochs", Domain: searchspace.Constant{Value: int64(3)}},
	)
	r := rand.New(rand.NewPCG(1, 2))
	var trials []ScoredConfig
	for range 300 {
		cfg := space.Sample(r)
		score := 10*math.Pow(cfg["x"].(float64)-0.3, 2) + 0.3*math.Pow(math.Log10(cfg["lr"].(float64))+2, 2)
		if cfg["opt"] != "adam" {
			score += 0.2
		}
		trials = append(trials, ScoredConfig{Config: cfg, Score: score})
	}
	got, err := Importance(space, trials, 0.1)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	sum := 0.0
	for _, p := range got {
		names = append(names, p.Name)
		sum += p.Importance
		if p.Trials != 300 {
			t.Errorf("%s judged on %d trials, want 300", p.Name, p.Trials)
		}
	}
	t.Logf("importance: %+v", got)
	if len(names) != 4 || names[0] != "x" || names[3] != "noise" {
		t.Errorf("ranking %v, want x first and noise last of 4", names)
	}
	if math.Abs(sum-1) > 1e-9 || got[3].Importance > 0.05 {
		t.Errorf("shares add up to %g, noise has %g: want 1 and under 0.05", sum, got[3].Importance)
	}
	if _, err := Importance(space, trials[:1], 0.1); err == nil {
		t.Error("one trial: no error")
	}
	if _, err := Importance(space, trials, 0); err == nil {
		t.Error("quantile 0: no error")
	}
}

func TestImportanceTop(t *testing.T) {
	for _, tt := range []struct {
		n        int
		quantile float64
		want     int
	}{
		{12, 0.1, 2}, // 1.2 rounds up
		{10, 0.1, 1},
		{8, 0.1, 1},
		{2, 0.01, 1}, // at least one
		{5, 1, 5},
	} {
		if got := ImportanceTop(tt.n, tt.quantile); got != tt.want {
			t.Errorf("ImportanceTop(%d, %g) = %d, want %d", tt.n, tt.quantile, got, tt.want)
		}
	}
}
