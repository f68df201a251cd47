package schedulers

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestRankTreeMatchesASortedSlice plays random insertions, removals and
// marks on a rankTree and on a sorted slice, and checks every query
// against the slice after each step.
func TestRankTreeMatchesASortedSlice(t *testing.T) {
	type item struct {
		score float64
		id    int
	}
	less := func(a, b item) bool { return a.score < b.score || (a.score == b.score && a.id < b.id) }
	rng := rand.New(rand.NewPCG(3, 4))
	tree := newRankTree(less)
	var ref []item // sorted by less
	marked := map[item]bool{}
	nextID := 0
	for step := range 4000 {
		switch op := rng.IntN(10); {
		case op < 5 || len(ref) == 0:
			// Few distinct scores, so that ties are common.
			it := item{float64(rng.IntN(20)), nextID}
			nextID++
			m := rng.IntN(3) == 0
			tree.Insert(it, m)
			i, _ := slices.BinarySearchFunc(ref, it, func(a, b item) int {
				if less(a, b) {
					return -1
				}
				return 1
			})
			ref = slices.Insert(ref, i, it)
			marked[it] = m
		case op < 7:
			i := rng.IntN(len(ref))
			if !tree.Remove(ref[i]) {
				t.Fatalf("step %d: Remove(%v) found nothing", step, ref[i])
			}
			delete(marked, ref[i])
			ref = slices.Delete(ref, i, i+1)
		default:
			it := ref[rng.IntN(len(ref))]
			m := rng.IntN(2) == 0
			if !tree.SetMark(it, m) {
				t.Fatalf("step %d: SetMark(%v) found nothing", step, it)
			}
			marked[it] = m
		}
		if tree.Remove(item{-1, -1}) || tree.SetMark(item{-1, -1}, true) {
			t.Fatalf("step %d: an item the tree does not hold was found", step)
		}
		if tree.Len() != len(ref) {
			t.Fatalf("step %d: Len %d, want %d", step, tree.Len(), len(ref))
		}
		var marks []int // indices of the marked items
		for i, it := range ref {
			if marked[it] {
				marks = append(marks, i)
			}
		}
		if tree.Marked() != len(marks) {
			t.Fatalf("step %d: Marked %d, want %d", step, tree.Marked(), len(marks))
		}
		// Check a few positions each step, and all of them now and then.
		for _, i := range probe(rng, len(ref), step%200 == 0) {
			if got := tree.At(i); got != ref[i] {
				t.Fatalf("step %d: At(%d) = %v, want %v", step, i, got, ref[i])
			}
			if got := tree.Rank(ref[i]); got != i {
				t.Fatalf("step %d: Rank(%v) = %d, want %d", step, ref[i], got, i)
			}
			want := 0
			for _, m := range marks {
				if m < i {
					want++
				}
			}
			if got := tree.MarkedBefore(i); got != want {
				t.Fatalf("step %d: MarkedBefore(%d) = %d, want %d", step, i, got, want)
			}
		}
		for _, j := range probe(rng, len(marks), step%200 == 0) {
			it, idx := tree.MarkedAt(j)
			if idx != marks[j] || it != ref[marks[j]] {
				t.Fatalf("step %d: MarkedAt(%d) = %v at %d, want %v at %d", step, j, it, idx, ref[marks[j]], marks[j])
			}
		}
		// Rank of an item the tree does not hold: where it would go.
		probeItem := item{float64(rng.IntN(20)) + 0.5, -1}
		want, _ := slices.BinarySearchFunc(ref, probeItem, func(a, b item) int {
			if less(a, b) {
				return -1
			}
			return 1
		})
		if got := tree.Rank(probeItem); got != want {
			t.Fatalf("step %d: Rank(%v) = %d, want %d", step, probeItem, got, want)
		}
	}
}

// probe returns some indices below n: all of them when all is set.
func probe(rng *rand.Rand, n int, all bool) []int {
	if n == 0 {
		return nil
	}
	if all {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	return []int{0, n - 1, rng.IntN(n)}
}
