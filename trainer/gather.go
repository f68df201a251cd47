package trainer

import (
	"context"
	"fmt"
	"sync"
)

// gather joins the k-th Report call of every rank of a Go worker group into
// the group's k-th report, delivers it once all ranks have arrived, and
// releases every rank with the verdict. Reports therefore reach the sink
// one at a time and in order.
type gather struct {
	n       int
	deliver func(metrics map[string]float64, shards []string) (Action, error)
	// arrive is told of every rank's report, as a sign of life.
	arrive func(rank int)

	mu     sync.Mutex
	cond   *sync.Cond
	counts []int // reports made per rank
	// short is the fewest reports a finished rank made, -1 while none has
	// finished: reports beyond it can never gather every rank.
	short   int
	pending map[int]*pendingReport
}

type pendingReport struct {
	metrics map[string]float64
	shards  []string // by rank; "" where the rank gave no checkpoint
	refused bool     // a rank's checkpoint was refused: none is committed
	arrived int
	done    bool
	left    int // ranks yet to read the verdict
	err     error
}

func newGather(n int, deliver func(map[string]float64, []string) (Action, error), arrive func(rank int)) *gather {
	g := &gather{n: n, deliver: deliver, arrive: arrive, counts: make([]int, n),
		short: -1, pending: map[int]*pendingReport{}}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// report is Worker.report for a rank of the group, with checkpoint already
// taken over (confined), or refused set when the rank handed over one that
// was refused: the report is then delivered without a checkpoint, and the
// other ranks' folders of it are removed. It returns nil to go on, ctx's
// error once the group is stopping, or the delivery's error.
func (g *gather) report(ctx context.Context, rank int, metrics map[string]float64, checkpoint string, refused bool) error {
	wake := context.AfterFunc(ctx, func() {
		g.mu.Lock()
		g.cond.Broadcast()
		g.mu.Unlock()
	})
	defer wake()
	g.arrive(rank)

	g.mu.Lock()
	defer g.mu.Unlock()
	g.counts[rank]++
	k := g.counts[rank]
	if g.short >= 0 && k > g.short {
		return g.mismatch()
	}
	p := g.pending[k]
	if p == nil {
		p = &pendingReport{shards: make([]string, g.n), left: g.n}
		g.pending[k] = p
	}
	if rank == 0 {
		p.metrics = metrics
	}
	p.shards[rank] = checkpoint
	p.refused = p.refused || refused
	p.arrived++
	if p.arrived == g.n {
		shards := compact(p.shards)
		if p.refused {
			removeAll(shards) // an incomplete checkpoint
			shards = nil
		}
		g.mu.Unlock()
		// The attempt acts on the verdict: a stop or a pause cancels ctx.
		_, err := g.deliver(p.metrics, shards)
		g.mu.Lock()
		p.done, p.err = true, err
		g.cond.Broadcast()
	}
	for !p.done {
		if err := ctx.Err(); err != nil {
			return err
		}
		g.cond.Wait()
	}
	if p.left--; p.left == 0 {
		delete(g.pending, k)
	}
	if p.err != nil {
		return p.err
	}
	return ctx.Err()
}

// finish records that rank's training function returned without error.
// Reports the other ranks make beyond its count can never complete: they
// fail, since every rank must report the same number of times.
func (g *gather) finish(rank int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.counts[rank]
	if g.short < 0 || c < g.short {
		g.short = c
	}
	for k, p := range g.pending {
		if k > g.short && !p.done {
			p.done, p.err = true, g.mismatch()
		}
	}
	g.cond.Broadcast()
}

func (g *gather) mismatch() error {
	return Permanent(fmt.Errorf("a worker returned after %d reports while another reported more: every worker must call Report the same number of times", g.short))
}

func compact(shards []string) []string {
	var out []string
	for _, s := range shards {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}
