package main

import (
	"fmt"
	"math"

	"github.com/gotune/gotune/searchspace"
)

// function is a benchmark function to minimise over a box. optuna_peer.py
// defines the same functions under the same names.
type function struct {
	name    string
	optimum float64
	low     []float64
	high    []float64
	f       func(x []float64) float64
}

// branin is the Branin-Hoo function on [-5, 10] × [0, 15]; its minimum
// 0.397887 is reached at (-π, 12.275), (π, 2.275) and (9.42478, 2.475).
func branin(x []float64) float64 {
	const a, r, s = 1.0, 6.0, 10.0
	b := 5.1 / (4 * math.Pi * math.Pi)
	c := 5 / math.Pi
	t := 1 / (8 * math.Pi)
	u := x[1] - b*x[0]*x[0] + c*x[0] - r
	return a*u*u + s*(1-t)*math.Cos(x[0]) + s
}

var (
	hartmannA = [4][6]float64{
		{10, 3, 17, 3.5, 1.7, 8},
		{0.05, 10, 17, 0.1, 8, 14},
		{3, 3.5, 1.7, 10, 17, 8},
		{17, 8, 0.05, 10, 0.1, 14},
	}
	hartmannP = [4][6]float64{
		{1312, 1696, 5569, 124, 8283, 5886},
		{2329, 4135, 8307, 3736, 1004, 9991},
		{2348, 1451, 3522, 2883, 3047, 6650},
		{4047, 8828, 8732, 5743, 1091, 381},
	}
	hartmannAlpha = [4]float64{1, 1.2, 3, 3.2}
)

// hartmann6 is the 6-dimensional Hartmann function on [0, 1]^6; its
// minimum −3.32237 is at (0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573).
func hartmann6(x []float64) float64 {
	sum := 0.0
	for i := range 4 {
		inner := 0.0
		for j := range 6 {
			d := x[j] - hartmannP[i][j]*1e-4
			inner += hartmannA[i][j] * d * d
		}
		sum += hartmannAlpha[i] * math.Exp(-inner)
	}
	return -sum
}

// rosenbrock is the Rosenbrock function on [-5, 10]^d; its minimum 0 is at
// (1, …, 1).
func rosenbrock(x []float64) float64 {
	sum := 0.0
	for i := 0; i+1 < len(x); i++ {
		a, b := x[i+1]-x[i]*x[i], x[i]-1
		sum += 100*a*a + b*b
	}
	return sum
}

func box(d int, low, high float64) ([]float64, []float64) {
	lo, hi := make([]float64, d), make([]float64, d)
	for i := range d {
		lo[i], hi[i] = low, high
	}
	return lo, hi
}

var functions = func() []function {
	hLow, hHigh := box(6, 0, 1)
	rLow, rHigh := box(10, -5, 10)
	return []function{
		{"branin", 0.397887, []float64{-5, 0}, []float64{10, 15}, branin},
		{"hartmann6", -3.32237, hLow, hHigh, hartmann6},
		{"rosenbrock10", 0, rLow, rHigh, rosenbrock},
	}
}()

// space is the search space of fn: one uniform parameter per dimension,
// x0, x1, … (at most 10, so that name order is dimension order).
func (fn function) space() *searchspace.Space {
	s := &searchspace.Space{}
	for i := range fn.low {
		if err := s.Add(fmt.Sprintf("x%d", i), searchspace.Uniform{Low: fn.low[i], High: fn.high[i]}); err != nil {
			panic(err)
		}
	}
	return s
}

// eval evaluates fn at a configuration of its space.
func (fn function) eval(cfg map[string]any) float64 {
	x := make([]float64, len(fn.low))
	for i := range x {
		x[i] = cfg[fmt.Sprintf("x%d", i)].(float64)
	}
	return fn.f(x)
}

// levy is the Levy function on any box; its minimum 0 is at (1, …, 1).
func levy(x []float64) float64 {
	w := func(v float64) float64 { return 1 + (v-1)/4 }
	d := len(x)
	s := math.Sin(math.Pi * w(x[0]))
	sum := s * s
	for i := 0; i+1 < d; i++ {
		wi := w(x[i])
		s := math.Sin(math.Pi*wi + 1)
		sum += (wi - 1) * (wi - 1) * (1 + 10*s*s)
	}
	wd := w(x[d-1])
	s = math.Sin(2 * math.Pi * wd)
	return sum + (wd-1)*(wd-1)*(1+s*s)
}
