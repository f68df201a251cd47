package schedulers

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gotune/gotune/searchspace"
)

func pbtSpace(t *testing.T) *searchspace.Space {
	t.Helper()
	space, err := searchspace.New(
		searchspace.Param{Name: "lr", Domain: searchspace.LogUniform{Low: 1e-3, High: 1}},
		searchspace.Param{Name: "act", Domain: searchspace.Choice{Values: []any{"relu", "tanh", "gelu"}}},
		searchspace.Param{Name: "layers", Domain: searchspace.RandInt{Low: 1, High: 5}},
		searchspace.Param{Name: "epochs", Domain: searchspace.Constant{Value: int64(10)}},
	)
	if err != nil {
		t.Fatal(err)
	}
	return space
}

func ptr[T any](v T) *T { return &v }

func TestPBTDecisions(t *testing.T) {
	s := mustNew(t, Config{Kind: "pbt", PerturbationInterval: 2, ResampleProbability: ptr(0.0)},
		Env{Metric: "loss", Checkpoints: true, Space: pbtSpace(t), Seed: 3})
	configs := map[int]map[string]any{
		1: {"lr": 0.01, "act": "tanh", "layers": int64(2), "epochs": int64(10)},
		2: {"lr": 0.1, "act": "relu", "layers": int64(4), "epochs": int64(10)},
		3: {"lr": 0.5, "act": "gelu", "layers": int64(1), "epochs": int64(10)},
		4: {"lr": 0.001, "act": "relu", "layers": int64(3), "epochs": int64(10)},
	}
	for n := 1; n <= 4; n++ {
		s.OnTrialAdd(n, configs[n])
	}
	play(t, s, []ev{
		res(1, 2, 0.1, Continue), // alone: no quantiles yet
		// Trial 2 is the bottom half of two, but trial 1 has no checkpoint.
		res(2, 2, 0.2, Continue).checkpointed().at(2).cut(0.2).why("none of the top trials has a checkpoint"),
		res(1, 3, 0.05, Continue).checkpointed(), // 3 < 2 + interval
	})
	d := s.OnResult(Result{Trial: 3, Time: 2, Score: 0.3, Checkpoint: true})
	if d.Action != Restart || d.Exploit == nil || d.Exploit.From != 1 || d.Exploit.FromTime != 3 || d.Rung != 2 || d.Cutoff != 0.3 {
		t.Fatalf("trial 3 in the bottom quantile: got %+v (exploit %+v), want a restart from trial 1 at 3", d, d.Exploit)
	}
	checkExplored(t, configs[1], d.Exploit.Config)
	play(t, s, []ev{
		// Trial 3 now continues from time 3: next perturbation at 5.
		res(3, 4, 0.04, Continue),
		res(3, 5, 0.04, Continue), // the best: not in the bottom quantile
	})
	// Trial 3's own latest checkpoint is the copy of trial 1's, at 3.
	d = s.OnResult(Result{Trial: 4, Time: 2, Score: 0.5})
	if d.Action != Restart || d.Exploit.From != 3 || d.Exploit.FromTime != 3 {
		t.Fatalf("trial 4: got %+v (exploit %+v), want a restart from trial 3's checkpoint at 3", d, d.Exploit)
	}
	// An ended trial is never a donor; trial 4 now ties trial 1 at 0.05 and
	// the tie goes to the lower number, so trial 2 is the bottom.
	s.OnTrialEnd(3)
	d = s.OnResult(Result{Trial: 2, Time: 4, Score: 0.3, Checkpoint: true})
	if d.Action != Restart || d.Exploit.From != 1 {
		t.Fatalf("trial 2: got %+v (exploit %+v), want a restart from trial 1", d, d.Exploit)
	}
}

// checkExplored checks that every mutated parameter moved to a neighbour
// of its old value and the constant stayed.
func checkExplored(t *testing.T, old, got map[string]any) {
	t.Helper()
	lr, want := got["lr"].(float64), old["lr"].(float64)
	if math.Abs(lr-want*1.2) > 1e-15 && math.Abs(lr-want*0.8) > 1e-15 {
		t.Errorf("lr %v: want %v ×1.2 or ×0.8", lr, want)
	}
	acts := []any{"relu", "tanh", "gelu"}
	if i, j := slices.Index(acts, old["act"]), slices.Index(acts, got["act"]); j < 0 || (j != i-1 && j != i+1 && j != i) {
		t.Errorf("act %v: want a neighbour of %v", got["act"], old["act"])
	}
	if l, o := got["layers"].(int64), old["layers"].(int64); l < 1 || l > 4 || math.Abs(float64(l-o)) > 1 {
		t.Errorf("layers %d: want a neighbour of %d within [1, 4]", l, o)
	}
	if got["epochs"] != int64(10) {
		t.Errorf("epochs %v: a constant must not change", got["epochs"])
	}
}

func TestPBTPerturbStaysInDomain(t *testing.T) {
	s := mustNew(t, Config{Kind: "pbt", PerturbationInterval: 1, PerturbationFactors: []float64{3, 0.1}},
		Env{Checkpoints: true, Space: pbtSpace(t)}).(*pbt)
	tests := []struct {
		domain searchspace.Domain
		value  any
		ok     func(any) bool
	}{
		{searchspace.Uniform{Low: 0, High: 1}, 0.5, func(v any) bool { x := v.(float64); return x == 1 || x == 0.05 }},
		{searchspace.LogUniform{Low: 0.01, High: 1}, 0.05, func(v any) bool { x := v.(float64); return math.Abs(x-0.15) < 1e-15 || x == 0.01 }},
		{searchspace.RandInt{Low: 1, High: 5}, int64(3), func(v any) bool { x := v.(int64); return x == 4 || x == 1 }},
		{searchspace.Choice{Values: []any{int64(8), int64(16)}}, int64(8), func(v any) bool { return v == int64(8) || v == int64(16) }},
	}
	for _, tt := range tests {
		for range 50 {
			v, _, ok := s.perturb(tt.domain, tt.value)
			if !ok || !tt.ok(v) {
				t.Fatalf("perturb(%v, %v): got %v, %v", tt.domain, tt.value, v, ok)
			}
		}
	}
	// A value the choice does not hold, or a non-number, is resampled.
	if _, _, ok := s.perturb(searchspace.Choice{Values: []any{"a"}}, "b"); ok {
		t.Error("perturb of a value outside the choice succeeded")
	}
	if _, _, ok := s.perturb(searchspace.Uniform{Low: 0, High: 1}, "x"); ok {
		t.Error("perturb of a string in a uniform domain succeeded")
	}
}

func TestPBTResamples(t *testing.T) {
	s := mustNew(t, Config{Kind: "pbt", PerturbationInterval: 1, ResampleProbability: ptr(1.0),
		HyperparamMutations: map[string]any{"lr": map[string]any{"uniform": []any{5.0, 6.0}}}},
		Env{Checkpoints: true, Space: pbtSpace(t)}).(*pbt)
	for range 20 {
		cfg, changes := s.explore(map[string]any{"lr": 0.01, "act": "relu"})
		if lr := cfg["lr"].(float64); lr < 5 || lr >= 6 || cfg["act"] != "relu" || len(changes) != 1 {
			t.Fatalf("explore with resample_probability 1: got %v (%v), want lr drawn from [5, 6) and act kept", cfg, changes)
		}
	}
}

// TestPBTExploreKeepsConditions explores configurations of a space where
// momentum exists only with opt = "sgd", with every parameter mutated
// and with hyperparam_mutations naming opt alone: whichever opt a
// mutation leaves, momentum is there exactly when its condition holds,
// with a value of its domain, drawn (and said so) when the mutation made
// the condition hold.
func TestPBTExploreKeepsConditions(t *testing.T) {
	space, err := searchspace.New(
		searchspace.Param{Name: "opt", Domain: searchspace.Choice{Values: []any{"sgd", "adam"}}},
		searchspace.Param{Name: "momentum", Domain: searchspace.Uniform{Low: 0.5, High: 1},
			When: &searchspace.Condition{Param: "opt", Op: "==", Values: []any{"sgd"}}},
	)
	if err != nil {
		t.Fatal(err)
	}
	for _, mutations := range []map[string]any{
		nil, // every parameter of the space
		{"opt": map[string]any{"choice": []any{"sgd", "adam"}}},
	} {
		s := mustNew(t, Config{Kind: "pbt", PerturbationInterval: 1, HyperparamMutations: mutations},
			Env{Checkpoints: true, Space: space, Seed: 1}).(*pbt)
		activated := 0
		for i := range 100 {
			from := map[string]any{"opt": "adam"}
			if i%2 == 0 {
				from = map[string]any{"opt": "sgd", "momentum": 0.75}
			}
			cfg, changes := s.explore(from)
			m, has := cfg["momentum"]
			if has != (cfg["opt"] == "sgd") {
				t.Fatalf("mutations %v: explored %v into %v (%v)", mutations, from, cfg, changes)
			}
			if has {
				if x, ok := m.(float64); !ok || x < 0.5 || x >= 1 {
					t.Fatalf("mutations %v: explored %v into %v: momentum outside [0.5, 1)", mutations, from, cfg)
				}
			}
			if has && from["opt"] == "adam" {
				activated++
				if mutations != nil && !strings.Contains(strings.Join(changes, ", "), "momentum "+searchspace.FormatValue(m)+" (drawn: its condition now holds)") {
					t.Errorf("explored %v into %v: changes %q do not say momentum was drawn", from, cfg, changes)
				}
			}
		}
		if activated == 0 {
			t.Errorf("mutations %v: no exploration turned adam into sgd: the test needs some that do", mutations)
		}
	}
}

// A failed trial that runs again (tuner.WithRerunFailed) keeps the time
// of its last perturbation, through a snapshot too: its first result
// after the restart, in the bottom quantile, is not perturbed before the
// interval from then is up.
func TestPBTRerunKeepsItsLastPerturbation(t *testing.T) {
	newPBT := func() Scheduler {
		return mustNew(t, Config{Kind: "pbt", PerturbationInterval: 4, ResampleProbability: ptr(0.0)},
			Env{Metric: "loss", Checkpoints: true, Space: pbtSpace(t), Seed: 3})
	}
	config := map[string]any{"lr": 0.01, "act": "tanh", "layers": int64(2), "epochs": int64(10)}
	s := newPBT()
	s.OnTrialAdd(1, config)
	s.OnTrialAdd(2, config)
	// Both reach the first perturbation at 4; trial 2 is the best.
	for _, r := range []Result{{Trial: 1, Time: 4, Score: 0.1, Checkpoint: true}, {Trial: 2, Time: 4, Score: 0.05, Checkpoint: true}} {
		if d := s.OnResult(r); d.Action != Continue {
			t.Fatalf("%+v: %+v, want Continue", r, d)
		}
	}
	EndTrial(s, 2, true)
	data, err := s.(Snapshotter).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	s = newPBT()
	if err := s.(Snapshotter).Restore(data); err != nil {
		t.Fatal(err)
	}
	// Trial 2 runs again from its checkpoint at 4.
	s.OnTrialAdd(2, config)
	if d := s.OnResult(Result{Trial: 1, Time: 8, Score: 0.1, Checkpoint: true}); d.Action != Continue {
		t.Fatalf("trial 1 alone at 8: %+v, want Continue", d)
	}
	d := s.OnResult(Result{Trial: 2, Time: 5, Score: 0.5})
	if d.Action != Continue {
		t.Errorf("the rerun at 5, last perturbed at 4: %+v, want Continue until 8", d)
	}
	if d := s.OnResult(Result{Trial: 2, Time: 8, Score: 0.5}); d.Action != Restart || d.Exploit.From != 1 {
		t.Errorf("the rerun at 8, in the bottom half: %+v, want a restart from trial 1", d)
	}
}
