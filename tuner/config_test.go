package tuner

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/gotune/gotune/search"
	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
)

func TestValidateSearch(t *testing.T) {
	choice := searchspace.Param{Name: "act", Domain: searchspace.Choice{Values: []any{"relu", "tanh"}}}
	grid := searchspace.Param{Name: "batch", Domain: searchspace.Grid{Values: []any{int64(32), int64(64)}}}
	x := searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: -2, High: 2}}
	y := searchspace.Param{Name: "y", Domain: searchspace.Uniform{Low: -2, High: 2}}
	bigGrid := make([]any, 1001)
	for i := range bigGrid {
		bigGrid[i] = int64(i)
	}
	for _, tt := range []struct {
		name   string
		edit   func(c *Config)
		params []searchspace.Param
		key    string
		msg    string
	}{
		{"unknown algorithm", func(c *Config) { c.Search.Algorithm = "bayes" }, nil,
			"search.algorithm", `unknown algorithm "bayes" (have random, grid, tpe, cmaes, nsga2, bohb)`},
		{"grid without grid parameters", func(c *Config) { c.Search.Algorithm = "grid" }, []searchspace.Param{x},
			"search.algorithm", "needs at least one grid parameter"},
		{"cmaes with a choice", func(c *Config) { c.Search.Algorithm = "cmaes" }, []searchspace.Param{x, y, choice},
			"search.space.act", `cmaes searches numeric spaces only, and "act" is a choice`},
		{"cmaes in one dimension", func(c *Config) { c.Search.Algorithm = "cmaes" }, []searchspace.Param{x, grid},
			"search.algorithm", "at least two numeric parameters"},
		{"too many trials", func(c *Config) { c.Search.NumSamples = 1000 },
			[]searchspace.Param{x, {Name: "g", Domain: searchspace.Grid{Values: bigGrid}}},
			"search.num_samples", "1000 samples × 1001 grid cells is more than 1000000 trials"},
		{"negative max_concurrent", func(c *Config) { c.Search.MaxConcurrent = -1 }, nil,
			"search.max_concurrent", "must not be negative"},
		{"placeholder naming no parameter", func(c *Config) {
			c.Trainer.Command = []string{"python3", "train.py", "--lr={lr}", "--x={x}"}
		}, []searchspace.Param{x, choice},
			"trainer.command", `{lr} in argument 3 ("--lr={lr}") names no parameter of [search.space] (have act, x; write {{lr}} for a literal {lr})`},
		{"placeholder with an empty space", func(c *Config) {
			c.Search.Space = nil
			c.Trainer.Command = []string{"run", "{x}"}
		}, nil, "trainer.command", "the space has none"},
		{"workdir placeholder naming no parameter", func(c *Config) {
			c.Trainer.Command, c.Trainer.Workdir = []string{"run"}, "runs/{trial}"
		}, []searchspace.Param{x}, "trainer.workdir", "{trial} names no parameter of [search.space] (write {trial_dir}"},
		{"more points than trials", func(c *Config) {
			c.Search.PointsToEvaluate = []map[string]any{{"x": 0.1}, {"x": 0.2}, {"x": 0.3}, {"x": 0.4}, {"x": 0.5}}
		}, []searchspace.Param{x}, "search.points_to_evaluate", "5 points, but the sweep runs 4 trials"},
		{"a point naming no parameter", func(c *Config) {
			c.Search.PointsToEvaluate = []map[string]any{{"x": 0.1}, {"z": 1.0}}
		}, []searchspace.Param{x, y}, "search.points_to_evaluate[1].z", "names no parameter the search samples (have [x y])"},
		{"a point outside the domain", func(c *Config) {
			c.Search.PointsToEvaluate = []map[string]any{{"x": 0.1, "act": "gelu"}}
		}, []searchspace.Param{x, choice}, "search.points_to_evaluate[0].act", `"gelu" is not a value of { choice = ["relu", "tanh"] }`},
		{"a point setting a grid parameter", func(c *Config) {
			c.Search.PointsToEvaluate = []map[string]any{{"batch": int64(32)}}
		}, []searchspace.Param{x, grid}, "search.points_to_evaluate[0].batch", "batch is a grid parameter"},
		{"warm start from itself", func(c *Config) { c.Search.Algorithm, c.Search.WarmStart = "tpe", c.Name }, nil,
			"search.warm_start", "names this experiment itself"},
		{"warm start of random search", func(c *Config) { c.Search.WarmStart = "earlier" }, nil,
			"search.warm_start", `algorithm "random" does not learn from other trials' results`},
		{"warm start from a path", func(c *Config) { c.Search.Algorithm, c.Search.WarmStart = "tpe", "a/b" }, nil,
			"search.warm_start", "not a path"},
		{"condition naming no parameter", func(c *Config) {
			// Added one by one, since New checks the conditions itself.
			c.Search.Space = &searchspace.Space{}
			c.Search.Space.Add("x", searchspace.Uniform{Low: 0, High: 1})
			c.Search.Space.AddParam(searchspace.Param{Name: "m", Domain: searchspace.Uniform{Low: 0, High: 1},
				When: &searchspace.Condition{Param: "opt", Op: "==", Values: []any{"sgd"}}})
		}, nil, "search.space.m.when", "opt names no parameter of the space"},
		{"a point with an absent conditional parameter", func(c *Config) {
			c.Search.PointsToEvaluate = []map[string]any{{"act": "relu", "m": 0.5}}
		}, []searchspace.Param{x, choice,
			{Name: "m", Domain: searchspace.Uniform{Low: 0, High: 1}, When: &searchspace.Condition{Param: "act", Op: "==", Values: []any{"tanh"}}}},
			"search.points_to_evaluate[0].m", "m is absent from this point, since its condition act == 'tanh' does not hold"},
		{"a parameter named trial_dir", func(c *Config) {
			c.Trainer.Command = []string{"run", "{trial_dir}"}
		}, []searchspace.Param{x, {Name: "trial_dir", Domain: searchspace.Choice{Values: []any{"a"}}}},
			"search.space.trial_dir", "the name is taken"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t, 4)
			if tt.params != nil {
				cfg.Search.Space = mustSpace(t, tt.params...)
			}
			tt.edit(&cfg)
			err := cfg.Validate()
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Key != tt.key || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("got %v, want a ConfigError on %s containing %q", err, tt.key, tt.msg)
			}
		})
	}
}

func TestValidateAcceptsCommandPlaceholders(t *testing.T) {
	cfg := testConfig(t, 2)
	cfg.Search.Space = mustSpace(t,
		searchspace.Param{Name: "lr", Domain: searchspace.LogUniform{Low: 1e-4, High: 1e-1}},
		searchspace.Param{Name: "opt", Domain: searchspace.Choice{Values: []any{"sgd", "adam"}}},
		searchspace.Param{Name: "batch-size", Domain: searchspace.Grid{Values: []any{int64(32)}}},
	)
	// A JSON argument is not a placeholder.
	cfg.Trainer.Command = []string{"python3", "train.py", "--lr={lr}", "--opt={opt}", "{batch-size}", `{"log": true}`, "--out={trial_dir}/x"}
	cfg.Trainer.Workdir = "{trial_dir}/{opt}"
	if err := cfg.Validate(); err != nil {
		t.Error(err)
	}
}

// mustFit runs cfg with the quadratic training function and opts.
func mustFit(t *testing.T, cfg Config, opts ...Option) *Result {
	t.Helper()
	tu, err := New(cfg, append([]Option{WithTrainFunc(quadratic)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	res, err := tu.Fit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// fitParams runs cfg and returns each trial's configuration, in trial order.
func fitParams(t *testing.T, cfg Config) []map[string]any {
	var out []map[string]any
	for _, tr := range mustFit(t, cfg).Trials {
		out = append(out, tr.Params)
	}
	return out
}

func TestSearchSeedOverridesExperimentSeed(t *testing.T) {
	seed := int64(1)
	a := testConfig(t, 3)
	a.Seed = 99
	a.Search.Seed = &seed
	b := testConfig(t, 3) // experiment seed 1, no search seed
	pa, pb := fitParams(t, a), fitParams(t, b)
	for i := range pa {
		if pa[i]["x"] != pb[i]["x"] {
			t.Errorf("trial %d: x %v with search seed 1, %v with experiment seed 1", i+1, pa[i]["x"], pb[i]["x"])
		}
	}
}

func TestFitGridTimesSamples(t *testing.T) {
	cfg := testConfig(t, 3)
	cfg.Search.Algorithm = "grid"
	cfg.Search.Space = mustSpace(t,
		searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: -2, High: 2}},
		searchspace.Param{Name: "opt", Domain: searchspace.Grid{Values: []any{"sgd", "adam"}}},
		searchspace.Param{Name: "steps", Domain: searchspace.Grid{Values: []any{int64(1), int64(2)}}},
	)
	res := mustFit(t, cfg)
	if len(res.Trials) != 12 {
		t.Fatalf("got %d trials, want 3 samples × 4 cells", len(res.Trials))
	}
	cells := map[string]int{}
	for _, tr := range res.Trials {
		cells[tr.Params["opt"].(string)+"/"+searchspace.FormatValue(tr.Params["steps"])]++
	}
	for cell, n := range cells {
		if n != 3 {
			t.Errorf("cell %s ran %d times, want 3", cell, n)
		}
	}
	if len(cells) != 4 {
		t.Errorf("cells run: %v, want 4", cells)
	}
}

func TestFitModelBasedSearchers(t *testing.T) {
	for _, alg := range []string{"tpe", "cmaes"} {
		t.Run(alg, func(t *testing.T) {
			cfg := testConfig(t, 16)
			cfg.Search.Algorithm = alg
			cfg.Search.MaxConcurrent = 2
			cfg.Search.Space = mustSpace(t,
				searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: -2, High: 2}},
				searchspace.Param{Name: "y", Domain: searchspace.QUniform{Low: 0, High: 1, Q: 0.25}},
				searchspace.Param{Name: "steps", Domain: searchspace.Grid{Values: []any{int64(2), int64(3)}}},
			)
			res := mustFit(t, cfg)
			if len(res.Trials) != 32 {
				t.Errorf("got %d trials, want 16 samples × 2 cells", len(res.Trials))
			}
			for _, tr := range res.Trials {
				if tr.Status != storage.TrialTerminated {
					t.Errorf("trial %d: %s %s", tr.Number, tr.Status, tr.Error)
				}
			}
		})
	}
}

func TestFitMaxConcurrent(t *testing.T) {
	cfg := testConfig(t, 8)
	cfg.Search.MaxConcurrent = 2
	cfg.Trainer.Scaling.NumWorkers = 1
	var mu sync.Mutex
	running, peak := 0, 0
	train := func(ctx context.Context, w *trainer.Worker) error {
		mu.Lock()
		running++
		peak = max(peak, running)
		mu.Unlock()
		defer func() {
			mu.Lock()
			running--
			mu.Unlock()
		}()
		return quadratic(ctx, w)
	}
	tu, err := New(cfg, WithTrainFunc(train))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tu.Fit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if peak > 2 {
		t.Errorf("%d trials ran at once, want at most max_concurrent 2", peak)
	}
}

// scripted is a searcher whose Suggest answers come from a function; it
// learns nothing.
type scripted struct {
	suggest func(trial int) error
}

func (s *scripted) OnResult(int, search.Observation) {}
func (s *scripted) OnTrialEnd(int, search.TrialEnd)  {}

func (s *scripted) Suggest(trial int) (map[string]any, error) {
	if err := s.suggest(trial); err != nil {
		return nil, err
	}
	return map[string]any{"x": 1.0, "steps": int64(2)}, nil
}

func TestFitSearcherControl(t *testing.T) {
	boom := errors.New("boom")
	for _, tt := range []struct {
		name    string
		suggest func(trial int) error
		trials  int
		err     string
	}{
		{"exhausted ends the experiment early", func(trial int) error {
			if trial > 2 {
				return search.ErrExhausted
			}
			return nil
		}, 2, ""},
		{"wait with nothing running fails", func(trial int) error {
			if trial > 1 {
				return search.ErrWait
			}
			return nil
		}, 1, "ErrWait with no trial running"},
		{"other errors abort", func(trial int) error {
			if trial == 2 {
				return boom
			}
			return nil
		}, 1, "searcher: suggest trial 2: boom"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t, 5)
			cfg.Search.MaxConcurrent = 1
			tu, err := New(cfg, WithTrainFunc(quadratic), WithSearcher(&scripted{suggest: tt.suggest}))
			if err != nil {
				t.Fatal(err)
			}
			res, err := tu.Fit(context.Background())
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Errorf("got error %v, want %q", err, tt.err)
			}
			if res == nil || len(res.Trials) != tt.trials {
				t.Errorf("got %v, want %d trials", res, tt.trials)
			}
		})
	}
}
