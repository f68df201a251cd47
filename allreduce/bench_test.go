package allreduce

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// benchGroup runs f b.N times on every rank of comms at once: rank 0 in the
// benchmark's goroutine, the others in their own.
func benchGroup(b *testing.B, comms []Comm, f func(c Comm) error) {
	var wg sync.WaitGroup
	errs := make([]error, len(comms))
	for _, c := range comms[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range b.N {
				if err := f(c); err != nil {
					errs[c.Rank()] = err
					return
				}
			}
		}()
	}
	b.ResetTimer()
	for range b.N {
		if err := f(comms[0]); err != nil {
			errs[0] = err
			break
		}
	}
	b.StopTimer()
	wg.Wait()
	for rank, err := range errs {
		if err != nil {
			b.Fatalf("rank %d: %v", rank, err)
		}
	}
}

// BenchmarkLocalAllReduce measures in-process allreduces: the 9,610
// float64 gradients of the built-in 64-128-10 MLP, and 1 and 16 MiB of
// float32. Its MB/s is algbw: bytes of one rank's buffer per second.
func BenchmarkLocalAllReduce(b *testing.B) {
	for _, size := range []int{2, 4} {
		b.Run(fmt.Sprintf("ranks=%d/mlp-grads-f64", size), func(b *testing.B) {
			benchAllReduce[float64](b, NewLocal(size), 9610)
		})
		for _, mib := range []int{1, 16} {
			b.Run(fmt.Sprintf("ranks=%d/%dMiB-f32", size, mib), func(b *testing.B) {
				benchAllReduce[float32](b, NewLocal(size), mib<<20/4)
			})
		}
	}
}

// BenchmarkTCPAllReduce is BenchmarkLocalAllReduce over loopback TCP, with
// the ranks in one process.
func BenchmarkTCPAllReduce(b *testing.B) {
	for _, size := range []int{2, 4} {
		b.Run(fmt.Sprintf("ranks=%d/mlp-grads-f64", size), func(b *testing.B) {
			benchAllReduce[float64](b, tcpGroup(b, size, DefaultTimeout), 9610)
		})
		b.Run(fmt.Sprintf("ranks=%d/16MiB-f32", size), func(b *testing.B) {
			benchAllReduce[float32](b, tcpGroup(b, size, DefaultTimeout), 16<<20/4)
		})
	}
}

func benchAllReduce[T float](b *testing.B, comms []Comm, n int) {
	defer closeAll(comms)
	bufs := inputs[T](7, len(comms), n)
	b.SetBytes(int64(n * sizeOf[T]()))
	benchGroup(b, comms, func(c Comm) error {
		if sizeOf[T]() == 4 {
			return c.AllReduceFloat32(context.Background(), any(bufs[c.Rank()]).([]float32), Mean)
		}
		return c.AllReduceFloat64(context.Background(), any(bufs[c.Rank()]).([]float64), Mean)
	})
}

// BenchmarkLocalBarrier measures the latency of an in-process barrier.
func BenchmarkLocalBarrier(b *testing.B) {
	for _, size := range []int{2, 4} {
		b.Run(fmt.Sprintf("ranks=%d", size), func(b *testing.B) {
			comms := NewLocal(size)
			defer closeAll(comms)
			benchGroup(b, comms, func(c Comm) error { return c.Barrier(context.Background()) })
		})
	}
}
