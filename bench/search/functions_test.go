package main

import (
	"math"
	"testing"

	"github.com/gotune/gotune/tuner"
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
		if got := tuner.Hypervolume(c.points, c.ref); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("Hypervolume(%v, %v) = %g, want %g", c.points, c.ref, got, c.want)
		}
	}
}
