package trainer

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const digits = "../examples/data/digits.csv"

func runMLP(t *testing.T, workers int, config map[string]any) []Result {
	t.Helper()
	train, err := Builtin(Config{Model: "mlp", Dataset: digits})
	if err != nil {
		t.Fatal(err)
	}
	sink := &recordingSink{}
	spec := Spec{Seed: 42, Config: config, Train: train, Scaling: ScalingConfig{NumWorkers: workers}}
	if _, err := Run(context.Background(), spec, sink); err != nil {
		t.Fatal(err)
	}
	return sink.results
}

func TestMLPLearnsDigits(t *testing.T) {
	res := runMLP(t, 2, map[string]any{"epochs": int64(8), "lr": 0.05, "hidden": int64(64), "dropout": 0.1})
	if len(res) != 8 {
		t.Fatalf("got %d reports, want 8", len(res))
	}
	first, last := res[0].Metrics, res[len(res)-1].Metrics
	for _, k := range []string{"epoch", "train_loss", "val_loss", "val_acc"} {
		if _, ok := last[k]; !ok {
			t.Errorf("report lacks %q: %v", k, last)
		}
	}
	if last["val_acc"] < 0.93 {
		t.Errorf("val_acc after 8 epochs: %.3f, want >= 0.93", last["val_acc"])
	}
	if last["train_loss"] >= first["train_loss"] {
		t.Errorf("train loss did not fall: %v -> %v", first["train_loss"], last["train_loss"])
	}
}

func TestMLPIsDeterministic(t *testing.T) {
	cfg := map[string]any{"epochs": int64(3), "layers": int64(2), "dropout": 0.2, "activation": "tanh"}
	a, b := runMLP(t, 3, cfg), runMLP(t, 3, cfg)
	for i := range a {
		if !reflect.DeepEqual(a[i].Metrics, b[i].Metrics) {
			t.Fatalf("epoch %d differs between identical runs: %v vs %v", i+1, a[i].Metrics, b[i].Metrics)
		}
	}
}

// TestGradientMatchesFiniteDifference checks backpropagation against a
// numerical gradient on a small network with both activations.
func TestGradientMatchesFiniteDifference(t *testing.T) {
	for _, act := range []string{"relu", "tanh"} {
		net := newNetwork([]int{3, 4, 3}, act, 0, 2, newRand(1))
		x := net.input(2).RawMatrix()
		copy(x.Data, []float64{0.5, -1, 2, 1.5, 0.2, -0.3})
		classes := []int{2, 0}
		loss := func() float64 {
			l, _ := net.softmaxCrossEntropy(net.forward(2, false, nil), classes)
			return l / 2
		}
		loss()
		net.backward(2, false)
		analytic := append([]float64(nil), net.grads...)
		const h = 1e-6
		for i := range net.params {
			orig := net.params[i]
			net.params[i] = orig + h
			up := loss()
			net.params[i] = orig - h
			down := loss()
			net.params[i] = orig
			num := (up - down) / (2 * h)
			if math.Abs(num-analytic[i]) > 1e-5 {
				t.Errorf("%s: d/dparam[%d]: backprop %g, numerical %g", act, i, analytic[i], num)
			}
		}
	}
}

func TestMLPRejectsBadHyperparameters(t *testing.T) {
	train, err := Builtin(Config{Model: "mlp", Dataset: digits})
	if err != nil {
		t.Fatal(err)
	}
	for cfg, want := range map[string]map[string]any{
		"lr must be positive":         {"lr": -1.0},
		"activation must be":          {"activation": "sigmoid"},
		"dropout must be in [0, 1)":   {"dropout": 1.0},
		"batch_size must be at least": {"batch_size": int64(0)},
	} {
		_, err := Run(context.Background(), Spec{Config: want, Train: train}, &recordingSink{})
		if err == nil || !strings.Contains(err.Error(), cfg) {
			t.Errorf("config %v: got %v, want %q", want, err, cfg)
		}
	}
}

func TestLoadCSVErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct{ name, body, want string }{
		{"missing label", "a,b\n1,2\n", `no column named "label"`},
		{"not a number", "a,label\n1,0\n2,x\n", `:3: column "label": "x" is not a finite number`},
		{"ragged row", "a,label\n1,0\n2\n", "wrong number of fields"},
		{"no rows", "a,label\n", "no data rows"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.name+".csv")
			os.WriteFile(path, []byte(tt.body), 0o644)
			_, err := LoadCSV(path, "label")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want %q", err, tt.want)
			}
		})
	}
}

func TestShardCoversEveryRowOnce(t *testing.T) {
	rows := make([]int, 11)
	for i := range rows {
		rows[i] = i
	}
	seen := map[int]int{}
	for r := range 4 {
		s := shard(rows, 3, 1, r, 4)
		if len(s) != 3 {
			t.Errorf("rank %d got %d rows, want 3", r, len(s))
		}
		for _, i := range s {
			seen[i]++
		}
	}
	if len(seen) != 11 {
		t.Errorf("shards cover %d distinct rows, want 11", len(seen))
	}
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0)) }
