package trainer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

const (
	digits      = "../examples/data/digits.csv"
	digitsSplit = "../examples/data/digits_split.csv"
)

// modelSink keeps every result; from iteration stopAt on (when positive) it
// answers Stop. With commitDir set, it copies the folders handed over with
// each report into commitDir/N (N the iteration), merged, as the tuner
// commits a checkpoint.
type modelSink struct {
	mu        sync.Mutex
	results   []Result
	stopAt    int
	commitDir string
}

func (s *modelSink) Report(_ context.Context, r Result) (Action, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.commitDir != "" && len(r.Checkpoint) > 0 {
		dst := filepath.Join(s.commitDir, fmt.Sprint(r.Iteration))
		for _, src := range r.Checkpoint {
			if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
				return Continue, err
			}
		}
	}
	s.results = append(s.results, r)
	if s.stopAt > 0 && r.Iteration >= s.stopAt {
		return Stop, nil
	}
	return Continue, nil
}

// committed is the folder the sink committed with the given iteration.
func (s *modelSink) committed(iteration int) string {
	return filepath.Join(s.commitDir, fmt.Sprint(iteration))
}

func (s *modelSink) metrics() []map[string]float64 {
	var out []map[string]float64
	for _, r := range s.results {
		out = append(out, r.Metrics)
	}
	return out
}

// runModel trains cfg's model with config on the given number of workers.
func runModel(t *testing.T, cfg Config, workers int, config map[string]any, sink *modelSink, resume string) {
	t.Helper()
	train, err := Builtin(cfg)
	if err != nil {
		t.Fatal(err)
	}
	spec := Spec{Seed: 42, Config: config, Train: train, Scaling: ScalingConfig{NumWorkers: workers}, ResumeDir: resume}
	if _, err := Run(context.Background(), spec, sink); err != nil {
		t.Fatal(err)
	}
}

// TestMLPLearnsDigits trains the benchmark's configuration on the fixed
// split the PyTorch reference uses; it must reach the accuracy target.
func TestMLPLearnsDigits(t *testing.T) {
	sink := &modelSink{}
	cfg := map[string]any{"epochs": int64(20), "lr": 0.05, "momentum": 0.9, "hidden": int64(128), "batch_size": int64(64), "checkpoint_every": int64(0)}
	runModel(t, Config{Model: "mlp", Dataset: digits, Split: digitsSplit}, 2, cfg, sink, "")
	res := sink.metrics()
	if len(res) != 20 {
		t.Fatalf("got %d reports, want 20", len(res))
	}
	first, last := res[0], res[len(res)-1]
	for _, k := range []string{"epoch", "train_loss", "val_loss", "val_acc"} {
		if _, ok := last[k]; !ok {
			t.Errorf("report lacks %q: %v", k, last)
		}
	}
	if last["val_acc"] < 0.95 {
		t.Errorf("val_acc after 20 epochs: %.4f, want >= 0.95", last["val_acc"])
	}
	if last["train_loss"] >= first["train_loss"] {
		t.Errorf("train loss did not fall: %v -> %v", first["train_loss"], last["train_loss"])
	}
	for _, r := range sink.results {
		if len(r.Checkpoint) != 0 {
			t.Errorf("report %d carries a checkpoint with checkpoint_every = 0", r.Iteration)
		}
	}
}

func TestLogregLearnsDigits(t *testing.T) {
	sink := &modelSink{}
	cfg := map[string]any{"epochs": int64(5), "optimizer": "adam", "lr": 0.01, "checkpoint_every": int64(0)}
	runModel(t, Config{Model: "logreg", Dataset: digits, Split: digitsSplit}, 2, cfg, sink, "")
	if acc := sink.results[4].Metrics["val_acc"]; acc < 0.9 {
		t.Errorf("logreg val_acc after 5 epochs: %.4f, want >= 0.9", acc)
	}
}

// writeLinear writes a CSV of n rows whose target is an exact linear
// function of two features plus small noise, with a text column to skip.
func writeLinear(t *testing.T, n int) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("id,a,b,price\n")
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range n {
		a, c := rng.Float64()*10, rng.NormFloat64()*100
		fmt.Fprintf(&b, "row%d,%g,%g,%g\n", i, a, c, 1000+3*a-0.5*c+rng.NormFloat64()*0.1)
	}
	path := filepath.Join(t.TempDir(), "linear.csv")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLinregFitsALinearFunction(t *testing.T) {
	path := writeLinear(t, 400)
	for opt, lr := range map[string]float64{"sgd": 0.01, "adam": 0.05} {
		t.Run(opt, func(t *testing.T) {
			sink := &modelSink{}
			cfg := map[string]any{"epochs": int64(30), "optimizer": opt, "lr": lr, "checkpoint_every": int64(0)}
			runModel(t, Config{Model: "linreg", Dataset: path, Label: "price", Features: []string{"a", "b"}}, 2, cfg, sink, "")
			last := sink.results[len(sink.results)-1].Metrics
			for _, k := range []string{"epoch", "train_loss", "val_loss", "val_rmse", "val_r2"} {
				if _, ok := last[k]; !ok {
					t.Errorf("report lacks %q: %v", k, last)
				}
			}
			// The noise has deviation 0.1: its MSE is 0.01, and the
			// targets' variance about 2,500.
			if last["val_r2"] < 0.9999 || last["val_loss"] > 0.1 {
				t.Errorf("linreg with %s: val_r2 %.6f, val_loss %.4f; want R² >= 0.9999 and MSE <= 0.1", opt, last["val_r2"], last["val_loss"])
			}
		})
	}
}

func TestClassifierWithTextLabels(t *testing.T) {
	var b strings.Builder
	b.WriteString("x,y,species\n")
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range 300 {
		name := []string{"setosa", "versicolor", "virginica"}[i%3]
		fmt.Fprintf(&b, "%g,%g,%s\n", float64(i%3)*3+rng.NormFloat64()*0.3, rng.NormFloat64(), name)
	}
	path := filepath.Join(t.TempDir(), "flowers.csv")
	os.WriteFile(path, []byte(b.String()), 0o644)
	sink := &modelSink{}
	runModel(t, Config{Model: "logreg", Dataset: path, Label: "species"}, 1, map[string]any{"epochs": int64(10), "lr": 0.1, "checkpoint_every": int64(0)}, sink, "")
	if acc := sink.results[9].Metrics["val_acc"]; acc < 0.95 {
		t.Errorf("val_acc %.3f on separable text-labelled classes, want >= 0.95", acc)
	}
}

// detConfigs are small configurations of every model, every optimizer and
// the mlp's options, used by the determinism and resume tests.
var detConfigs = []struct {
	name   string
	cfg    Config
	params map[string]any
}{
	{"mlp-sgd-dropout", Config{Model: "mlp", Dataset: digits, Split: digitsSplit}, map[string]any{"layers": int64(2), "hidden": int64(16), "dropout": 0.2, "weight_decay": 1e-4}},
	{"mlp-tanh-adamw", Config{Model: "mlp", Dataset: digits, Scale: "minmax"}, map[string]any{"activation": "tanh", "hidden": int64(16), "optimizer": "adamw", "weight_decay": 0.01, "dropout": 0.1, "precision": "float64"}},
	{"logreg-adam", Config{Model: "logreg", Dataset: digits, Scale: "none"}, map[string]any{"optimizer": "adam", "batch_size": int64(50)}},
	{"linreg-sgd", Config{Model: "linreg", Dataset: digits, Label: "f20"}, map[string]any{"lr": 0.001}},
}

func withEpochs(params map[string]any, epochs int) map[string]any {
	out := map[string]any{"epochs": int64(epochs)}
	for k, v := range params {
		out[k] = v
	}
	return out
}

func TestModelsAreDeterministic(t *testing.T) {
	for _, tt := range detConfigs {
		t.Run(tt.name, func(t *testing.T) {
			a, b := &modelSink{commitDir: t.TempDir()}, &modelSink{commitDir: t.TempDir()}
			runModel(t, tt.cfg, 3, withEpochs(tt.params, 2), a, "")
			runModel(t, tt.cfg, 3, withEpochs(tt.params, 2), b, "")
			if !reflect.DeepEqual(a.metrics(), b.metrics()) {
				t.Errorf("identical runs differ:\n%v\n%v", a.metrics(), b.metrics())
			}
			sameFile(t, filepath.Join(a.committed(2), CheckpointFile), filepath.Join(b.committed(2), CheckpointFile))
		})
	}
}

// TestResumeIsBitIdentical stops a run after some epochs, resumes it from
// the checkpoint the sink committed, and compares the resumed epochs'
// metrics and final weights bit for bit with an uninterrupted run's.
func TestResumeIsBitIdentical(t *testing.T) {
	const epochs, stopAt, workers = 4, 2, 2
	for _, tt := range detConfigs {
		t.Run(tt.name, func(t *testing.T) {
			params := withEpochs(tt.params, epochs)
			whole := &modelSink{commitDir: t.TempDir()}
			runModel(t, tt.cfg, workers, params, whole, "")

			first := &modelSink{commitDir: t.TempDir(), stopAt: stopAt}
			runModel(t, tt.cfg, workers, params, first, "")
			if len(first.results) != stopAt {
				t.Fatalf("stopped run made %d reports, want %d", len(first.results), stopAt)
			}
			rest := &modelSink{commitDir: t.TempDir()}
			runModel(t, tt.cfg, workers, params, rest, first.committed(stopAt))

			got := append(first.metrics(), rest.metrics()...)
			if !reflect.DeepEqual(got, whole.metrics()) {
				t.Errorf("resumed run's metrics differ:\n got %v\nwant %v", got, whole.metrics())
			}
			sameFile(t, filepath.Join(rest.committed(epochs-stopAt), CheckpointFile), filepath.Join(whole.committed(epochs), CheckpointFile))
		})
	}
}

func sameFile(t *testing.T, a, b string) {
	t.Helper()
	da, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	db, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if string(da) != string(db) {
		t.Errorf("%s and %s differ", a, b)
	}
}

func TestResumeErrors(t *testing.T) {
	sink := &modelSink{commitDir: t.TempDir()}
	runModel(t, Config{Model: "mlp", Dataset: digits}, 1, map[string]any{"epochs": int64(1), "hidden": int64(8)}, sink, "")
	good := sink.committed(1)
	data, err := os.ReadFile(filepath.Join(good, CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	damaged := t.TempDir()
	flipped := []byte(string(data))
	flipped[len(flipped)-3] ^= 1
	os.WriteFile(filepath.Join(damaged, CheckpointFile), flipped, 0o644)
	truncated := t.TempDir()
	os.WriteFile(filepath.Join(truncated, CheckpointFile), data[:len(data)-8], 0o644)

	tests := []struct {
		name, dir, model string
		params           map[string]any
		want             string
	}{
		{"empty folder", t.TempDir(), "mlp", map[string]any{"hidden": int64(8)}, "has no model.ckpt"},
		{"damaged", damaged, "mlp", map[string]any{"hidden": int64(8)}, "checksum mismatch"},
		{"truncated", truncated, "mlp", map[string]any{"hidden": int64(8)}, "payload has"},
		{"other sizes", good, "mlp", map[string]any{"hidden": int64(9)}, "layer sizes [64 8 10]; this trial trains a mlp with layer sizes [64 9 10]"},
		{"other model", good, "logreg", nil, "holds a mlp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			train, err := Builtin(Config{Model: tt.model, Dataset: digits})
			if err != nil {
				t.Fatal(err)
			}
			_, err = Run(context.Background(), Spec{Config: tt.params, Train: train, ResumeDir: tt.dir}, &modelSink{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestResumeWithAnotherOptimizer keeps the weights and restarts the
// optimizer, as population-based training needs when it changes one.
func TestResumeWithAnotherOptimizer(t *testing.T) {
	sink := &modelSink{commitDir: t.TempDir()}
	cfg := Config{Model: "logreg", Dataset: digits}
	runModel(t, cfg, 2, map[string]any{"epochs": int64(2), "lr": 0.05}, sink, "")
	resumed := &modelSink{}
	runModel(t, cfg, 2, map[string]any{"epochs": int64(3), "optimizer": "adam", "checkpoint_every": int64(0)}, resumed, sink.committed(2))
	if len(resumed.results) != 1 || resumed.results[0].Metrics["epoch"] != 3 {
		t.Fatalf("resumed run reported %v, want epoch 3 only", resumed.metrics())
	}
	if acc := resumed.results[0].Metrics["val_acc"]; acc < 0.85 {
		t.Errorf("val_acc %.3f after resuming trained weights, want >= 0.85", acc)
	}
}

func TestRejectsBadHyperparameters(t *testing.T) {
	train, err := Builtin(Config{Model: "mlp", Dataset: digits})
	if err != nil {
		t.Fatal(err)
	}
	for want, cfg := range map[string]map[string]any{
		"lr must be positive":               {"lr": -1.0},
		"activation must be":                {"activation": "sigmoid"},
		"dropout must be in [0, 1)":         {"dropout": 1.0},
		"batch_size must be at least":       {"batch_size": int64(0)},
		"optimizer must be one of":          {"optimizer": "lbfgs"},
		"momentum must be in [0, 1)":        {"momentum": 1.0},
		"beta2 must be in [0, 1)":           {"optimizer": "adam", "beta2": 1.5},
		"checkpoint_every must not be":      {"checkpoint_every": int64(-1)},
		`hyperparameter "hidden" is 1.5`:    {"hidden": 1.5},
		"weight_decay must not be negative": {"weight_decay": -0.1},
	} {
		_, err := Run(context.Background(), Spec{Config: cfg, Train: train}, &modelSink{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config %v: got %v, want %q", cfg, err, want)
		}
	}
}

func TestBuiltinErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		os.WriteFile(path, []byte(body), 0o644)
		return path
	}
	text := write("text.csv", "a,label\n1,x\n2,y\n3,x\n4,y\n5,x\n")
	one := write("one.csv", "a,label\n1,7\n2,7\n3,7\n4,7\n5,7\n")
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"unknown model", Config{Model: "svm", Dataset: digits}, `unknown built-in model "svm" (have linreg, logreg, mlp)`},
		{"text label for regression", Config{Model: "linreg", Dataset: text}, `model linreg needs a numeric label: dataset ` + text + `:2: label "label": "x" is not a finite number`},
		{"single class", Config{Model: "logreg", Dataset: one}, `the label "label" has the single value "7"`},
		{"split of another data set", Config{Model: "mlp", Dataset: text, Split: digitsSplit}, "is not a row index of the data set (0 to 4)"},
		{"no validation rows", Config{Model: "mlp", Dataset: text, ValFraction: 0.01}, "5 training and 0 validation rows"},
		{"missing feature", Config{Model: "mlp", Dataset: digits, Features: []string{"f1", "f99"}}, `no column named "f99" (a feature)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Builtin(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestConfigValidatesDataFields(t *testing.T) {
	tests := []struct {
		cfg  Config
		key  string
		want string
	}{
		{Config{Model: "mlp", Dataset: digits, Split: digitsSplit, ValFraction: 0.3}, "split", "drop val_fraction"},
		{Config{Model: "mlp", Dataset: digits, Scale: "log"}, "scale", `unknown scaling "log"`},
		{Config{Model: "linreg"}, "dataset", "needs a dataset"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		fe, ok := err.(*FieldError)
		if !ok || fe.Key != tt.key || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: got %v, want a FieldError on %q containing %q", tt.cfg, err, tt.key, tt.want)
		}
	}
	if err := (&Config{Model: "logreg", Dataset: digits, Split: digitsSplit, Scale: "minmax"}).Validate(); err != nil {
		t.Errorf("valid config: %v", err)
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
	// Fewer rows than ranks: every rank still gets one.
	for r := range 3 {
		if s := shard([]int{5}, 1, 1, r, 3); len(s) != 1 || s[0] != 5 {
			t.Errorf("one row, rank %d of 3: got %v", r, s)
		}
	}
}

// TestDatasetBesideSweepFile: a relative dataset and split are relative to
// PathBase (the sweep file's folder), not to the working directory, and a
// path not found there is named with where it was looked for, with a hint
// when the working directory has it.
func TestDatasetBesideSweepFile(t *testing.T) {
	examples, err := filepath.Abs("../examples")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	ok := Config{Model: "logreg", Dataset: "data/digits.csv", Split: "data/digits_split.csv", PathBase: examples}
	if _, err := Builtin(ok); err != nil {
		t.Errorf("dataset beside the sweep file: %v", err)
	}
	os.MkdirAll("data", 0o755)
	os.WriteFile("data/here.csv", []byte("a,label\n1,0\n2,1\n"), 0o644)
	for _, tt := range []struct {
		cfg  Config
		want []string
	}{
		{Config{Model: "logreg", Dataset: "data/missing.csv", PathBase: examples},
			[]string{filepath.Join(examples, "data/missing.csv"), "looked for it in " + examples, "relative to the sweep file's folder"}},
		{Config{Model: "logreg", Dataset: "data/here.csv", PathBase: examples},
			[]string{filepath.Join(examples, "data/here.csv"), "data/here.csv is in the current folder", "relative to the sweep file's folder"}},
		{Config{Model: "logreg", Dataset: "data/digits.csv", Split: "data/missing.csv", PathBase: examples},
			[]string{"split", filepath.Join(examples, "data/missing.csv"), "looked for it in " + examples}},
	} {
		_, err := Builtin(tt.cfg)
		for _, w := range tt.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s / %s: %v, want it to say %q", tt.cfg.Dataset, tt.cfg.Split, err, w)
			}
		}
	}
}
