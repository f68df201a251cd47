package allreduce

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrClosed is returned by collectives of a group one of whose ranks has closed.
var ErrClosed = errors.New("allreduce: group closed")

// NewLocal returns the n ranks of a group whose members are goroutines of
// this process. Rank i is element i. Collectives exchange data through shared
// memory: each rank reduces its own slice of the buffers, so the work is
// spread across the ranks as in a reduce-scatter followed by an allgather.
func NewLocal(n int) []Comm {
	if n < 1 {
		panic(fmt.Sprintf("allreduce: NewLocal(%d): a group needs at least one rank", n))
	}
	g := &localGroup{n: n, bufs: make([][]float64, n), done: make(chan struct{})}
	g.cond = sync.NewCond(&g.mu)
	comms := make([]Comm, n)
	for i := range comms {
		comms[i] = &localComm{g: g, rank: i}
	}
	return comms
}

type localGroup struct {
	n    int
	bufs [][]float64

	mu      sync.Mutex
	cond    *sync.Cond
	arrived int
	phase   uint64
	closed  bool
	done    chan struct{}
}

type localComm struct {
	g    *localGroup
	rank int
}

func (c *localComm) Rank() int { return c.rank }
func (c *localComm) Size() int { return c.g.n }

// Close marks the group broken and wakes every rank waiting in a collective.
func (c *localComm) Close() error {
	g := c.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		g.closed = true
		close(g.done)
		g.cond.Broadcast()
	}
	return nil
}

// barrier blocks until all ranks have arrived, ctx ends or the group closes.
func (g *localGroup) barrier(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		g.mu.Lock()
		g.cond.Broadcast()
		g.mu.Unlock()
	})
	defer stop()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return ErrClosed
	}
	phase := g.phase
	g.arrived++
	if g.arrived == g.n {
		g.arrived = 0
		g.phase++
		g.cond.Broadcast()
		return nil
	}
	for g.phase == phase {
		if g.closed {
			return ErrClosed
		}
		if err := ctx.Err(); err != nil {
			// A rank that leaves mid-barrier breaks the group for everyone.
			g.closed = true
			close(g.done)
			g.cond.Broadcast()
			return err
		}
		g.cond.Wait()
	}
	return nil
}

func (c *localComm) Barrier(ctx context.Context) error { return c.g.barrier(ctx) }

func (c *localComm) AllReduceFloat64(ctx context.Context, buf []float64, op Op) error {
	g := c.g
	g.bufs[c.rank] = buf
	if err := g.barrier(ctx); err != nil {
		return err
	}
	for _, b := range g.bufs {
		if len(b) != len(buf) {
			_ = c.Close()
			return fmt.Errorf("allreduce: rank %d has %d elements, another rank %d", c.rank, len(buf), len(b))
		}
	}
	lo, hi := chunk(len(buf), g.n, c.rank)
	for i := lo; i < hi; i++ {
		s := 0.0
		for _, b := range g.bufs {
			s += b[i]
		}
		if op == Mean {
			s /= float64(g.n)
		}
		for _, b := range g.bufs {
			b[i] = s
		}
	}
	if err := g.barrier(ctx); err != nil {
		return err
	}
	g.bufs[c.rank] = nil
	return nil
}

// chunk returns the half-open index range rank owns when n elements are
// split as evenly as possible across size ranks.
func chunk(n, size, rank int) (lo, hi int) {
	q, r := n/size, n%size
	lo = rank*q + min(rank, r)
	hi = lo + q
	if rank < r {
		hi++
	}
	return lo, hi
}
