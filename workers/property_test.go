package workers

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// randomNodes returns 1 to 4 nodes of assorted sizes, some without GPUs.
func randomNodes(rng *rand.Rand) []Node {
	nodes := make([]Node, 1+rng.IntN(4))
	for i := range nodes {
		n := Node{Name: fmt.Sprintf("n%d", i), CPUs: float64(2 + rng.IntN(15)), Memory: Bytes(1+rng.IntN(16)) * GiB}
		for g := range rng.IntN(5) {
			n.GPUs = append(n.GPUs, GPU{Index: g, MIG: -1})
		}
		nodes[i] = n
	}
	return nodes
}

// randomRequest returns a group of 1 to 4 workers with a mix of needs,
// sometimes elastic, sometimes too large to ever fit.
func randomRequest(rng *rand.Rand, name string) Request {
	r := Request{
		Name:    name,
		Workers: 1 + rng.IntN(4),
		Per: Resources{
			CPUs:   []float64{0, 0.25, 0.5, 1, 2}[rng.IntN(5)],
			GPUs:   []float64{0, 0, 0.25, 0.3, 0.5, 1, 2}[rng.IntN(7)],
			Memory: []Bytes{0, 512 * MiB, 2 * GiB}[rng.IntN(3)],
		},
		Placement: []Placement{"", Pack, Spread}[rng.IntN(3)],
	}
	if rng.IntN(4) == 0 {
		r.MinWorkers = 1 + rng.IntN(r.Workers)
	}
	return r
}

// checkInvariants recomputes what the live allocations hold from their
// workers, independently of the manager's books, and checks that nothing
// is over-committed, that the books agree, that waiting tickets hold
// nothing and that none of them would fit in what is free and unreserved.
func checkInvariants(t *testing.T, m *Manager, live []*Allocation, waiting []*Ticket) {
	t.Helper()
	m.mu.Lock()
	nodes := slices.Clone(m.nodes)
	m.mu.Unlock()
	used := viewOf(nodes)
	for i := range used.cpu {
		used.cpu[i], used.mem[i] = 0, 0
		clear(used.gpu[i])
	}
	exclusive := map[[2]int]int{} // devices held whole, by how many workers
	for _, a := range live {
		ws := a.Workers()
		r := a.Request()
		if len(ws) < 1 || len(ws) > r.Workers || r.MinWorkers == 0 && len(ws) != r.Workers {
			t.Fatalf("%s holds %d workers, asked for %d (min %d)", r.Name, len(ws), r.Workers, r.MinWorkers)
		}
		seen := map[int]bool{}
		for k, w := range ws {
			if seen[w.NodeIndex] && ws[k-1].NodeIndex != w.NodeIndex {
				t.Fatalf("%s: node %d's workers are not adjacent", r.Name, w.NodeIndex)
			}
			seen[w.NodeIndex] = true
			i := w.NodeIndex
			used.cpu[i] += cpuUnits(w.CPUs)
			used.mem[i] += int64(w.Memory)
			var ids []string
			for _, g := range w.GPUs {
				dev := slices.IndexFunc(nodes[i].GPUs, func(x GPU) bool { return x == g.GPU })
				used.gpu[i][dev] += gpuUnits(g.Share)
				if g.Share == 1 {
					exclusive[[2]int{i, dev}]++
				}
				ids = append(ids, g.GPU.VisibleID())
			}
			switch {
			case r.Per.GPUs == 0 && len(w.GPUs) != 0,
				r.Per.GPUs > 0 && r.Per.GPUs < 1 && (len(w.GPUs) != 1 || w.GPUs[0].Share != r.Per.GPUs),
				r.Per.GPUs >= 1 && len(w.GPUs) != int(r.Per.GPUs):
				t.Fatalf("%s: a worker asking for %g GPUs got %+v", r.Name, r.Per.GPUs, w.GPUs)
			}
			if want := strings.Join(ids, ","); w.CUDAVisibleDevices != want {
				t.Fatalf("%s: CUDA_VISIBLE_DEVICES %q, want %q", r.Name, w.CUDAVisibleDevices, want)
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, n := range nodes {
		if used.cpu[i] > cpuUnits(n.CPUs) || n.Memory > 0 && used.mem[i] > int64(n.Memory) {
			t.Fatalf("node %d over-committed: %d/%d thousandths of a CPU, %d/%d bytes", i, used.cpu[i], cpuUnits(n.CPUs), used.mem[i], n.Memory)
		}
		for d, u := range used.gpu[i] {
			if u > gpuScale {
				t.Fatalf("node %d GPU %d over-committed: %d ten-thousandths", i, d, u)
			}
			if exclusive[[2]int{i, d}] > 0 && u != gpuScale {
				t.Fatalf("node %d GPU %d is held whole and shared too", i, d)
			}
		}
		if m.free.cpu[i] != m.capacity.cpu[i]-used.cpu[i] || m.free.mem[i] != m.capacity.mem[i]-used.mem[i] {
			t.Fatalf("node %d: the books say %d CPU, %d memory free; the workers leave %d, %d",
				i, m.free.cpu[i], m.free.mem[i], m.capacity.cpu[i]-used.cpu[i], m.capacity.mem[i]-used.mem[i])
		}
		for d := range used.gpu[i] {
			if m.free.gpu[i][d] != gpuScale-used.gpu[i][d] {
				t.Fatalf("node %d GPU %d: the books say %d free, the workers leave %d", i, d, m.free.gpu[i][d], gpuScale-used.gpu[i][d])
			}
		}
	}
	reserved := m.capacity.clone()
	holders := 0
	for _, q := range m.queue {
		if q.resv != nil {
			holders++
			reserved.apply(q.resv, q.d, -1)
			if q != m.reserver {
				t.Fatalf("%s holds a reservation but is not the reserver", q.req.Name)
			}
		}
	}
	if holders > 1 || m.reserver != nil && holders != 1 {
		t.Fatalf("%d tickets hold reservations, reserver %v", holders, m.reserver != nil)
	}
	if r := m.reserver; r != nil {
		for _, s := range r.resv {
			if m.free.off[s.node] {
				t.Fatalf("%s reserves on lost node %d", r.req.Name, s.node)
			}
		}
	}
	for i := range reserved.cpu {
		if reserved.cpu[i] < 0 || reserved.mem[i] < 0 || slices.Min(append([]int64{0}, reserved.gpu[i]...)) < 0 {
			t.Fatalf("node %d: reservations exceed its capacity", i)
		}
	}
	if len(m.queue) != len(waiting) {
		t.Fatalf("the manager has %d waiting, the test %d", len(m.queue), len(waiting))
	}
	avail := m.free.clone()
	for _, q := range m.queue {
		if q.resv != nil {
			avail.apply(q.resv, q.d, -1)
		}
	}
	for _, tk := range waiting {
		if granted(tk) || tk.alloc != nil {
			t.Fatalf("%s is waiting and granted", tk.req.Name)
		}
		if tk.resv == nil {
			if _, ok := placeRequest(avail.clone(), tk); ok {
				t.Fatalf("%s waits although it fits in what is free and unreserved", tk.req.Name)
			}
		}
	}
}

// simulate plays a seeded random script of submissions, releases,
// cancellations, growth, shrinking and clock ticks against a manager,
// checking the invariants after every step, then releases everything and
// checks that every waiting group is granted. It returns a log of every
// grant, for the determinism check.
func simulate(t *testing.T, seed uint64, steps int) []string {
	rng := rand.New(rand.NewPCG(seed, 42))
	nodes := randomNodes(rng)
	reserveAfter := []time.Duration{-1, time.Second, 10 * time.Second}[rng.IntN(3)]
	m, clock := newTestManager(nodes, reserveAfter)
	var live []*Allocation
	var waiting []*Ticket
	var log []string
	// onLost checks that no worker was placed on a lost node.
	onLost := func(what string, ws []Worker) {
		for _, w := range ws {
			if m.Lost(w.NodeIndex) {
				t.Fatalf("seed %d: %s placed a worker on lost node %d", seed, what, w.NodeIndex)
			}
		}
	}
	collect := func() {
		kept := waiting[:0]
		for _, tk := range waiting {
			if granted(tk) {
				a := tk.Allocation()
				live = append(live, a)
				onLost(tk.req.Name, a.Workers())
				log = append(log, fmt.Sprintf("%s %v", tk.req.Name, a.Workers()))
			} else {
				kept = append(kept, tk)
			}
		}
		waiting = kept
	}
	for step := range steps {
		switch op := rng.IntN(11); {
		case op < 4:
			r := randomRequest(rng, fmt.Sprintf("g%d", step))
			tk, err := m.Submit(r)
			if err != nil {
				// It must truly never fit: not even on idle nodes.
				if m.capacity.totalFit(demandOf(r.Per), r.min()) >= r.min() {
					t.Fatalf("seed %d: %s refused although it fits idle nodes: %v", seed, r.Name, err)
				}
				continue
			}
			waiting = append(waiting, tk)
		case op < 7 && len(live) > 0:
			i := rng.IntN(len(live))
			live[i].Release()
			live = slices.Delete(live, i, i+1)
		case op < 8 && len(waiting) > 0:
			i := rng.IntN(len(waiting))
			waiting[i].Cancel()
			waiting = slices.Delete(waiting, i, i+1)
		case op < 9 && len(live) > 0:
			a := live[rng.IntN(len(live))]
			if n := len(a.Workers()); a.Request().MinWorkers > 0 && n > 1 && rng.IntN(2) == 0 {
				if err := a.Shrink(rng.IntN(n)); err != nil {
					t.Fatal(err)
				}
			} else {
				before := map[int]int{}
				for _, w := range a.Workers() {
					before[w.NodeIndex]++
				}
				if _, err := a.Grow(); err != nil {
					t.Fatal(err)
				}
				for _, w := range a.Workers() {
					if before[w.NodeIndex]--; before[w.NodeIndex] < 0 && m.Lost(w.NodeIndex) {
						t.Fatalf("seed %d: grew onto lost node %d", seed, w.NodeIndex)
					}
				}
			}
		case op == 9:
			// A node is lost, or a lost one rejoins with as much or more.
			i := rng.IntN(len(nodes))
			if !m.Lost(i) {
				if err := m.LoseNode(i); err != nil {
					t.Fatal(err)
				}
				break
			}
			n := m.Nodes()[i]
			n.CPUs += float64(rng.IntN(3))
			if err := m.RejoinNode(i, n); err != nil {
				t.Fatal(err)
			}
		default:
			clock.advance(time.Duration(rng.IntN(3)) * time.Second)
		}
		collect()
		checkInvariants(t, m, live, waiting)
	}
	// Liveness: with every node back, time passing and running groups
	// ending, every waiting group is granted.
	for i := range nodes {
		if m.Lost(i) {
			if err := m.RejoinNode(i, m.Nodes()[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	collect()
	for round := 0; len(waiting) > 0; round++ {
		if round > 1000 {
			t.Fatalf("seed %d: %d groups still wait after everything was released", seed, len(waiting))
		}
		clock.advance(time.Minute)
		for _, a := range live {
			a.Release()
		}
		live = nil
		collect()
		checkInvariants(t, m, live, waiting)
	}
	for _, a := range live {
		a.Release()
	}
	if !reflect.DeepEqual(m.free, m.capacity) {
		t.Fatalf("seed %d: free %+v after every release, want %+v", seed, m.free, m.capacity)
	}
	return log
}

// TestManagerProperties runs many random scripts; each must keep the
// invariants, and running the same script twice must place every group
// the same way.
func TestManagerProperties(t *testing.T) {
	seeds, steps := 100, 200
	if testing.Short() {
		seeds = 20
	}
	for seed := range uint64(seeds) {
		first := simulate(t, seed, steps)
		if seed%10 == 0 {
			if again := simulate(t, seed, steps); !reflect.DeepEqual(first, again) {
				t.Fatalf("seed %d: the same script placed groups differently", seed)
			}
		}
	}
}

// TestManagerConcurrent has goroutines acquire and release random groups
// through the blocking API while a ledger kept outside the manager checks
// that no device, CPU or byte is ever handed out twice. Run it with -race.
func TestManagerConcurrent(t *testing.T) {
	nodes := gpuNodes(2, 8, 4)
	m := NewManager(nodes, ManagerConfig{ReserveAfter: time.Millisecond})
	var mu sync.Mutex
	ledger := viewOf(nodes)
	// take gives back the workers in back, then takes those in ws, as one
	// step of the ledger.
	take := func(ws, back []Worker) {
		mu.Lock()
		defer mu.Unlock()
		for sign, list := range map[int64][]Worker{1: back, -1: ws} {
			for _, w := range list {
				ledger.cpu[w.NodeIndex] += sign * cpuUnits(w.CPUs)
				ledger.mem[w.NodeIndex] += sign * int64(w.Memory)
				for _, g := range w.GPUs {
					ledger.gpu[w.NodeIndex][g.GPU.Index] += sign * gpuUnits(g.Share)
				}
			}
		}
		for i := range ledger.cpu {
			if ledger.cpu[i] < 0 || ledger.mem[i] < 0 || slices.Min(ledger.gpu[i]) < 0 {
				t.Errorf("over-committed: node %d ledger %d CPU, %d memory, GPUs %v", i, ledger.cpu[i], ledger.mem[i], ledger.gpu[i])
			}
		}
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for i := range 40 {
				r := randomRequest(rng, fmt.Sprintf("g%d.%d", g, i))
				a, err := m.Acquire(context.Background(), r)
				if err != nil {
					continue // never fits
				}
				ws := a.Workers()
				take(ws, nil)
				if r.MinWorkers > 0 && rng.IntN(2) == 0 {
					if n, err := a.Grow(); err == nil && n > 0 {
						// Grow may reorder the workers (each node's stay
						// adjacent): the ledger swaps the whole list.
						grown := a.Workers()
						take(grown, ws)
						ws = grown
					}
				}
				time.Sleep(time.Duration(rng.IntN(100)) * time.Microsecond)
				take(nil, ws)
				a.Release()
			}
		})
	}
	wg.Wait()
	if !reflect.DeepEqual(m.free, m.capacity) || !reflect.DeepEqual(ledger, m.capacity) {
		t.Errorf("books do not balance: free %+v, ledger %+v, capacity %+v", m.free, ledger, m.capacity)
	}
}
