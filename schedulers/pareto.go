package schedulers

import (
	"math"
	"slices"
)

// paretoFronts keeps a rung's records of a multi-objective experiment
// (those that did not diverge) sorted into non-dominated fronts, updated
// as each record arrives, so that a decision need not sort the whole rung
// afresh. A new record joins the first front none of whose members
// dominates it (found by bisection: if a member of front f dominates it,
// one of every earlier front does too); the members of that front it
// dominates move down one front, and the members of the next front they
// dominate move down in turn. The fronts are those non-dominated sorting
// of the whole rung gives; within a front, crowding distance orders the
// records when a decision needs it, as NSGA-II selects (Deb et al., IEEE
// TEC 2002).
type paretoFronts struct {
	// fronts holds each front's records in arrival order.
	fronts [][]*ashaRecord
}

// dominates reports whether objectives a dominate b: no worse in any,
// better in one.
func dominates(a, b []fnum) bool {
	better := false
	for k := range a {
		if a[k] > b[k] {
			return false
		}
		better = better || a[k] < b[k]
	}
	return better
}

// insert adds rec to the first front none of whose members dominates it.
func (pf *paretoFronts) insert(rec *ashaRecord) {
	dominated := func(f int) bool {
		return slices.ContainsFunc(pf.fronts[f], func(q *ashaRecord) bool { return dominates(q.Scores, rec.Scores) })
	}
	lo, hi := 0, len(pf.fronts)
	for lo < hi {
		mid := (lo + hi) / 2
		if dominated(mid) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	moving := []*ashaRecord{rec}
	for f := lo; len(moving) > 0; f++ {
		if f == len(pf.fronts) {
			pf.fronts = append(pf.fronts, nil)
		}
		var stay, down []*ashaRecord
		for _, q := range pf.fronts[f] {
			if slices.ContainsFunc(moving, func(p *ashaRecord) bool { return dominates(p.Scores, q.Scores) }) {
				down = append(down, q)
			} else {
				stay = append(stay, q)
			}
		}
		merged := append(stay, moving...)
		slices.SortFunc(merged, func(x, y *ashaRecord) int { return x.seq - y.seq })
		pf.fronts[f] = merged
		moving = down
	}
}

// frontOf returns the index of the front that holds rec, or -1.
func (pf *paretoFronts) frontOf(rec *ashaRecord) int {
	for f, members := range pf.fronts {
		if slices.Contains(members, rec) {
			return f
		}
	}
	return -1
}

// byCrowding returns a front's records ordered by crowding distance,
// larger first, ties to the earlier record.
func byCrowding(front []*ashaRecord) []*ashaRecord {
	dist := make(map[*ashaRecord]float64, len(front))
	for k := range front[0].Scores {
		byK := slices.Clone(front)
		slices.SortStableFunc(byK, func(a, b *ashaRecord) int {
			switch x, y := a.Scores[k], b.Scores[k]; {
			case x < y:
				return -1
			case x > y:
				return 1
			}
			return 0
		})
		lo, hi := float64(byK[0].Scores[k]), float64(byK[len(byK)-1].Scores[k])
		dist[byK[0]], dist[byK[len(byK)-1]] = math.Inf(1), math.Inf(1)
		if hi == lo || math.IsInf(hi-lo, 0) {
			continue
		}
		for i := 1; i < len(byK)-1; i++ {
			dist[byK[i]] += (float64(byK[i+1].Scores[k]) - float64(byK[i-1].Scores[k])) / (hi - lo)
		}
	}
	out := slices.Clone(front)
	slices.SortStableFunc(out, func(a, b *ashaRecord) int {
		switch {
		case dist[a] > dist[b]:
			return -1
		case dist[a] < dist[b]:
			return 1
		}
		return a.seq - b.seq
	})
	return out
}

// top returns the q best records, best first: whole fronts in turn, the
// last one needed ordered by crowding distance.
func (pf *paretoFronts) top(q int) []*ashaRecord {
	var out []*ashaRecord
	for _, front := range pf.fronts {
		if len(out) >= q {
			break
		}
		if len(out)+len(front) <= q {
			out = append(out, byCrowding(front)...)
			continue
		}
		out = append(out, byCrowding(front)[:q-len(out)]...)
	}
	return out
}
