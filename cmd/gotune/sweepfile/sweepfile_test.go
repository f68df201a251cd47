package sweepfile

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gotune/gotune/searchspace"
)

const valid = `name = "digits"
seed = 7

[objective]
metric = "val_loss"
mode = "min"

[search]
num_samples = 4
max_concurrent = 2

[search.space]
lr = { loguniform = [1e-4, 1e-1] }
hidden = { choice = [32, 64] }
epochs = 3

[trainer]
model = "mlp"
dataset = "data.csv"

[trainer.scaling]
num_workers = 2
`

func TestDecodeValid(t *testing.T) {
	cfg, err := Decode("sweep.toml", []byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Name != "digits" || cfg.Seed != 7 || cfg.Search.NumSamples != 4 || cfg.Trainer.Scaling.NumWorkers != 2 {
		t.Errorf("decoded %+v", cfg)
	}
	if got := cfg.Search.Space.Domain("lr"); got != (searchspace.LogUniform{Low: 1e-4, High: 1e-1}) {
		t.Errorf("lr domain: got %v", got)
	}
	if got := cfg.Search.Space.Domain("epochs"); got != (searchspace.Constant{Value: int64(3)}) {
		t.Errorf("epochs domain: got %v", got)
	}
}

// TestDecodeErrors checks that each mistake names the file, the line and the key.
func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name    string
		replace [2]string
		line    int
		key     string
		msg     string
	}{
		{"misspelt top-level key", [2]string{"seed = 7", "sede = 7"}, 2, "sede", "unknown key"},
		{"misspelt key in table", [2]string{"num_samples = 4", "num_sample = 4"}, 9, "search.num_sample", "unknown key"},
		{"misspelt nested table", [2]string{"[trainer.scaling]", "[trainer.scalling]"}, 21, "trainer.scalling", "unknown key"},
		{"wrong type", [2]string{"num_samples = 4", `num_samples = "four"`}, 9, "search.num_samples", "want an integer, got a string"},
		{"wrong type of table", [2]string{`mode = "min"`, `mode = 3`}, 6, "objective.mode", "want a string"},
		{"bad domain", [2]string{"lr = { loguniform = [1e-4, 1e-1] }", "lr = { loguniform = [0, 1e-1] }"}, 13, "search.space.lr", "loguniform: log range [0, 0.1] touches zero: low must be positive"},
		{"inverted range", [2]string{"lr = { loguniform = [1e-4, 1e-1] }", "lr = { uniform = [1, 0] }"}, 13, "search.space.lr", "inverted"},
		{"invalid value", [2]string{`mode = "min"`, `mode = "minimum"`}, 6, "objective.mode", `"min" or "max"`},
		{"missing key names its table", [2]string{`metric = "val_loss"`, ``}, 4, "objective.metric", "name the metric"},
		{"unknown isolation", [2]string{`dataset = "data.csv"`, "dataset = \"data.csv\"\nisolation = \"thread\""}, 20, "trainer.isolation", `must be "goroutine" or "process"`},
		{"bad nested value", [2]string{"num_workers = 2", "num_workers = -1"}, 22, "trainer.scaling.num_workers", "at least 1"},
		{"zero workers", [2]string{"num_workers = 2", "num_workers = 0"}, 22, "trainer.scaling.num_workers", "at least 1, got 0"},
		{"syntax error", [2]string{"seed = 7", "seed = = 7"}, 2, "", "unexpected character"},
		{"negative log range", [2]string{"lr = { loguniform = [1e-4, 1e-1] }", "lr = { loguniform = [-1, 1e-1] }"}, 13, "search.space.lr", "goes negative"},
		{"q not positive", [2]string{"epochs = 3", "epochs = { quniform = [1, 9, 0] }"}, 15, "search.space.epochs", "quniform: step q must be positive, got 0"},
		{"empty choice", [2]string{"hidden = { choice = [32, 64] }", "hidden = { choice = [] }"}, 14, "search.space.hidden", "choice needs at least one value"},
		{"empty randint", [2]string{"epochs = 3", "epochs = { randint = [3, 3] }"}, 15, "search.space.epochs", "empty or inverted integer range [3, 3)"},
		{"lograndint from zero", [2]string{"epochs = 3", "epochs = { lograndint = [0, 9] }"}, 15, "search.space.epochs", "touches zero"},
		{"unknown domain", [2]string{"epochs = 3", "epochs = { gaussian = [0, 1] }"}, 15, "search.space.epochs", "gaussian: unknown domain"},
		{"unknown algorithm", [2]string{"num_samples = 4", "num_samples = 4\nalgorithm = \"bayes\""}, 10, "search.algorithm", `unknown algorithm "bayes"`},
		{"search seed of the wrong type", [2]string{"num_samples = 4", "num_samples = 4\nseed = \"x\""}, 10, "search.seed", "want an integer"},
		{"cmaes with a choice names the choice", [2]string{"num_samples = 4", "num_samples = 4\nalgorithm = \"cmaes\""}, 15, "search.space.hidden", `cmaes searches numeric spaces only, and "hidden" is a choice`},
		{"grid without grid parameters", [2]string{"num_samples = 4", "num_samples = 4\nalgorithm = \"grid\""}, 10, "search.algorithm", "needs at least one grid parameter"},
		{"condition that does not parse", [2]string{"hidden = { choice = [32, 64] }", "hidden = { choice = [32, 64], when = \"epochs >= 3\" }"},
			14, "search.space.hidden.when", `condition "epochs >= 3": at byte 7: the name is followed by ==, !=, in or not in`},
		{"condition on a numeric parameter", [2]string{"hidden = { choice = [32, 64] }", "hidden = { choice = [32, 64], when = \"lr == 0.01\" }"},
			14, "search.space.hidden.when", "lr is { loguniform = [0.0001, 0.1] }; a condition compares a choice or a grid parameter's values"},
		{"condition naming no parameter", [2]string{"epochs = 3", "epochs = 3\nwd = { uniform = [0, 0.1], when = \"hiden == 32\" }"},
			16, "search.space.wd.when", "hiden names no parameter of the space"},
		{"condition of the wrong type", [2]string{"epochs = 3", "epochs = 3\nwd = { uniform = [0, 0.1], when = true }"},
			16, "search.space.wd.when", "want a string"},
		{"bad constraint", [2]string{`mode = "min"`, "mode = \"min\"\nconstraints = [\n  \"mem <= 40\",\n  \"latency == 3\",\n]"},
			9, "objective.constraints[1]", `"latency == 3" is not a constraint: want a metric, <=, <, >= or >, and a number`},
		{"several metrics with one mode", [2]string{`metric = "val_loss"`, `metric = ["val_loss", "latency"]`}, 6, "objective.mode", "several metrics take an array of modes"},
		{"modes without metrics", [2]string{`mode = "min"`, `mode = ["min", "max"]`}, 6, "objective.mode", "an array of modes goes with an array of metrics"},
		{"metric array of numbers", [2]string{`metric = "val_loss"`, `metric = ["val_loss", 3]`}, 5, "objective.metric", "got an array holding a number"},
		{"fewer modes than metrics", [2]string{"metric = \"val_loss\"\nmode = \"min\"", "metric = [\"val_loss\", \"lat\", \"mem\"]\nmode = [\"min\", \"max\"]"}, 6, "objective.mode", "2 modes for 3 metrics"},
		{"point naming no parameter", [2]string{"max_concurrent = 2", "max_concurrent = 2\npoints_to_evaluate = [\n  { lr = 0.01 },\n  { lr = 0.02, hiden = 64 },\n]"},
			13, "search.points_to_evaluate[1].hiden", "names no parameter the search samples (have [epochs hidden lr])"},
		{"point outside its domain", [2]string{"max_concurrent = 2", "max_concurrent = 2\npoints_to_evaluate = [{ lr = 0.01, hidden = 48 }]"},
			11, "search.points_to_evaluate[0].hidden", "48 is not a value of { choice = [32, 64] }"},
		{"point that is not a table", [2]string{"max_concurrent = 2", "max_concurrent = 2\npoints_to_evaluate = [0.01]"},
			11, "search.points_to_evaluate", "want a table"},
		{"warm start of random search", [2]string{"max_concurrent = 2", "max_concurrent = 2\nwarm_start = \"earlier\""},
			11, "search.warm_start", `algorithm "random" does not learn from other trials' results: warm start needs "tpe"`},
		{"placeholder naming no parameter", [2]string{`model = "mlp"`, `command = ["python3", "train.py", "--lr={lr}", "--layers={layers}"]`}, 18, "trainer.command", `{layers} in argument 4 ("--layers={layers}") names no parameter of [search.space] (have epochs, hidden, lr; write {{layers}} for a literal {layers})`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := strings.Replace(valid, tt.replace[0], tt.replace[1], 1)
			if doc == valid {
				t.Fatal("replacement did not apply")
			}
			_, err := Decode("sweep.toml", []byte(doc))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v (%T), want *Error", err, err)
			}
			if e.File != "sweep.toml" || e.Line != tt.line || e.Key != tt.key {
				t.Errorf("got file %q line %d key %q, want sweep.toml line %d key %q (%v)", e.File, e.Line, e.Key, tt.line, tt.key, err)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not mention %q", err, tt.msg)
			}
		})
	}
}

// TestDecodeSearch checks the [search] section and every domain of [search.space].
func TestDecodeSearch(t *testing.T) {
	doc := `name = "all-domains"
seed = 7

[objective]
metric = "loss"

[search]
algorithm = "tpe"
num_samples = 5
max_concurrent = 3
seed = 11

[search.space]
lr = { loguniform = [1e-4, 1e-1] }
dropout = { uniform = [0.0, 0.5] }
momentum = { quniform = [0.5, 0.99, 0.01] }
wd = { qloguniform = [1e-5, 1e-2, 1e-5] }
layers = { randint = [1, 4] }
width = { lograndint = [16, 1024] }
hidden = { choice = [32, 64, 128] }
act = { choice = ["relu", "tanh"] }
bias = { choice = [true, false] }
batch_size = { grid = [32, 64] }
optimizer = "sgd"
epochs = 27

[trainer]
command = ["python3", "train.py", "--lr={lr}", "--act={act}", "--batch={batch_size}"]
workdir = "examples"
`
	cfg, err := Decode("sweep.toml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Search
	if s.Algorithm != "tpe" || s.NumSamples != 5 || s.MaxConcurrent != 3 || s.Seed == nil || *s.Seed != 11 {
		t.Errorf("[search]: got %+v", s)
	}
	if s.Trials() != 10 {
		t.Errorf("trials: got %d, want 5 samples × 2 grid cells", s.Trials())
	}
	want := map[string]searchspace.Domain{
		"lr":         searchspace.LogUniform{Low: 1e-4, High: 1e-1},
		"dropout":    searchspace.Uniform{Low: 0, High: 0.5},
		"momentum":   searchspace.QUniform{Low: 0.5, High: 0.99, Q: 0.01},
		"wd":         searchspace.QLogUniform{Low: 1e-5, High: 1e-2, Q: 1e-5},
		"layers":     searchspace.RandInt{Low: 1, High: 4},
		"width":      searchspace.LogRandInt{Low: 16, High: 1024},
		"hidden":     searchspace.Choice{Values: []any{int64(32), int64(64), int64(128)}},
		"act":        searchspace.Choice{Values: []any{"relu", "tanh"}},
		"bias":       searchspace.Choice{Values: []any{true, false}},
		"batch_size": searchspace.Grid{Values: []any{int64(32), int64(64)}},
		"optimizer":  searchspace.Constant{Value: "sgd"},
		"epochs":     searchspace.Constant{Value: int64(27)},
	}
	if s.Space.Len() != len(want) {
		t.Errorf("space has %d parameters, want %d", s.Space.Len(), len(want))
	}
	for name, d := range want {
		if got := s.Space.Domain(name); !reflect.DeepEqual(got, d) {
			t.Errorf("%s: got %#v, want %#v", name, got, d)
		}
	}
	if len(cfg.Trainer.Command) != 5 || cfg.Trainer.Workdir != "examples" {
		t.Errorf("trainer: command %q workdir %q", cfg.Trainer.Command, cfg.Trainer.Workdir)
	}
}

func TestLoadShippedExamples(t *testing.T) {
	files, _ := filepath.Glob("../../../examples/*.toml")
	if len(files) == 0 {
		t.Fatal("no example sweep files found")
	}
	for _, f := range files {
		if _, err := Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.toml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("got %v, want a not-exist error", err)
	}
}

// FuzzDecode checks that no input makes the decoder panic, that every
// error it returns is located in the file, and that what it accepts is a
// valid config whose space samples and expands. The seed corpus is in
// testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(valid))
	f.Add([]byte("name = 1"))
	f.Add([]byte("[search.space]\nx = { choice = [] }"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Decode("fuzz.toml", data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.File != "fuzz.toml" {
				t.Fatalf("error %v (%T) is not a located *Error", err, err)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("decoded a config that does not validate: %v", err)
		}
		space := cfg.Search.Space
		r := rand.New(rand.NewPCG(1, 2))
		for range 3 {
			if c := space.Sample(r); len(c) != space.Len() {
				t.Fatalf("sampled %d values for %d parameters", len(c), space.Len())
			}
		}
		if n := space.GridSize(); n <= 1000 && len(space.GridCells()) != n {
			t.Fatalf("grid of %d cells expanded to %d", n, len(space.GridCells()))
		}
	})
}

// TestDecodePointsAndWarmStart checks [search] points_to_evaluate and
// warm_start.
func TestDecodePointsAndWarmStart(t *testing.T) {
	doc := strings.Replace(valid, "max_concurrent = 2", `max_concurrent = 2
algorithm = "tpe"
warm_start = "digits-v1"
points_to_evaluate = [{ lr = 0.01, hidden = 64 }, { hidden = 32 }]`, 1)
	cfg, err := Decode("sweep.toml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := []map[string]any{{"lr": 0.01, "hidden": int64(64)}, {"hidden": int64(32)}}
	if !reflect.DeepEqual(cfg.Search.PointsToEvaluate, want) {
		t.Errorf("points: got %v, want %v", cfg.Search.PointsToEvaluate, want)
	}
	if cfg.Search.WarmStart != "digits-v1" {
		t.Errorf("warm_start: got %q", cfg.Search.WarmStart)
	}
}

// TestDecodeConditional checks a conditional parameter.
func TestDecodeConditional(t *testing.T) {
	doc := strings.Replace(valid, "epochs = 3", `epochs = 3
opt = { choice = ["sgd", "adam"] }
momentum = { uniform = [0.0, 0.99], when = "opt == 'sgd'" }`, 1)
	cfg, err := Decode("sweep.toml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	p, ok := cfg.Search.Space.Param("momentum")
	if !ok || p.Domain != (searchspace.Uniform{Low: 0, High: 0.99}) || p.When == nil || p.When.String() != "opt == 'sgd'" {
		t.Errorf("momentum: got %+v", p)
	}
	// A command cannot take it as an argument: it is absent from some trials.
	doc = strings.Replace(doc, `model = "mlp"`, `command = ["python3", "train.py", "--momentum={momentum}"]`, 1)
	_, err = Decode("sweep.toml", []byte(doc))
	var e *Error
	if !errors.As(err, &e) || e.Key != "trainer.command" || !strings.Contains(err.Error(), "names a conditional parameter") {
		t.Errorf("a conditional parameter in the command: got %v", err)
	}
}

// TestDecodeSeveralObjectives checks metric and mode arrays.
func TestDecodeSeveralObjectives(t *testing.T) {
	doc := strings.Replace(valid, "metric = \"val_loss\"\nmode = \"min\"", "metric = [\"val_loss\", \"val_acc\"]\nmode = [\"min\", \"max\"]", 1)
	cfg, err := Decode("sweep.toml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.Objective
	if !reflect.DeepEqual(o.Metrics, []string{"val_loss", "val_acc"}) || !reflect.DeepEqual(o.Modes, []string{"min", "max"}) || o.Metric != "" {
		t.Errorf("objective: got %+v", o)
	}
	for _, c := range []struct{ algorithm, key, msg string }{
		{"cmaes", "search.algorithm", "cmaes optimises one objective"},
		{"nsga2", "", ""},
		{"tpe", "", ""},
	} {
		_, err := Decode("sweep.toml", []byte(strings.Replace(doc, "num_samples = 4", "num_samples = 4\nalgorithm = \""+c.algorithm+"\"", 1)))
		var e *Error
		if c.key == "" && err != nil || c.key != "" && (!errors.As(err, &e) || e.Key != c.key || !strings.Contains(err.Error(), c.msg)) {
			t.Errorf("%s: got %v, want key %q", c.algorithm, err, c.key)
		}
	}
}
