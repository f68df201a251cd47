package workers

import (
	"math"
	"slices"
)

// This file holds placement as pure functions over a view of free
// capacity: no locks, no clocks, no I/O. The manager (manager.go) owns the
// state and calls them; tests feed them views directly.

// view is capacity per node in the manager's integer units. Values may go
// negative where reservations exceed what is free; every reader treats a
// negative amount as none.
type view struct {
	cpu []int64   // thousandths of a CPU
	mem []int64   // bytes
	gpu [][]int64 // per device, ten-thousandths of the device
	off []bool    // nodes that take no workers (lost), whatever they hold
}

// unaccountedMemory stands for the memory of a node that does not know its
// own: any demand fits.
const unaccountedMemory = int64(1) << 62

func viewOf(nodes []Node) view {
	v := view{}
	for _, n := range nodes {
		v.addNode(n)
	}
	return v
}

func (v *view) addNode(n Node) {
	mem := int64(n.Memory)
	if mem == 0 {
		mem = unaccountedMemory
	}
	v.cpu = append(v.cpu, cpuUnits(n.CPUs))
	v.mem = append(v.mem, mem)
	g := make([]int64, len(n.GPUs))
	for i := range g {
		g[i] = gpuScale
	}
	v.gpu = append(v.gpu, g)
	v.off = append(v.off, false)
}

func (v view) clone() view {
	c := view{cpu: slices.Clone(v.cpu), mem: slices.Clone(v.mem), gpu: make([][]int64, len(v.gpu)), off: slices.Clone(v.off)}
	for i, g := range v.gpu {
		c.gpu[i] = slices.Clone(g)
	}
	return c
}

// slot is one worker's place: a node, and on it the devices it uses with
// the share it holds of each.
type slot struct {
	node  int
	devs  []int
	share int64 // ten-thousandths held of each device in devs
}

// apply adds sign × the slots' demand d to v (sign -1 takes, +1 gives back).
func (v view) apply(slots []slot, d demand, sign int64) {
	for _, s := range slots {
		v.cpu[s.node] += sign * d.cpu
		v.mem[s.node] += sign * d.mem
		for _, dev := range s.devs {
			v.gpu[s.node][dev] += sign * s.share
		}
	}
}

// tryTake takes the slots' demand d from v when v has all of it free
// (slots on one node or device summed) and reports whether it did; when it
// does not, v is left as it was.
func (v view) tryTake(slots []slot, d demand) bool {
	v.apply(slots, d, -1)
	for _, s := range slots {
		ok := v.cpu[s.node] >= 0 && v.mem[s.node] >= 0
		for _, dev := range s.devs {
			ok = ok && v.gpu[s.node][dev] >= 0
		}
		if !ok {
			v.apply(slots, d, +1)
			return false
		}
	}
	return true
}

// fitCount is how many workers of demand d fit on node i of v at once,
// counted up to limit.
func (v view) fitCount(i int, d demand, limit int) int {
	if v.off[i] {
		return 0
	}
	k := int64(limit)
	if d.cpu > 0 {
		k = min(k, max(v.cpu[i], 0)/d.cpu)
	}
	if d.mem > 0 {
		k = min(k, max(v.mem[i], 0)/d.mem)
	}
	if d.gpu > 0 && k > 0 {
		var fit int64
		if d.wholeGPUs() {
			for _, f := range v.gpu[i] {
				if f >= gpuScale {
					fit++
				}
			}
			fit /= d.gpu / gpuScale
		} else {
			for _, f := range v.gpu[i] {
				fit += max(f, 0) / d.gpu
			}
		}
		k = min(k, fit)
	}
	return int(max(k, 0))
}

// totalFit is how many workers of demand d fit on v in all, up to limit.
func (v view) totalFit(d demand, limit int) int {
	total := 0
	for i := range v.cpu {
		total += v.fitCount(i, d, limit-total)
		if total >= limit {
			break
		}
	}
	return total
}

func (v view) freeGPU(i int) int64 {
	var s int64
	for _, f := range v.gpu[i] {
		s += max(f, 0)
	}
	return s
}

// place finds room in v for n workers of demand d under policy, takes it
// from v and returns the workers' slots; ok is false, and v unchanged, when
// they do not fit. Ties are broken by node and device index, so equal
// inputs give equal placements. group holds the group's slots already
// placed (an elastic group that grows), nil for none: a worker with a share
// of a device goes to a device without another worker of its group when
// its node has one, since PyTorch's NCCL backend refuses two ranks on one
// device.
//
// prefer, when not nil, is what is free right now while v is what may be
// reserved: pack then chooses the nodes and devices with the most free in
// prefer, so that a reservation is satisfied as soon as possible.
func place(v view, n int, d demand, policy Placement, prefer *view, group []slot) ([]slot, bool) {
	if n <= 0 {
		return nil, false
	}
	fits := make([]int, len(v.cpu))
	total := 0
	for i := range fits {
		fits[i] = v.fitCount(i, d, n)
		total += fits[i]
	}
	if total < n {
		return nil, false
	}
	var counts []int // workers per node, in the order they are taken
	var order []int
	if policy == Spread {
		room := make([]int, len(fits))
		for i, k := range fits {
			if k > 0 {
				room[i] = v.fitCount(i, d, math.MaxInt32)
			}
		}
		order, counts = spreadNodes(fits, room, n)
	} else {
		order, counts = packNodes(v, fits, n, d, prefer)
	}
	slots := make([]slot, 0, n)
	taken := slices.Clone(group)
	for j, i := range order {
		for range counts[j] {
			s := takeOne(v, i, d, policy, prefer, taken)
			slots, taken = append(slots, s), append(taken, s)
		}
	}
	return slots, true
}

// packNodes chooses as few nodes as it can: the best-fitting single node
// when one holds the whole group (least left over after it, so that large
// free nodes stay whole), otherwise the roomiest nodes first.
func packNodes(v view, fits []int, n int, d demand, prefer *view) (order, counts []int) {
	// leftover ranks node i lower-is-better among equals: what would be
	// left free of GPUs, then CPUs; with prefer, the most free right now.
	leftover := func(i, k int) [2]int64 {
		if prefer != nil {
			return [2]int64{-prefer.freeGPU(i), -max(prefer.cpu[i], 0)}
		}
		return [2]int64{v.freeGPU(i) - int64(k)*d.gpu, v.cpu[i] - int64(k)*d.cpu}
	}
	best := -1
	var bestKey [2]int64
	for i, k := range fits {
		if k < n {
			continue
		}
		key := leftover(i, n)
		if best < 0 || key[0] < bestKey[0] || key[0] == bestKey[0] && key[1] < bestKey[1] {
			best, bestKey = i, key
		}
	}
	if best >= 0 {
		return []int{best}, []int{n}
	}
	nodes := make([]int, 0, len(fits))
	for i, k := range fits {
		if k > 0 {
			nodes = append(nodes, i)
		}
	}
	slices.SortFunc(nodes, func(a, b int) int {
		if fits[a] != fits[b] {
			return fits[b] - fits[a]
		}
		ka, kb := leftover(a, fits[a]), leftover(b, fits[b])
		for x := range ka {
			if ka[x] != kb[x] {
				if ka[x] < kb[x] {
					return -1
				}
				return 1
			}
		}
		return a - b
	})
	left := n
	for _, i := range nodes {
		k := min(fits[i], left)
		order, counts = append(order, i), append(counts, k)
		left -= k
		if left == 0 {
			break
		}
	}
	return order, counts
}

// spreadNodes deals workers out one at a time to the node with the fewest
// of the group so far, and among those the one with the most room left
// (room counts the workers of this shape a node holds); the result is in
// node order.
func spreadNodes(fits, room []int, n int) (order, counts []int) {
	assigned := make([]int, len(fits))
	for range n {
		best := -1
		for i, k := range fits {
			if assigned[i] >= k {
				continue
			}
			if best < 0 || assigned[i] < assigned[best] ||
				assigned[i] == assigned[best] && room[i]-assigned[i] > room[best]-assigned[best] {
				best = i
			}
		}
		assigned[best]++
	}
	for i, a := range assigned {
		if a > 0 {
			order, counts = append(order, i), append(counts, a)
		}
	}
	return order, counts
}

// takeOne takes one worker's demand from node i of v, which must have room
// for it, choosing its devices: whole devices in index order (with prefer,
// those free right now first); for a share, the device it fits on with the
// fewest workers of its group (taken: the group's slots so far), and among
// those the fullest under Pack (so shares stack on one device and whole
// devices stay free) and the emptiest under Spread.
func takeOne(v view, i int, d demand, policy Placement, prefer *view, taken []slot) slot {
	s := slot{node: i}
	v.cpu[i] -= d.cpu
	v.mem[i] -= d.mem
	switch {
	case d.gpu == 0:
	case d.wholeGPUs():
		want := int(d.gpu / gpuScale)
		s.share = gpuScale
		var cand []int
		for dev, f := range v.gpu[i] {
			if f >= gpuScale {
				cand = append(cand, dev)
			}
		}
		if prefer != nil {
			p := prefer.gpu[i]
			slices.SortStableFunc(cand, func(a, b int) int {
				return boolRank(p[a] >= gpuScale) - boolRank(p[b] >= gpuScale)
			})
			cand = cand[:want]
			slices.Sort(cand)
		}
		s.devs = cand[:want]
	default:
		s.share = d.gpu
		ranks := make([]int, len(v.gpu[i])) // the group's workers on each device
		for _, t := range taken {
			if t.node == i {
				for _, dev := range t.devs {
					ranks[dev]++
				}
			}
		}
		best := -1
		for dev, f := range v.gpu[i] {
			if f < d.gpu {
				continue
			}
			if best < 0 || ranks[dev] < ranks[best] || ranks[dev] == ranks[best] && better(v, prefer, i, dev, best, policy) {
				best = dev
			}
		}
		s.devs = []int{best}
	}
	for _, dev := range s.devs {
		v.gpu[i][dev] -= s.share
	}
	return s
}

// boolRank orders true before false.
func boolRank(b bool) int {
	if b {
		return 0
	}
	return 1
}

// better reports whether device a beats device b (a > b in index) for a
// share on node i.
func better(v view, prefer *view, i, a, b int, policy Placement) bool {
	if prefer != nil {
		return prefer.gpu[i][a] > prefer.gpu[i][b]
	}
	fa, fb := v.gpu[i][a], v.gpu[i][b]
	if policy == Spread {
		return fa > fb
	}
	return fa < fb
}
