package workers

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestAcquireIsAllOrNothing(t *testing.T) {
	p := NewPool(Resources{CPUs: 4})
	a, err := p.Acquire(context.Background(), 3, Resources{CPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	// 2 workers do not fit in the 1 CPU left: the request must wait whole.
	got := make(chan *Allocation)
	go func() {
		b, err := p.Acquire(context.Background(), 2, Resources{CPUs: 1})
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	select {
	case <-got:
		t.Fatal("a group of 2 was placed with 1 CPU free")
	case <-time.After(50 * time.Millisecond):
	}
	if p.free.CPUs != 1 {
		t.Errorf("a waiting group holds part of the pool: free %v, want 1", p.free.CPUs)
	}
	a.Release()
	b := <-got
	b.Release()
	b.Release() // a second release must not free twice
	if p.free != p.capacity {
		t.Errorf("free %v after all releases, want %v", p.free, p.capacity)
	}
}

func TestAcquireNeverFits(t *testing.T) {
	p := NewPool(Resources{CPUs: 2})
	_, err := p.Acquire(context.Background(), 3, Resources{CPUs: 1})
	if err == nil || !strings.Contains(err.Error(), "can never be placed") {
		t.Errorf("got %v, want a can-never-fit error", err)
	}
}

func TestAcquireCancelled(t *testing.T) {
	p := NewPool(Resources{CPUs: 1})
	a, _ := p.Acquire(context.Background(), 1, Resources{CPUs: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := p.Acquire(ctx, 1, Resources{CPUs: 1}); err == nil {
		t.Fatal("Acquire on a full pool returned without waiting")
	}
	a.Release()
	if p.free != p.capacity || len(p.waiting) != 0 {
		t.Errorf("cancelled request left state behind: free %v waiting %d", p.free, len(p.waiting))
	}
}

// TestPoolNeverOvercommits hammers the pool with random fractional groups
// and checks the books balance at every step and at the end.
func TestPoolNeverOvercommits(t *testing.T) {
	p := NewPool(Resources{CPUs: 8, Memory: 8 << 30})
	var mu sync.Mutex
	inUse := 0.0
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 50 {
				n := 1 + rng.IntN(4)
				per := Resources{CPUs: []float64{0.25, 0.5, 1, 2}[rng.IntN(4)], Memory: 1 << 28}
				a, err := p.Acquire(context.Background(), n, per)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				inUse += per.CPUs * float64(n)
				if inUse > 8+1e-9 {
					t.Errorf("over-committed: %g CPUs in use of 8", inUse)
				}
				mu.Unlock()
				time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
				mu.Lock()
				inUse -= per.CPUs * float64(n)
				mu.Unlock()
				a.Release()
			}
		}()
	}
	wg.Wait()
	if d := p.free.CPUs - p.capacity.CPUs; d > 1e-9 || d < -1e-9 || p.free.Memory != p.capacity.Memory {
		t.Errorf("books do not balance: free %v, capacity %v", p.free, p.capacity)
	}
}

func TestLocalResources(t *testing.T) {
	r := LocalResources()
	if r.CPUs < 1 {
		t.Errorf("LocalResources: %v CPUs", r.CPUs)
	}
}
