package allreduce

import (
	"context"
	"fmt"
	"sync"
	"unsafe"
)

// NewLocal returns the n ranks of a group whose members are goroutines of
// this process; rank i is element i. It panics when n < 1.
//
// The ranks exchange data through shared memory, without copies in between:
// an allreduce is a reduce-scatter, where each rank adds up its own segment of
// every rank's buffer (in the ring order Comm documents, so the bits equal
// those of a TCP group of the same size), followed by an allgather, where it
// writes the result into that segment of every rank's buffer.
func NewLocal(n int) []Comm {
	if n < 1 {
		panic(fmt.Sprintf("allreduce: NewLocal(%d): a group needs at least one rank", n))
	}
	g := &localGroup{n: n, slots: make([]localSlot, n), done: make(chan struct{})}
	g.gen = &generation{done: make(chan struct{})}
	comms := make([]Comm, n)
	for i := range comms {
		comms[i] = &localComm{g: g, rank: i}
	}
	return comms
}

// localBlock is the number of elements an in-process reduction sums before
// writing them out, so that the partial sums stay in the core's cache.
const localBlock = 4096

// localSlot is where a rank publishes its buffers for the others to read
// between the two barriers of a collective.
type localSlot struct {
	buf unsafe.Pointer // first element of buf (or dst); nil when empty
	n   int            // elements of buf (or dst)
	src unsafe.Pointer // first element of an allgather's src
}

// generation is one round of the group's barrier.
type generation struct {
	done  chan struct{} // closed when every rank has arrived
	first call          // the first arriving rank's call
	err   error         // set before done closes when the ranks' calls disagree
}

type localGroup struct {
	n     int
	slots []localSlot

	mu       sync.Mutex
	arrived  int
	gen      *generation
	closed   bool
	closeErr error
	done     chan struct{} // closed with closed
}

type localComm struct {
	g    *localGroup
	rank int
}

func (c *localComm) Rank() int { return c.rank }
func (c *localComm) Size() int { return c.g.n }

// Close marks the group broken and wakes every rank waiting in a collective.
func (c *localComm) Close() error {
	c.g.breakGroup(broken(nil, "allreduce: rank %d closed the group", c.rank))
	return nil
}

// breakGroup records why the group broke, once, and wakes every waiter.
func (g *localGroup) breakGroup(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		g.closed = true
		g.closeErr = err
		close(g.done)
	}
}

// failure is the error a call returns once the group is broken.
func (g *localGroup) failure() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closeErr
}

// barrier blocks until every rank has arrived with the same call, ctx ends or
// the group breaks. A rank whose ctx ends breaks the group for everyone, and
// ranks that arrive with different calls break it too.
func (g *localGroup) barrier(ctx context.Context, rank int, c call) error {
	g.mu.Lock()
	if g.closed {
		err := g.closeErr
		g.mu.Unlock()
		return err
	}
	gen := g.gen
	if g.arrived == 0 {
		gen.first = c
	} else if c != gen.first && gen.err == nil {
		gen.err = fmt.Errorf("allreduce: the ranks of the group made different calls: one called %v, rank %d called %v; every rank must make the same sequence of calls", gen.first, rank, c)
	}
	g.arrived++
	if g.arrived == g.n {
		g.arrived = 0
		g.gen = &generation{done: make(chan struct{})}
		if gen.err != nil && !g.closed {
			g.closed = true
			g.closeErr = broken(nil, "allreduce: group broken after a mismatched call")
			close(g.done)
		}
		close(gen.done)
		g.mu.Unlock()
		return gen.err
	}
	g.mu.Unlock()

	select {
	case <-gen.done:
		return gen.err
	case <-g.done:
		// A barrier that completed as the group broke still counts.
		select {
		case <-gen.done:
			return gen.err
		default:
		}
		return g.failure()
	case <-ctx.Done():
		g.breakGroup(broken(ctx.Err(), "allreduce: rank %d left a collective", rank))
		return fmt.Errorf("allreduce: rank %d: %w", rank, ctx.Err())
	}
}

func (c *localComm) Barrier(ctx context.Context) error {
	return c.g.barrier(ctx, c.rank, call{kind: kindBarrier})
}

func (c *localComm) AllReduceFloat64(ctx context.Context, buf []float64, op Op) error {
	return localAllReduce(ctx, c, buf, op, kindAllReduce64)
}

func (c *localComm) AllReduceFloat32(ctx context.Context, buf []float32, op Op) error {
	return localAllReduce(ctx, c, buf, op, kindAllReduce32)
}

func (c *localComm) BroadcastFloat64(ctx context.Context, buf []float64, root int) error {
	return localBroadcast(ctx, c, buf, root, kindBroadcast64)
}

func (c *localComm) BroadcastFloat32(ctx context.Context, buf []float32, root int) error {
	return localBroadcast(ctx, c, buf, root, kindBroadcast32)
}

func (c *localComm) AllGatherFloat64(ctx context.Context, dst, src []float64) error {
	return localAllGather(ctx, c, dst, src, kindAllGather64)
}

func (c *localComm) AllGatherFloat32(ctx context.Context, dst, src []float32) error {
	return localAllGather(ctx, c, dst, src, kindAllGather32)
}

// publish stores rank's buffers in its slot for the others to read.
func publish[T float](g *localGroup, rank int, buf, src []T) {
	g.slots[rank] = localSlot{buf: unsafe.Pointer(unsafe.SliceData(buf)), n: len(buf), src: unsafe.Pointer(unsafe.SliceData(src))}
}

// peerBuf returns the buf rank published.
func peerBuf[T float](g *localGroup, rank int) []T {
	s := g.slots[rank]
	return unsafe.Slice((*T)(s.buf), s.n)
}

func localAllReduce[T float](ctx context.Context, c *localComm, buf []T, op Op, k kind) error {
	if err := checkOp(op); err != nil {
		return err
	}
	g := c.g
	publish[T](g, c.rank, buf, nil)
	if err := g.barrier(ctx, c.rank, call{kind: k, param: int(op), count: len(buf)}); err != nil {
		return err
	}
	// Reduce this rank's segment, starting from this rank's own values and
	// adding the others' in ring order, a block at a time.
	n := g.n
	lo, hi := segment(len(buf), n, c.rank)
	for b := lo; b < hi; b += localBlock {
		e := min(b+localBlock, hi)
		acc := buf[b:e]
		for j := 1; j < n; j++ {
			peer := peerBuf[T](g, (c.rank+j)%n)[b:e]
			if op == Mean && j == n-1 {
				addDivTo(acc, peer, T(n))
			} else {
				addTo(acc, peer)
			}
		}
		for j := 1; j < n; j++ {
			copy(peerBuf[T](g, (c.rank+j)%n)[b:e], acc)
		}
	}
	return g.barrier(ctx, c.rank, call{kind: k, param: int(op), count: len(buf)})
}

func localBroadcast[T float](ctx context.Context, c *localComm, buf []T, root int, k kind) error {
	if err := checkRoot(root, c.g.n); err != nil {
		return err
	}
	g := c.g
	publish[T](g, c.rank, buf, nil)
	cl := call{kind: k, param: root, count: len(buf)}
	if err := g.barrier(ctx, c.rank, cl); err != nil {
		return err
	}
	if c.rank != root {
		copy(buf, peerBuf[T](g, root))
	}
	return g.barrier(ctx, c.rank, cl)
}

func localAllGather[T float](ctx context.Context, c *localComm, dst, src []T, k kind) error {
	g := c.g
	if err := checkGather(len(dst), len(src), g.n); err != nil {
		return err
	}
	publish(g, c.rank, dst, src)
	cl := call{kind: k, count: len(src)}
	if err := g.barrier(ctx, c.rank, cl); err != nil {
		return err
	}
	m := len(src)
	for j := range g.n {
		block := dst[j*m : (j+1)*m]
		s := unsafe.Slice((*T)(g.slots[j].src), m)
		if unsafe.SliceData(block) != unsafe.SliceData(s) {
			copy(block, s)
		}
	}
	return g.barrier(ctx, c.rank, cl)
}
