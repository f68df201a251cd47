package schedulers

import (
	"cmp"
	"math"
	"math/bits"
	"slices"
	"sort"
)

// frozenMeans holds, for the median rule, the running averages of the
// trials it is not hearing from (ended or paused), so that a decision at a
// time no trial reported at, as on a continuous time attribute, need not
// go over every trial. A frozen trial's running average is a step
// function of the time t compared at: piece j of its history holds from
// its j-th result's time to the next one's (each widened by Reached's
// tolerance), the last one only around its last time. Each piece is a
// +1 event at its start and a −1 event at its end, keyed by its average,
// so the averages standing at t are the events up to t, summed by key.
//
// The events sit in blocks, each sorted by time with a wavelet matrix over
// the keys (the averages' bits, in the averages' order), merged as a
// binary counter merges (Bentley and Saxe), so that there are O(log N)
// blocks for N events and each event is rebuilt into O(log N) of them.
// The k-th smallest average standing at t is found by walking the 64 bit
// levels of every block at once: O(64·log N) steps, whatever the number
// of trials. A trial that reports again is taken out by adding its
// pieces with the signs swapped. The last pieces added, up to
// frozenRecent of them, wait in a list that a query goes over, so that a
// block is not built for each trial that ends.
type frozenMeans struct {
	blocks []*frozenBlock
	recent []signedPiece
}

// frozenRecent is how many pieces wait before they make a block.
const frozenRecent = 256

// signedPiece is a piece added (+1) or taken out (−1).
type signedPiece struct {
	meanPiece
	sign int
}

// frozenBlock is a set of events: plus holds the +1 events, minus the −1.
type frozenBlock struct {
	plus, minus waveletMatrix
}

// frozenEvent is one event: at time, of the average whose order key is key.
type frozenEvent struct {
	time float64
	key  uint64
}

func (b *frozenBlock) size() int { return len(b.plus.times) + len(b.minus.times) }

// add adds the pieces of a trial's history, or with remove, takes them out.
func (f *frozenMeans) add(pieces []meanPiece, remove bool) {
	sign := 1
	if remove {
		sign = -1
	}
	for _, p := range pieces {
		f.recent = append(f.recent, signedPiece{p, sign})
	}
	if len(f.recent) < frozenRecent {
		return
	}
	var plus, minus []frozenEvent
	for _, p := range f.recent {
		start, end := frozenEvent{p.from, p.key}, frozenEvent{p.until, p.key}
		if p.sign < 0 {
			// A removed piece counts −1 from its start and +1 from its
			// end, cancelling the piece added before.
			start, end = end, start
		}
		plus, minus = append(plus, start), append(minus, end)
	}
	f.recent = f.recent[:0]
	f.blocks = append(f.blocks, newFrozenBlock(plus, minus))
	for n := len(f.blocks); n >= 2 && f.blocks[n-2].size() <= 2*f.blocks[n-1].size(); n = len(f.blocks) {
		a, b := f.blocks[n-2], f.blocks[n-1]
		f.blocks = append(f.blocks[:n-2], newFrozenBlock(
			slices.Concat(a.plus.events(), b.plus.events()),
			slices.Concat(a.minus.events(), b.minus.events())))
	}
}

func newFrozenBlock(plus, minus []frozenEvent) *frozenBlock {
	return &frozenBlock{plus: newWaveletMatrix(plus), minus: newWaveletMatrix(minus)}
}

// count is the number of averages standing at t in the blocks.
func (f *frozenMeans) count(t float64) int {
	n := 0
	for _, b := range f.blocks {
		n += b.plus.upTo(t) - b.minus.upTo(t)
	}
	return n
}

// recentAt appends the keys of the recent pieces standing at t to plus,
// or for those taken out, to minus.
func (f *frozenMeans) recentAt(t float64, plus, minus []uint64) ([]uint64, []uint64) {
	for _, p := range f.recent {
		if p.from <= t && t < p.until {
			if p.sign > 0 {
				plus = append(plus, p.key)
			} else {
				minus = append(minus, p.key)
			}
		}
	}
	return plus, minus
}

// kth is the key of the k-th smallest (from 0) of the averages standing at
// t in the blocks, with the keys plus added and minus taken out (both
// sorted); k must be below their count.
func (f *frozenMeans) kth(t float64, plus, minus []uint64, k int) uint64 {
	// Each matrix's range of events up to t, and each list's range,
	// narrowed level by level to the keys that begin as key does.
	type span struct{ s, e int }
	ups, downs := make([]span, len(f.blocks)), make([]span, len(f.blocks))
	for i, b := range f.blocks {
		ups[i], downs[i] = span{0, b.plus.upTo(t)}, span{0, b.minus.upTo(t)}
	}
	add, sub := span{0, len(plus)}, span{0, len(minus)}
	// split is where the keys of list[sp] with the bit set begin.
	split := func(list []uint64, sp span, bit uint64) int {
		return sp.s + sort.Search(sp.e-sp.s, func(j int) bool { return list[sp.s+j]&bit != 0 })
	}
	var key uint64
	for level := range 64 {
		bit := uint64(1) << (63 - level)
		zeros := 0
		for i, b := range f.blocks {
			zeros += b.plus.zerosIn(level, ups[i].s, ups[i].e) - b.minus.zerosIn(level, downs[i].s, downs[i].e)
		}
		addMid, subMid := split(plus, add, bit), split(minus, sub, bit)
		zeros += (addMid - add.s) - (subMid - sub.s)
		one := k >= zeros
		if one {
			k -= zeros
			key |= bit
			add.s, sub.s = addMid, subMid
		} else {
			add.e, sub.e = addMid, subMid
		}
		for i, b := range f.blocks {
			ups[i].s, ups[i].e = b.plus.follow(level, ups[i].s, one), b.plus.follow(level, ups[i].e, one)
			downs[i].s, downs[i].e = b.minus.follow(level, downs[i].s, one), b.minus.follow(level, downs[i].e, one)
		}
	}
	return key
}

// waveletMatrix holds events sorted by time and, for each of the keys'
// 64 bits from the highest, the bits of the keys as ordered at that level
// (stably by the bits above, zeros first): a position range at one level
// maps to the ranges of its zeros and ones at the next.
type waveletMatrix struct {
	times []float64
	keys  []uint64
	bits  [64]rankBits
	// zeros[l] counts the zero bits at level l.
	zeros [64]int
}

func newWaveletMatrix(events []frozenEvent) waveletMatrix {
	slices.SortFunc(events, func(a, b frozenEvent) int { return cmp.Compare(a.time, b.time) })
	w := waveletMatrix{times: make([]float64, len(events)), keys: make([]uint64, len(events))}
	for i, e := range events {
		w.times[i], w.keys[i] = e.time, e.key
	}
	cur, next := slices.Clone(w.keys), make([]uint64, len(events))
	// The 64 levels' bits share two allocations.
	n := len(events)/64 + 1
	words, before := make([]uint64, 64*n), make([]uint32, 64*n)
	for level := range 64 {
		shift := 63 - level
		w.bits[level] = newRankBits(cur, shift, words[level*n:(level+1)*n], before[level*n:(level+1)*n])
		z := 0
		for _, k := range cur {
			if k>>shift&1 == 0 {
				next[z] = k
				z++
			}
		}
		w.zeros[level] = z
		o := z
		for _, k := range cur {
			if k>>shift&1 == 1 {
				next[o] = k
				o++
			}
		}
		cur, next = next, cur
	}
	return w
}

// events lists the matrix's events, for a merge.
func (w *waveletMatrix) events() []frozenEvent {
	out := make([]frozenEvent, len(w.times))
	for i := range out {
		out[i] = frozenEvent{w.times[i], w.keys[i]}
	}
	return out
}

// upTo is the number of events at or before t.
func (w *waveletMatrix) upTo(t float64) int {
	return sort.Search(len(w.times), func(i int) bool { return w.times[i] > t })
}

// zerosIn counts the zero bits at level in positions [s, e).
func (w *waveletMatrix) zerosIn(level, s, e int) int {
	b := &w.bits[level]
	return (e - b.ones(e)) - (s - b.ones(s))
}

// follow maps position i at level to the next level's, within the zeros
// or, with one, the ones.
func (w *waveletMatrix) follow(level, i int, one bool) int {
	ones := w.bits[level].ones(i)
	if one {
		return w.zeros[level] + ones
	}
	return i - ones
}

// rankBits is a bit vector that counts the ones before a position in O(1).
type rankBits struct {
	words []uint64
	// before[w] counts the ones in words[:w].
	before []uint32
}

// newRankBits holds bit shift of each key, in words and before, zeroed
// and of len(keys)/64+1 elements each.
func newRankBits(keys []uint64, shift int, words []uint64, before []uint32) rankBits {
	r := rankBits{words: words, before: before}
	for i, k := range keys {
		r.words[i/64] |= (k >> shift & 1) << (i % 64)
	}
	n := uint32(0)
	for i, w := range r.words {
		r.before[i] = n
		n += uint32(bits.OnesCount64(w))
	}
	return r
}

// ones counts the ones in positions [0, i).
func (r *rankBits) ones(i int) int {
	return int(r.before[i/64]) + bits.OnesCount64(r.words[i/64]&(1<<(i%64)-1))
}

// meanKey maps an average to a key that orders as the averages do
// (−0 before +0, which compare equal).
func meanKey(x float64) uint64 {
	b := math.Float64bits(x)
	if b>>63 == 1 {
		return ^b
	}
	return b | 1<<63
}

// keyMean inverts meanKey.
func keyMean(k uint64) float64 {
	if k>>63 == 1 {
		return math.Float64frombits(k &^ (1 << 63))
	}
	return math.Float64frombits(^k)
}

// meanPiece is a span of times compared at, [from, until), over which a
// trial's running average stands at the value whose key is key.
type meanPiece struct {
	from, until float64
	key         uint64
}

// pieces lists the trial's running averages from grace on as pieces of
// time: the j-th stands from the time its result reaches (Reached) to the
// time the next one's does, the last one while Reached(last, t). Diverged
// averages are left out, as the median leaves them out. False when a time
// is not finite: such a trial is not frozen.
func (t *medianTrial) pieces(grace float64) ([]meanPiece, bool) {
	for _, x := range t.Times {
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return nil, false
		}
	}
	from := sort.Search(len(t.Times), func(i int) bool { return Reached(t.Times[i], grace) })
	var out []meanPiece
	for j := from; j < len(t.Times); j++ {
		if t.bad[j] > 0 {
			break // every later average holds a diverged result too
		}
		mean := t.sums[j] / float64(j+1-from)
		if diverged(mean) {
			continue
		}
		p := meanPiece{from: reachedFrom(t.Times[j]), key: meanKey(mean)}
		if j+1 < len(t.Times) {
			p.until = reachedFrom(t.Times[j+1])
		} else {
			p.until = math.Nextafter(lastReaching(t.Times[j]), math.Inf(1))
		}
		if p.from < p.until {
			out = append(out, p)
		}
	}
	return out, true
}

// lastReaching is the largest time t such that Reached(m, t): the last
// time a trial whose last result came at m is compared at. m is finite.
func lastReaching(m float64) float64 {
	lo, hi := meanKey(m), meanKey(m+4*relTol*math.Max(1, math.Abs(m)))
	// Reached(m, keyMean(lo)) holds, Reached(m, keyMean(hi)) does not.
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if Reached(m, keyMean(mid)) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return keyMean(lo)
}
