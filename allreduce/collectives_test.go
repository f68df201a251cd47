package allreduce

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// A transport builds the n ranks of a fresh group.
type transport struct {
	name  string
	group func(t testing.TB, n int) []Comm
}

var transports = []transport{
	{"local", func(t testing.TB, n int) []Comm {
		comms := NewLocal(n)
		t.Cleanup(func() { closeAll(comms) })
		return comms
	}},
	// Ranks of one host connect through Unix-domain sockets, or over TCP
	// loopback when told to, as ranks on different hosts do.
	{"tcp", func(t testing.TB, n int) []Comm { return tcpGroup(t, n, 10*time.Second) }},
	// Ranks of one host of which the first does not use the shared-memory
	// slots it offered: its frames go inline through the Unix socket, the
	// others' through slots.
	{"unix-inline", func(t testing.TB, n int) []Comm {
		comms := tcpGroup(t, n, 10*time.Second)
		comms[0].(*tcpComm).out = nil
		return comms
	}},
	{"tcp-only", func(t testing.TB, n int) []Comm {
		return joinGroup(t, n, TCPConfig{Timeout: 10 * time.Second, TCPOnly: true})
	}},
	// Frames of a few dozen elements, so that segments span many columns and
	// the ring's column groups, partial groups included, are exercised.
	{"tcp-small-frames", func(t testing.TB, n int) []Comm {
		comms := tcpGroup(t, n, 10*time.Second)
		for _, c := range comms {
			c.(*tcpComm).chunk = 100
			c.(*tcpComm).width = 3
		}
		return comms
	}},
}

// tcpGroup joins n ranks on this host through a fresh rendezvous service.
func tcpGroup(t testing.TB, n int, timeout time.Duration) []Comm {
	t.Helper()
	return joinGroup(t, n, TCPConfig{Timeout: timeout})
}

// joinGroup joins n ranks with cfg's settings (but for the rendezvous,
// group, rank and size) through a fresh rendezvous service on loopback.
func joinGroup(t testing.TB, n int, cfg TCPConfig) []Comm {
	t.Helper()
	rv, err := NewRendezvous("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rv.Close() })
	comms := make([]Comm, n)
	errs := parallel(n, func(rank int) error {
		cfg := cfg
		cfg.Rendezvous, cfg.Group, cfg.Rank, cfg.Size = rv.Addr(), t.Name(), rank, n
		c, err := JoinTCP(context.Background(), cfg)
		comms[rank] = c
		return err
	})
	t.Cleanup(func() { closeAll(comms) })
	for rank, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: JoinTCP: %v", rank, err)
		}
	}
	return comms
}

func closeAll(comms []Comm) {
	for _, c := range comms {
		if c != nil {
			c.Close()
		}
	}
}

// parallel calls f(rank) for every rank concurrently and returns the errors.
func parallel(n int, f func(rank int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for rank := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[rank] = f(rank)
		}()
	}
	wg.Wait()
	return errs
}

// each runs f on every rank of comms concurrently and fails t on any error.
func each(t testing.TB, comms []Comm, what string, f func(c Comm) error) {
	t.Helper()
	for rank, err := range parallel(len(comms), func(rank int) error { return f(comms[rank]) }) {
		if err != nil {
			t.Fatalf("%s: rank %d: %v", what, rank, err)
		}
	}
}

// lengths covers empty buffers, buffers shorter than the group, primes and
// lengths not divisible by any group size from 2 to 8.
var lengths = []int{0, 1, 2, 3, 7, 13, 31, 97, 1009}

// inputs returns size random vectors of n elements whose magnitudes vary,
// so that adding them in another order gives other bits.
func inputs[T float](seed uint64, size, n int) [][]T {
	rng := rand.New(rand.NewPCG(seed, uint64(size*100000+n)))
	in := make([][]T, size)
	for r := range in {
		in[r] = make([]T, n)
		for i := range in[r] {
			in[r][i] = T(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(9)-4)))
		}
	}
	return in
}

// serialAllReduce is the reference: segment s of the buffer is summed in
// rank order s, s+1, ..., s-1 and divided by the size for a mean.
func serialAllReduce[T float](in [][]T, op Op) []T {
	size, n := len(in), len(in[0])
	out := make([]T, n)
	for s := range size {
		lo, hi := segment(n, size, s)
		for i := lo; i < hi; i++ {
			acc := in[s][i]
			for j := 1; j < size; j++ {
				acc += in[(s+j)%size][i]
			}
			if op == Mean && size > 1 {
				acc /= T(size)
			}
			out[i] = acc
		}
	}
	return out
}

func clone[T float](in [][]T) [][]T {
	out := make([][]T, len(in))
	for i := range in {
		out[i] = append([]T{}, in[i]...)
	}
	return out
}

// sameBits reports the first index where got and want differ in any bit.
func sameBits[T float](got, want []T) (int, bool) {
	if len(got) != len(want) {
		return -1, false
	}
	for i := range got {
		if math.Float64bits(float64(got[i])) != math.Float64bits(float64(want[i])) {
			return i, false
		}
	}
	return 0, true
}

type allReduceFunc[T float] func(c Comm, ctx context.Context, buf []T, op Op) error

func checkAllReduce[T float](t *testing.T, comms []Comm, name string, f allReduceFunc[T]) {
	size := len(comms)
	for _, n := range lengths {
		for _, op := range []Op{Sum, Mean} {
			in := inputs[T](1, size, n)
			want := serialAllReduce(in, op)
			bufs := clone(in)
			each(t, comms, fmt.Sprintf("%s(%d, %v)", name, n, op), func(c Comm) error {
				return f(c, context.Background(), bufs[c.Rank()], op)
			})
			for rank, got := range bufs {
				if i, ok := sameBits(got, want); !ok {
					t.Fatalf("%s(%d elements, %v), %d ranks: rank %d [%d]: got %v, want %v", name, n, op, size, rank, i, got[i], want[i])
				}
			}
		}
	}
}

func checkBroadcast[T float](t *testing.T, comms []Comm, name string, f func(c Comm, ctx context.Context, buf []T, root int) error) {
	size := len(comms)
	for _, n := range []int{0, 1, 13, 1009} {
		for root := range size {
			in := inputs[T](2, size, n)
			bufs := clone(in)
			each(t, comms, fmt.Sprintf("%s(%d, root %d)", name, n, root), func(c Comm) error {
				return f(c, context.Background(), bufs[c.Rank()], root)
			})
			for rank, got := range bufs {
				if i, ok := sameBits(got, in[root]); !ok {
					t.Fatalf("%s(%d elements, root %d), %d ranks: rank %d [%d]: got %v, want %v", name, n, root, size, rank, i, got[i], in[root][i])
				}
			}
		}
	}
}

func checkAllGather[T float](t *testing.T, comms []Comm, name string, f func(c Comm, ctx context.Context, dst, src []T) error) {
	size := len(comms)
	for _, n := range []int{0, 1, 7, 97, 1009} {
		for _, inPlace := range []bool{false, true} {
			in := inputs[T](3, size, n)
			var want []T
			for _, v := range in {
				want = append(want, v...)
			}
			dsts := make([][]T, size)
			srcs := clone(in)
			for r := range dsts {
				dsts[r] = make([]T, size*n)
				if inPlace {
					copy(dsts[r][r*n:], in[r])
					srcs[r] = dsts[r][r*n : (r+1)*n]
				}
			}
			each(t, comms, fmt.Sprintf("%s(%d, in place %v)", name, n, inPlace), func(c Comm) error {
				return f(c, context.Background(), dsts[c.Rank()], srcs[c.Rank()])
			})
			for rank, got := range dsts {
				if i, ok := sameBits(got, want); !ok {
					t.Fatalf("%s(%d elements, in place %v), %d ranks: rank %d [%d]: got %v, want %v", name, n, inPlace, size, rank, i, got[i], want[i])
				}
			}
		}
	}
}

// TestCollectivesMatchSerialReference checks every collective, on every
// transport, for groups of 1 to 8 ranks, bit for bit against a serial
// reference.
func TestCollectivesMatchSerialReference(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			for size := 1; size <= 8; size++ {
				t.Run(fmt.Sprint(size), func(t *testing.T) {
					comms := tr.group(t, size)
					checkAllReduce(t, comms, "AllReduceFloat64", Comm.AllReduceFloat64)
					checkAllReduce(t, comms, "AllReduceFloat32", Comm.AllReduceFloat32)
					checkBroadcast(t, comms, "BroadcastFloat64", Comm.BroadcastFloat64)
					checkBroadcast(t, comms, "BroadcastFloat32", Comm.BroadcastFloat32)
					checkAllGather(t, comms, "AllGatherFloat64", Comm.AllGatherFloat64)
					checkAllGather(t, comms, "AllGatherFloat32", Comm.AllGatherFloat32)
					checkBarrier(t, comms)
				})
			}
		})
	}
}

// checkBarrier checks that no rank leaves a barrier before every rank has
// entered it: each rank records its arrival, then checks after the barrier
// that all ranks have arrived.
func checkBarrier(t *testing.T, comms []Comm) {
	var mu sync.Mutex
	for round := range 20 {
		arrived := 0
		each(t, comms, "Barrier", func(c Comm) error {
			mu.Lock()
			arrived++
			mu.Unlock()
			if err := c.Barrier(context.Background()); err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			if arrived != len(comms) {
				return fmt.Errorf("round %d: left the barrier when %d of %d ranks had arrived", round, arrived, len(comms))
			}
			return nil
		})
	}
}

// TestTransportsAgreeBitForBit runs the same allreduces on both transports
// and on repeated runs: a reduction depends on nothing but its inputs and
// the world size.
func TestTransportsAgreeBitForBit(t *testing.T) {
	const size, n = 5, 9973
	in := inputs[float32](4, size, n)
	var first []float32
	for _, tr := range transports {
		for run := range 2 {
			comms := tr.group(t, size)
			bufs := clone(in)
			each(t, comms, "AllReduceFloat32", func(c Comm) error {
				return c.AllReduceFloat32(context.Background(), bufs[c.Rank()], Mean)
			})
			if first == nil {
				first = bufs[0]
			}
			for rank := range bufs {
				if i, ok := sameBits(bufs[rank], first); !ok {
					t.Fatalf("%s run %d rank %d [%d]: got %v, first run had %v", tr.name, run, rank, i, bufs[rank][i], first[i])
				}
			}
		}
	}
}

// TestLargeAllReduce checks buffers whose segments span several frames of
// tens of KiB over TCP, with scratch buffers reused from call to call.
func TestLargeAllReduce(t *testing.T) {
	const chunk = 64 << 10
	for _, size := range []int{2, 3} {
		comms := transports[1].group(t, size)
		for _, c := range comms {
			c.(*tcpComm).chunk = chunk
		}
		for _, n := range []int{3*chunk/8*size + 17, chunk / 8 * size} {
			in := inputs[float64](5, size, n)
			want := serialAllReduce(in, Mean)
			bufs := clone(in)
			each(t, comms, "AllReduceFloat64", func(c Comm) error {
				return c.AllReduceFloat64(context.Background(), bufs[c.Rank()], Mean)
			})
			for rank := range bufs {
				if i, ok := sameBits(bufs[rank], want); !ok {
					t.Fatalf("%d ranks, %d elements: rank %d [%d]: got %v, want %v", size, n, rank, i, bufs[rank][i], want[i])
				}
			}
		}
	}
}

// TestMismatchedCallsFail checks that ranks making different calls get
// errors, not garbage or a hang.
func TestMismatchedCallsFail(t *testing.T) {
	cases := []struct {
		name string
		call func(c Comm) error
	}{
		{"lengths", func(c Comm) error {
			return c.AllReduceFloat64(context.Background(), make([]float64, 3+c.Rank()), Sum)
		}},
		{"ops", func(c Comm) error {
			return c.AllReduceFloat64(context.Background(), make([]float64, 3), Op(c.Rank()%2))
		}},
		{"types", func(c Comm) error {
			if c.Rank() == 0 {
				return c.AllReduceFloat32(context.Background(), make([]float32, 3), Sum)
			}
			return c.AllReduceFloat64(context.Background(), make([]float64, 3), Sum)
		}},
		{"collectives", func(c Comm) error {
			if c.Rank() == 0 {
				return c.Barrier(context.Background())
			}
			return c.BroadcastFloat64(context.Background(), make([]float64, 3), 0)
		}},
		{"roots", func(c Comm) error {
			return c.BroadcastFloat32(context.Background(), make([]float32, 3), c.Rank()%2)
		}},
	}
	for _, tr := range transports[:2] {
		for _, tc := range cases {
			t.Run(tr.name+"/"+tc.name, func(t *testing.T) {
				comms := tr.group(t, 3)
				errs := parallel(3, func(rank int) error { return tc.call(comms[rank]) })
				explained := false
				for rank, err := range errs {
					if err == nil {
						t.Errorf("rank %d: mismatched call succeeded", rank)
						continue
					}
					explained = explained || strings.Contains(err.Error(), "different calls")
				}
				if !explained {
					t.Errorf("no rank's error explains the mismatch: %v", errs)
				}
				// The group is unusable afterwards.
				for rank, err := range parallel(3, func(rank int) error { return comms[rank].Barrier(context.Background()) }) {
					if !errors.Is(err, ErrClosed) {
						t.Errorf("rank %d: Barrier after a failure: got %v, want an error matching ErrClosed", rank, err)
					}
				}
			})
		}
	}
}

// TestBadArgumentsFail checks the arguments a rank can check on its own.
func TestBadArgumentsFail(t *testing.T) {
	for _, tr := range transports[:2] {
		t.Run(tr.name, func(t *testing.T) {
			c := tr.group(t, 2)[0]
			ctx := context.Background()
			for name, err := range map[string]error{
				"op":   c.AllReduceFloat64(ctx, nil, Op(7)),
				"root": c.BroadcastFloat64(ctx, nil, 2),
				"dst":  c.AllGatherFloat32(ctx, make([]float32, 3), make([]float32, 2)),
			} {
				if err == nil {
					t.Errorf("%s: accepted", name)
				}
			}
		})
	}
}

// TestRankLeavingFailsOthers checks that a rank that closes its Comm, or
// whose context ends, makes the others' pending and later collectives fail
// instead of hang. Rank 3 is slow: it calls nothing until the end, so the
// others are still waiting when rank 0 leaves.
func TestRankLeavingFailsOthers(t *testing.T) {
	for _, tr := range transports[:2] {
		for _, how := range []string{"close", "cancel"} {
			t.Run(tr.name+"/"+how, func(t *testing.T) {
				comms := tr.group(t, 4)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				done := make(chan error, 2)
				for _, c := range comms[1:3] {
					go func() { done <- c.AllReduceFloat64(context.Background(), make([]float64, 1000), Sum) }()
				}
				if how == "close" {
					comms[0].Close()
				} else {
					left := make(chan error, 1)
					go func() { left <- comms[0].AllReduceFloat64(ctx, make([]float64, 1000), Sum) }()
					time.Sleep(10 * time.Millisecond)
					cancel()
					if err := <-left; !errors.Is(err, context.Canceled) {
						t.Errorf("rank 0: got %v, want context.Canceled", err)
					}
				}
				for range 2 {
					if err := <-done; !errors.Is(err, ErrClosed) {
						t.Errorf("pending collective: got %v, want an error matching ErrClosed", err)
					}
				}
				// The slow rank makes the same call late; then every
				// rank's next call fails.
				if err := comms[3].AllReduceFloat64(context.Background(), make([]float64, 1000), Sum); !errors.Is(err, ErrClosed) {
					t.Errorf("rank 3: late collective: got %v, want an error matching ErrClosed", err)
				}
				for rank, c := range comms {
					if err := c.Barrier(context.Background()); !errors.Is(err, ErrClosed) {
						t.Errorf("rank %d: later Barrier: got %v, want an error matching ErrClosed", rank, err)
					}
				}
			})
		}
	}
}
