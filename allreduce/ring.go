package allreduce

// ringPlan is one rank's schedule of a ring collective: ring allreduce is a
// reduce-scatter followed by an allgather (Patarasuk and Yuan, "Bandwidth
// optimal all-reduce algorithms for clusters of workstations", JPDC 2009),
// and an allgather alone is its second half.
//
// The buffer is cut into size segments. At ring step s, rank r sends segment
// (r-s) mod size to rank r+1 and receives segment (r-s-1) mod size from rank
// r-1; during the first reduce steps it adds what it receives to its own
// values, afterwards it stores it. So segment c is summed in rank order c,
// c+1, ..., c-1, ends complete on rank c-1 after size-1 steps, and travels
// on round the ring during the allgather steps.
//
// Each segment is further cut into cols near-equal columns, and the stream
// of frames is ordered so that a rank forwards a column soon after receiving
// it, while it is still in the core's cache: the columns are taken width at
// a time, and for each such group of columns all steps are run, step by step.
// Frame k of the incoming stream is frame k of the previous rank's outgoing
// stream; an outgoing frame of step s > 0 needs the incoming frame of step
// s-1 of the same column, width frames earlier, which leaves a rank width-1
// frames of work to overlap with every wait.
type ringPlan struct {
	rank, size int
	steps      int // ring steps in the stream
	reduce     int // the first reduce steps add what they receive
	cols       int // columns per segment, at least 1
	width      int // columns in flight, at least 1
	elem       int // bytes per element
	// seg returns segment c's element range in the buffer.
	seg func(c int) (lo, hi int)
}

// frames is the length of the stream, the same in both directions.
func (p *ringPlan) frames() int { return p.steps * p.cols }

// at returns the step and column of stream frame k and the width of its
// group of columns.
func (p *ringPlan) at(k int) (step, col, width int) {
	per := p.steps * p.width
	g := k / per
	r := k - g*per
	width = min(p.width, p.cols-g*p.width)
	return r / width, g*p.width + r%width, width
}

// need returns how many incoming frames must have been handled before
// outgoing frame k may be sent.
func (p *ringPlan) need(k int) int {
	step, _, width := p.at(k)
	if step == 0 {
		return 0
	}
	return k - width + 1
}

// span returns the byte range of column col of segment c.
func (p *ringPlan) span(c, col int) (lo, hi int) {
	slo, shi := p.seg(c)
	clo, chi := segment(shi-slo, p.cols, col)
	return (slo + clo) * p.elem, (slo + chi) * p.elem
}

// out returns the byte range outgoing frame k carries.
func (p *ringPlan) out(k int) (lo, hi int) {
	step, col, _ := p.at(k)
	return p.span(mod(p.rank-step, p.size), col)
}

// in returns the byte range incoming frame k fills, and whether it is added
// (reduced) rather than stored, and whether it is the last addition.
func (p *ringPlan) in(k int) (lo, hi int, add, last bool) {
	step, col, _ := p.at(k)
	lo, hi = p.span(mod(p.rank-step-1, p.size), col)
	return lo, hi, step < p.reduce, step == p.reduce-1
}

// columns returns how many columns cut the longest of the segments, of
// maxElems elements, into frames of at most about chunk bytes.
func columns(maxElems, elem, chunk int) int {
	return max(1, (maxElems*elem+chunk-1)/chunk)
}

func mod(a, n int) int { return ((a % n) + n) % n }
