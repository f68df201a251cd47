package trainer

import "context"

// Placer reserves compute for a trial's group, a whole group at a time. The
// tuner adapts its resource manager to it, sized for one trial's workers.
type Placer interface {
	// Place blocks until at least lo workers fit, then reserves as many as
	// fit, up to hi. It fails at once when lo workers can never fit, and
	// with ctx's error when ctx ends first.
	Place(ctx context.Context, lo, hi int) (Placement, error)
}

// Placement is a reservation of a group's workers, held until Release.
type Placement interface {
	// Slots describes the reserved workers, one each, in rank order.
	Slots() []Slot
	// Grow reserves up to n more workers, as many as fit now, without
	// waiting, and returns how many it added to Slots.
	Grow(n int) int
	// Release returns every reserved worker. Calling it again does nothing.
	Release()
}

// Slot is where one worker runs.
type Slot struct {
	// Node names the node; "" is this one. Workers on the same node share
	// a node rank and are numbered by local rank.
	Node string
	// GPUs are the devices the worker may use, as CUDA_VISIBLE_DEVICES
	// lists them; empty when it has none.
	GPUs []string
	// Launcher starts the worker's process on its node; nil means
	// Spec.Launcher (this node). Goroutine workers run in this process
	// and cannot take a slot with a Launcher.
	Launcher Launcher
}

// remote reports whether the slot's worker runs on another node: it has
// a Launcher of its own.
func (s Slot) remote() bool { return s.Launcher != nil }

// localPlacer places a fixed group of hi workers on this node without
// reserving anything: the caller has reserved them.
type localPlacer struct{}

func (localPlacer) Place(_ context.Context, _, hi int) (Placement, error) {
	return &fixedPlacement{slots: make([]Slot, hi)}, nil
}

type fixedPlacement struct{ slots []Slot }

func (p *fixedPlacement) Slots() []Slot { return p.slots }
func (p *fixedPlacement) Grow(int) int  { return 0 }
func (p *fixedPlacement) Release()      {}

// noPlacement stands in after a failed placement, so Release is safe.
type noPlacement struct{}

func (noPlacement) Slots() []Slot { return nil }
func (noPlacement) Grow(int) int  { return 0 }
func (noPlacement) Release()      {}

// rankInfo is one worker's place in its group.
type rankInfo struct {
	rank, size           int
	localRank, localSize int
	nodeRank, nodes      int
	// gpus is the worker's CUDA_VISIBLE_DEVICES, as a list.
	gpus []string
}

// placeRanks derives each worker's local rank and node rank from the
// slots (nodes are numbered in order of first appearance) and the devices
// each worker sees, by visibility (see ScalingConfig.GPUVisibility).
func placeRanks(slots []Slot, visibility string) []rankInfo {
	nodeIndex := map[string]int{}
	perNode := map[string][]int{} // the ranks on each node, in local-rank order
	out := make([]rankInfo, len(slots))
	for i, s := range slots {
		if _, ok := nodeIndex[s.Node]; !ok {
			nodeIndex[s.Node] = len(nodeIndex)
		}
		out[i] = rankInfo{rank: i, size: len(slots), localRank: len(perNode[s.Node]), nodeRank: nodeIndex[s.Node], gpus: s.GPUs}
		perNode[s.Node] = append(perNode[s.Node], i)
	}
	for _, ranks := range perNode {
		var view []string
		if visibility != GPUViewWorker {
			view = groupView(slots, ranks)
		}
		for _, r := range ranks {
			out[r].localSize, out[r].nodes = len(ranks), len(nodeIndex)
			if view != nil {
				out[r].gpus = view
			}
		}
	}
	return out
}

// groupView is what torchrun shows the workers of one node: every device
// of the group's workers there, such that entry LOCAL_RANK is the worker's
// own (its first, when it has several). ranks are the node's workers in
// local-rank order. The first device of each worker comes first, in
// local-rank order; the other devices of workers with several follow, in
// the same order. It is nil when no worker has a device, or when two
// workers share one (fractional gpus_per_worker): CUDA cannot list a device
// twice, so those workers keep their own view.
func groupView(slots []Slot, ranks []int) []string {
	seen := map[string]bool{}
	var first, rest []string
	for _, r := range ranks {
		for i, g := range slots[r].GPUs {
			if seen[g] {
				return nil
			}
			seen[g] = true
			if i == 0 {
				first = append(first, g)
			} else {
				rest = append(rest, g)
			}
		}
		if len(slots[r].GPUs) == 0 {
			return nil
		}
	}
	return append(first, rest...)
}
