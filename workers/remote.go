package workers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// Remote is the far end of a Process that runs on another node: the part
// only that node can do, to which the Process delegates. Package cluster
// implements it over an agent's session; this package knows no network.
// Its methods may be called from several goroutines at once.
type Remote interface {
	// Node is the name of the node the process runs on.
	Node() string
	// Signal asks the node to stop the process group (SIGTERM, then
	// SIGKILL after grace) or, when kill is set, to kill it at once. It
	// returns at once, and does nothing once the process has exited.
	Signal(kill bool, grace time.Duration)
	// Fetch is Process.Fetch, on the process's node.
	Fetch(ctx context.Context, dir string) (string, error)
	// Usage is Process.Usage, on the process's node.
	Usage(ctx context.Context) (ProcUsage, error)
	// Stack is Process.Stack, on the process's node.
	Stack(ctx context.Context) (Stack, error)
}

// RemoteProcess feeds a Process whose process runs on another node (see
// NewRemoteProcess) with what that node relays: the process's pid, the
// lines of its log and its exit. Whoever relays them calls its methods
// from one goroutine, in the order the node sent the events.
type RemoteProcess struct{ p *Process }

// NewRemoteProcess returns the feed of a new Process that runs on another
// node, delegating to r what needs that node (Stop, Kill, Node, Fetch,
// Usage, Stack). The Process keeps spec's log on this node (LogPath,
// LogMaxBytes, LogKeep, OnOutput); its report lines are the relayer's to
// hand over. control, when not nil, is the launcher's end of its control
// stream (Process.Control); the relayer ends it, the Process never
// closes it. Call Started once the process runs, or Abandon when it did
// not start.
func NewRemoteProcess(spec LaunchSpec, r Remote, control io.ReadWriteCloser) *RemoteProcess {
	p := &Process{log: newProcessLog(spec), done: make(chan struct{}), remote: r, control: control}
	return &RemoteProcess{p}
}

// Process is the Process fed, for the launcher to return once Started.
func (f *RemoteProcess) Process() *Process { return f.p }

// Started records the process's pid on its node.
func (f *RemoteProcess) Started(pid int) { f.p.pid = pid }

// Abandon closes the log of a Process whose process never started; the
// Process is not used afterwards.
func (f *RemoteProcess) Abandon() { f.p.log.close() }

// Output writes a line the process wrote to its log (stderr, or stdout
// that was not a report line).
func (f *RemoteProcess) Output(line string) { f.p.log.writeLine([]byte(line)) }

// Exited ends the Process: err is how the process ended (nil, an
// *ExitError, or an error wrapping ErrNodeLost when its node was lost),
// its log is closed (kept with its notes when the process failed by
// itself), and Done is closed. It is the last call.
func (f *RemoteProcess) Exited(err error) {
	p := f.p
	p.keepLogOfFailure(err)
	p.log.close()
	p.mu.Lock()
	p.exited, p.err, p.exitedAt = true, err, time.Now()
	p.mu.Unlock()
	close(p.done)
}

// ErrNodeLost is wrapped by the errors of processes, launches and
// transfers on a node that was lost (see NodeLostError).
var ErrNodeLost = errors.New("node lost")

// NodeLostError is how a process on a lost node ended, or why a launch
// there failed.
type NodeLostError struct {
	// Node is the lost node's name.
	Node string
	// Cause is why the node was lost: its agent's connection broke or went
	// silent, or no agent serves it now.
	Cause error
}

func (e *NodeLostError) Error() string {
	return fmt.Sprintf("was lost with node %s (%v)", e.Node, e.Cause)
}

// Is makes errors.Is(err, ErrNodeLost) hold.
func (e *NodeLostError) Is(target error) bool { return target == ErrNodeLost }
func (e *NodeLostError) Unwrap() error        { return e.Cause }
