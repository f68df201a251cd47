package workers

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// Resources is an amount of compute: CPUs (fractions allowed) and bytes of memory.
type Resources struct {
	CPUs   float64
	Memory int64
}

// Add returns r + o.
func (r Resources) Add(o Resources) Resources {
	return Resources{r.CPUs + o.CPUs, r.Memory + o.Memory}
}

// Times returns r scaled by n, the demand of n identical workers.
func (r Resources) Times(n int) Resources {
	return Resources{r.CPUs * float64(n), r.Memory * int64(n)}
}

// fits reports whether r fits within capacity c.
func (r Resources) fits(c Resources) bool {
	const eps = 1e-9 // fractional CPUs must not fail to fit by rounding
	return r.CPUs <= c.CPUs+eps && r.Memory <= c.Memory
}

func (r Resources) String() string {
	return fmt.Sprintf("%g CPUs, %d MiB", r.CPUs, r.Memory>>20)
}

// LocalResources reports this node's logical CPUs and total memory. Memory
// is 0 when /proc/meminfo cannot be read (a non-Linux host).
func LocalResources() Resources {
	return Resources{CPUs: float64(runtime.NumCPU()), Memory: totalMemory()}
}

func totalMemory() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// Pool hands out a node's resources to training groups, whole groups at a
// time. Requests are granted in arrival order, so a large group is never
// starved by a stream of small ones. The zero Pool is not usable: use NewPool.
type Pool struct {
	capacity Resources

	mu      sync.Mutex
	free    Resources
	waiting []*request
}

type request struct {
	need  Resources
	grant chan struct{}
}

// Allocation is a group's share of the pool, held until Release.
type Allocation struct {
	pool *Pool
	need Resources
	once sync.Once
}

// NewPool returns a pool with the given capacity.
func NewPool(capacity Resources) *Pool {
	return &Pool{capacity: capacity, free: capacity}
}

// Capacity is the pool's total size.
func (p *Pool) Capacity() Resources { return p.capacity }

// Acquire blocks until n workers of per resources each can be placed at once,
// then reserves them all. It fails at once when the group can never fit, and
// with ctx's error when ctx ends first.
func (p *Pool) Acquire(ctx context.Context, n int, per Resources) (*Allocation, error) {
	need := per.Times(n)
	if !need.fits(p.capacity) {
		return nil, fmt.Errorf("a group of %d workers × (%s) needs %s, more than this pool's %s: it can never be placed",
			n, per, need, p.capacity)
	}
	p.mu.Lock()
	if len(p.waiting) == 0 && need.fits(p.free) {
		p.free = p.free.Add(need.Times(-1))
		p.mu.Unlock()
		return &Allocation{pool: p, need: need}, nil
	}
	req := &request{need: need, grant: make(chan struct{})}
	p.waiting = append(p.waiting, req)
	p.mu.Unlock()

	select {
	case <-req.grant:
		return &Allocation{pool: p, need: need}, nil
	case <-ctx.Done():
		p.mu.Lock()
		defer p.mu.Unlock()
		select {
		case <-req.grant: // granted while we were giving up: hand it back
			p.free = p.free.Add(need)
		default:
			for i, w := range p.waiting {
				if w == req {
					p.waiting = append(p.waiting[:i], p.waiting[i+1:]...)
					break
				}
			}
		}
		p.grantLocked()
		return nil, ctx.Err()
	}
}

// Release returns the allocation to its pool. Calling it again does nothing.
func (a *Allocation) Release() {
	a.once.Do(func() {
		p := a.pool
		p.mu.Lock()
		defer p.mu.Unlock()
		p.free = p.free.Add(a.need)
		p.grantLocked()
	})
}

// grantLocked serves waiting requests in order while the head one fits.
func (p *Pool) grantLocked() {
	for len(p.waiting) > 0 && p.waiting[0].need.fits(p.free) {
		req := p.waiting[0]
		p.waiting = p.waiting[1:]
		p.free = p.free.Add(req.need.Times(-1))
		close(req.grant)
	}
}
