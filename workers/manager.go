package workers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Manager hands the nodes' resources out to training groups, a whole
// group at a time: a group is granted all its workers at once or waits
// holding nothing. One Manager is shared by every trial of a sweep; it is
// safe for concurrent use.
//
// Waiting groups are served in arrival order, and a later group that fits
// is placed while an earlier one that does not waits (backfill). So that a
// large group is not starved by a stream of small ones, the oldest group
// that has waited ReserveAfter and still does not fit reserves a place:
// the resources it will use are handed to nobody else, and it is granted
// as soon as they are all free. Then the next oldest may reserve.
type Manager struct {
	reserveAfter time.Duration
	now          func() time.Time

	mu       sync.Mutex
	nodes    []Node
	capacity view
	free     view
	queue    []*Ticket     // waiting, in arrival order
	reserver *Ticket       // the waiting ticket holding the reservation, if any
	elastic  []*Allocation // granted elastic groups, for MoreFit
}

// ManagerConfig tunes a Manager. Its zero value is ready to use.
type ManagerConfig struct {
	// ReserveAfter is how long a group waits before it may reserve
	// resources that no later group may take (one group at a time, the
	// oldest). 0 means DefaultReserveAfter; a negative value means at once,
	// which serves groups that do not fit in strict arrival order.
	ReserveAfter time.Duration
	// Now is the clock; nil means time.Now. Simulations set it.
	Now func() time.Time
}

// DefaultReserveAfter is how long a group waits before it reserves.
const DefaultReserveAfter = 30 * time.Second

// NewManager returns a manager of nodes (see Declared.Inventory and
// Discover).
func NewManager(nodes []Node, cfg ManagerConfig) *Manager {
	m := &Manager{reserveAfter: cfg.ReserveAfter, now: cfg.Now}
	if m.reserveAfter == 0 {
		m.reserveAfter = DefaultReserveAfter
	}
	if m.now == nil {
		m.now = time.Now
	}
	for _, n := range nodes {
		m.addNodeLocked(n)
	}
	return m
}

func (m *Manager) addNodeLocked(n Node) int {
	n.GPUs = append([]GPU(nil), n.GPUs...)
	m.nodes = append(m.nodes, n)
	m.capacity.addNode(n)
	m.free.addNode(n)
	return len(m.nodes) - 1
}

// AddNode adds a node's resources, for example a remote agent that joined,
// and places the groups that now fit. It returns the node's index.
func (m *Manager) AddNode(n Node) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := m.addNodeLocked(n)
	m.scheduleLocked()
	return i
}

// LoseNode marks node i lost, for example a remote agent that stopped
// answering: no worker is placed on it until RejoinNode, while the groups
// holding workers there keep them until they release them (they learn of
// the loss from their processes, which fail). Groups that fit only with
// lost nodes wait for them rather than fail. Losing a lost node does
// nothing.
func (m *Manager) LoseNode(i int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i < 0 || i >= len(m.nodes) {
		return fmt.Errorf("lose node %d: the manager has %s", i, count(len(m.nodes), "node"))
	}
	m.free.off[i] = true // free decides placement; capacity, whether a group could ever fit
	if r := m.reserver; r != nil && slices.ContainsFunc(r.resv, func(s slot) bool { return s.node == i }) {
		m.reserver, r.resv = nil, nil // it reserves again, elsewhere
	}
	m.scheduleLocked()
	return nil
}

// RejoinNode brings lost node i back with the resources n describes (an
// agent that joined again, perhaps with other CPUs or memory; n.Name is
// ignored) and places the groups that now fit. Workers still held there
// from before the loss stay counted until released, so the node is never
// over-committed. It fails, changing nothing, when the node is not lost or
// n has another number of GPUs: add it as a new node then.
func (m *Manager) RejoinNode(i int, n Node) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case i < 0 || i >= len(m.nodes):
		return fmt.Errorf("rejoin node %d: the manager has %s", i, count(len(m.nodes), "node"))
	case !m.free.off[i]:
		return fmt.Errorf("rejoin node %d (%s): it is not lost", i, m.nodes[i].Name)
	case len(n.GPUs) != len(m.nodes[i].GPUs):
		return fmt.Errorf("rejoin node %d (%s): it had %s and now has %d", i, m.nodes[i].Name, count(len(m.nodes[i].GPUs), "GPU"), len(n.GPUs))
	}
	var nv view
	nv.addNode(n)
	// Free moves by what the capacity gains or loses; it may go negative
	// while old workers hold more than the node now has.
	m.free.cpu[i] += nv.cpu[0] - m.capacity.cpu[i]
	m.free.mem[i] += nv.mem[0] - m.capacity.mem[i]
	m.capacity.cpu[i], m.capacity.mem[i] = nv.cpu[0], nv.mem[0]
	m.free.off[i] = false
	n.Name = m.nodes[i].Name
	n.GPUs = append([]GPU(nil), n.GPUs...)
	m.nodes[i] = n
	m.scheduleLocked()
	return nil
}

// Lost reports whether node i is lost (see LoseNode).
func (m *Manager) Lost(i int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return i >= 0 && i < len(m.nodes) && m.free.off[i]
}

// Nodes returns the nodes the manager hands out, in index order.
func (m *Manager) Nodes() []Node {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Node, len(m.nodes))
	for i, n := range m.nodes {
		n.GPUs = append([]GPU(nil), n.GPUs...)
		out[i] = n
	}
	return out
}

// Request asks for a training group.
type Request struct {
	// Name says whose group it is in messages, as in "trial 7".
	Name string
	// Workers is the group's size; for an elastic group, the most workers
	// it wants. It must be at least 1.
	Workers int
	// MinWorkers makes the group elastic when it is between 1 and Workers-1:
	// the group is granted as soon as MinWorkers fit, with as many more as
	// fit up to Workers, and can grow later (see Allocation.MoreFit). 0
	// means Workers: a fixed group.
	MinWorkers int
	// Per is what each worker needs.
	Per Resources
	// Placement is Pack (the default, "") or Spread.
	Placement Placement
}

func (r Request) min() int {
	if r.MinWorkers == 0 {
		return r.Workers
	}
	return r.MinWorkers
}

func (r Request) validate() error {
	switch {
	case r.Workers < 1:
		return fmt.Errorf("a group needs at least 1 worker, got %d", r.Workers)
	case r.MinWorkers < 0 || r.MinWorkers > r.Workers:
		return fmt.Errorf("the minimum of an elastic group must be between 1 and its size %d, got %d", r.Workers, r.MinWorkers)
	}
	if err := r.Per.Validate(); err != nil {
		return err
	}
	return r.Placement.Validate()
}

func (r Request) describe() string {
	size := count(r.Workers, "worker")
	if r.min() < r.Workers {
		size = fmt.Sprintf("%d to %d workers", r.min(), r.Workers)
	}
	s := fmt.Sprintf("a group of %s × (%s)", size, r.Per)
	if r.Name != "" {
		s = r.Name + ": " + s
	}
	return s
}

// count writes n things, as in "1 node" or "2 nodes".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// ErrNeverFits is wrapped by the error for a group that cannot be placed
// even on idle nodes.
var ErrNeverFits = errors.New("can never be placed")

// Ticket is a request waiting for its group. Take the group from
// Allocation once Ready is closed, or give up with Cancel.
type Ticket struct {
	m     *Manager
	req   Request
	d     demand
	since time.Time
	ready chan struct{}
	alloc *Allocation
	gone  bool   // cancelled, or granted
	resv  []slot // the reserved place, nil until the ticket reserves
}

// Check reports whether req is valid and could be placed on idle nodes,
// without asking for anything: the error Submit would fail with at once,
// or nil. Use it to refuse a sweep before it starts.
func (m *Manager) Check(req Request) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.checkLocked(req)
}

// SharedDevices is how many of req's workers, placed on idle nodes at
// their group's full size (or as many as fit), share a GPU with another worker of their group:
// 0 when each has devices of its own (placement keeps a group's workers on
// distinct devices while there are enough). PyTorch's NCCL backend refuses
// two ranks on one device, so a sweep says so before it starts.
func (m *Manager) SharedDevices(req Request) int {
	d := demandOf(req.Per)
	if d.gpu == 0 || d.wholeGPUs() || req.validate() != nil {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.capacity.clone()
	n := v.totalFit(d, req.Workers)
	if n < req.min() {
		return 0 // Check refuses it
	}
	slots, _ := place(v, n, d, req.Placement, nil, nil)
	ranks := map[[2]int]int{}
	for _, s := range slots {
		ranks[[2]int{s.node, s.devs[0]}]++
	}
	shared := 0
	for _, k := range ranks {
		if k > 1 {
			shared += k
		}
	}
	return shared
}

func (m *Manager) checkLocked(req Request) error {
	if err := req.validate(); err != nil {
		if req.Name != "" {
			return fmt.Errorf("%s: %w", req.Name, err)
		}
		return err
	}
	d := demandOf(req.Per)
	if m.capacity.totalFit(d, req.min()) < req.min() {
		return m.neverFitsLocked(req, d)
	}
	return nil
}

// Submit queues req and returns at once. It fails at once, with an error
// that wraps ErrNeverFits, when the group could not be placed even with
// every node idle. A group that fits now is granted before Submit returns.
func (m *Manager) Submit(req Request) (*Ticket, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkLocked(req); err != nil {
		return nil, err
	}
	d := demandOf(req.Per)
	t := &Ticket{m: m, req: req, d: d, since: m.now(), ready: make(chan struct{})}
	m.queue = append(m.queue, t)
	m.scheduleLocked()
	return t, nil
}

// neverFitsLocked explains why req cannot fit even on idle nodes.
func (m *Manager) neverFitsLocked(req Request, d demand) error {
	var cpus, gpus, mem float64
	mostGPUs := 0
	for _, n := range m.nodes {
		cpus += n.CPUs
		gpus += float64(len(n.GPUs))
		mem += float64(n.Memory)
		mostGPUs = max(mostGPUs, len(n.GPUs))
	}
	fit := m.capacity.totalFit(d, req.min())
	var limits []string
	if f := m.capacity.totalFit(demand{cpu: d.cpu}, req.min()); d.cpu > 0 && f < req.min() {
		limits = append(limits, plural(cpus, "CPU")+" in all")
	}
	if f := m.capacity.totalFit(demand{mem: d.mem}, req.min()); d.mem > 0 && f < req.min() {
		limits = append(limits, fmt.Sprintf("%s of memory in all", Bytes(min(mem, 1<<62)).Human()))
	}
	if f := m.capacity.totalFit(demand{gpu: d.gpu}, req.min()); d.gpu > 0 && f < req.min() {
		l := plural(gpus, "GPU") + " in all"
		if d.wholeGPUs() && gpus > 0 {
			l += fmt.Sprintf(", at most %d on one node", mostGPUs)
		}
		if gpus == 0 && len(m.nodes) > 0 && m.nodes[0].GPUNote != "" {
			l += "; " + m.nodes[0].GPUNote
		}
		limits = append(limits, l)
	}
	if len(limits) == 0 {
		limits = append(limits, "no node has room for a whole worker of the group")
	}
	return fmt.Errorf("%s %w: at most %s fit on %s (%s); ask for fewer workers or less per worker, or add resources",
		req.describe(), ErrNeverFits, count(fit, "such worker"), count(len(m.nodes), "node"), strings.Join(limits, ", "))
}

// Ready is closed when the group is granted.
func (t *Ticket) Ready() <-chan struct{} { return t.ready }

// Allocation returns the granted group, or nil while it waits.
func (t *Ticket) Allocation() *Allocation {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	return t.alloc
}

// Cancel withdraws a waiting request, or releases the group when it was
// granted already. Calling it again does nothing.
func (t *Ticket) Cancel() {
	m := t.m
	m.mu.Lock()
	if t.alloc != nil {
		m.mu.Unlock()
		t.alloc.Release()
		return
	}
	defer m.mu.Unlock()
	if t.gone {
		return
	}
	t.gone = true
	if m.reserver == t {
		m.reserver, t.resv = nil, nil
	}
	for i, q := range m.queue {
		if q == t {
			m.queue = append(m.queue[:i], m.queue[i+1:]...)
			break
		}
	}
	m.scheduleLocked()
}

// Acquire places a group, waiting until it fits: it is Submit, then a wait
// for the grant or for ctx to end (which withdraws the request and returns
// ctx's error). It fails at once for a group that can never fit.
func (m *Manager) Acquire(ctx context.Context, req Request) (*Allocation, error) {
	t, err := m.Submit(req)
	if err != nil {
		return nil, err
	}
	select {
	case <-t.ready:
		return t.Allocation(), nil
	case <-ctx.Done():
		t.Cancel()
		return nil, ctx.Err()
	}
}

// Allocation is a granted group: its workers' places, held until Release.
type Allocation struct {
	m     *Manager
	req   Request
	d     demand
	slots []slot // guarded by m.mu
	done  bool   // released; guarded by m.mu
	more  chan struct{}
}

// Worker is one worker's place.
type Worker struct {
	// Node is the node's name and NodeIndex its index in Manager.Nodes.
	Node      string
	NodeIndex int
	// CPUs and Memory are reserved for the worker.
	CPUs   float64
	Memory Bytes
	// GPUs are the worker's devices and its share of each (1 for a whole
	// device); workers sharing a device see the same device.
	GPUs []GPUShare
	// CUDAVisibleDevices is the value of CUDA_VISIBLE_DEVICES for the
	// worker: its devices' VisibleIDs, comma-separated; "" when it has none.
	CUDAVisibleDevices string
}

// GPUShare is a worker's share of one device.
type GPUShare struct {
	GPU   GPU
	Share float64
}

// Workers returns the group's workers. Workers on one node are adjacent,
// so ranks in this order give each node a contiguous run (as torchrun
// expects). For a fixed group the list never changes; an elastic group's
// changes with Grow and Shrink.
func (a *Allocation) Workers() []Worker {
	a.m.mu.Lock()
	defer a.m.mu.Unlock()
	out := make([]Worker, len(a.slots))
	for i, s := range a.slots {
		out[i] = a.workerLocked(s)
	}
	return out
}

func (a *Allocation) workerLocked(s slot) Worker {
	n := a.m.nodes[s.node]
	w := Worker{Node: n.Name, NodeIndex: s.node, CPUs: a.req.Per.CPUs, Memory: a.req.Per.Memory}
	ids := make([]string, len(s.devs))
	for i, dev := range s.devs {
		w.GPUs = append(w.GPUs, GPUShare{GPU: n.GPUs[dev], Share: float64(s.share) / gpuScale})
		ids[i] = n.GPUs[dev].VisibleID()
	}
	w.CUDAVisibleDevices = strings.Join(ids, ",")
	return w
}

// Request is what the group was asked for.
func (a *Allocation) Request() Request { return a.req }

// Release returns the group's resources and places the groups that now
// fit. Calling it again does nothing.
func (a *Allocation) Release() {
	m := a.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if a.done {
		return
	}
	a.done = true
	m.free.apply(a.slots, a.d, +1)
	for i, e := range m.elastic {
		if e == a {
			m.elastic = append(m.elastic[:i], m.elastic[i+1:]...)
			break
		}
	}
	m.scheduleLocked()
}

// MoreFit signals an elastic group below its size that at least one more
// of its workers would fit now, after the waiting groups were served; the
// trainer then calls Grow. The channel holds at most one signal and is
// never closed; for a fixed group it never fires.
func (a *Allocation) MoreFit() <-chan struct{} { return a.more }

// Grow adds as many workers as fit now, up to the group's size, and
// returns how many it added (0 when none fit). Workers then lists old and
// new workers with each node's still adjacent, so positions may change:
// the group restarts with new ranks after a resize anyway. Resources
// reserved for waiting groups are not taken.
func (a *Allocation) Grow() (int, error) {
	m := a.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if a.done {
		return 0, errors.New("grow: the group was released")
	}
	want := a.req.Workers - len(a.slots)
	if want <= 0 {
		return 0, nil
	}
	avail := m.availLocked()
	k := avail.totalFit(a.d, want)
	if k == 0 {
		return 0, nil
	}
	slots, _ := place(avail, k, a.d, a.req.Placement, nil, a.slots)
	m.free.apply(slots, a.d, -1)
	a.slots = groupByNode(append(a.slots, slots...))
	return k, nil
}

// groupByNode orders slots so that each node's are adjacent, nodes in the
// order they first appear, keeping the order within a node.
func groupByNode(slots []slot) []slot {
	first := map[int]int{}
	for i, s := range slots {
		if _, ok := first[s.node]; !ok {
			first[s.node] = i
		}
	}
	slices.SortStableFunc(slots, func(a, b slot) int { return first[a.node] - first[b.node] })
	return slots
}

// Shrink releases the workers at the given positions in Workers (for
// example those of a node that failed); the others keep their order. It
// fails, changing nothing, when a position is out of range or repeated.
func (a *Allocation) Shrink(positions ...int) error {
	m := a.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if a.done {
		return errors.New("shrink: the group was released")
	}
	drop := make([]bool, len(a.slots))
	for _, p := range positions {
		if p < 0 || p >= len(a.slots) || drop[p] {
			return fmt.Errorf("shrink: position %d is out of range or repeated (the group has %d workers)", p, len(a.slots))
		}
		drop[p] = true
	}
	kept := a.slots[:0:0]
	var gone []slot
	for i, s := range a.slots {
		if drop[i] {
			gone = append(gone, s)
		} else {
			kept = append(kept, s)
		}
	}
	a.slots = kept
	m.free.apply(gone, a.d, +1)
	m.scheduleLocked()
	return nil
}

// availLocked is what requests other than the reserving one may use:
// free minus the reservation.
func (m *Manager) availLocked() view {
	avail := m.free.clone()
	if r := m.reserver; r != nil {
		avail.apply(r.resv, r.d, -1)
	}
	return avail
}

// shape identifies requests that fit or fail alike, so that a pass tries
// each shape once while the free resources only shrink.
type shape struct {
	d        demand
	min, max int
	policy   Placement
}

// scheduleLocked is one placement pass over the waiting requests, in
// arrival order, as in EASY backfilling (Lifka, "The ANL/IBM SP scheduling
// system", 1995; Mu'alem and Feitelson, IEEE TPDS 12(6), 2001): each
// request is placed if it fits in what is free and not reserved; the
// oldest request that does not fit and has waited ReserveAfter reserves
// room on the idle cluster, preferring what is free now; the reserving
// request is granted its reservation as soon as all of it is free. One
// reservation at a time keeps the idle time it costs small: with many,
// freed devices would sit reserved for groups still waiting on others.
// Last, elastic groups below their size hear whether more of them fit.
func (m *Manager) scheduleLocked() {
	if len(m.queue) > 0 {
		m.serveQueueLocked()
	}
	if len(m.elastic) == 0 {
		return
	}
	avail := m.availLocked()
	for _, a := range m.elastic {
		if len(a.slots) < a.req.Workers && avail.totalFit(a.d, 1) > 0 {
			select {
			case a.more <- struct{}{}:
			default:
			}
		}
	}
}

func (m *Manager) serveQueueLocked() {
	now := m.now()
	avail := m.availLocked()
	// Free resources only shrink during a pass, so a shape that failed once
	// fails again: each is tried once.
	failed := map[shape]bool{}
	kept := make([]*Ticket, 0, len(m.queue))
	for _, t := range m.queue {
		if t == m.reserver {
			avail.apply(t.resv, t.d, +1) // its own reservation is its to use
			if avail.tryTake(t.resv, t.d) {
				m.grantLocked(t, t.resv)
				continue
			}
			if slots, ok := placeRequest(avail, t); ok {
				m.grantLocked(t, slots)
				continue
			}
			avail.apply(t.resv, t.d, -1)
			kept = append(kept, t)
			continue
		}
		key := shape{t.d, t.req.min(), t.req.Workers, t.req.Placement}
		if !failed[key] {
			if slots, ok := placeRequest(avail, t); ok {
				m.grantLocked(t, slots)
				continue
			}
			failed[key] = true
		}
		if m.reserver == nil && now.Sub(t.since) >= m.reserveAfter {
			live := m.capacity.clone()
			copy(live.off, m.free.off) // reserve nothing on lost nodes
			if slots, ok := place(live, t.req.min(), t.d, t.req.Placement, &avail, nil); ok {
				t.resv, m.reserver = slots, t
				avail.apply(slots, t.d, -1)
			}
		}
		kept = append(kept, t)
	}
	m.queue = kept
}

// placeRequest places t's group in v: all its workers, or for an elastic
// group as many as fit when at least its minimum does.
func placeRequest(v view, t *Ticket) ([]slot, bool) {
	n := t.req.Workers
	if t.req.min() < n {
		n = v.totalFit(t.d, n)
		if n < t.req.min() {
			return nil, false
		}
	}
	return place(v, n, t.d, t.req.Placement, nil, nil)
}

// grantLocked gives t its slots. The slots must fit in m.free.
func (m *Manager) grantLocked(t *Ticket, slots []slot) {
	a := &Allocation{m: m, req: t.req, d: t.d, slots: slots, more: make(chan struct{}, 1)}
	m.free.apply(slots, t.d, -1)
	if t.req.min() < t.req.Workers {
		m.elastic = append(m.elastic, a)
	}
	if m.reserver == t {
		m.reserver = nil
	}
	t.alloc, t.gone, t.resv = a, true, nil
	close(t.ready)
}
