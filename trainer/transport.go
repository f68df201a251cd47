package trainer

import (
	"context"
	"fmt"
	"time"

	"github.com/gotune/gotune/allreduce"
)

// The TCP transport of package allreduce connects the collectives of
// process workers. Until a build assigns these two functions, a group of
// several process workers runs without collectives: Comm's calls fail with
// errNoTransport (reports still work, since the launcher gathers them).
//
// Wiring, in a file of this package:
//
//	func init() {
//		startRendezvous = func(addr string) (rendezvous, error) {
//			r, err := allreduce.NewRendezvous(addr)
//			if err != nil {
//				return nil, err
//			}
//			return r, nil
//		}
//		joinGroup = func(ctx context.Context, j joinSpec) (allreduce.Comm, error) {
//			return allreduce.JoinTCP(ctx, allreduce.TCPConfig{Rendezvous: j.rendezvous,
//				Group: j.group, Rank: j.rank, Size: j.size, Host: j.host, Timeout: j.timeout})
//		}
//	}
var (
	// startRendezvous starts, in the launching process, the service through
	// which a group's process workers find each other; addr is
	// "127.0.0.1:0" for groups on this node.
	startRendezvous func(addr string) (rendezvous, error)
	// joinGroup joins a process worker to its group's collectives.
	joinGroup func(ctx context.Context, j joinSpec) (allreduce.Comm, error)
)

// rendezvous is the running rendezvous service.
type rendezvous interface {
	Addr() string
	Close() error
}

// joinSpec is what a process worker knows about its group's collectives.
type joinSpec struct {
	rendezvous, group string
	rank, size        int
	host              string
	timeout           time.Duration
}

// joinTimeout bounds how long a process worker waits for its group to form.
const joinTimeout = time.Minute

// processComm returns the collectives of a process worker: in-process for a
// group of one, over TCP when the transport is wired in, and otherwise a
// Comm whose collectives fail.
func processComm(ctx context.Context, j joinSpec) (allreduce.Comm, error) {
	if j.size == 1 {
		return allreduce.NewLocal(1)[0], nil
	}
	if joinGroup == nil || j.rendezvous == "" {
		return noTransport{j.rank, j.size}, nil
	}
	c, err := joinGroup(ctx, j)
	if err != nil {
		return nil, fmt.Errorf("join the group's collectives at %s: %w", j.rendezvous, err)
	}
	return c, nil
}

// errNoTransport is the error of every collective of a multi-process group
// built without the TCP transport.
var errNoTransport = fmt.Errorf("trainer: this build has no TCP transport for the collectives of process workers (see trainer/transport.go)")

// noTransport is the Comm of a process worker in a group of several when
// no transport is wired in.
type noTransport struct{ rank, size int }

func (c noTransport) Rank() int { return c.rank }
func (c noTransport) Size() int { return c.size }
func (c noTransport) AllReduceFloat64(context.Context, []float64, allreduce.Op) error {
	return errNoTransport
}
func (c noTransport) Barrier(context.Context) error { return errNoTransport }
func (c noTransport) Close() error                  { return nil }
