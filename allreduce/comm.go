package allreduce

import (
	"context"
	"errors"
	"fmt"
)

// Op is the reduction an allreduce applies element-wise across ranks.
type Op int

const (
	// Sum adds the ranks' values.
	Sum Op = iota
	// Mean adds the ranks' values and divides the sum by the world size.
	Mean
)

func (o Op) String() string {
	switch o {
	case Sum:
		return "sum"
	case Mean:
		return "mean"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Comm is one rank's view of its group's collectives.
//
// Every rank of a group must make the same sequence of calls with the same
// arguments where they must agree (the op, the root, the buffer lengths); a
// call returns once the collective has completed on this rank, or with an
// error when ctx ends, the ranks' calls disagree, or the group is broken (a
// rank has closed its Comm, exited, or fallen silent). After an error the
// Comm is unusable: every later call fails and the group must be rebuilt.
//
// The collectives of one Comm must not run concurrently with each other;
// Close may be called at any time from any goroutine, and aborts them.
//
// Reductions are deterministic for a given world size: the same inputs give
// the same bits on every rank, on every run and over every transport. The
// buffer is cut into Size near-equal contiguous segments, and the elements of
// segment s are added in rank order s, s+1, ..., Size-1, 0, ..., s-1 (the
// order in which a ring reduce-scatter accumulates them); Mean divides that
// sum by Size.
type Comm interface {
	// Rank is this member's index in [0, Size).
	Rank() int
	// Size is the number of ranks in the group.
	Size() int
	// AllReduceFloat64 replaces buf on every rank with the element-wise
	// reduction of all ranks' buf.
	AllReduceFloat64(ctx context.Context, buf []float64, op Op) error
	// AllReduceFloat32 is AllReduceFloat64 for float32 values.
	AllReduceFloat32(ctx context.Context, buf []float32, op Op) error
	// BroadcastFloat64 copies rank root's buf into every other rank's buf.
	// Every rank passes the same root and a buf of the same length.
	BroadcastFloat64(ctx context.Context, buf []float64, root int) error
	// BroadcastFloat32 is BroadcastFloat64 for float32 values.
	BroadcastFloat32(ctx context.Context, buf []float32, root int) error
	// AllGatherFloat64 concatenates the ranks' src, in rank order, into
	// every rank's dst: rank i's src lands in dst[i*len(src):(i+1)*len(src)].
	// Every rank passes a src of the same length and a dst of Size()
	// times that length. src may be this rank's own block of dst.
	AllGatherFloat64(ctx context.Context, dst, src []float64) error
	// AllGatherFloat32 is AllGatherFloat64 for float32 values.
	AllGatherFloat32(ctx context.Context, dst, src []float32) error
	// Barrier returns once every rank has entered it.
	Barrier(ctx context.Context) error
	// Close releases the rank's resources; pending and later calls of this
	// rank fail, and so do those of the other ranks that need this one.
	// Close is idempotent and returns nil.
	Close() error
}

// ErrClosed is matched (with errors.Is) by the errors of collectives that
// failed because the group broke: this rank or another one closed its Comm,
// exited, or fell silent. The error's message says which rank and why. A
// group broken this way is usually the consequence of a failure elsewhere,
// which a caller looking for the root cause should prefer.
var ErrClosed = errors.New("allreduce: group closed")

// brokenError is a collective's failure caused by the group breaking.
type brokenError struct {
	msg   string
	cause error
}

func (e *brokenError) Error() string        { return e.msg }
func (e *brokenError) Unwrap() error        { return e.cause }
func (e *brokenError) Is(target error) bool { return target == ErrClosed }

// broken returns an error matching ErrClosed with the given message and cause.
func broken(cause error, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if cause != nil {
		msg += ": " + cause.Error()
	}
	return &brokenError{msg: msg, cause: cause}
}

// kind identifies a collective, with its element type, so that ranks can
// check that they are making the same call.
type kind uint8

const (
	kindBarrier kind = 1 + iota
	kindAllReduce32
	kindAllReduce64
	kindBroadcast32
	kindBroadcast64
	kindAllGather32
	kindAllGather64
)

func (k kind) String() string {
	switch k {
	case kindBarrier:
		return "Barrier"
	case kindAllReduce32:
		return "AllReduceFloat32"
	case kindAllReduce64:
		return "AllReduceFloat64"
	case kindBroadcast32:
		return "BroadcastFloat32"
	case kindBroadcast64:
		return "BroadcastFloat64"
	case kindAllGather32:
		return "AllGatherFloat32"
	case kindAllGather64:
		return "AllGatherFloat64"
	}
	return fmt.Sprintf("collective(%d)", uint8(k))
}

// call describes one collective call as the ranks must agree on it.
type call struct {
	kind  kind
	param int // the Op of an allreduce, the root of a broadcast, 0 otherwise
	count int // elements: of buf, or of src for an allgather
}

func (c call) String() string {
	switch c.kind {
	case kindBarrier:
		return "Barrier"
	case kindAllReduce32, kindAllReduce64:
		return fmt.Sprintf("%v(%d elements, %v)", c.kind, c.count, Op(c.param))
	case kindBroadcast32, kindBroadcast64:
		return fmt.Sprintf("%v(%d elements, root %d)", c.kind, c.count, c.param)
	}
	return fmt.Sprintf("%v(%d elements)", c.kind, c.count)
}

// checkOp rejects an Op that is neither Sum nor Mean.
func checkOp(op Op) error {
	if op != Sum && op != Mean {
		return fmt.Errorf("allreduce: unknown op %v: use Sum or Mean", op)
	}
	return nil
}

// checkRoot rejects a broadcast root outside [0, size).
func checkRoot(root, size int) error {
	if root < 0 || root >= size {
		return fmt.Errorf("allreduce: broadcast root %d is not a rank of a group of %d", root, size)
	}
	return nil
}

// checkGather rejects an allgather whose dst is not size times src.
func checkGather(dst, src, size int) error {
	if dst != size*src {
		return fmt.Errorf("allreduce: allgather dst has %d elements, want %d (%d ranks × %d)", dst, size*src, size, src)
	}
	return nil
}

// segment returns the half-open index range of segment s when n elements are
// cut into size near-equal contiguous segments (the first n%size one longer).
func segment(n, size, s int) (lo, hi int) {
	q, r := n/size, n%size
	lo = s*q + min(s, r)
	hi = lo + q
	if s < r {
		hi++
	}
	return lo, hi
}
