package workers

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gotune/gotune/workers/agentpb"
)

// LocalLauncher starts worker processes on this node.
type LocalLauncher struct {
	// Address is the address of this node that the workers listen on and
	// other nodes reach them at; "" means 127.0.0.1, enough when every
	// worker runs on this node.
	Address string
}

// Host is l.Address, or 127.0.0.1 when it is empty.
func (l LocalLauncher) Host() string {
	if l.Address == "" {
		return "127.0.0.1"
	}
	return l.Address
}

// FreePort returns a TCP port on Host that was free a moment ago.
func (l LocalLauncher) FreePort(context.Context) (int, error) { return freePort(l.Host()) }

// Start is StartProcess.
func (l LocalLauncher) Start(spec LaunchSpec, onReport func(line string)) (*Process, error) {
	return StartProcess(spec, onReport)
}

// freePort returns a TCP port on host that is free now, for a worker to
// listen on a moment later (rank 0's MASTER_PORT). Between the two, any
// socket could take a port the kernel picks (one bound to port 0, or a
// connection's local end), so the port is drawn at random from just below
// the kernel's ephemeral range, where only a program that names a port
// takes it; a port handed out in the last minute is not handed out again,
// so trials that start together get different ports. When no such port is
// free it falls back to one the kernel picks.
func freePort(host string) (int, error) {
	low, high := namedPortRange()
	for range 64 {
		port := low + rand.IntN(high-low)
		if !portsHandedOut.take(port) {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err == nil {
			ln.Close()
			return port, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return 0, err
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// namedPortRange is where freePort draws ports: the 8,192 ports below the
// kernel's ephemeral range (Linux's net.ipv4.ip_local_port_range, 32768
// and up by default), above the privileged ports.
func namedPortRange() (low, high int) {
	high = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 1024+1024 {
				high = n
			}
		}
	}
	return max(1024, high-8192), high
}

// portsHandedOut remembers the ports freePort gave in the last minute.
var portsHandedOut = recentPorts{at: map[int]time.Time{}}

// recentPorts is a set of ports, each forgotten a minute after it was added.
type recentPorts struct {
	mu sync.Mutex
	at map[int]time.Time
}

// take adds port and reports whether it was not already there.
func (r *recentPorts) take(port int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for p, t := range r.at {
		if now.Sub(t) > time.Minute {
			delete(r.at, p)
		}
	}
	if _, ok := r.at[port]; ok {
		return false
	}
	r.at[port] = now
	return true
}

// RemoteLauncher starts worker processes on a node an agent lends (see
// Head.Launcher). The processes' report lines, log lines, control streams
// and exits come back over the agent's session; their log files are kept
// on this node.
type RemoteLauncher struct {
	h    *Head
	node int
}

// Node is the name of the launcher's node.
func (l *RemoteLauncher) Node() string {
	l.h.mu.Lock()
	defer l.h.mu.Unlock()
	return l.h.agents[l.node].name
}

// Host is the address the node's workers listen on, as its agent gave it.
func (l *RemoteLauncher) Host() string {
	l.h.mu.Lock()
	defer l.h.mu.Unlock()
	return l.h.agents[l.node].host
}

// FreePort asks the agent for a TCP port on Host that was free a moment ago.
func (l *RemoteLauncher) FreePort(ctx context.Context) (int, error) {
	s, err := l.h.live(l.node)
	if err != nil {
		return 0, err
	}
	id := s.newID()
	ch := make(chan *agentpb.PortReply, 1)
	s.mu.Lock()
	s.ports[id] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.ports, id)
		s.mu.Unlock()
	}()
	if err := s.send(&agentpb.HeadMessage{Msg: &agentpb.HeadMessage_Port{Port: &agentpb.PortRequest{Id: id}}}); err != nil {
		return 0, err
	}
	select {
	case r := <-ch:
		if r.Error != "" {
			return 0, fmt.Errorf("node %s: free port: %s", s.name, r.Error)
		}
		return int(r.Port), nil
	case <-s.ctx.Done():
		return 0, s.lostErr()
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Start starts spec's process on the node and returns once it runs. The
// agent runs it in its own environment with the variables of spec.Env that
// differ from this process's environment set on top (so the contract's
// variables travel, while PATH and HOME are the node's); Args[0] is the
// agent's own program when spec.Self is set. Unless the agent shares this
// node's files, spec.Inputs are copied to the node first and spec.Scratch
// is replaced by a folder of the node, in arguments and variables alike.
// It fails with an error wrapping ErrNodeLost when the node is lost before
// the process starts.
func (l *RemoteLauncher) Start(spec LaunchSpec, onReport func(line string)) (*Process, error) {
	if len(spec.Args) == 0 {
		return nil, errors.New("launch: no command")
	}
	s, err := l.h.live(l.node)
	if err != nil {
		return nil, err
	}
	log := newProcessLog(spec)
	p := &Process{log: log, done: make(chan struct{})}
	rp := &remoteProc{s: s, node: s.name, spec: spec, p: p, onReport: onReport, events: newQueue[procEvent]()}
	p.remote = rp
	if spec.Control {
		rp.ctl = newBufPipe()
		p.control = remoteControl{rp}
	}
	launch := &agentpb.Launch{
		Args: spec.Args, Self: spec.Self, Dir: spec.Dir, Env: envOverlay(spec.Env, os.Environ()),
		ReportPrefix: spec.ReportPrefix, Control: spec.Control, Scratch: spec.Scratch,
	}
	rp.id = s.newID()
	launch.Id = rp.id
	started := make(chan *agentpb.Started, 1)
	var keys []string
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		log.close()
		return nil, s.lostErr()
	}
	for _, in := range spec.Inputs {
		key := randomID()
		s.offers[key] = in
		keys = append(keys, key)
		launch.Inputs = append(launch.Inputs, &agentpb.Input{Key: key, Path: in})
	}
	s.procs[rp.id] = rp
	s.starts[rp.id] = started
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		for _, k := range keys {
			delete(s.offers, k)
		}
		delete(s.starts, rp.id)
		s.mu.Unlock()
	}()
	fail := func(err error) (*Process, error) {
		s.mu.Lock()
		delete(s.procs, rp.id)
		s.mu.Unlock()
		log.close()
		return nil, err
	}
	if err := s.send(&agentpb.HeadMessage{Msg: &agentpb.HeadMessage_Launch{Launch: launch}}); err != nil {
		return fail(err)
	}
	select {
	case st := <-started:
		if st.Error != "" {
			return fail(fmt.Errorf("node %s: %w", s.name, peerError(st.Error)))
		}
		p.pid = int(st.Pid)
	case <-s.ctx.Done():
		return fail(s.lostErr())
	}
	if spec.Heading != nil {
		p.Notef("%s", spec.Heading(p.pid))
	}
	p.Notef("started on node %s as pid %d", s.name, p.pid)
	go rp.deliver() // after the notes: they come first in the log
	return p, nil
}

// placeVars are variables of the command-worker contract that say where a
// worker runs: they travel to the agent even when this process happens to
// have the same value, which the agent's own environment may not.
var placeVars = map[string]bool{
	"RANK": true, "WORLD_SIZE": true, "LOCAL_RANK": true, "LOCAL_WORLD_SIZE": true, "GROUP_RANK": true,
	"GROUP_WORLD_SIZE": true, "ROLE_NAME": true, "ROLE_RANK": true, "ROLE_WORLD_SIZE": true,
	"MASTER_ADDR": true, "MASTER_PORT": true, "CUDA_VISIBLE_DEVICES": true,
}

// envOverlay is the entries of env that base does not hold as they are,
// and those of gotune's, torchelastic's and the contract's variables.
func envOverlay(env, base []string) []string {
	have := make(map[string]bool, len(base))
	for _, kv := range base {
		have[kv] = true
	}
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !have[kv] || placeVars[k] || strings.HasPrefix(k, "GOTUNE_") || strings.HasPrefix(k, "TORCHELASTIC_") {
			out = append(out, kv)
		}
	}
	return slices.Clip(out)
}
