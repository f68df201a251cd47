package trainer

import (
	"context"

	"github.com/gotune/gotune/workers"
)

// Launcher starts a group's worker processes on one node:
// workers.LocalLauncher on this node, cluster.RemoteLauncher on a node a
// remote agent lends. The tuner puts the right one in each Slot.
type Launcher interface {
	// Host is the address the node's workers listen on for their group's
	// collectives, and that the other nodes reach the node at.
	Host() string
	// FreePort returns a TCP port on Host that was free a moment ago: the
	// MASTER_PORT of a group whose rank 0 runs on the node.
	FreePort(ctx context.Context) (int, error)
	// Start starts a worker process, as workers.StartProcess does. A
	// failure that wraps workers.ErrNodeLost fails the attempt like a
	// worker's failure, so the group restarts (elsewhere); any other
	// failure to start is permanent.
	Start(spec workers.LaunchSpec, onReport func(line string)) (*workers.Process, error)
}

// localLauncher is the launcher of this node's workers.
func (r *runner) localLauncher() Launcher {
	if r.spec.Launcher != nil {
		return r.spec.Launcher
	}
	return workers.LocalLauncher{}
}

// launcher is the launcher of rank's node.
func (a *attempt) launcher(rank int) Launcher {
	if l := a.slots[rank].Launcher; l != nil {
		return l
	}
	return a.r.localLauncher()
}
