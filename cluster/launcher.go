package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/gotune/gotune/cluster/agentpb"
	"github.com/gotune/gotune/workers"
)

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
// It fails with an error wrapping workers.ErrNodeLost when the node is lost before
// the process starts.
func (l *RemoteLauncher) Start(spec workers.LaunchSpec, onReport func(line string)) (*workers.Process, error) {
	if len(spec.Args) == 0 {
		return nil, errors.New("launch: no command")
	}
	s, err := l.h.live(l.node)
	if err != nil {
		return nil, err
	}
	rp := &remoteProc{s: s, node: s.name, spec: spec, onReport: onReport, events: newQueue[procEvent]()}
	var control io.ReadWriteCloser
	if spec.Control {
		rp.ctl = newBufPipe()
		control = remoteControl{rp}
	}
	rp.feed = workers.NewRemoteProcess(spec, rp, control)
	p := rp.feed.Process()
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
		rp.feed.Abandon()
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
	fail := func(err error) (*workers.Process, error) {
		s.mu.Lock()
		delete(s.procs, rp.id)
		s.mu.Unlock()
		rp.feed.Abandon()
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
		rp.feed.Started(int(st.Pid))
	case <-s.ctx.Done():
		return fail(s.lostErr())
	}
	if spec.Heading != nil {
		p.Notef("%s", spec.Heading(p.Pid()))
	}
	p.Notef("started on node %s as pid %d", s.name, p.Pid())
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
