package workers

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fakeClock is a manager clock that moves only when a test moves it.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newTestManager(nodes []Node, reserveAfter time.Duration) (*Manager, *fakeClock) {
	c := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	return NewManager(nodes, ManagerConfig{ReserveAfter: reserveAfter, Now: c.now}), c
}

func mustSubmit(t *testing.T, m *Manager, r Request) *Ticket {
	t.Helper()
	tk, err := m.Submit(r)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func granted(tk *Ticket) bool {
	select {
	case <-tk.Ready():
		return true
	default:
		return false
	}
}

func mustGranted(t *testing.T, tk *Ticket) *Allocation {
	t.Helper()
	if !granted(tk) {
		t.Fatalf("%s is still waiting", tk.req.Name)
	}
	return tk.Allocation()
}

func gpuRequest(name string, workers int, gpus float64) Request {
	return Request{Name: name, Workers: workers, Per: Resources{CPUs: 1, GPUs: gpus}}
}

func TestAllOrNothing(t *testing.T) {
	m, _ := newTestManager(gpuNodes(1, 8, 4), time.Hour)
	a := mustGranted(t, mustSubmit(t, m, gpuRequest("a", 3, 1)))
	b := mustSubmit(t, m, gpuRequest("b", 2, 1))
	if granted(b) {
		t.Fatal("a group of 2 was placed with 1 GPU free")
	}
	if b.Allocation() != nil {
		t.Error("a waiting ticket has an allocation")
	}
	if got := m.free.freeGPU(0); got != gpuScale {
		t.Errorf("a waiting group holds part of the node: %d ten-thousandths of a GPU free, want one GPU", got)
	}
	a.Release()
	ab := mustGranted(t, b)
	if n := len(ab.Workers()); n != 2 {
		t.Errorf("b got %d workers, want 2", n)
	}
	ab.Release()
	ab.Release() // a second release must not free twice
	a.Release()
	if !reflect.DeepEqual(m.free, m.capacity) {
		t.Errorf("free %+v after all releases, want %+v", m.free, m.capacity)
	}
}

func TestNeverFits(t *testing.T) {
	nodes := gpuNodes(2, 8, 4) // 16 CPUs, 8 GPUs, 128GiB in all
	tests := []struct {
		name string
		req  Request
		msg  string
	}{
		{"more GPUs than exist", gpuRequest("trial 3", 9, 1), "8 GPUs in all"},
		{"more GPUs per worker than a node has", gpuRequest("trial 3", 1, 5), "8 GPUs in all, at most 4 on one node"},
		{"more CPUs than exist", Request{Name: "trial 3", Workers: 17, Per: Resources{CPUs: 1}}, "16 CPUs in all"},
		{"more memory than exists", Request{Name: "trial 3", Workers: 3, Per: Resources{Memory: 48 * GiB}}, "128GiB of memory in all"},
		{"elastic minimum too large", Request{Name: "trial 3", Workers: 10, MinWorkers: 9, Per: Resources{GPUs: 1}}, "9 to 10 workers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _ := newTestManager(nodes, time.Hour)
			_, err := m.Submit(tt.req)
			if !errors.Is(err, ErrNeverFits) {
				t.Fatalf("got %v, want ErrNeverFits", err)
			}
			for _, want := range []string{"trial 3:", "can never be placed", tt.msg} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
			if err := m.Check(tt.req); !errors.Is(err, ErrNeverFits) {
				t.Errorf("Check: got %v, want ErrNeverFits", err)
			}
			if _, err := m.Acquire(context.Background(), tt.req); !errors.Is(err, ErrNeverFits) {
				t.Errorf("Acquire: got %v, want ErrNeverFits at once", err)
			}
		})
	}
	// An elastic group whose minimum fits is accepted even if its maximum never does.
	m, _ := newTestManager(nodes, time.Hour)
	tk := mustSubmit(t, m, Request{Workers: 20, MinWorkers: 2, Per: Resources{GPUs: 1}})
	if n := len(mustGranted(t, tk).Workers()); n != 8 {
		t.Errorf("elastic group got %d workers, want all 8 GPUs", n)
	}
}

func TestInvalidRequest(t *testing.T) {
	m, _ := newTestManager(gpuNodes(1, 8, 4), time.Hour)
	for _, r := range []Request{
		{Workers: 0},
		{Workers: 2, MinWorkers: 3},
		{Workers: 1, Per: Resources{GPUs: 1.5}},
		{Workers: 1, Per: Resources{CPUs: -1}},
		{Workers: 1, Placement: "scatter"},
	} {
		if _, err := m.Submit(r); err == nil || errors.Is(err, ErrNeverFits) {
			t.Errorf("Submit(%+v): got %v, want a validation error", r, err)
		}
		if err := m.Check(r); err == nil {
			t.Errorf("Check(%+v) passed", r)
		}
	}
}

func TestAcquireCancelled(t *testing.T) {
	m, _ := newTestManager(gpuNodes(1, 1, 0), -1)
	a, err := m.Acquire(context.Background(), Request{Workers: 1, Per: Resources{CPUs: 1}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			m.mu.Lock()
			n := len(m.queue)
			m.mu.Unlock()
			if n == 1 {
				cancel()
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	if _, err := m.Acquire(ctx, Request{Workers: 1, Per: Resources{CPUs: 1}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	a.Release()
	if !reflect.DeepEqual(m.free, m.capacity) || len(m.queue) != 0 {
		t.Errorf("a cancelled request left state behind: free %+v, %d waiting", m.free, len(m.queue))
	}
}

func TestTicketCancel(t *testing.T) {
	m, _ := newTestManager(gpuNodes(1, 8, 2), -1)
	a := mustGranted(t, mustSubmit(t, m, gpuRequest("a", 2, 1)))
	waiting := mustSubmit(t, m, gpuRequest("w", 2, 1)) // reserves at once
	small := mustSubmit(t, m, gpuRequest("s", 1, 1))
	waiting.Cancel()
	waiting.Cancel()
	a.Release()
	if granted(waiting) {
		t.Error("a cancelled ticket was granted")
	}
	mustGranted(t, small)
	small.Cancel() // releases the granted group
	if !reflect.DeepEqual(m.free, m.capacity) {
		t.Errorf("free %+v, want %+v", m.free, m.capacity)
	}
}

func TestCUDAVisibleDevices(t *testing.T) {
	discovered := Node{Name: "gpu1", CPUs: 8, GPUs: []GPU{
		{Index: 0, MIG: -1, UUID: "GPU-aaaa"},
		{Index: 1, MIG: 0, UUID: "MIG-bbbb"},
		{Index: 1, MIG: 1, UUID: "MIG-cccc"},
	}}
	tests := []struct {
		name  string
		nodes []Node
		req   Request
		want  []string
	}{
		{"declared whole GPUs", gpuNodes(1, 8, 4), gpuRequest("", 2, 2), []string{"0,1", "2,3"}},
		{"no GPUs", gpuNodes(1, 8, 4), Request{Workers: 2, Per: Resources{CPUs: 1}}, []string{"", ""}},
		{"a group's shares see distinct devices", gpuNodes(1, 8, 4), gpuRequest("", 2, 0.5), []string{"0", "1"}},
		{"shares of the only GPU see the same device", gpuNodes(1, 8, 1), gpuRequest("", 2, 0.5), []string{"0", "0"}},
		{"spread shares see different devices", gpuNodes(1, 8, 4), Request{Workers: 2, Per: Resources{GPUs: 0.5}, Placement: Spread}, []string{"0", "1"}},
		{"discovered GPUs by UUID", []Node{discovered}, gpuRequest("", 1, 1), []string{"GPU-aaaa"}},
		{"MIG devices by UUID", []Node{discovered}, gpuRequest("", 3, 1), []string{"GPU-aaaa", "MIG-bbbb", "MIG-cccc"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _ := newTestManager(tt.nodes, time.Hour)
			a := mustGranted(t, mustSubmit(t, m, tt.req))
			var got []string
			for _, w := range a.Workers() {
				got = append(got, w.CUDAVisibleDevices)
				if w.Node != tt.nodes[w.NodeIndex].Name {
					t.Errorf("worker on node %q, index %d", w.Node, w.NodeIndex)
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("CUDA_VISIBLE_DEVICES: got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestReservationPreventsStarvation plays a stream of one-GPU groups
// against a four-GPU group on a four-GPU node: the small ones are
// backfilled while the large one is young, and once it has waited
// ReserveAfter no small one is placed until it is.
func TestReservationPreventsStarvation(t *testing.T) {
	m, clock := newTestManager(gpuNodes(1, 8, 4), 10*time.Second)
	var small []*Allocation
	for range 4 {
		small = append(small, mustGranted(t, mustSubmit(t, m, gpuRequest("small", 1, 1))))
	}
	big := mustSubmit(t, m, gpuRequest("big", 4, 1))
	// Young: a freed GPU goes to the next small group.
	small[0].Release()
	next := mustSubmit(t, m, gpuRequest("small", 1, 1))
	small = append(small[1:], mustGranted(t, next))
	// Old: the big group reserves, and small ones wait behind it.
	clock.advance(11 * time.Second)
	var waiting []*Ticket
	for len(small) > 0 {
		if granted(big) {
			t.Fatal("big was granted with GPUs still in use")
		}
		small[0].Release()
		small = small[1:]
		waiting = append(waiting, mustSubmit(t, m, gpuRequest("small", 1, 1)))
		for _, w := range waiting {
			if granted(w) && !granted(big) {
				t.Fatal("a small group took a GPU reserved for the big one")
			}
		}
	}
	a := mustGranted(t, big)
	if n := len(a.Workers()); n != 4 {
		t.Fatalf("big got %d workers", n)
	}
	a.Release()
	for _, w := range waiting {
		mustGranted(t, w)
	}
}

func TestReserveAtOnce(t *testing.T) {
	m, _ := newTestManager(gpuNodes(1, 8, 2), -1)
	a := mustGranted(t, mustSubmit(t, m, gpuRequest("a", 1, 1)))
	big := mustSubmit(t, m, gpuRequest("big", 2, 1))
	small := mustSubmit(t, m, gpuRequest("small", 1, 1))
	if granted(small) {
		t.Error("a small group jumped a reserving one")
	}
	a.Release()
	mustGranted(t, big).Release()
	mustGranted(t, small)
}

func TestElastic(t *testing.T) {
	m, _ := newTestManager(gpuNodes(1, 8, 4), time.Hour)
	fixed := mustGranted(t, mustSubmit(t, m, gpuRequest("fixed", 2, 1)))
	el := mustGranted(t, mustSubmit(t, m, Request{Name: "el", Workers: 4, MinWorkers: 1, Per: Resources{CPUs: 1, GPUs: 1}}))
	if n := len(el.Workers()); n != 2 {
		t.Fatalf("elastic group got %d workers, want the 2 that fit", n)
	}
	select {
	case <-el.MoreFit():
		t.Fatal("MoreFit fired with no room")
	default:
	}
	if n, err := el.Grow(); n != 0 || err != nil {
		t.Errorf("Grow with no room: %d, %v", n, err)
	}
	fixed.Release()
	select {
	case <-el.MoreFit():
	default:
		t.Fatal("MoreFit did not fire after GPUs were freed")
	}
	if n, err := el.Grow(); n != 2 || err != nil {
		t.Fatalf("Grow: %d, %v; want 2", n, err)
	}
	ws := el.Workers()
	if len(ws) != 4 || ws[2].CUDAVisibleDevices == ws[0].CUDAVisibleDevices {
		t.Errorf("after Grow: %+v", ws)
	}
	if n, _ := el.Grow(); n != 0 {
		t.Errorf("Grow at full size added %d", n)
	}
	// Shrink drops a worker; the others keep their order.
	if err := el.Shrink(1); err != nil {
		t.Fatal(err)
	}
	got := el.Workers()
	if len(got) != 3 || got[0].CUDAVisibleDevices != ws[0].CUDAVisibleDevices || got[1].CUDAVisibleDevices != ws[2].CUDAVisibleDevices {
		t.Errorf("after Shrink(1): %+v", got)
	}
	select {
	case <-el.MoreFit():
	default:
		t.Error("MoreFit did not fire after Shrink freed a GPU")
	}
	if err := el.Shrink(3); err == nil {
		t.Error("Shrink out of range passed")
	}
	if err := el.Shrink(0, 0); err == nil {
		t.Error("Shrink with a repeated position passed")
	}
	el.Release()
	if _, err := el.Grow(); err == nil {
		t.Error("Grow after Release passed")
	}
	if !reflect.DeepEqual(m.free, m.capacity) {
		t.Errorf("free %+v, want %+v", m.free, m.capacity)
	}
}

func TestGrowKeepsNodesAdjacent(t *testing.T) {
	m, _ := newTestManager(gpuNodes(2, 8, 2), time.Hour)
	fixed := mustGranted(t, mustSubmit(t, m, Request{Workers: 2, Per: Resources{GPUs: 1}, Placement: Spread}))
	el := mustGranted(t, mustSubmit(t, m, Request{Workers: 4, MinWorkers: 1, Per: Resources{GPUs: 1}}))
	fixed.Release()
	if n, _ := el.Grow(); n != 2 {
		t.Fatalf("Grow added %d, want 2", n)
	}
	var nodes []int
	for _, w := range el.Workers() {
		nodes = append(nodes, w.NodeIndex)
	}
	if !reflect.DeepEqual(nodes, []int{0, 0, 1, 1}) {
		t.Errorf("workers on nodes %v after Grow, want each node's adjacent: [0 0 1 1]", nodes)
	}
}

func TestElasticWaitsForItsMinimum(t *testing.T) {
	m, _ := newTestManager(gpuNodes(1, 8, 4), time.Hour)
	fixed := mustGranted(t, mustSubmit(t, m, gpuRequest("fixed", 3, 1)))
	el := mustSubmit(t, m, Request{Workers: 4, MinWorkers: 2, Per: Resources{GPUs: 1}})
	if granted(el) {
		t.Fatal("elastic group granted below its minimum")
	}
	fixed.Release()
	if n := len(mustGranted(t, el).Workers()); n != 4 {
		t.Errorf("got %d workers, want 4", n)
	}
}

// TestGrowLeavesReservations checks that an elastic group does not grow
// into resources a waiting group has reserved.
func TestGrowLeavesReservations(t *testing.T) {
	m, _ := newTestManager(gpuNodes(1, 8, 4), -1)
	el := mustGranted(t, mustSubmit(t, m, Request{Workers: 4, MinWorkers: 1, Per: Resources{GPUs: 1}}))
	if err := el.Shrink(0); err != nil { // 3 held, 1 free
		t.Fatal(err)
	}
	w := mustSubmit(t, m, gpuRequest("w", 2, 1)) // reserves the free GPU and a held one
	if granted(w) {
		t.Fatal("w granted with 1 GPU free")
	}
	if n, _ := el.Grow(); n != 0 {
		t.Errorf("Grow took %d GPUs reserved for a waiting group", n)
	}
	el.Release()
	mustGranted(t, w)
}

func TestAddNode(t *testing.T) {
	m, _ := newTestManager(gpuNodes(1, 8, 2), time.Hour)
	mustGranted(t, mustSubmit(t, m, gpuRequest("a", 2, 1)))
	tk := mustSubmit(t, m, gpuRequest("b", 2, 1))
	i := m.AddNode(Node{Name: "agent", CPUs: 8, GPUs: []GPU{{Index: 0, MIG: -1}, {Index: 1, MIG: -1}}})
	ws := mustGranted(t, tk).Workers()
	if i != 1 || ws[0].Node != "agent" || ws[1].Node != "agent" {
		t.Errorf("after AddNode (index %d): %+v", i, ws)
	}
	if n := len(m.Nodes()); n != 2 {
		t.Errorf("Nodes: %d", n)
	}
}

func TestWorkersContiguousByNode(t *testing.T) {
	m, _ := newTestManager(gpuNodes(3, 8, 2), time.Hour)
	a := mustGranted(t, mustSubmit(t, m, Request{Workers: 5, Per: Resources{GPUs: 1}, Placement: Spread}))
	seen := map[int]bool{}
	last := -1
	for _, w := range a.Workers() {
		if w.NodeIndex != last && seen[w.NodeIndex] {
			t.Fatalf("node %d's workers are not adjacent: %+v", w.NodeIndex, a.Workers())
		}
		seen[w.NodeIndex], last = true, w.NodeIndex
	}
	if len(seen) != 3 {
		t.Errorf("spread used %d nodes, want 3", len(seen))
	}
}

// A node that rejoins smaller than it left, while groups still hold its
// old resources, takes no new worker until enough are released.
func TestRejoinSmallerNeverOverCommits(t *testing.T) {
	m, _ := newTestManager([]Node{{Name: "a", CPUs: 4}}, time.Hour)
	a := mustGranted(t, mustSubmit(t, m, Request{Name: "a", Workers: 3, Per: Resources{CPUs: 1}}))
	if err := m.LoseNode(0); err != nil {
		t.Fatal(err)
	}
	b := mustSubmit(t, m, Request{Name: "b", Workers: 1, Per: Resources{CPUs: 1}})
	if granted(b) {
		t.Fatal("placed a worker on a lost node")
	}
	if err := m.RejoinNode(0, Node{Name: "renamed", CPUs: 2}); err != nil {
		t.Fatal(err)
	}
	if granted(b) {
		t.Fatal("placed a worker on a node of 2 CPUs whose 3 are held")
	}
	if got := m.Nodes()[0]; got.Name != "a" || got.CPUs != 2 {
		t.Errorf("the rejoined node is %+v", got)
	}
	a.Release()
	if !granted(b) {
		t.Fatal("the node has room again, the group still waits")
	}
}

func TestLoseAndRejoinErrors(t *testing.T) {
	m, _ := newTestManager(gpuNodes(1, 4, 2), time.Hour)
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"lose out of range", m.LoseNode(3), "the manager has 1 node"},
		{"rejoin a live node", m.RejoinNode(0, gpuNodes(1, 4, 2)[0]), "not lost"},
		{"rejoin with other GPUs", func() error { m.LoseNode(0); return m.RejoinNode(0, gpuNodes(1, 4, 1)[0]) }(), "had 2 GPUs and now has 1"},
	}
	for _, tt := range tests {
		if tt.err == nil || !strings.Contains(tt.err.Error(), tt.want) {
			t.Errorf("%s: got %v, want an error with %q", tt.name, tt.err, tt.want)
		}
	}
	if !m.Lost(0) {
		t.Error("a failed rejoin brought the node back")
	}
	if err := m.LoseNode(0); err != nil {
		t.Errorf("losing a lost node: %v", err)
	}
}
