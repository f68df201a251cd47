package schedulers

import (
	"slices"

	"github.com/gotune/gotune/pareto"
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
// TEC 2002). Dominance and crowding distance are package pareto's.
type paretoFronts struct {
	// fronts holds each front's records in arrival order.
	fronts [][]*ashaRecord
}

// insert adds rec to the first front none of whose members dominates it.
func (pf *paretoFronts) insert(rec *ashaRecord) {
	dominated := func(f int) bool {
		return slices.ContainsFunc(pf.fronts[f], func(q *ashaRecord) bool { return pareto.Dominates(q.Scores, rec.Scores) })
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
			if slices.ContainsFunc(moving, func(p *ashaRecord) bool { return pareto.Dominates(p.Scores, q.Scores) }) {
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
// larger first, ties to the earlier record (see pareto.CrowdedOrder).
func byCrowding(front []*ashaRecord) []*ashaRecord {
	points := make([][]fnum, len(front))
	ids := make([]int, len(front))
	for i, rec := range front {
		points[i], ids[i] = rec.Scores, i
	}
	out := make([]*ashaRecord, len(front))
	for i, id := range pareto.CrowdedOrder(points, ids) {
		out[i] = front[id]
	}
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
