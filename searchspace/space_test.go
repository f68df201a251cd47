package searchspace

import (
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		raw  any
		want Domain
	}{
		{"uniform", map[string]any{"uniform": []any{0.0, 0.5}}, Uniform{0, 0.5}},
		{"uniform int bounds", map[string]any{"uniform": []any{int64(0), int64(2)}}, Uniform{0, 2}},
		{"loguniform", map[string]any{"loguniform": []any{1e-4, 1e-1}}, LogUniform{1e-4, 1e-1}},
		{"quniform", map[string]any{"quniform": []any{0.5, 0.99, 0.01}}, QUniform{0.5, 0.99, 0.01}},
		{"qloguniform", map[string]any{"qloguniform": []any{1e-4, 1e-1, 1e-4}}, QLogUniform{1e-4, 1e-1, 1e-4}},
		{"quniform int step", map[string]any{"quniform": []any{int64(0), int64(100), int64(5)}}, QUniform{0, 100, 5}},
		{"randint", map[string]any{"randint": []any{int64(1), int64(4)}}, RandInt{1, 4}},
		{"randint integral floats", map[string]any{"randint": []any{1.0, 4.0}}, RandInt{1, 4}},
		{"lograndint", map[string]any{"lograndint": []any{int64(16), int64(1024)}}, LogRandInt{16, 1024}},
		{"choice ints", map[string]any{"choice": []any{int64(32), int64(64)}}, Choice{[]any{int64(32), int64(64)}}},
		{"choice mixed numbers become floats", map[string]any{"choice": []any{int64(1), 2.5}}, Choice{[]any{1.0, 2.5}}},
		{"choice strings", map[string]any{"choice": []any{"relu", "tanh"}}, Choice{[]any{"relu", "tanh"}}},
		{"choice booleans", map[string]any{"choice": []any{true, false}}, Choice{[]any{true, false}}},
		{"grid", map[string]any{"grid": []any{int64(32), int64(64)}}, Grid{[]any{int64(32), int64(64)}}},
		{"grid strings", map[string]any{"grid": []any{"sgd", "adam"}}, Grid{[]any{"sgd", "adam"}}},
		{"constant int", int64(27), Constant{int64(27)}},
		{"constant float", 0.5, Constant{0.5}},
		{"constant string", "adam", Constant{"adam"}},
		{"constant bool", true, Constant{true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.raw)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Parse: got %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		raw  any
		want string
	}{
		{"inverted range", map[string]any{"uniform": []any{1.0, 0.0}}, "uniform: empty or inverted range [1, 0]: high must exceed low"},
		{"empty range", map[string]any{"uniform": []any{1.0, 1.0}}, "empty or inverted range [1, 1]"},
		{"log touches zero", map[string]any{"loguniform": []any{0.0, 1.0}}, "loguniform: log range [0, 1] touches zero: low must be positive"},
		{"log negative", map[string]any{"loguniform": []any{-1.0, 1.0}}, "log range [-1, 1] goes negative"},
		{"log inverted", map[string]any{"loguniform": []any{0.1, 0.01}}, "empty or inverted range [0.1, 0.01]"},
		{"qlog touches zero", map[string]any{"qloguniform": []any{0.0, 1.0, 0.1}}, "qloguniform: log range [0, 1] touches zero"},
		{"q zero", map[string]any{"quniform": []any{0.0, 1.0, 0.0}}, "quniform: step q must be positive, got 0"},
		{"q negative", map[string]any{"qloguniform": []any{0.1, 1.0, -0.1}}, "step q must be positive, got -0.1"},
		{"q wider than range", map[string]any{"quniform": []any{0.0, 1.0, 5.0}}, "step q 5 is wider than the range [0, 1]"},
		{"q inverted range", map[string]any{"quniform": []any{1.0, 0.0, 0.1}}, "quniform: empty or inverted range"},
		{"q missing", map[string]any{"quniform": []any{0.0, 1.0}}, "want an array [low, high, q] of 3 numbers, got 2 elements"},
		{"empty randint", map[string]any{"randint": []any{int64(3), int64(3)}}, "randint: empty or inverted integer range [3, 3)"},
		{"inverted randint", map[string]any{"randint": []any{int64(4), int64(1)}}, "empty or inverted integer range [4, 1)"},
		{"fractional randint", map[string]any{"randint": []any{0.5, int64(3)}}, "bounds must be integers, got 0.5"},
		{"lograndint zero", map[string]any{"lograndint": []any{int64(0), int64(8)}}, "lograndint: log range [0, 8) touches zero: low must be at least 1"},
		{"lograndint negative", map[string]any{"lograndint": []any{int64(-2), int64(8)}}, "goes negative"},
		{"empty choice", map[string]any{"choice": []any{}}, "choice: choice needs at least one value"},
		{"empty grid", map[string]any{"grid": []any{}}, "grid: grid needs at least one value"},
		{"mixed choice", map[string]any{"choice": []any{int64(1), "a"}}, "all be numbers, all strings or all booleans, got numbers and strings"},
		{"mixed grid", map[string]any{"grid": []any{true, "a"}}, "grid values must all be numbers"},
		{"choice of arrays", map[string]any{"choice": []any{[]any{1.0}}}, "choice values must be numbers, strings or booleans, got an array"},
		{"choice not an array", map[string]any{"choice": "relu"}, "want an array of values, got a string"},
		{"one bound", map[string]any{"uniform": []any{1.0}}, "want an array [low, high] of 2 numbers, got 1 element"},
		{"string bounds", map[string]any{"uniform": []any{"a", "b"}}, "[low, high] must be numbers, got a string"},
		{"unknown kind", map[string]any{"gaussian": []any{0.0, 1.0}}, "gaussian: unknown domain (want one of choice, grid, loguniform"},
		{"two kinds", map[string]any{"uniform": []any{0.0, 1.0}, "choice": []any{1.0}}, "exactly one key"},
		{"array constant", []any{1.0}, "plain value or a table such as { uniform = [0, 1] }, got an array"},
		{"nan bound", map[string]any{"uniform": []any{math.NaN(), 1.0}}, "finite"},
		{"infinite constant", math.Inf(1), "a constant must be finite"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.raw)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse(%v): got error %v, want one containing %q", tt.raw, err, tt.want)
			}
		})
	}
}

func TestSampleStaysInDomain(t *testing.T) {
	space, err := New(
		Param{Name: "lr", Domain: LogUniform{1e-4, 1e-1}},
		Param{Name: "dropout", Domain: Uniform{0, 0.5}},
		Param{Name: "momentum", Domain: QUniform{0.5, 0.99, 0.01}},
		Param{Name: "wd", Domain: QLogUniform{1e-5, 1e-2, 1e-5}},
		Param{Name: "layers", Domain: RandInt{1, 4}},
		Param{Name: "width", Domain: LogRandInt{16, 1024}},
		Param{Name: "act", Domain: Choice{[]any{"relu", "tanh"}}},
		Param{Name: "batch", Domain: Grid{[]any{int64(32), int64(64)}}},
		Param{Name: "epochs", Domain: Constant{int64(9)}},
	)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	seenLayers := map[int64]bool{}
	seenMomentum := map[float64]bool{}
	for range 5000 {
		c := space.Sample(r)
		if lr := c["lr"].(float64); lr < 1e-4 || lr >= 1e-1 {
			t.Fatalf("lr %g outside [1e-4, 1e-1)", lr)
		}
		if d := c["dropout"].(float64); d < 0 || d >= 0.5 {
			t.Fatalf("dropout %g outside [0, 0.5)", d)
		}
		m := c["momentum"].(float64)
		k := math.Round((m - 0.5) / 0.01)
		if m < 0.5 || m > 0.99 || m != math.Round(m*100)/100 || k < 0 || k > 49 {
			t.Fatalf("momentum %v is not one of 0.50, 0.51, …, 0.99", m)
		}
		seenMomentum[m] = true
		if wd := c["wd"].(float64); wd < 1e-5 || wd > 1e-2 || math.Abs(wd/1e-5-math.Round(wd/1e-5)) > 1e-6 {
			t.Fatalf("wd %v is not a multiple of 1e-5 in [1e-5, 1e-2]", wd)
		}
		l := c["layers"].(int64)
		if l < 1 || l >= 4 {
			t.Fatalf("layers %d outside [1, 4)", l)
		}
		seenLayers[l] = true
		if w := c["width"].(int64); w < 16 || w >= 1024 {
			t.Fatalf("width %d outside [16, 1024)", w)
		}
		if a := c["act"].(string); a != "relu" && a != "tanh" {
			t.Fatalf("act %q not a choice", a)
		}
		if b := c["batch"].(int64); b != 32 && b != 64 {
			t.Fatalf("batch %d not a grid value", b)
		}
		if c["epochs"] != int64(9) {
			t.Fatalf("epochs %v, want constant 9", c["epochs"])
		}
	}
	if len(seenLayers) != 3 {
		t.Errorf("randint [1, 4) drew %v, want each of 1, 2, 3", seenLayers)
	}
	if !seenMomentum[0.5] || !seenMomentum[0.99] || len(seenMomentum) != 50 {
		t.Errorf("quniform [0.5, 0.99, 0.01] drew %d distinct values (ends: %v %v), want all 50", len(seenMomentum), seenMomentum[0.5], seenMomentum[0.99])
	}
}

// TestLogDomainsFavourSmallValues checks that log domains spread draws
// evenly over orders of magnitude.
func TestLogDomainsFavourSmallValues(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const n = 20000
	var lowLog, lowInt int
	for range n {
		if (LogUniform{1e-4, 1}).Sample(r).(float64) < 1e-2 {
			lowLog++
		}
		if (LogRandInt{1, 10000}).Sample(r).(int64) < 100 {
			lowInt++
		}
	}
	for name, got := range map[string]int{"loguniform": lowLog, "lograndint": lowInt} {
		if frac := float64(got) / n; frac < 0.45 || frac > 0.55 {
			t.Errorf("%s: %.3f of draws in the lower half of the orders of magnitude, want about 0.5", name, frac)
		}
	}
}

func TestQUniformValues(t *testing.T) {
	d := QUniform{0.5, 0.99, 0.01}
	if d.Steps() != 49 {
		t.Errorf("steps of [0.5, 0.99] by 0.01: got %d, want 49", d.Steps())
	}
	if got := d.Value(3); got != 0.53 {
		t.Errorf("value 3: got %v, want 0.53", got)
	}
	if got := d.Value(49); got != 0.99 {
		t.Errorf("value 49: got %v, want 0.99", got)
	}
	if got := d.Round(0.7349); got != 0.73 {
		t.Errorf("round of 0.7349: got %v, want 0.73", got)
	}
	if got := d.Round(2); got != 0.99 {
		t.Errorf("round of 2: got %v, want the top value 0.99", got)
	}
	// A high that is not on the grid is never reached.
	if got := (QUniform{0, 1, 0.3}).Steps(); got != 3 {
		t.Errorf("steps of [0, 1] by 0.3: got %d, want 3 (0, 0.3, 0.6, 0.9)", got)
	}
	q := QLogUniform{1, 100, 10}
	if got := q.Round(100); got != 91 {
		t.Errorf("qloguniform round of 100: got %v, want 91 (the top value 1 + 9·10)", got)
	}
	if got := q.Round(1.2); got != 1 {
		t.Errorf("qloguniform round of 1.2: got %v, want 1", got)
	}
}

func TestSampleIsReproducible(t *testing.T) {
	space, _ := New(Param{Name: "a", Domain: Uniform{0, 1}}, Param{Name: "b", Domain: Choice{[]any{int64(1), int64(2), int64(3)}}}, Param{Name: "c", Domain: LogRandInt{1, 100}})
	r1, r2 := rand.New(rand.NewPCG(7, 7)), rand.New(rand.NewPCG(7, 7))
	for range 50 {
		if a, b := space.Sample(r1), space.Sample(r2); !reflect.DeepEqual(a, b) {
			t.Fatalf("same seed, different configs: %v vs %v", a, b)
		}
	}
}

func TestSpaceRejects(t *testing.T) {
	for _, tt := range []struct {
		name   string
		params []Param
		want   string
	}{
		{"duplicate", []Param{{Name: "a", Domain: Uniform{0, 1}}, {Name: "a", Domain: Uniform{0, 2}}}, `parameter "a" defined twice`},
		{"empty name", []Param{{Name: "", Domain: Uniform{0, 1}}}, "name must not be empty"},
		{"invalid domain", []Param{{Name: "lr", Domain: LogUniform{0, 1}}}, `parameter "lr": log range [0, 1] touches zero`},
		{"constant of another type", []Param{{Name: "x", Domain: Constant{[]int{1}}}}, "got []int"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.params...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestGridCells(t *testing.T) {
	space, err := New(
		Param{Name: "opt", Domain: Grid{[]any{"sgd", "adam"}}},
		Param{Name: "lr", Domain: Uniform{0, 1}},
		Param{Name: "batch", Domain: Grid{[]any{int64(32), int64(64), int64(128)}}},
	)
	if err != nil {
		t.Fatal(err)
	}
	if got := space.GridSize(); got != 6 {
		t.Fatalf("grid size: got %d, want 6", got)
	}
	want := []map[string]any{
		{"batch": int64(32), "opt": "sgd"}, {"batch": int64(32), "opt": "adam"},
		{"batch": int64(64), "opt": "sgd"}, {"batch": int64(64), "opt": "adam"},
		{"batch": int64(128), "opt": "sgd"}, {"batch": int64(128), "opt": "adam"},
	}
	if got := space.GridCells(); !reflect.DeepEqual(got, want) {
		t.Errorf("cells:\n got %v\nwant %v", got, want)
	}
	rest := space.WithoutGrid()
	if rest.Len() != 1 || rest.Params()[0].Name != "lr" {
		t.Errorf("space without grid: %v", rest.Params())
	}
	if space.Len() != 3 {
		t.Errorf("WithoutGrid changed the space: %d params", space.Len())
	}

	plain, _ := New(Param{Name: "lr", Domain: Uniform{0, 1}})
	if plain.GridSize() != 1 || !reflect.DeepEqual(plain.GridCells(), []map[string]any{{}}) {
		t.Errorf("a space without grid has one empty cell: %d %v", plain.GridSize(), plain.GridCells())
	}
}

func TestGridSizeSaturates(t *testing.T) {
	vals := make([]any, 1000)
	for i := range vals {
		vals[i] = int64(i)
	}
	space, _ := New(Param{Name: "a", Domain: Grid{vals}}, Param{Name: "b", Domain: Grid{vals}}, Param{Name: "c", Domain: Grid{vals}}, Param{Name: "d", Domain: Grid{vals}})
	if got := space.GridSize(); got != MaxGridCells+1 {
		t.Errorf("10^12 cells: got %d, want MaxGridCells+1", got)
	}
}

func TestString(t *testing.T) {
	for _, tt := range []struct {
		d    Domain
		want string
	}{
		{Uniform{0, 0.5}, "{ uniform = [0.0, 0.5] }"},
		{LogUniform{1e-4, 0.1}, "{ loguniform = [0.0001, 0.1] }"},
		{QUniform{0.5, 0.99, 0.01}, "{ quniform = [0.5, 0.99, 0.01] }"},
		{QLogUniform{1e-5, 1e-2, 1e-5}, "{ qloguniform = [1e-05, 0.01, 1e-05] }"},
		{RandInt{1, 4}, "{ randint = [1, 4] }"},
		{LogRandInt{16, 1024}, "{ lograndint = [16, 1024] }"},
		{Choice{[]any{"relu", "tanh"}}, `{ choice = ["relu", "tanh"] }`},
		{Grid{[]any{int64(32), 64.5}}, "{ grid = [32, 64.5] }"},
		{Constant{"adam"}, `"adam"`},
		{Constant{int64(27)}, "27"},
	} {
		if got := tt.d.String(); got != tt.want {
			t.Errorf("%#v: got %s, want %s", tt.d, got, tt.want)
		}
	}
}

func TestFormatValue(t *testing.T) {
	for v, want := range map[any]string{int64(64): "64", 0.001: "0.001", "relu": "relu", true: "true", 1e-5: "1e-05"} {
		if got := FormatValue(v); got != want {
			t.Errorf("FormatValue(%v): got %q, want %q", v, got, want)
		}
	}
}
