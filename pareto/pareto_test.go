package pareto

import (
	"math"
	"slices"
	"testing"
)

func TestFronts(t *testing.T) {
	points := [][]float64{{1, 5}, {2, 2}, {3, 3}, {5, 1}, {4, 4}, {2, 2}, {6, 6}}
	got := Fronts(points)
	want := [][]int{{0, 1, 3, 5}, {2}, {4}, {6}}
	if len(got) != len(want) {
		t.Fatalf("fronts %v, want %v", got, want)
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("front %d: %v, want %v", i, got[i], want[i])
		}
	}
	d := Crowding(points, []int{0, 1, 3})
	if !math.IsInf(d[0], 1) || !math.IsInf(d[2], 1) || d[1] != 2 {
		t.Errorf("crowding %v, want [+Inf 2 +Inf]", d)
	}
	order, rank := Order(points, []float64{0, 0, 0, 0, 0, 0, 3})
	if order[len(order)-1] != 6 || rank[6] != 3 || rank[2] != 1 {
		t.Errorf("order %v, ranks %v", order, rank)
	}
}

// TestHypervolumeSelect checks the hypervolume in two and three
// dimensions, and that selecting 2 of a front of 5 keeps the points that
// cover most: the knee and an end, not the two ends.
func TestHypervolumeSelect(t *testing.T) {
	if got := Hypervolume([][]float64{{0, 1}, {1, 0}, {1, 1}}, []float64{2, 2}); got != 3 {
		t.Errorf("2-D hypervolume %g, want 3", got)
	}
	if got := Hypervolume([][]float64{{0, 0, 1}, {1, 1, 0}}, []float64{2, 2, 2}); got != 5 {
		t.Errorf("3-D hypervolume %g, want 5", got)
	}
	points := [][]float64{{0, 10}, {1, 3}, {2, 2}, {3, 1}, {10, 0}}
	got := SelectByHypervolume(points, []int{0, 1, 2, 3, 4}, 2)
	if !slices.Contains(got, 2) || len(got) != 2 {
		t.Errorf("selected %v, want the knee (2) among 2", got)
	}
}

// TestCrowdedOrder orders a front by crowding distance, larger first,
// ties (the two extremes, both infinite) in the front's order, on a named
// float type as the schedulers' scores are.
func TestCrowdedOrder(t *testing.T) {
	type score float64
	points := [][]score{{0, 9}, {1, 5}, {4, 4}, {5, 1}, {9, 0}}
	// Distances: 0 and 4 +Inf; 1: (4-0)/9 + (9-4)/9 = 1; 2: (5-1)/9 +
	// (5-1)/9 = 8/9; 3: (9-4)/9 + (4-0)/9 = 1.
	got := CrowdedOrder(points, []int{4, 3, 2, 1, 0})
	if want := []int{4, 0, 3, 1, 2}; !slices.Equal(got, want) {
		t.Errorf("crowded order %v, want %v", got, want)
	}
}

// TestCrowdingIgnoresAnInfiniteRange: an objective whose range is
// infinite (a point at +Inf) adds nothing to the inner points' distances,
// where dividing by the range made NaN of an infinite gap, which no order
// can sort.
func TestCrowdingIgnoresAnInfiniteRange(t *testing.T) {
	points := [][]float64{{0, 3}, {1, 2}, {2, 1}, {math.Inf(1), 0}}
	d := Crowding(points, []int{0, 1, 2, 3})
	for i, v := range d {
		if math.IsNaN(v) {
			t.Fatalf("crowding %v: point %d is NaN", d, i)
		}
	}
	if want := []float64{math.Inf(1), 2.0 / 3, 2.0 / 3, math.Inf(1)}; !slices.Equal(d, want) {
		t.Errorf("crowding %v, want %v", d, want)
	}
}

func TestDominates(t *testing.T) {
	for _, c := range []struct {
		a, b []float64
		want bool
	}{
		{[]float64{1, 2}, []float64{2, 2}, true},
		{[]float64{1, 2}, []float64{1, 2}, false},
		{[]float64{1, 3}, []float64{2, 2}, false},
		{[]float64{2, 2}, []float64{1, 2}, false},
	} {
		if got := Dominates(c.a, c.b); got != c.want {
			t.Errorf("Dominates(%v, %v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
