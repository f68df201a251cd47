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
		{"randint", map[string]any{"randint": []any{int64(1), int64(4)}}, RandInt{1, 4}},
		{"randint integral floats", map[string]any{"randint": []any{1.0, 4.0}}, RandInt{1, 4}},
		{"choice ints", map[string]any{"choice": []any{int64(32), int64(64)}}, Choice{[]any{int64(32), int64(64)}}},
		{"choice mixed numbers become floats", map[string]any{"choice": []any{int64(1), 2.5}}, Choice{[]any{1.0, 2.5}}},
		{"choice strings", map[string]any{"choice": []any{"relu", "tanh"}}, Choice{[]any{"relu", "tanh"}}},
		{"constant int", int64(27), Constant{int64(27)}},
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
		{"inverted range", map[string]any{"uniform": []any{1.0, 0.0}}, "uniform: empty or inverted range"},
		{"empty range", map[string]any{"uniform": []any{1.0, 1.0}}, "empty or inverted"},
		{"log touches zero", map[string]any{"loguniform": []any{0.0, 1.0}}, "log range must be positive"},
		{"log negative", map[string]any{"loguniform": []any{-1.0, 1.0}}, "log range must be positive"},
		{"empty randint", map[string]any{"randint": []any{int64(3), int64(3)}}, "empty integer range"},
		{"fractional randint", map[string]any{"randint": []any{0.5, int64(3)}}, "must be integers"},
		{"empty choice", map[string]any{"choice": []any{}}, "at least one value"},
		{"mixed choice", map[string]any{"choice": []any{int64(1), "a"}}, "all be numbers, all strings"},
		{"one bound", map[string]any{"uniform": []any{1.0}}, "2 numbers, got 1 elements"},
		{"string bounds", map[string]any{"uniform": []any{"a", "b"}}, "bounds must be numbers"},
		{"unknown kind", map[string]any{"gaussian": []any{0.0, 1.0}}, "unknown domain"},
		{"two kinds", map[string]any{"uniform": []any{0.0, 1.0}, "choice": []any{1.0}}, "exactly one key"},
		{"array constant", []any{1.0}, "plain value or a table"},
		{"nan bound", map[string]any{"uniform": []any{math.NaN(), 1.0}}, "finite"},
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
		Param{"lr", LogUniform{1e-4, 1e-1}},
		Param{"dropout", Uniform{0, 0.5}},
		Param{"layers", RandInt{1, 4}},
		Param{"act", Choice{[]any{"relu", "tanh"}}},
		Param{"epochs", Constant{int64(9)}},
	)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	seenLayers := map[int64]bool{}
	for range 2000 {
		c := space.Sample(r)
		if lr := c["lr"].(float64); lr < 1e-4 || lr >= 1e-1 {
			t.Fatalf("lr %g outside [1e-4, 1e-1)", lr)
		}
		if d := c["dropout"].(float64); d < 0 || d >= 0.5 {
			t.Fatalf("dropout %g outside [0, 0.5)", d)
		}
		l := c["layers"].(int64)
		if l < 1 || l >= 4 {
			t.Fatalf("layers %d outside [1, 4)", l)
		}
		seenLayers[l] = true
		if a := c["act"].(string); a != "relu" && a != "tanh" {
			t.Fatalf("act %q not a choice", a)
		}
		if c["epochs"] != int64(9) {
			t.Fatalf("epochs %v, want constant 9", c["epochs"])
		}
	}
	if len(seenLayers) != 3 {
		t.Errorf("randint [1, 4) drew %v, want each of 1, 2, 3", seenLayers)
	}
}

func TestSampleIsReproducible(t *testing.T) {
	space, _ := New(Param{"a", Uniform{0, 1}}, Param{"b", Choice{[]any{int64(1), int64(2), int64(3)}}})
	r1, r2 := rand.New(rand.NewPCG(7, 7)), rand.New(rand.NewPCG(7, 7))
	for range 50 {
		if a, b := space.Sample(r1), space.Sample(r2); !reflect.DeepEqual(a, b) {
			t.Fatalf("same seed, different configs: %v vs %v", a, b)
		}
	}
}

func TestSpaceRejectsDuplicates(t *testing.T) {
	_, err := New(Param{"a", Uniform{0, 1}}, Param{"a", Uniform{0, 2}})
	if err == nil || !strings.Contains(err.Error(), "defined twice") {
		t.Errorf("got %v, want a duplicate error", err)
	}
}

func TestFormatValue(t *testing.T) {
	for v, want := range map[any]string{int64(64): "64", 0.001: "0.001", "relu": "relu", true: "true", 1e-5: "1e-05"} {
		if got := FormatValue(v); got != want {
			t.Errorf("FormatValue(%v): got %q, want %q", v, got, want)
		}
	}
}
