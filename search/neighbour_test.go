package search

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/gotune/gotune/searchspace"
)

func TestTPEParamNeighbours(t *testing.T) {
	for _, tt := range []struct {
		name   string
		domain searchspace.Domain
		x      float64
		want   []float64
	}{
		{"randint, lowest", searchspace.RandInt{Low: 0, High: 5}, 0, []float64{1}},
		{"randint, inside", searchspace.RandInt{Low: 0, High: 5}, 2, []float64{1, 3}},
		{"randint, highest", searchspace.RandInt{Low: 0, High: 5}, 4, []float64{3}},
		{"randint of 64 values", searchspace.RandInt{Low: 0, High: 64}, 10, []float64{9, 11}},
		{"randint of 65 values", searchspace.RandInt{Low: 0, High: 65}, 10, nil},
		{"quniform", searchspace.QUniform{Low: 0, High: 1, Q: 0.25}, 0.5, []float64{0.25, 0.75}},
		{"choice", searchspace.Choice{Values: []any{"a", "b", "c"}}, 1, []float64{0, 2}},
		{"uniform", searchspace.Uniform{Low: 0, High: 1}, 0.5, nil},
		{"lograndint", searchspace.LogRandInt{Low: 1, High: 100}, 2, nil},
	} {
		p, err := newTPEParam(searchspace.Param{Name: "p", Domain: tt.domain})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.neighbours(tt.x); !slices.Equal(got, tt.want) {
			t.Errorf("%s: neighbours(%v) = %v, want %v", tt.name, tt.x, got, tt.want)
		}
	}
}

// fixedSource makes a rand.Rand whose Float64 is always its value over
// 2⁵³ (math/rand/v2 takes the low 53 bits).
type fixedSource uint64

func (s fixedSource) Uint64() uint64 { return uint64(s) }

// A trial that draws the neighbour move gets an untried neighbour of
// the best trial; one that does not, BOHB, and a best trial whose
// neighbours were all tried keep the draw.
func TestTPESuggestNeighbour(t *testing.T) {
	space, err := searchspace.New(
		searchspace.Param{Name: "a", Domain: searchspace.RandInt{Low: 0, High: 10}},
		searchspace.Param{Name: "b", Domain: searchspace.Choice{Values: []any{"x", "y", "z"}}},
	)
	if err != nil {
		t.Fatal(err)
	}
	score := func(cfg map[string]any) float64 {
		d := float64(cfg["a"].(int64) - 6)
		if cfg["b"] != "y" {
			d += 3
		}
		return d * d
	}
	// history gives a TPE its startup trials and returns the best one.
	history := func(opts ...TPEOption) (*TPE, map[string]any) {
		s, err := NewTPE(space, 5, opts...)
		if err != nil {
			t.Fatal(err)
		}
		var best map[string]any
		for _, cfg := range drive(t, s, TPEStartupTrials, score) {
			if best == nil || score(cfg) < score(best) {
				best = cfg
			}
		}
		return s, best
	}
	neighbourOf := func(cfg, best map[string]any) bool {
		da := cfg["a"].(int64) - best["a"].(int64)
		return cfg["b"] == best["b"] && (da == 1 || da == -1) || da == 0 && cfg["b"] != best["b"]
	}
	// draw fits TPE and returns its own draw for trial 11 and what
	// suggestNeighbour makes of it with r.
	draw := func(s *TPE, r *rand.Rand) (drawn, got map[string]any) {
		cfg, xs := map[string]any{}, make([]float64, 2)
		s.suggestJoint(rand.New(fixedSource(7)), cfg, xs)
		drawn = maps(cfg)
		s.suggestNeighbour(r, cfg, xs)
		return drawn, cfg
	}
	move, stay := rand.New(fixedSource(0)), rand.New(fixedSource(1<<52))

	s, best := history()
	if _, got := draw(s, move); !neighbourOf(got, best) || s.suggested.has(got) {
		t.Errorf("with the move drawn: %v, want an untried neighbour of the best trial %v", got, best)
	}
	if drawn, got := draw(s, stay); !reflect.DeepEqual(drawn, got) {
		t.Errorf("without the move drawn: %v, want TPE's own draw %v", got, drawn)
	}
	// Every neighbour of the best trial tried: the draw stands.
	for _, v := range []float64{-1, 1} {
		s.suggested.add(map[string]any{"a": best["a"].(int64) + int64(v), "b": best["b"]})
	}
	for _, b := range []any{"x", "y", "z"} {
		s.suggested.add(map[string]any{"a": best["a"], "b": b})
	}
	if drawn, got := draw(s, move); !reflect.DeepEqual(drawn, got) {
		t.Errorf("every neighbour tried: %v, want TPE's own draw %v", got, drawn)
	}
	bohb, _ := history(tpeWidenDraws(bohbBandwidthFactor))
	if drawn, got := draw(bohb, move); !reflect.DeepEqual(drawn, got) {
		t.Errorf("BOHB's TPE: %v, want its own draw %v", got, drawn)
	}
}

// On 4-D Rosenbrock over 9 levels of each parameter in [−2, 2] (6,561
// cells), run one trial at a time, TPE reaches the optimum (every
// parameter at 1) within 100 trials on 5 of 10 seeds by searching around
// its best trial; with its draws from l alone it reached it on none.
func TestTPEReachesAGridsOptimum(t *testing.T) {
	var params []searchspace.Param
	for _, name := range []string{"a", "b", "c", "d"} {
		params = append(params, searchspace.Param{Name: name, Domain: searchspace.RandInt{Low: 0, High: 9}})
	}
	space, err := searchspace.New(params...)
	if err != nil {
		t.Fatal(err)
	}
	score := func(cfg map[string]any) float64 {
		var x []float64
		for _, p := range params {
			x = append(x, -2+float64(cfg[p.Name].(int64))/2)
		}
		f := 0.0
		for i := range len(x) - 1 {
			f += 100*(x[i+1]-x[i]*x[i])*(x[i+1]-x[i]*x[i]) + (1-x[i])*(1-x[i])
		}
		return f
	}
	reached := 0
	const seeds = 10
	for seed := range int64(seeds) {
		s, err := NewTPE(space, seed)
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(drive(t, s, 100, score), func(cfg map[string]any) bool { return score(cfg) == 0 }) {
			reached++
		}
	}
	if reached < 3 {
		t.Errorf("%d of %d seeds reached the optimum within 100 trials, want at least 3", reached, seeds)
	}
}

// A TPE resumed from a finite space's recorded trials goes on with the
// suggestions, neighbour moves included, that the uninterrupted one made.
func TestTPEResumesItsNeighbourMoves(t *testing.T) {
	space, err := searchspace.New(
		searchspace.Param{Name: "a", Domain: searchspace.RandInt{Low: 0, High: 12}},
		searchspace.Param{Name: "b", Domain: searchspace.RandInt{Low: 0, High: 12}},
		searchspace.Param{Name: "c", Domain: searchspace.Choice{Values: []any{"x", "y", "z"}}},
	)
	if err != nil {
		t.Fatal(err)
	}
	score := func(cfg map[string]any) float64 {
		a, b := float64(cfg["a"].(int64))-8, float64(cfg["b"].(int64))-3
		if cfg["c"] != "z" {
			a += 2
		}
		return a*a + b*b
	}
	live, err := NewTPE(space, 9)
	if err != nil {
		t.Fatal(err)
	}
	want := drive(t, live, 60, score)
	resumed, err := NewTPE(space, 9)
	if err != nil {
		t.Fatal(err)
	}
	for i, cfg := range want[:30] {
		if err := resumed.Replay(i+1, cfg); err != nil {
			t.Fatal(err)
		}
		resumed.OnTrialEnd(i+1, TrialEnd{Status: TrialCompleted, Last: &Observation{Step: 1, Score: score(cfg)}})
	}
	for trial := 31; trial <= 60; trial++ {
		cfg, err := resumed.Suggest(trial)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(cfg, want[trial-1]) {
			t.Fatalf("resumed at trial 31, trial %d is %v, want %v", trial, cfg, want[trial-1])
		}
		resumed.OnTrialEnd(trial, TrialEnd{Status: TrialCompleted, Last: &Observation{Step: 1, Score: score(cfg)}})
	}
}
