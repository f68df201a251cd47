package main

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gotune/gotune/pareto"
)

func TestFunctionsAtTheirMinimisers(t *testing.T) {
	ones := make([]float64, 10)
	for i := range ones {
		ones[i] = 1
	}
	for _, tt := range []struct {
		name string
		f    func([]float64) float64
		x    []float64
		want float64
	}{
		{"branin at (-π, 12.275)", branin, []float64{-math.Pi, 12.275}, 0.397887},
		{"branin at (π, 2.275)", branin, []float64{math.Pi, 2.275}, 0.397887},
		{"branin at (9.42478, 2.475)", branin, []float64{9.42478, 2.475}, 0.397887},
		{"hartmann6", hartmann6, []float64{0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573}, -3.32237},
		{"rosenbrock", rosenbrock, ones, 0},
		{"levy", levy, ones[:4], 0},
	} {
		if got := tt.f(tt.x); math.Abs(got-tt.want) > 1e-5 {
			t.Errorf("%s: got %.7f, want %.6f", tt.name, got, tt.want)
		}
	}
	for _, fn := range functions {
		if got := fn.space().Len(); got != len(fn.low) {
			t.Errorf("%s: space of %d parameters, want %d", fn.name, got, len(fn.low))
		}
	}
}

func TestHypervolume(t *testing.T) {
	for _, c := range []struct {
		points [][]float64
		ref    []float64
		want   float64
	}{
		{[][]float64{{1, 1}}, []float64{2, 2}, 1},
		{[][]float64{{0, 1}, {1, 0}}, []float64{2, 2}, 3},
		{[][]float64{{0, 1}, {1, 0}, {1, 1}, {3, 0}}, []float64{2, 2}, 3},
		{[][]float64{{1, 1, 1}}, []float64{2, 2, 2}, 1},
		{[][]float64{{0, 0, 1}, {1, 1, 0}}, []float64{2, 2, 2}, 4 + 2 - 1},
	} {
		if got := pareto.Hypervolume(c.points, c.ref); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("Hypervolume(%v, %v) = %g, want %g", c.points, c.ref, got, c.want)
		}
	}
}

// TestTables checks the generated tables: every configuration has a
// value, the minimum is among them, and the generated tables' structure
// holds (the mlp table holds every measured configuration's error
// range; a cut-off NAS cell scores chance).
func TestTables(t *testing.T) {
	tables := makeTables()
	if len(tables) != 7 {
		t.Fatalf("%d tables, want 7", len(tables))
	}
	for _, tb := range tables {
		size := 1
		for _, n := range tb.Levels {
			size *= n
		}
		if len(tb.Values) != size || len(tb.Categorical) != len(tb.Levels) {
			t.Errorf("%s: %d values for %d configurations", tb.Name, len(tb.Values), size)
		}
		if !slices.Contains(tb.Values, tb.Min) {
			t.Errorf("%s: minimum %g is not a value", tb.Name, tb.Min)
		}
		if got := tb.space().Len(); got != len(tb.Levels) {
			t.Errorf("%s: space of %d parameters, want %d", tb.Name, got, len(tb.Levels))
		}
	}
	m := newMLPDigits()
	if len(m.errs) != 717 {
		t.Errorf("mlp table: %d measured configurations, want 717", len(m.errs))
	}
	if lo, hi := slices.Min(m.errs), slices.Max(m.errs); lo < 0 || hi > 1 || lo > 0.01 {
		t.Errorf("mlp table: errors in [%g, %g], want within [0, 1] and the best under 0.01", lo, hi)
	}
	cell := newNASCell(201)
	// Every edge "none" but 1→2: nothing reaches node 3.
	if got := cell.err([]int{opNone, opNone, opConv3, opNone, opNone, opNone}); got < 89 {
		t.Errorf("a cut-off cell scores %g, want about 90", got)
	}
	if got := cell.err([]int{opConv3, opConv3, opConv3, opSkip, opConv3, opConv3}); got > 15 {
		t.Errorf("a cell of convolutions scores %g, want a low error", got)
	}
}

// TestReadPeerTabular reads saved peer runs, skipping the peer's other
// lines, and fails on a line that is not JSON.
func TestReadPeerTabular(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.jsonl")
	os.WriteFile(good, []byte(`{"mode": "version", "optuna": "3.1.0"}
{"mode": "tabular", "table": "branin_t", "setting": "sync8", "sampler": "tpe_liar", "seed": 3, "regret": [2, 1], "pending_repeats": 1, "repeats": 2}

`), 0o644)
	runs := map[string][]tabularRun{}
	if err := readPeerTabular(good, runs); err != nil {
		t.Fatal(err)
	}
	rs := runs["optuna_tpe_liar/branin_t/sync8"]
	if len(runs) != 1 || len(rs) != 1 || !slices.Equal(rs[0].regret, []float64{2, 1}) || rs[0].pendingRepeats != 1 || rs[0].repeats != 2 {
		t.Errorf("read %+v", runs)
	}
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte("{\"mode\": \"tabular\"\n"), 0o644)
	if err := readPeerTabular(bad, runs); err == nil {
		t.Error("a truncated line read without error")
	}
}
