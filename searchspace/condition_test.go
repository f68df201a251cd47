package searchspace

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseCondition(t *testing.T) {
	cases := []struct {
		text string
		want *Condition
		err  string
	}{
		{"opt == 'sgd'", &Condition{"opt", "==", []any{"sgd"}}, ""},
		{`opt=="sgd"`, &Condition{"opt", "==", []any{"sgd"}}, ""},
		{"  opt != 'adam'  ", &Condition{"opt", "!=", []any{"adam"}}, ""},
		{"layers in [2, 3]", &Condition{"layers", "in", []any{int64(2), int64(3)}}, ""},
		{"opt not in ['adam','adamw']", &Condition{"opt", "not in", []any{"adam", "adamw"}}, ""},
		{"bias == true", &Condition{"bias", "==", []any{true}}, ""},
		{"lr_sched.kind in [0.5, -1e-3]", &Condition{"lr_sched.kind", "in", []any{0.5, -1e-3}}, ""},
		{"index == 3", &Condition{"index", "==", []any{int64(3)}}, ""},
		{"notes == 'x'", &Condition{"notes", "==", []any{"x"}}, ""},
		{"", nil, "starts with a parameter's name"},
		{"== 'sgd'", nil, "starts with a parameter's name"},
		{"opt = 'sgd'", nil, "followed by ==, !=, in or not in"},
		{"opt == sgd", nil, "a quoted string, a number, true or false"},
		{"opt == 'sgd", nil, "no closing '"},
		{"opt in 'sgd'", nil, "followed by a list"},
		{"opt in []", nil, "the list is empty"},
		{"opt in [1 2]", nil, "separated by commas"},
		{"opt not 'sgd'", nil, `"not" is followed by "in"`},
		{"opt == 'sgd' and x == 1", nil, `unexpected "and x == 1"`},
		{"opt == 1_000", nil, `"1_000" is not a number`},
		{"opt == --1", nil, `"--1" is not a number`},
		{"opt instance == 1", nil, "followed by ==, !=, in or not in"},
	}
	for _, c := range cases {
		got, err := ParseCondition(c.text)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseCondition(%q): got %v, %v; want an error with %q", c.text, got, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseCondition(%q): got %+v, %v; want %+v", c.text, got, err, c.want)
			continue
		}
		again, err := ParseCondition(got.String())
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Errorf("ParseCondition(%q).String() = %q reads back as %+v, %v", c.text, got.String(), again, err)
		}
	}
}

// FuzzParseCondition checks that the parser never panics, and that what
// it accepts renders as text it reads back the same.
func FuzzParseCondition(f *testing.F) {
	for _, s := range []string{"opt == 'sgd'", "layers in [2, 3]", `opt not in ["a", 'b']`, "b != false", "x == -1.5e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCondition(s)
		if err != nil {
			return
		}
		again, err := ParseCondition(c.String())
		if err != nil {
			t.Fatalf("%q parses, but its rendering %q does not: %v", s, c.String(), err)
		}
		if !reflect.DeepEqual(again, c) {
			t.Fatalf("%q parses as %+v, its rendering %q as %+v", s, c, c.String(), again)
		}
	})
}

func mustCond(t *testing.T, s string) *Condition {
	t.Helper()
	c, err := ParseCondition(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestConditionalSpace samples a tree: momentum only with sgd, nesterov
// only where momentum is present and not 0 (a chain), and beta only with
// adam or adamw.
func TestConditionalSpace(t *testing.T) {
	space, err := New(
		Param{Name: "opt", Domain: Choice{[]any{"sgd", "adam", "adamw"}}},
		Param{Name: "momentum", Domain: Choice{[]any{0.0, 0.9}}, When: mustCond(t, "opt == 'sgd'")},
		Param{Name: "nesterov", Domain: Choice{[]any{true, false}}, When: mustCond(t, "momentum != 0")},
		Param{Name: "beta", Domain: Uniform{0.8, 0.999}, When: mustCond(t, "opt in ['adam', 'adamw']")},
		Param{Name: "lr", Domain: LogUniform{1e-4, 1e-1}},
	)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	seen := map[string]int{}
	for range 400 {
		cfg := space.Sample(r)
		_, hasMomentum := cfg["momentum"]
		_, hasNesterov := cfg["nesterov"]
		_, hasBeta := cfg["beta"]
		opt := cfg["opt"]
		if hasMomentum != (opt == "sgd") || hasBeta != (opt != "sgd") {
			t.Fatalf("opt = %v with %v", opt, cfg)
		}
		if hasNesterov != (hasMomentum && cfg["momentum"] != 0.0) {
			t.Fatalf("nesterov present = %v in %v", hasNesterov, cfg)
		}
		if _, ok := cfg["lr"]; !ok {
			t.Fatalf("lr missing from %v", cfg)
		}
		seen[strings.Join(sortedKeys(cfg), ",")]++
	}
	if len(seen) != 3 {
		t.Errorf("sampled %d shapes of configuration, want 3: %v", len(seen), seen)
	}
	// Check gives the condition's values the parent's types.
	nesterov, _ := space.Param("nesterov")
	if got := nesterov.When.Values[0]; got != 0.0 {
		t.Errorf("nesterov's condition compares with %v (%T), want 0.0", got, got)
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func TestCheckConditions(t *testing.T) {
	opt := Param{Name: "opt", Domain: Choice{[]any{"sgd", "adam"}}}
	lr := Param{Name: "lr", Domain: LogUniform{1e-4, 1e-1}}
	cases := []struct {
		name   string
		params []Param
		param  string
		err    string
	}{
		{"unknown parent", []Param{opt, {Name: "m", Domain: Uniform{0, 1}, When: mustCond(t, "optim == 'sgd'")}}, "m", "optim names no parameter of the space"},
		{"itself", []Param{{Name: "m", Domain: Choice{[]any{"a"}}, When: mustCond(t, "m == 'a'")}}, "m", "m cannot depend on itself"},
		{"numeric parent", []Param{lr, {Name: "m", Domain: Uniform{0, 1}, When: mustCond(t, "lr == 0.01")}}, "m", "lr is { loguniform = [0.0001, 0.1] }; a condition compares a choice or a grid"},
		{"value not in parent", []Param{opt, {Name: "m", Domain: Uniform{0, 1}, When: mustCond(t, "opt in ['sgd', 'sdg']")}}, "m", `opt can never be "sdg"`},
		{"value of another kind", []Param{opt, {Name: "m", Domain: Uniform{0, 1}, When: mustCond(t, "opt == 1")}}, "m", "opt can never be 1"},
		{"grid child", []Param{opt, {Name: "b", Domain: Grid{[]any{int64(1)}}, When: mustCond(t, "opt == 'sgd'")}}, "b", "cannot be conditional"},
		{"cycle", []Param{
			{Name: "a", Domain: Choice{[]any{"x"}}, When: mustCond(t, "b == 'x'")},
			{Name: "b", Domain: Choice{[]any{"x"}}, When: mustCond(t, "a == 'x'")},
		}, "a", "conditions form a cycle"},
	}
	for _, c := range cases {
		_, err := New(c.params...)
		ce, ok := err.(*ConditionError)
		if !ok || ce.Param != c.param || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: got %v, want a ConditionError on %s with %q", c.name, err, c.param, c.err)
		}
	}
}

func TestParseConditional(t *testing.T) {
	d, c, err := ParseConditional(map[string]any{"uniform": []any{0.0, 0.99}, "when": "opt == 'sgd'"})
	if err != nil || d != (Uniform{0, 0.99}) || !reflect.DeepEqual(c, &Condition{"opt", "==", []any{"sgd"}}) {
		t.Errorf("got %v, %+v, %v", d, c, err)
	}
	if _, c, err := ParseConditional(map[string]any{"uniform": []any{0.0, 0.99}}); c != nil || err != nil {
		t.Errorf("without when: got %+v, %v", c, err)
	}
	for raw, want := range map[string]any{
		"want a string":             map[string]any{"uniform": []any{0.0, 1.0}, "when": int64(1)},
		"followed by ==, !=, in or": map[string]any{"uniform": []any{0.0, 1.0}, "when": "opt = 'a'"},
	} {
		_, _, err := ParseConditional(want)
		if _, ok := err.(*ConditionError); !ok || !strings.Contains(err.Error(), raw) {
			t.Errorf("%v: got %v, want a ConditionError with %q", want, err, raw)
		}
	}
	p := Param{Name: "m", Domain: Uniform{0, 0.99}, When: &Condition{"opt", "==", []any{"sgd"}}}
	if got, want := p.String(), `{ uniform = [0.0, 0.99], when = "opt == 'sgd'" }`; got != want {
		t.Errorf("Param.String: got %s, want %s", got, want)
	}
}
