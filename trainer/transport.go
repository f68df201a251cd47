package trainer

import (
	"context"
	"fmt"
	"time"

	"github.com/gotune/gotune/allreduce"
)

// joinSpec is what a process worker knows about its group's collectives.
type joinSpec struct {
	rendezvous, group string
	rank, size        int
	host              string
	timeout           time.Duration
}

// joinTimeout bounds how long a process worker waits for its group to form,
// and how long a peer may stay silent before the group's collectives fail.
const joinTimeout = time.Minute

// processComm returns the collectives of a process worker: in-process for a
// group of one, over TCP through the group's rendezvous otherwise.
func processComm(ctx context.Context, j joinSpec) (allreduce.Comm, error) {
	if j.size == 1 {
		return allreduce.NewLocal(1)[0], nil
	}
	if j.rendezvous == "" {
		return nil, fmt.Errorf("worker %d of %d: no rendezvous address in %s", j.rank, j.size, EnvRendezvous)
	}
	c, err := allreduce.JoinTCP(ctx, allreduce.TCPConfig{Rendezvous: j.rendezvous,
		Group: j.group, Rank: j.rank, Size: j.size, Host: j.host, Timeout: j.timeout})
	if err != nil {
		return nil, fmt.Errorf("join the group's collectives at %s: %w", j.rendezvous, err)
	}
	return c, nil
}
