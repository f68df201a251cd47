package schedulers

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gotune/gotune/pareto"
)

// paretoRank, the reference paretoFronts is checked against, orders
// records best first by their Scores, as NSGA-II
// selects (Deb et al., IEEE TEC 2002): by non-dominated front, then by
// crowding distance within a front, larger first, ties to the earlier
// record. It returns the order (indices into records) and each record's
// front, from 0. O(n²·m) for n records of m objectives.
func paretoRank(records []*ashaRecord) (order, front []int) {
	n := len(records)
	count := make([]int, n)
	beats := make([][]int, n)
	for i := range n {
		for j := i + 1; j < n; j++ {
			switch {
			case pareto.Dominates(records[i].Scores, records[j].Scores):
				beats[i] = append(beats[i], j)
				count[j]++
			case pareto.Dominates(records[j].Scores, records[i].Scores):
				beats[j] = append(beats[j], i)
				count[i]++
			}
		}
	}
	front = make([]int, n)
	var cur []int
	for i := range n {
		if count[i] == 0 {
			cur = append(cur, i)
		}
	}
	for f := 0; len(cur) > 0; f++ {
		dist := make(map[int]float64, len(cur))
		for k := range records[cur[0]].Scores {
			byK := slices.Clone(cur)
			slices.SortStableFunc(byK, func(a, b int) int {
				x, y := records[a].Scores[k], records[b].Scores[k]
				switch {
				case x < y:
					return -1
				case x > y:
					return 1
				}
				return 0
			})
			lo, hi := float64(records[byK[0]].Scores[k]), float64(records[byK[len(byK)-1]].Scores[k])
			dist[byK[0]], dist[byK[len(byK)-1]] = math.Inf(1), math.Inf(1)
			if hi == lo || math.IsInf(hi-lo, 0) {
				continue
			}
			for i := 1; i < len(byK)-1; i++ {
				dist[byK[i]] += (float64(records[byK[i+1]].Scores[k]) - float64(records[byK[i-1]].Scores[k])) / (hi - lo)
			}
		}
		slices.SortStableFunc(cur, func(a, b int) int {
			switch {
			case dist[a] > dist[b]:
				return -1
			case dist[a] < dist[b]:
				return 1
			}
			return a - b
		})
		var next []int
		for _, i := range cur {
			front[i] = f
			order = append(order, i)
			for _, j := range beats[i] {
				if count[j]--; count[j] == 0 {
					next = append(next, j)
				}
			}
		}
		slices.Sort(next)
		cur = next
	}
	return order, front
}

// TestParetoFrontsMatchSortingAfresh inserts random records, with ties
// and diverged ones, one by one and checks after each that the kept fronts
// give the order non-dominated sorting of the whole rung gives.
func TestParetoFrontsMatchSortingAfresh(t *testing.T) {
	for _, m := range []int{2, 3} {
		rng := rand.New(rand.NewPCG(uint64(m), 5))
		rg := newASHARung(1)
		var finite []*ashaRecord
		for i := range 300 {
			scores := make([]fnum, m)
			for k := range scores {
				scores[k] = fnum(rng.IntN(8))
				if rng.IntN(40) == 0 {
					scores[k] = fnum(math.Inf(1))
				}
			}
			rec := &ashaRecord{Trial: i, Scores: scores}
			rg.add(rec)
			if rec.diverged() {
				continue
			}
			finite = append(finite, rec)
			order, front := paretoRank(finite)
			got := rg.fronts.top(len(finite))
			for j, k := range order {
				if got[j] != finite[k] {
					t.Fatalf("m=%d after %d records: place %d holds trial %d, want %d", m, i+1, j, got[j].Trial, finite[k].Trial)
				}
			}
			if f := rg.fronts.frontOf(rec); f != front[len(finite)-1] {
				t.Fatalf("m=%d record %d: front %d, want %d", m, i, f, front[len(finite)-1])
			}
			if q := rng.IntN(len(finite) + 1); !slices.Equal(rg.fronts.top(q), got[:q]) {
				t.Fatalf("m=%d: top(%d) is not the first %d of the order", m, q, q)
			}
		}
	}
}
