package allreduce

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// run calls f on every rank of a local group concurrently and returns the ranks' errors.
func run(comms []Comm, f func(c Comm) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(c)
		}()
	}
	wg.Wait()
	return errs
}

func TestLocalAllReduceMatchesSerialSum(t *testing.T) {
	for _, size := range []int{1, 2, 3, 5, 8} {
		for _, n := range []int{0, 1, 7, 13, 64, 1000} {
			for _, op := range []Op{Sum, Mean} {
				rng := rand.New(rand.NewPCG(uint64(size), uint64(n)))
				inputs := make([][]float64, size)
				want := make([]float64, n)
				for r := range inputs {
					inputs[r] = make([]float64, n)
					for i := range inputs[r] {
						inputs[r][i] = rng.NormFloat64()
					}
				}
				for i := range want {
					for r := range inputs {
						want[i] += inputs[r][i]
					}
					if op == Mean {
						want[i] /= float64(size)
					}
				}
				comms := NewLocal(size)
				errs := run(comms, func(c Comm) error {
					return c.AllReduceFloat64(context.Background(), inputs[c.Rank()], op)
				})
				for r, err := range errs {
					if err != nil {
						t.Fatalf("size %d n %d rank %d: %v", size, n, r, err)
					}
					for i := range want {
						if inputs[r][i] != want[i] {
							t.Fatalf("size %d n %d %v rank %d [%d]: got %v, want %v", size, n, op, r, i, inputs[r][i], want[i])
						}
					}
				}
			}
		}
	}
}

func TestLocalRepeatedCollectives(t *testing.T) {
	comms := NewLocal(4)
	errs := run(comms, func(c Comm) error {
		for step := range 200 {
			buf := []float64{float64(c.Rank() + step)}
			if err := c.AllReduceFloat64(context.Background(), buf, Sum); err != nil {
				return err
			}
			if want := float64(0 + 1 + 2 + 3 + 4*step); buf[0] != want {
				return errors.New("wrong sum")
			}
			if err := c.Barrier(context.Background()); err != nil {
				return err
			}
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestLocalRankLeavingFailsOthers checks that a rank that closes, or whose
// context ends, makes the others' pending collectives fail instead of hang.
func TestLocalRankLeavingFailsOthers(t *testing.T) {
	for _, how := range []string{"close", "cancel"} {
		t.Run(how, func(t *testing.T) {
			comms := NewLocal(3)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 2)
			for _, c := range comms[1:] {
				go func() { done <- c.AllReduceFloat64(context.Background(), []float64{1}, Sum) }()
			}
			if how == "close" {
				comms[0].Close()
			} else {
				go func() { done <- comms[0].Barrier(ctx) }()
				time.Sleep(10 * time.Millisecond)
				cancel()
				<-done
			}
			for range 2 {
				select {
				case err := <-done:
					if err == nil {
						t.Error("a collective succeeded although a rank left")
					}
				case <-time.After(5 * time.Second):
					t.Fatal("a collective hung after a rank left")
				}
			}
		})
	}
}

func TestLocalLengthMismatchFails(t *testing.T) {
	comms := NewLocal(2)
	errs := run(comms, func(c Comm) error {
		return c.AllReduceFloat64(context.Background(), make([]float64, 3+c.Rank()), Sum)
	})
	for r, err := range errs {
		if err == nil {
			t.Errorf("rank %d: mismatched lengths accepted", r)
		}
	}
}

func TestChunkCoversRange(t *testing.T) {
	for n := range 20 {
		for size := 1; size <= 6; size++ {
			next := 0
			for r := range size {
				lo, hi := chunk(n, size, r)
				if lo != next || hi < lo {
					t.Fatalf("chunk(%d, %d, %d) = [%d, %d), want start %d", n, size, r, lo, hi, next)
				}
				next = hi
			}
			if next != n {
				t.Fatalf("chunks of %d over %d ranks end at %d", n, size, next)
			}
		}
	}
}
