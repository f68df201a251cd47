package search

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/gotune/gotune/searchspace"
)

// finiteSpace has 4 × 4 × 3 = 48 configurations, of every discrete kind.
func finiteSpace(t testing.TB) *searchspace.Space {
	return mustSpace(t,
		searchspace.Param{Name: "a", Domain: searchspace.RandInt{Low: 0, High: 4}},
		searchspace.Param{Name: "b", Domain: searchspace.QUniform{Low: 0, High: 0.3, Q: 0.1}},
		searchspace.Param{Name: "c", Domain: searchspace.Choice{Values: []any{"x", "y", "z"}}},
		searchspace.Param{Name: "k", Domain: searchspace.Constant{Value: int64(7)}},
	)
}

// finiteScore is lowest at a = 3, b = 0.3, c = "y": TPE crowds there.
func finiteScore(cfg map[string]any) float64 {
	v := math.Pow(float64(cfg["a"].(int64))-3, 2) + math.Pow(cfg["b"].(float64)-0.3, 2)
	if cfg["c"] != "y" {
		v++
	}
	return v
}

// finiteSearchers builds each searcher that must not repeat in a finite
// space, with its options.
var finiteSearchers = map[string]func(space *searchspace.Space, seed int64, repeats bool) (Searcher, error){
	"random": func(space *searchspace.Space, seed int64, repeats bool) (Searcher, error) {
		if repeats {
			return NewRandomSearch(space, seed, RandomAllowRepeats()), nil
		}
		return NewRandomSearch(space, seed), nil
	},
	"tpe": func(space *searchspace.Space, seed int64, repeats bool) (Searcher, error) {
		if repeats {
			return NewTPE(space, seed, TPEAllowRepeats())
		}
		return NewTPE(space, seed)
	},
	"motpe": func(space *searchspace.Space, seed int64, repeats bool) (Searcher, error) {
		opts := []TPEOption{TPEObjectives([]Objective{{Metric: "f", Mode: "min"}, {Metric: "g", Mode: "min"}})}
		if repeats {
			opts = append(opts, TPEAllowRepeats())
		}
		return NewTPE(space, seed, opts...)
	},
	"nsga2": func(space *searchspace.Space, seed int64, repeats bool) (Searcher, error) {
		var opts []NSGA2Option
		if repeats {
			opts = append(opts, NSGA2AllowRepeats())
		}
		return NewNSGA2(space, seed, []Objective{{Metric: "f", Mode: "min"}}, nil, opts...)
	},
	// CMA-ES searches numeric spaces only: c is an integer of 3 values
	// here, which keeps 48 configurations.
	"cmaes": func(space *searchspace.Space, seed int64, repeats bool) (Searcher, error) {
		var params []searchspace.Param
		for _, p := range space.Params() {
			if p.Name == "c" {
				p.Domain = searchspace.RandInt{Low: 0, High: 3}
			}
			params = append(params, p)
		}
		numeric, err := searchspace.New(params...)
		if err != nil {
			return nil, err
		}
		var opts []CMAESOption
		if repeats {
			opts = append(opts, CMAESAllowRepeats())
		}
		return NewCMAES(numeric, seed, opts...)
	},
}

// end tells s that trial completed with cfg's finiteScore (and, for
// MOTPE, a second objective).
func end(s Searcher, trial int, cfg map[string]any) {
	f := finiteScore(cfg)
	obs := Observation{Step: 1, Score: f, Metrics: map[string]float64{"f": f, "g": float64(cfg["a"].(int64))}}
	s.OnResult(trial, obs)
	s.OnTrialEnd(trial, TrialEnd{Status: TrialCompleted, Last: &obs})
}

func configKey(cfg map[string]any) string { return fmt.Sprint(cfg) }

// TestNoRepeatsWithinABatch asks for batches of 8 configurations, none
// ending before the whole batch is suggested, after 12 finished trials:
// no configuration may come twice in a batch. TPE without its pending
// trials suggested the same configuration several times per batch.
func TestNoRepeatsWithinABatch(t *testing.T) {
	for name, build := range finiteSearchers {
		t.Run(name, func(t *testing.T) {
			s, err := build(finiteSpace(t), 5, false)
			if err != nil {
				t.Fatal(err)
			}
			drive(t, s, 12, finiteScore)
			trial := 12
			for batch := range 3 {
				seen := map[string]int{}
				var cfgs []map[string]any
				for range 8 {
					trial++
					cfg, err := s.Suggest(trial)
					if err != nil {
						t.Fatalf("suggest trial %d: %v", trial, err)
					}
					if first, dup := seen[configKey(cfg)]; dup {
						t.Errorf("batch %d: trial %d repeats trial %d's %v", batch, trial, first, cfg)
					}
					seen[configKey(cfg)] = trial
					cfgs = append(cfgs, cfg)
				}
				for i, cfg := range cfgs {
					end(s, trial-len(cfgs)+1+i, cfg)
				}
			}
		})
	}
}

// TestNoRepeatsAgainstHistory runs a finite space of 48 configurations
// one trial at a time: the first 48 trials must try each once, and the
// 49th suggestion must say the space is exhausted rather than repeat.
// With AllowRepeats the search goes on past 48, repeating.
func TestNoRepeatsAgainstHistory(t *testing.T) {
	for name, build := range finiteSearchers {
		t.Run(name, func(t *testing.T) {
			s, err := build(finiteSpace(t), 9, false)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]int{}
			for trial := 1; trial <= 48; trial++ {
				cfg, err := s.Suggest(trial)
				if err != nil {
					t.Fatalf("suggest trial %d of 48: %v", trial, err)
				}
				if first, dup := seen[configKey(cfg)]; dup {
					t.Fatalf("trial %d repeats trial %d's %v", trial, first, cfg)
				}
				seen[configKey(cfg)] = trial
				end(s, trial, cfg)
			}
			if cfg, err := s.Suggest(49); !errors.Is(err, ErrExhausted) {
				t.Fatalf("trial 49 of a 48-configuration space: got %v, %v, want ErrExhausted", cfg, err)
			}

			s, err = build(finiteSpace(t), 9, true)
			if err != nil {
				t.Fatal(err)
			}
			repeats := 0
			seen = map[string]int{}
			for trial := 1; trial <= 60; trial++ {
				cfg, err := s.Suggest(trial)
				if err != nil {
					t.Fatalf("with repeats allowed, suggest trial %d: %v", trial, err)
				}
				if _, dup := seen[configKey(cfg)]; dup {
					repeats++
				}
				seen[configKey(cfg)] = trial
				end(s, trial, cfg)
			}
			if repeats < 12 {
				t.Errorf("with repeats allowed, %d repeats in 60 trials of 48 configurations", repeats)
			}
		})
	}
}

// TestNoRepeatsAfterReplay resumes TPE in a finite space: the replayed
// trials, finished or still running, count as suggested.
func TestNoRepeatsAfterReplay(t *testing.T) {
	space := finiteSpace(t)
	first := mustTPE(t, space, 2)
	cfgs := drive(t, first, 40, finiteScore)
	resumed := mustTPE(t, space, 2)
	seen := map[string]bool{}
	for i, cfg := range cfgs {
		if err := resumed.Replay(i+1, cfg); err != nil {
			t.Fatal(err)
		}
		if i < 30 {
			end(resumed, i+1, cfg)
		}
		seen[configKey(cfg)] = true
	}
	for trial := 41; trial <= 48; trial++ {
		cfg, err := resumed.Suggest(trial)
		if err != nil {
			t.Fatalf("suggest trial %d: %v", trial, err)
		}
		if seen[configKey(cfg)] {
			t.Fatalf("trial %d repeats %v", trial, cfg)
		}
		seen[configKey(cfg)] = true
	}
}

// TestTPEPendingShapesSuggestions gives two TPE searchers the same
// history and seed; one also has trials running. Their next suggestions
// must differ, in the single-objective and the multi-objective (both
// turns) paths: the running trials count (as Optuna's constant liar).
// A TPE that ignores them suggests the same as one without them.
func TestTPEPendingShapesSuggestions(t *testing.T) {
	space := mustSpace(t,
		searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: -2, High: 2}},
		searchspace.Param{Name: "y", Domain: searchspace.Uniform{Low: -2, High: 2}})
	f := func(cfg map[string]any) float64 {
		return math.Pow(cfg["x"].(float64)-0.5, 2) + math.Pow(cfg["y"].(float64)+0.5, 2)
	}
	multi := TPEObjectives([]Objective{{Metric: "f", Mode: "min"}, {Metric: "g", Mode: "min"}})
	for _, tc := range []struct {
		name string
		opts []TPEOption
	}{
		{"single", nil},
		{"multi", []TPEOption{multi}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			build := func(opts ...TPEOption) *TPE {
				s := mustTPE(t, space, 4, append(append([]TPEOption(nil), tc.opts...), opts...)...)
				for trial := 1; trial <= 30; trial++ {
					cfg, err := s.Suggest(trial)
					if err != nil {
						t.Fatal(err)
					}
					v := f(cfg)
					obs := Observation{Step: 1, Score: v, Metrics: map[string]float64{"f": v, "g": cfg["y"].(float64)}}
					s.OnTrialEnd(trial, TrialEnd{Status: TrialCompleted, Last: &obs})
				}
				return s
			}
			idle, busy, ignoring := build(), build(), build(TPEIgnorePending())
			for trial := 31; trial <= 38; trial++ {
				// The same configurations run in busy and ignoring.
				cfg, err := busy.Suggest(trial)
				if err != nil {
					t.Fatal(err)
				}
				if err := ignoring.Replay(trial, cfg); err != nil {
					t.Fatal(err)
				}
			}
			for _, trial := range []int{39, 40} {
				a, _ := idle.Suggest(trial)
				b, _ := busy.Suggest(trial)
				c, _ := ignoring.Suggest(trial)
				if reflect.DeepEqual(a, b) {
					t.Errorf("trial %d: %v with 8 trials running, the same as with none", trial, b)
				}
				if !reflect.DeepEqual(a, c) {
					t.Errorf("trial %d: ignoring the running trials, %v, not %v as with none", trial, c, a)
				}
			}
		})
	}
}

// bowlTPE returns a TPE (seed 6) on x and y in domain after 30
// trials of the bowl (x−13)² + (y−6)² finished.
func bowlTPE(t *testing.T, domain searchspace.Domain) *TPE {
	t.Helper()
	space := mustSpace(t, searchspace.Param{Name: "x", Domain: domain}, searchspace.Param{Name: "y", Domain: domain})
	s := mustTPE(t, space, 6)
	num := func(v any) float64 {
		if k, ok := v.(int64); ok {
			return float64(k)
		}
		return v.(float64)
	}
	drive(t, s, 30, func(cfg map[string]any) float64 {
		return math.Pow(num(cfg["x"])-13, 2) + math.Pow(num(cfg["y"])-6, 2)
	})
	return s
}

// TestTPERunningTrialsInG fits g with 8 trials running after 30
// finished, in a finite space (21 × 21 integers) and in a continuous
// one. In both the running trials join g as its newest observations, so
// the finished ones weigh as the oldest 30 of 38 (tpeWeight); in the
// finite space, where their configurations are barred from later
// suggestions, the running trials weigh nothing, elsewhere as much as
// the newest finished ones (Optuna's constant liar).
func TestTPERunningTrialsInG(t *testing.T) {
	for _, tc := range []struct {
		name   string
		domain searchspace.Domain
		liar   bool
	}{
		{"finite", searchspace.RandInt{Low: 0, High: 21}, false},
		{"continuous", searchspace.Uniform{Low: 0, High: 21}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := bowlTPE(t, tc.domain)
			for trial := 31; trial <= 38; trial++ {
				if _, err := s.Suggest(trial); err != nil {
					t.Fatal(err)
				}
			}
			s.fit()
			good := tpeGamma(30)
			others := 30 - good
			m := others + 8
			w := make([]float64, len(s.g.logW))
			total := tpePriorWeight
			for k := range m {
				w[k] = tpeWeight(k, m)
				if k >= others && !tc.liar {
					w[k] = 0
				}
				total += w[k]
			}
			w[m] = tpePriorWeight
			if len(w) != m+1 {
				t.Fatalf("g has %d components, want %d", len(w), m+1)
			}
			for k, want := range w {
				if got := math.Exp(s.g.logW[k]); !closeTo(got, want/total, 1e-12) {
					t.Errorf("component %d of g weighs %v, want %v", k, got, want/total)
				}
			}
		})
	}
}

// TestTPERunningTrialsStayOutOfL fits l with trials running after 30
// finished: whether few or many run, in a finite space or a continuous
// one, l has the good trials (and its prior) alone, with the kernels it
// had before they started.
func TestTPERunningTrialsStayOutOfL(t *testing.T) {
	for _, tc := range []struct {
		name    string
		domain  searchspace.Domain
		running int
	}{
		{"finite, 2 running", searchspace.RandInt{Low: 0, High: 21}, 2},
		{"finite, 8 running", searchspace.RandInt{Low: 0, High: 21}, 8},
		{"continuous, 2 running", searchspace.Uniform{Low: 0, High: 21}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := bowlTPE(t, tc.domain)
			s.fit()
			idleSigmas := slices.Clone(s.l.dims[0].sigmas)
			for trial := 31; trial <= 30+tc.running; trial++ {
				if _, err := s.Suggest(trial); err != nil {
					t.Fatal(err)
				}
			}
			s.fit()
			if want := tpeGamma(30) + 1; len(s.l.logW) != want {
				t.Fatalf("l has %d components, want %d", len(s.l.logW), want)
			}
			if got := s.l.dims[0].sigmas; !slices.Equal(got, idleSigmas) {
				t.Errorf("l's kernels changed with trials running: %v, want %v", got, idleSigmas)
			}
		})
	}
}
