package searchspace

import (
	"strings"
	"testing"
)

func TestMember(t *testing.T) {
	cases := []struct {
		name string
		d    Domain
		v    any
		want any    // the value Member returns
		err  string // a fragment of the error, "" for none
	}{
		{"uniform int", Uniform{0, 1}, int64(0), 0.0, ""},
		{"uniform inside", Uniform{0, 1}, 0.5, 0.5, ""},
		{"uniform high is open", Uniform{0, 1}, 1.0, nil, "not a value of { uniform = [0.0, 1.0] }"},
		{"uniform below", Uniform{0, 1}, -0.1, nil, "not a value"},
		{"uniform string", Uniform{0, 1}, "a", nil, "not a value"},
		{"loguniform", LogUniform{1e-4, 1e-1}, 0.01, 0.01, ""},
		{"loguniform zero", LogUniform{1e-4, 1e-1}, 0.0, nil, "not a value"},
		{"quniform step", QUniform{0.5, 0.99, 0.01}, 0.53, 0.53, ""},
		{"quniform top", QUniform{0, 1, 0.25}, 1.0, 1.0, ""},
		{"quniform off step", QUniform{0, 1, 0.25}, 0.3, nil, "nearest step is 0.25"},
		{"qloguniform", QLogUniform{1, 100, 1}, int64(7), 7.0, ""},
		{"randint", RandInt{1, 4}, int64(3), int64(3), ""},
		{"randint whole float", RandInt{1, 4}, 2.0, int64(2), ""},
		{"randint high is exclusive", RandInt{1, 4}, int64(4), nil, "not a value"},
		{"randint fraction", RandInt{1, 4}, 2.5, nil, "not a value"},
		{"lograndint", LogRandInt{16, 1024}, int64(16), int64(16), ""},
		{"choice int", Choice{[]any{int64(32), int64(64)}}, 64.0, int64(64), ""},
		{"choice float", Choice{[]any{0.5, 1.0}}, int64(1), 1.0, ""},
		{"choice string", Choice{[]any{"sgd", "adam"}}, "adam", "adam", ""},
		{"choice absent", Choice{[]any{"sgd", "adam"}}, "rmsprop", nil, `"rmsprop" is not a value of { choice = ["sgd", "adam"] }`},
		{"grid bool", Grid{[]any{true, false}}, false, false, ""},
		{"constant", Constant{int64(27)}, int64(27), int64(27), ""},
		{"constant other", Constant{int64(27)}, int64(9), nil, "not a value of 27"},
		{"not a value kind", Uniform{0, 1}, []any{}, nil, "values must be"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Member(c.d, c.v)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("Member(%s, %v): got error %v, want one with %q", c.d, c.v, err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Member(%s, %v): %v", c.d, c.v, err)
			}
			if got != c.want {
				t.Errorf("Member(%s, %v): got %v (%T), want %v (%T)", c.d, c.v, got, got, c.want, c.want)
			}
		})
	}
}
