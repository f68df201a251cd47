package pareto

import (
	"math"
	"slices"
)

// Dominates reports whether a dominates b: no worse in every objective
// and better in one, all lower-is-better.
func Dominates[F ~float64](a, b []F) bool {
	better := false
	for k := range a {
		switch {
		case a[k] > b[k]:
			return false
		case a[k] < b[k]:
			better = true
		}
	}
	return better
}

// Fronts sorts points into non-dominated fronts, best first (Deb et al., "A
// fast and elitist multiobjective genetic algorithm: NSGA-II", IEEE TEC
// 2002): the first front is the points no other dominates, the next those
// only the first dominates, and so on. Each front lists indices into
// points in increasing order. O(n²·m) for n points of m objectives.
func Fronts[F ~float64](points [][]F) [][]int {
	n := len(points)
	count := make([]int, n)   // how many points dominate i
	beats := make([][]int, n) // the points i dominates
	for i := range n {
		for j := i + 1; j < n; j++ {
			switch {
			case Dominates(points[i], points[j]):
				beats[i] = append(beats[i], j)
				count[j]++
			case Dominates(points[j], points[i]):
				beats[j] = append(beats[j], i)
				count[i]++
			}
		}
	}
	var fronts [][]int
	var front []int
	for i := range n {
		if count[i] == 0 {
			front = append(front, i)
		}
	}
	for len(front) > 0 {
		fronts = append(fronts, front)
		var next []int
		for _, i := range front {
			for _, j := range beats[i] {
				if count[j]--; count[j] == 0 {
					next = append(next, j)
				}
			}
		}
		slices.Sort(next)
		front = next
	}
	return fronts
}

// Crowding returns the crowding distance of each point of a front (NSGA-II):
// the sum over objectives of the gap between its neighbours along that
// objective, normalised by the front's range; infinite for the extremes.
// An objective whose range is empty or infinite adds nothing. Larger
// means lonelier, which selection prefers.
func Crowding[F ~float64](points [][]F, front []int) []float64 {
	d := make([]float64, len(front))
	if len(front) == 0 {
		return d
	}
	order := make([]int, len(front))
	for k := range points[front[0]] {
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int {
			x, y := points[front[a]][k], points[front[b]][k]
			switch {
			case x < y:
				return -1
			case x > y:
				return 1
			}
			return 0
		})
		lo, hi := float64(points[front[order[0]]][k]), float64(points[front[order[len(order)-1]]][k])
		d[order[0]], d[order[len(order)-1]] = math.Inf(1), math.Inf(1)
		if hi == lo || math.IsInf(hi-lo, 0) {
			continue
		}
		for i := 1; i < len(order)-1; i++ {
			d[order[i]] += float64(points[front[order[i+1]]][k]-points[front[order[i-1]]][k]) / (hi - lo)
		}
	}
	return d
}

// CrowdedOrder returns front's members ordered by crowding distance (see
// Crowding), larger first, ties in front's order: the order NSGA-II
// selects within a front.
func CrowdedOrder[F ~float64](points [][]F, front []int) []int {
	d := Crowding(points, front)
	byDist := make([]int, len(front))
	for i := range byDist {
		byDist[i] = i
	}
	slices.SortStableFunc(byDist, func(a, b int) int {
		switch {
		case d[a] > d[b]:
			return -1
		case d[a] < d[b]:
			return 1
		}
		return 0
	})
	out := make([]int, len(front))
	for i, j := range byDist {
		out[i] = front[j]
	}
	return out
}

// Order orders points best first for selection: by front, and
// within a front by crowding distance, larger first (NSGA-II's crowded
// comparison). Points with a positive violation (infeasible) come after
// every feasible one, by violation (Deb's constrained domination). It
// returns the order and each point's front number (from 0; infeasible
// points after the feasible fronts).
func Order(points [][]float64, violation []float64) (order []int, rank []int) {
	var feasible, infeasible []int
	for i := range points {
		if violation[i] > 0 {
			infeasible = append(infeasible, i)
		} else {
			feasible = append(feasible, i)
		}
	}
	sub := make([][]float64, len(feasible))
	for i, id := range feasible {
		sub[i] = points[id]
	}
	rank = make([]int, len(points))
	fronts := Fronts(sub)
	for f, front := range fronts {
		ids := make([]int, len(front))
		for i, j := range front {
			ids[i] = feasible[j]
		}
		for _, id := range CrowdedOrder(points, ids) {
			order = append(order, id)
			rank[id] = f
		}
	}
	slices.SortStableFunc(infeasible, func(a, b int) int {
		switch {
		case violation[a] < violation[b]:
			return -1
		case violation[a] > violation[b]:
			return 1
		}
		return 0
	})
	for _, i := range infeasible {
		order = append(order, i)
		rank[i] = len(fronts)
	}
	return order, rank
}

// Hypervolume is the volume that points dominate below ref, all
// minimised: exact, by slicing along the last objective (O(n²·log n) in
// three dimensions).
func Hypervolume(points [][]float64, ref []float64) float64 {
	var in [][]float64
	for _, p := range points {
		below := true
		for k := range p {
			below = below && p[k] < ref[k]
		}
		if below {
			in = append(in, p)
		}
	}
	m := len(ref)
	if len(in) == 0 {
		return 0
	}
	if m == 1 {
		best := ref[0]
		for _, p := range in {
			best = min(best, p[0])
		}
		return ref[0] - best
	}
	slices.SortFunc(in, func(a, b []float64) int {
		switch {
		case a[m-1] < b[m-1]:
			return -1
		case a[m-1] > b[m-1]:
			return 1
		}
		return 0
	})
	hv := 0.0
	for i := range in {
		next := ref[m-1]
		if i+1 < len(in) {
			next = in[i+1][m-1]
		}
		if next == in[i][m-1] {
			continue
		}
		slice := make([][]float64, i+1)
		for j, p := range in[:i+1] {
			slice[j] = p[:m-1]
		}
		hv += Hypervolume(slice, ref[:m-1]) * (next - in[i][m-1])
	}
	return hv
}

// SelectByHypervolume picks k of the points ids (a front) greedily, each
// time the one that adds most hypervolume to those picked, against a
// reference point just beyond the front's worst values (as Optuna's MOTPE
// selects within the front that does not fit whole). Ties go to the
// earlier id.
func SelectByHypervolume(points [][]float64, ids []int, k int) []int {
	m := len(points[ids[0]])
	ref := make([]float64, m)
	for j := range m {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, id := range ids {
			lo, hi = min(lo, points[id][j]), max(hi, points[id][j])
		}
		ref[j] = hi + max(0.1*(hi-lo), 1e-12)
	}
	var picked []int
	var chosen [][]float64
	used := make([]bool, len(ids))
	base := 0.0
	for len(picked) < k {
		best, gain := -1, -1.0
		for i, id := range ids {
			if used[i] {
				continue
			}
			if g := Hypervolume(append(chosen, points[id]), ref) - base; g > gain {
				best, gain = i, g
			}
		}
		used[best] = true
		picked = append(picked, ids[best])
		chosen = append(chosen, points[ids[best]])
		base += gain
	}
	return picked
}
