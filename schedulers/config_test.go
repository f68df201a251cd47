package schedulers

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gotune/gotune/searchspace"
)

func TestNewDefaults(t *testing.T) {
	if s := mustNew(t, Config{}, Env{}); s != (FIFO{}) {
		t.Errorf("zero config: got %T, want FIFO", s)
	}
	c := Config{Kind: "asha"}.WithDefaults()
	if c.TimeAttr != DefaultTimeAttr || c.MaxT != 100 || c.GracePeriod != 1 || c.ReductionFactor != 3 || c.Brackets != 1 || c.Mode != "" {
		t.Errorf("asha defaults: got %+v", c)
	}
	if a := mustNew(t, Config{Kind: "asha"}, Env{Checkpoints: true}).(*asha); !a.promote {
		t.Error("asha with checkpoints: want mode promote by default")
	}
	if a := mustNew(t, Config{Kind: "asha"}, Env{}).(*asha); a.promote {
		t.Error("asha without checkpoints: want mode stop by default")
	}
	p := mustNew(t, Config{Kind: "pbt", PerturbationInterval: 5}, Env{Checkpoints: true, Space: pbtSpace(t)}).(*pbt)
	if p.resample != 0.25 || p.c.QuantileFraction != 0.25 || len(p.c.PerturbationFactors) != 2 {
		t.Errorf("pbt defaults: got %+v", p.c)
	}
	// Every non-constant parameter of the space is mutated by default.
	var names []string
	for _, m := range p.mutations {
		names = append(names, m.name)
	}
	if strings.Join(names, ",") != "act,layers,lr" {
		t.Errorf("pbt default mutations: got %v, want act, layers, lr", names)
	}
	m := mustNew(t, Config{Kind: "median"}, Env{}).(*medianRule)
	if m.c.GracePeriod != 1 || m.c.MinSamplesRequired != 3 {
		t.Errorf("median defaults: got %+v", m.c)
	}
}

func TestNewErrors(t *testing.T) {
	ckpt := Env{Checkpoints: true}
	space := Env{Checkpoints: true, Space: pbtSpace(t)}
	constOnly, _ := searchspace.New(searchspace.Param{Name: "epochs", Domain: searchspace.Constant{Value: int64(3)}})
	tests := []struct {
		name string
		cfg  Config
		env  Env
		key  string
		msg  string
	}{
		{"unknown kind", Config{Kind: "sha"}, Env{}, "kind", `unknown scheduler "sha"`},
		{"key of another kind", Config{MaxT: 10}, Env{}, "max_t", `not used by kind "fifo" (only by asha, hyperband)`},
		{"brackets for hyperband", Config{Kind: "hyperband", Brackets: 2}, ckpt, "brackets", "only by asha"},
		{"mode for median", Config{Kind: "median", Mode: "stop"}, Env{}, "mode", "only by asha"},
		{"pbt key for asha", Config{Kind: "asha", ResampleProbability: ptr(0.5)}, Env{}, "resample_probability", "only by pbt"},
		{"promote without checkpoints", Config{Kind: "asha", Mode: "promote"}, Env{}, "mode", `use "stop"`},
		{"unknown mode", Config{Kind: "asha", Mode: "fast"}, ckpt, "mode", `"promote" or "stop"`},
		{"hyperband without checkpoints", Config{Kind: "hyperband"}, Env{}, "kind", "hyperband pauses trials"},
		{"pbt without checkpoints", Config{Kind: "pbt", PerturbationInterval: 1}, Env{Space: pbtSpace(t)}, "kind", "pbt restarts trials"},
		{"reduction factor 1", Config{Kind: "asha", ReductionFactor: 1}, Env{}, "reduction_factor", "must exceed 1"},
		{"negative grace", Config{Kind: "asha", GracePeriod: -1}, Env{}, "grace_period", "must be positive"},
		{"grace at max_t", Config{Kind: "hyperband", GracePeriod: 10, MaxT: 10}, ckpt, "grace_period", "below max_t"},
		{"infinite max_t", Config{Kind: "asha", MaxT: math.Inf(1)}, Env{}, "max_t", "finite"},
		{"too many brackets", Config{Kind: "asha", MaxT: 27, Brackets: 4}, Env{}, "brackets", "at most 3"},
		{"negative brackets", Config{Kind: "asha", Brackets: -1}, Env{}, "brackets", "at least 1"},
		{"bad time_attr", Config{Kind: "asha", TimeAttr: "my epoch"}, Env{}, "time_attr", "not a metric name"},
		{"median min samples", Config{Kind: "median", MinSamplesRequired: -2}, Env{}, "min_samples_required", "at least 1"},
		{"median grace", Config{Kind: "median", GracePeriod: math.NaN()}, Env{}, "grace_period", "finite"},
		{"pbt needs an interval", Config{Kind: "pbt"}, space, "perturbation_interval", "in training_iteration units"},
		{"pbt negative interval", Config{Kind: "pbt", PerturbationInterval: -1}, space, "perturbation_interval", "positive"},
		{"pbt quantile", Config{Kind: "pbt", PerturbationInterval: 1, QuantileFraction: 0.6}, space, "quantile_fraction", "(0, 0.5]"},
		{"pbt resample", Config{Kind: "pbt", PerturbationInterval: 1, ResampleProbability: ptr(1.5)}, space, "resample_probability", "[0, 1]"},
		{"pbt factors", Config{Kind: "pbt", PerturbationInterval: 1, PerturbationFactors: []float64{1.2, 0}}, space, "perturbation_factors", "positive"},
		{"pbt bad mutation", Config{Kind: "pbt", PerturbationInterval: 1,
			HyperparamMutations: map[string]any{"lr": map[string]any{"uniform": []any{1.0, 0.0}}}}, space, "hyperparam_mutations.lr", "inverted"},
		{"pbt mutation outside the space", Config{Kind: "pbt", PerturbationInterval: 1,
			HyperparamMutations: map[string]any{"mom": map[string]any{"uniform": []any{0.0, 1.0}}}}, space, "hyperparam_mutations.mom", `no parameter "mom"`},
		{"pbt Go domain invalid", Config{Kind: "pbt", PerturbationInterval: 1,
			HyperparamMutations: map[string]any{"lr": searchspace.LogUniform{Low: 0, High: 1}}}, space, "hyperparam_mutations.lr", "positive"},
		{"pbt nothing to mutate", Config{Kind: "pbt", PerturbationInterval: 1}, ckpt, "hyperparam_mutations", "needs parameters to mutate"},
		{"pbt constants only", Config{Kind: "pbt", PerturbationInterval: 1}, Env{Checkpoints: true, Space: constOnly}, "hyperparam_mutations", "needs parameters to mutate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate(tt.env)
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("got %v (%T), want a *FieldError", err, err)
			}
			if fe.Key != tt.key || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("got key %q: %v; want key %q and a message containing %q", fe.Key, err, tt.key, tt.msg)
			}
		})
	}
}

func TestNewAcceptsMutationsGivenAsDomains(t *testing.T) {
	p := mustNew(t, Config{Kind: "pbt", PerturbationInterval: 1,
		HyperparamMutations: map[string]any{"lr": searchspace.Uniform{Low: 0, High: 1}, "act": map[string]any{"choice": []any{"a", "b"}}}},
		Env{Checkpoints: true}).(*pbt)
	if len(p.mutations) != 2 || p.mutations[0].name != "act" || p.mutations[1].domain != (searchspace.Uniform{Low: 0, High: 1}) {
		t.Errorf("mutations: got %+v", p.mutations)
	}
}
