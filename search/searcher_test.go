package search

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/c-bata/goptuna"

	"github.com/gotune/gotune/searchspace"
)

func mustSpace(t testing.TB, params ...searchspace.Param) *searchspace.Space {
	t.Helper()
	s, err := searchspace.New(params...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// mixedSpace has one parameter of every domain a model-based searcher handles.
func mixedSpace(t testing.TB) *searchspace.Space {
	return mustSpace(t,
		searchspace.Param{Name: "lr", Domain: searchspace.LogUniform{Low: 1e-4, High: 1e-1}},
		searchspace.Param{Name: "dropout", Domain: searchspace.Uniform{Low: 0, High: 0.5}},
		searchspace.Param{Name: "momentum", Domain: searchspace.QUniform{Low: 0.5, High: 0.99, Q: 0.01}},
		searchspace.Param{Name: "wd", Domain: searchspace.QLogUniform{Low: 1e-5, High: 1e-2, Q: 1e-5}},
		searchspace.Param{Name: "layers", Domain: searchspace.RandInt{Low: 1, High: 4}},
		searchspace.Param{Name: "width", Domain: searchspace.LogRandInt{Low: 16, High: 1024}},
		searchspace.Param{Name: "act", Domain: searchspace.Choice{Values: []any{"relu", "tanh", "gelu"}}},
		searchspace.Param{Name: "epochs", Domain: searchspace.Constant{Value: int64(9)}},
	)
}

// inDomain reports why v is not a value of d, or "".
func inDomain(d searchspace.Domain, v any) string {
	switch d := d.(type) {
	case searchspace.Uniform:
		if x, ok := v.(float64); !ok || x < d.Low || x >= d.High {
			return "outside the range"
		}
	case searchspace.LogUniform:
		if x, ok := v.(float64); !ok || x < d.Low || x >= d.High {
			return "outside the range"
		}
	case searchspace.QUniform:
		x, ok := v.(float64)
		k := math.Round((x - d.Low) / d.Q)
		if !ok || k < 0 || k > float64(d.Steps()) || x != d.Value(int(k)) {
			return "not on the grid of steps"
		}
	case searchspace.QLogUniform:
		if x, ok := v.(float64); !ok || x != d.Round(x) || x < d.Low || x > d.High {
			return "not on the grid of steps"
		}
	case searchspace.RandInt:
		if x, ok := v.(int64); !ok || x < d.Low || x >= d.High {
			return "outside the integer range"
		}
	case searchspace.LogRandInt:
		if x, ok := v.(int64); !ok || x < d.Low || x >= d.High {
			return "outside the integer range"
		}
	case searchspace.Choice:
		if !slices.Contains(d.Values, v) {
			return "not a choice"
		}
	case searchspace.Grid:
		if !slices.Contains(d.Values, v) {
			return "not a grid value"
		}
	case searchspace.Constant:
		if v != d.Value {
			return "not the constant"
		}
	}
	return ""
}

// drive runs n trials one at a time, scoring each configuration with f,
// and returns the configurations in order.
func drive(t testing.TB, s Searcher, n int, f func(map[string]any) float64) []map[string]any {
	t.Helper()
	var cfgs []map[string]any
	for trial := 1; trial <= n; trial++ {
		cfg, err := s.Suggest(trial)
		if err != nil {
			t.Fatalf("suggest trial %d: %v", trial, err)
		}
		obs := Observation{Step: 1, Score: f(cfg)}
		s.OnResult(trial, obs)
		s.OnTrialEnd(trial, TrialEnd{Status: TrialCompleted, Last: &obs})
		cfgs = append(cfgs, cfg)
	}
	return cfgs
}

func checkConfigs(t *testing.T, space *searchspace.Space, cfgs []map[string]any) {
	t.Helper()
	for i, cfg := range cfgs {
		if len(cfg) != space.Len() {
			t.Fatalf("trial %d: %d values for %d parameters: %v", i+1, len(cfg), space.Len(), cfg)
		}
		for _, p := range space.Params() {
			if why := inDomain(p.Domain, cfg[p.Name]); why != "" {
				t.Fatalf("trial %d: %s = %v (%T) is %s %s", i+1, p.Name, cfg[p.Name], cfg[p.Name], why, p.Domain)
			}
		}
	}
}

// score is a smooth function of the mixed space, lowest at lr 0.01,
// dropout 0.2 and act "tanh".
func score(cfg map[string]any) float64 {
	v := math.Pow(math.Log10(cfg["lr"].(float64))+2, 2) + math.Pow(cfg["dropout"].(float64)-0.2, 2)
	if cfg["act"] != "tanh" {
		v += 0.5
	}
	return v
}

func TestRandomSearchRepeats(t *testing.T) {
	space := mixedSpace(t)
	a := drive(t, NewRandomSearch(space, 3), 20, score)
	b := drive(t, NewRandomSearch(space, 3), 20, score)
	c := drive(t, NewRandomSearch(space, 4), 20, score)
	if !reflect.DeepEqual(a, b) {
		t.Error("same seed, different sequences")
	}
	if reflect.DeepEqual(a, c) {
		t.Error("seeds 3 and 4 gave the same sequence")
	}
	checkConfigs(t, space, a)
}

func TestModelBasedSearchersStayInDomain(t *testing.T) {
	space := mixedSpace(t)
	tpe := mustTPE(t, space, 1)
	checkConfigs(t, space, drive(t, tpe, 40, score))

	numeric := mustSpace(t,
		searchspace.Param{Name: "lr", Domain: searchspace.LogUniform{Low: 1e-4, High: 1e-1}},
		searchspace.Param{Name: "momentum", Domain: searchspace.QUniform{Low: 0.5, High: 0.99, Q: 0.01}},
		searchspace.Param{Name: "wd", Domain: searchspace.QLogUniform{Low: 1e-5, High: 1e-2, Q: 1e-5}},
		searchspace.Param{Name: "layers", Domain: searchspace.RandInt{Low: 1, High: 4}},
		searchspace.Param{Name: "width", Domain: searchspace.LogRandInt{Low: 16, High: 1024}},
		searchspace.Param{Name: "epochs", Domain: searchspace.Constant{Value: int64(9)}},
	)
	cma, err := NewCMAES(numeric, 1)
	if err != nil {
		t.Fatal(err)
	}
	checkConfigs(t, numeric, drive(t, cma, 40, func(cfg map[string]any) float64 {
		return math.Pow(math.Log10(cfg["lr"].(float64))+2, 2) + float64(cfg["layers"].(int64))
	}))
}

func TestCMAESRefusesNonNumericSpaces(t *testing.T) {
	for _, tt := range []struct {
		name   string
		params []searchspace.Param
		key    string
		msg    string
	}{
		{"choice", []searchspace.Param{
			{Name: "lr", Domain: searchspace.LogUniform{Low: 1e-4, High: 1e-1}},
			{Name: "act", Domain: searchspace.Choice{Values: []any{"relu", "tanh"}}},
			{Name: "x", Domain: searchspace.Uniform{Low: 0, High: 1}},
		}, "search.space.act", `"act" is a choice`},
		{"numeric choice", []searchspace.Param{
			{Name: "hidden", Domain: searchspace.Choice{Values: []any{int64(32), int64(64)}}},
			{Name: "x", Domain: searchspace.Uniform{Low: 0, High: 1}},
		}, "search.space.hidden", `"hidden" is a choice`},
		{"grid", []searchspace.Param{
			{Name: "batch", Domain: searchspace.Grid{Values: []any{int64(32), int64(64)}}},
			{Name: "x", Domain: searchspace.Uniform{Low: 0, High: 1}},
			{Name: "y", Domain: searchspace.Uniform{Low: 0, High: 1}},
		}, "search.space.batch", `"batch" is a grid`},
		{"one dimension", []searchspace.Param{
			{Name: "x", Domain: searchspace.Uniform{Low: 0, High: 1}},
			{Name: "epochs", Domain: searchspace.Constant{Value: int64(3)}},
		}, "search.algorithm", "at least two numeric parameters"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewCMAES(mustSpace(t, tt.params...), 1)
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Key != tt.key || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("got %v, want a ConfigError on %s mentioning %q", err, tt.key, tt.msg)
			}
		})
	}
}

// custom is a Domain the model-based searchers cannot model.
type custom struct{ searchspace.Uniform }

func TestModelBasedSearchersRefuseCustomDomains(t *testing.T) {
	space := mustSpace(t,
		searchspace.Param{Name: "a", Domain: custom{searchspace.Uniform{Low: 0, High: 1}}},
		searchspace.Param{Name: "b", Domain: searchspace.Uniform{Low: 0, High: 1}},
		searchspace.Param{Name: "c", Domain: searchspace.Uniform{Low: 0, High: 1}},
	)
	for name, build := range map[string]func() (Searcher, error){
		"tpe":   func() (Searcher, error) { return NewTPE(space, 1) },
		"cmaes": func() (Searcher, error) { return NewCMAES(space, 1) },
	} {
		_, err := build()
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Key != "search.space.a" || !strings.Contains(err.Error(), "cannot model") {
			t.Errorf("%s: got %v, want a ConfigError on search.space.a", name, err)
		}
	}
}

func TestCMAESRepeatsAndConverges(t *testing.T) {
	space := mustSpace(t,
		searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: -5, High: 5}},
		searchspace.Param{Name: "y", Domain: searchspace.Uniform{Low: -5, High: 5}},
		searchspace.Param{Name: "n", Domain: searchspace.RandInt{Low: 0, High: 10}},
	)
	f := func(cfg map[string]any) float64 {
		x, y, n := cfg["x"].(float64), cfg["y"].(float64), float64(cfg["n"].(int64))
		return (x-1)*(x-1) + (y+2)*(y+2) + (n-3)*(n-3)
	}
	run := func(seed int64) []map[string]any {
		s, err := NewCMAES(space, seed)
		if err != nil {
			t.Fatal(err)
		}
		return drive(t, s, 120, f)
	}
	a, b := run(5), run(5)
	if !reflect.DeepEqual(a, b) {
		t.Error("CMA-ES with the same seed and the same results gave different configurations")
	}
	best := math.Inf(1)
	for _, cfg := range a {
		best = min(best, f(cfg))
	}
	if best > 0.1 {
		t.Errorf("best of 120 CMA-ES trials on a quadratic: %.3f, want below 0.1", best)
	}
}

// TestCMAESCountsStoppedTrials checks that a generation fills with trials
// the scheduler stopped, so that CMA-ES moves on when most trials stop.
func TestCMAESCountsStoppedTrials(t *testing.T) {
	space := mustSpace(t,
		searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: -5, High: 5}},
		searchspace.Param{Name: "y", Domain: searchspace.Uniform{Low: -5, High: 5}},
	)
	s, err := NewCMAES(space, 1)
	if err != nil {
		t.Fatal(err)
	}
	for trial := 1; trial <= 60; trial++ {
		cfg, err := s.Suggest(trial)
		if err != nil {
			t.Fatal(err)
		}
		x, y := cfg["x"].(float64), cfg["y"].(float64)
		obs := Observation{Step: 1, Score: (x-3)*(x-3) + (y-3)*(y-3)}
		s.OnTrialEnd(trial, TrialEnd{Status: TrialStopped, Last: &obs})
	}
	gens := map[string]bool{}
	for _, tr := range s.s.store.finished {
		if tr.State != goptuna.TrialStateComplete {
			t.Fatalf("a stopped trial is %v in CMA-ES's history, want COMPLETE", tr.State)
		}
		gens[tr.SystemAttrs["goptuna:cmaes:generationId"]] = true
	}
	if len(gens) < 5 {
		t.Errorf("60 stopped trials made %d generations, want CMA-ES to move on", len(gens))
	}
}

// recorder is an inner searcher that records what reaches it.
type recorder struct {
	next    int
	results []int
	ends    []int
}

func (r *recorder) Suggest(int) (map[string]any, error) {
	r.next++
	return map[string]any{"x": float64(r.next)}, nil
}
func (r *recorder) OnResult(trial int, _ Observation) { r.results = append(r.results, trial) }
func (r *recorder) OnTrialEnd(trial int, _ TrialEnd)  { r.ends = append(r.ends, trial) }

func TestGridSearch(t *testing.T) {
	space := mustSpace(t,
		searchspace.Param{Name: "opt", Domain: searchspace.Grid{Values: []any{"sgd", "adam"}}},
		searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: 0, High: 1}},
	)
	inner := &recorder{}
	g, err := NewGridSearch(space, 3, inner)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for trial := 1; ; trial++ {
		cfg, err := g.Suggest(trial)
		if errors.Is(err, ErrExhausted) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if cfg["x"] != float64(trial) {
			t.Errorf("trial %d: x %v, want the inner searcher's %d", trial, cfg["x"], trial)
		}
		got = append(got, cfg["opt"].(string))
		g.OnResult(trial, Observation{})
		g.OnTrialEnd(trial, TrialEnd{Status: TrialCompleted})
	}
	want := []string{"sgd", "adam", "sgd", "adam", "sgd", "adam"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("cells: got %v, want %v", got, want)
	}
	if len(inner.results) != 6 || len(inner.ends) != 6 {
		t.Errorf("inner searcher saw %d results and %d ends, want 6 and 6", len(inner.results), len(inner.ends))
	}
	if _, err := NewGridSearch(space, 0, inner); err == nil {
		t.Error("num_samples 0 accepted")
	}
}

// waiter is an inner searcher that waits until told otherwise.
type waiter struct {
	recorder
	wait bool
}

func (w *waiter) Suggest(trial int) (map[string]any, error) {
	if w.wait {
		return nil, ErrWait
	}
	return w.recorder.Suggest(trial)
}

func TestGridSearchWaitsWithoutUsingACell(t *testing.T) {
	space := mustSpace(t, searchspace.Param{Name: "opt", Domain: searchspace.Grid{Values: []any{"a", "b"}}})
	inner := &waiter{wait: true}
	g, _ := NewGridSearch(space, 1, inner)
	if _, err := g.Suggest(1); !errors.Is(err, ErrWait) {
		t.Fatalf("got %v, want the inner searcher's ErrWait", err)
	}
	inner.wait = false
	for i, want := range []string{"a", "b"} {
		cfg, err := g.Suggest(i + 1)
		if err != nil || cfg["opt"] != want {
			t.Errorf("suggestion %d: %v %v, want opt %s", i+1, cfg, err, want)
		}
	}
}

func TestLimiter(t *testing.T) {
	inner := &recorder{}
	l, err := NewLimiter(inner, 2)
	if err != nil {
		t.Fatal(err)
	}
	for trial := 1; trial <= 2; trial++ {
		if _, err := l.Suggest(trial); err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
	}
	if _, err := l.Suggest(3); !errors.Is(err, ErrWait) {
		t.Fatalf("third running trial: got %v, want ErrWait", err)
	}
	l.OnResult(1, Observation{})
	if _, err := l.Suggest(3); !errors.Is(err, ErrWait) {
		t.Fatalf("after a result: got %v, want ErrWait", err)
	}
	l.OnTrialEnd(1, TrialEnd{Status: TrialFailed})
	if _, err := l.Suggest(3); err != nil {
		t.Fatalf("after trial 1 ended: %v", err)
	}
	if inner.next != 3 || len(inner.results) != 1 || len(inner.ends) != 1 {
		t.Errorf("inner searcher: %d suggestions, %d results, %d ends; want 3, 1, 1", inner.next, len(inner.results), len(inner.ends))
	}
	if _, err := NewLimiter(inner, 0); err == nil {
		t.Error("a limit of 0 accepted")
	}
}

// TestLimiterResumes: a resumed experiment's replayed trials count against
// the bound until they end, and a warm start reaches the inner searcher
// (or says it cannot).
func TestLimiterResumes(t *testing.T) {
	inner := &recorder{}
	l, err := NewLimiter(inner, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.WarmStart([]PriorTrial{{Number: 1}}); !errors.Is(err, ErrNoWarmStart) {
		t.Errorf("warm start of a searcher that cannot learn from it: %v, want ErrNoWarmStart", err)
	}
	for trial := 1; trial <= 2; trial++ {
		if err := l.Replay(trial, map[string]any{"x": float64(trial)}); err != nil {
			t.Fatalf("replay trial %d: %v", trial, err)
		}
	}
	if _, err := l.Suggest(3); !errors.Is(err, ErrWait) {
		t.Fatalf("with 2 replayed trials running: got %v, want ErrWait", err)
	}
	l.OnTrialEnd(2, TrialEnd{Status: TrialCompleted})
	if _, err := l.Suggest(3); err != nil {
		t.Fatalf("after replayed trial 2 ended: %v", err)
	}
	if inner.next != 3 {
		t.Errorf("the inner searcher was asked %d times (2 replays, 1 suggestion), want 3", inner.next)
	}

	space := mustSpace(t, searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: 0, High: 1}})
	tpe, err := NewTPE(space, 1)
	if err != nil {
		t.Fatal(err)
	}
	warm, _ := NewLimiter(tpe, 2)
	prior := []PriorTrial{{Number: 1, Config: map[string]any{"x": 0.5}, End: TrialEnd{Status: TrialCompleted, Last: &Observation{Step: 1, Score: 0.2}}}}
	if err := warm.WarmStart(prior); err != nil {
		t.Errorf("warm start through a limiter around TPE: %v", err)
	}
}

// TestCMAESReadsARecentWindow: past historyWindow completed trials, the
// sampler reads only the newest historyWindow of them, and the strategy
// still moves generation after generation.
func TestCMAESReadsARecentWindow(t *testing.T) {
	space := mustSpace(t,
		searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: -5, High: 5}},
		searchspace.Param{Name: "y", Domain: searchspace.Uniform{Low: -5, High: 5}},
	)
	s, err := NewCMAES(space, 3)
	if err != nil {
		t.Fatal(err)
	}
	const n = historyWindow*2 + 500
	cfgs := drive(t, s, n, func(cfg map[string]any) float64 {
		x, y := cfg["x"].(float64), cfg["y"].(float64)
		return x*x + y*y
	})
	seen, err := s.s.store.GetAllTrials(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != historyWindow || len(s.s.store.finished) > 2*historyWindow {
		t.Fatalf("the sampler reads %d trials, %d kept; want %d, at most %d", len(seen), len(s.s.store.finished), historyWindow, 2*historyWindow)
	}
	if last := seen[len(seen)-1].InternalParams["x"]; last != cfgs[n-1]["x"] {
		t.Errorf("the newest trial the sampler reads has x = %v, want the last trial's %v", last, cfgs[n-1]["x"])
	}
	// Still converging at the end: the last generation is near the optimum.
	x, y := cfgs[n-1]["x"].(float64), cfgs[n-1]["y"].(float64)
	if x*x+y*y > 1e-3 {
		t.Errorf("trial %d: x = %g, y = %g; want CMA-ES near 0 by now", n, x, y)
	}
}
