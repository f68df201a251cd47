package allreduce

import (
	"context"
	"fmt"
)

// Op is the reduction an allreduce applies element-wise across ranks.
type Op int

const (
	// Sum adds the ranks' values.
	Sum Op = iota
	// Mean adds the ranks' values and divides by the world size.
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

// Comm is one rank's view of its group's collectives. Every rank of a group
// must make the same sequence of calls with buffers of the same length; a
// call returns once the collective has completed on this rank, or with an
// error when ctx ends or the group is broken (a rank has gone away). After an
// error the Comm is unusable: the group must be rebuilt.
type Comm interface {
	// Rank is this member's index in [0, Size).
	Rank() int
	// Size is the number of ranks in the group.
	Size() int
	// AllReduceFloat64 replaces buf on every rank with the element-wise
	// reduction of all ranks' buf.
	AllReduceFloat64(ctx context.Context, buf []float64, op Op) error
	// Barrier returns once every rank has entered it.
	Barrier(ctx context.Context) error
	// Close releases the rank's resources; pending and later calls of any
	// rank of the group fail.
	Close() error
}
