package trainer

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// gather joins the k-th Report call of every rank into the trial's k-th
// result, hands it to the sink once all ranks have arrived, and releases
// every rank with the sink's verdict. Reports therefore reach the sink one
// at a time and in order.
type gather struct {
	n    int
	sink Sink
	// stop cancels the group; called when the sink answers Stop.
	stop func()

	mu      sync.Mutex
	cond    *sync.Cond
	counts  []int // reports made per rank
	pending map[int]*pendingReport
	stopped bool
}

type pendingReport struct {
	metrics map[string]float64
	shards  []string // by rank; "" where the rank gave no checkpoint
	arrived int
	done    bool
	left    int // ranks yet to read the verdict
	err     error
}

func newGather(n int, sink Sink, stop func()) *gather {
	g := &gather{n: n, sink: sink, stop: stop, counts: make([]int, n), pending: map[int]*pendingReport{}}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// report is Worker.report for a rank of the group.
func (g *gather) report(ctx context.Context, rank int, metrics map[string]float64, checkpoint string) error {
	wake := context.AfterFunc(ctx, func() {
		g.mu.Lock()
		g.cond.Broadcast()
		g.mu.Unlock()
	})
	defer wake()

	g.mu.Lock()
	defer g.mu.Unlock()
	g.counts[rank]++
	k := g.counts[rank]
	p := g.pending[k]
	if p == nil {
		p = &pendingReport{shards: make([]string, g.n), left: g.n}
		g.pending[k] = p
	}
	if rank == 0 {
		p.metrics = metrics
	}
	p.shards[rank] = checkpoint
	p.arrived++
	if p.arrived == g.n {
		g.mu.Unlock()
		act, err := g.sink.Report(ctx, Result{Iteration: k, Time: time.Now(), Metrics: p.metrics, Checkpoint: compact(p.shards)})
		g.mu.Lock()
		p.done = true
		if err != nil {
			p.err = fmt.Errorf("report %d: %w", k, err)
		} else if act == Stop {
			g.stopped = true
			g.stop()
		}
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

// wasStopped reports whether the sink ended the trial.
func (g *gather) wasStopped() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stopped
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
