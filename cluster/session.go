package cluster

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gotune/gotune/cluster/agentpb"
	"github.com/gotune/gotune/workers"
)

// session is the head's side of one agent's connection. Its run method
// owns the stream; other goroutines send through out and wait on ctx.
type session struct {
	h      *Head
	id     string
	host   string
	shared bool
	node   int    // set by attach
	name   string // set by attach
	out    chan *agentpb.HeadMessage
	ctx    context.Context
	end    context.CancelCauseFunc

	mu      sync.Mutex
	closed  bool
	leaving bool // the agent said it is stopping (see Head.withdraw)
	nextID  uint64
	procs   map[uint64]*remoteProc
	starts  map[uint64]chan *agentpb.Started
	ports   map[uint64]chan *agentpb.PortReply
	stacks  map[uint64]chan *agentpb.StackReply
	usages  map[uint64]chan *agentpb.UsageReply
	fetches map[uint64]*fetchReq
	offers  map[string]string // GetFiles key → folder
}

func newSession(h *Head, host string, shared bool) *session {
	s := &session{
		h: h, id: randomID(), host: host, shared: shared,
		out:   make(chan *agentpb.HeadMessage, 64),
		procs: map[uint64]*remoteProc{}, starts: map[uint64]chan *agentpb.Started{},
		ports: map[uint64]chan *agentpb.PortReply{}, stacks: map[uint64]chan *agentpb.StackReply{},
		usages: map[uint64]chan *agentpb.UsageReply{}, fetches: map[uint64]*fetchReq{},
		offers: map[string]string{},
	}
	s.ctx, s.end = context.WithCancelCause(context.Background())
	return s
}

// run serves the stream until the session ends: it sends what others
// queue, heartbeats, and dispatches what the agent sends; silence for the
// head's timeout ends the session.
func (s *session) run(stream agentpb.Head_SessionServer, interval time.Duration) {
	timeout := s.h.cfg.Timeout
	watchdog := time.AfterFunc(timeout, func() {
		s.end(fmt.Errorf("no word from the agent for %v", timeout))
	})
	defer watchdog.Stop()

	s.h.wg.Add(1)
	go func() {
		defer s.h.wg.Done()
		for {
			m, err := stream.Recv()
			if err != nil {
				s.end(brokenStream(err))
				return
			}
			watchdog.Reset(timeout)
			if err := s.dispatch(m); err != nil {
				s.end(err)
				return
			}
		}
	}()

	tick := time.NewTicker(interval)
	defer tick.Stop()
	beat := &agentpb.HeadMessage{Msg: &agentpb.HeadMessage_Heartbeat{Heartbeat: &agentpb.Heartbeat{}}}
	for {
		var m *agentpb.HeadMessage
		select {
		case <-s.ctx.Done():
			return
		case m = <-s.out:
		case <-tick.C:
			m = beat
		}
		if err := stream.Send(m); err != nil {
			s.end(brokenStream(err))
			return
		}
	}
}

// brokenStream explains the end of an agent's stream: when the agent's
// process dies, or the network fails and the connection is reset, gRPC
// says no more than that the stream was cancelled.
func brokenStream(err error) error {
	switch status.Code(err) {
	case codes.Canceled, codes.Unavailable:
		return errors.New("its connection closed (the agent stopped, or the network failed)")
	}
	return fmt.Errorf("its connection failed: %w", err)
}

// send queues m for the agent; it fails once the session has ended.
func (s *session) send(m *agentpb.HeadMessage) error {
	select {
	case s.out <- m:
		return nil
	case <-s.ctx.Done():
		return s.lostErr()
	}
}

// lostErr is the error of work that the session's end cut short.
func (s *session) lostErr() error {
	return &workers.NodeLostError{Node: s.name, Cause: context.Cause(s.ctx)}
}

// dispatch handles one message of the agent.
func (s *session) dispatch(m *agentpb.AgentMessage) error {
	switch msg := m.Msg.(type) {
	case *agentpb.AgentMessage_Heartbeat:
	case *agentpb.AgentMessage_Started:
		reply(s, s.starts, msg.Started.Id, msg.Started)
	case *agentpb.AgentMessage_Output:
		if rp := s.proc(msg.Output.Id); rp != nil {
			rp.events.push(procEvent{line: msg.Output.Line, report: msg.Output.Report})
		}
	case *agentpb.AgentMessage_Control:
		if rp := s.proc(msg.Control.Id); rp != nil {
			rp.events.push(procEvent{control: msg.Control.Data})
		}
	case *agentpb.AgentMessage_Exited:
		e := msg.Exited
		s.mu.Lock()
		rp := s.procs[e.Id]
		delete(s.procs, e.Id)
		s.mu.Unlock()
		if rp != nil {
			rp.events.push(procEvent{exited: true, err: exitFromPB(e)})
			rp.events.close()
		}
	case *agentpb.AgentMessage_Port:
		reply(s, s.ports, msg.Port.Id, msg.Port)
	case *agentpb.AgentMessage_Stack:
		reply(s, s.stacks, msg.Stack.Id, msg.Stack)
	case *agentpb.AgentMessage_Usage:
		reply(s, s.usages, msg.Usage.Id, msg.Usage)
	case *agentpb.AgentMessage_Leaving:
		s.h.withdraw(s)
	case *agentpb.AgentMessage_FetchFailed:
		if f := s.takeFetch(msg.FetchFailed.Id); f != nil {
			f.finish(peerError(msg.FetchFailed.Error))
		}
	default:
		return fmt.Errorf("protocol error: unexpected %T", m.Msg)
	}
	return nil
}

// peerError is a failure an agent reported, as a string. One that names a
// full disk (or a full quota) on the agent's node wraps that errno, so that
// the head's callers wait for space there as they do on their own node
// instead of failing for good.
type peerError string

func (e peerError) Error() string { return workers.Printable(string(e), workers.MaxPeerError, true) }

func (e peerError) Unwrap() error {
	for _, errno := range []syscall.Errno{syscall.ENOSPC, syscall.EDQUOT} {
		if strings.Contains(string(e), errno.Error()) {
			return errno
		}
	}
	return nil
}

func exitFromPB(e *agentpb.Exited) error {
	switch {
	case e.Error != "":
		return peerError(e.Error)
	case e.Code == 0:
		return nil
	case e.Code < 0:
		return &workers.ExitError{Code: -1, Signal: syscall.Signal(e.Signal)}
	}
	return &workers.ExitError{Code: int(e.Code)}
}

func (s *session) proc(id uint64) *remoteProc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[id]
}

// failAll ends every process of the session, and every wait on it, once
// the session is over.
func (s *session) failAll(cause error) {
	s.mu.Lock()
	s.closed = true
	procs := s.procs
	s.procs = map[uint64]*remoteProc{}
	fetches := s.fetches
	s.fetches = map[uint64]*fetchReq{}
	s.mu.Unlock()
	lost := &workers.NodeLostError{Node: s.name, Cause: cause}
	for _, rp := range procs {
		rp.events.push(procEvent{exited: true, err: lost})
		rp.events.close()
	}
	for _, f := range fetches {
		f.finish(lost)
	}
}

// newID numbers a request of the session.
func (s *session) newID() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	return s.nextID
}

// offered returns the folder offered as key.
func (s *session) offered(key string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	dir, ok := s.offers[key]
	return dir, ok
}

// fetchReq is a folder the head asked an agent for.
type fetchReq struct {
	dest string
	done chan error // receives one result
}

func (f *fetchReq) finish(err error) {
	select {
	case f.done <- err:
	default:
	}
}

// takeFetch removes and returns the pending fetch id, nil when none.
func (s *session) takeFetch(id uint64) *fetchReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fetches[id]
	delete(s.fetches, id)
	return f
}

// procEvent is one thing that happened to a remote process, delivered in
// the order the agent sent it.
type procEvent struct {
	line    string
	report  bool
	control []byte
	exited  bool
	err     error
}

// remoteProc is the head's side of a process an agent runs: it replays the
// process's output into its workers.Process from one goroutine, in order,
// and is the Process's workers.Remote.
type remoteProc struct {
	s        *session
	id       uint64
	node     string
	spec     workers.LaunchSpec
	feed     *workers.RemoteProcess
	onReport func(string)
	events   *queue[procEvent]
	ctl      *bufPipe // nil without a control stream
	fetches  int      // folders fetched, for their names

	mu         sync.Mutex
	exited     bool
	ctlDrained bool // the control stream was read to its end, or closed
	released   bool
}

// deliver replays the process's events until its exit.
func (rp *remoteProc) deliver() {
	for {
		ev, ok := rp.events.pop()
		if !ok {
			return
		}
		switch {
		case ev.exited:
			if rp.ctl != nil {
				rp.ctl.closeWrite()
			}
			rp.mu.Lock()
			rp.exited = true
			rp.mu.Unlock()
			rp.feed.Exited(ev.err)
			rp.maybeRelease()
			return
		case ev.control != nil:
			rp.ctl.feed(ev.control)
		case ev.report && rp.onReport != nil:
			rp.onReport(ev.line)
		default:
			rp.feed.Output(ev.line)
		}
	}
}

// maybeRelease tells the agent to drop the process's folders once nothing
// can fetch from them any more: the process has exited and its control
// stream, if any, has been read to its end (the trainer fetches a
// checkpoint before it reads the next control message).
func (rp *remoteProc) maybeRelease() {
	rp.mu.Lock()
	ready := rp.exited && (rp.ctl == nil || rp.ctlDrained) && !rp.released
	if ready {
		rp.released = true
	}
	rp.mu.Unlock()
	if ready {
		rp.s.send(&agentpb.HeadMessage{Msg: &agentpb.HeadMessage_Release{Release: &agentpb.Release{Id: rp.id}}})
	}
}

// Node is the name of the process's node.
func (rp *remoteProc) Node() string { return rp.node }

// Signal asks the agent to stop or kill the process.
func (rp *remoteProc) Signal(kill bool, grace time.Duration) {
	rp.mu.Lock()
	exited := rp.exited
	rp.mu.Unlock()
	if exited {
		return
	}
	// A lost session has failed the process already.
	rp.s.send(&agentpb.HeadMessage{Msg: &agentpb.HeadMessage_Signal{Signal: &agentpb.Signal{
		Id: rp.id, Kill: kill, GraceMillis: grace.Milliseconds(),
	}}})
}

// Stack asks the agent for the process's current stack.
func (rp *remoteProc) Stack(ctx context.Context) (workers.Stack, error) {
	r, err := ask(ctx, rp.s, rp.s.stacks, func(id uint64) *agentpb.HeadMessage {
		return &agentpb.HeadMessage{Msg: &agentpb.HeadMessage_Stack{Stack: &agentpb.StackRequest{Id: id, Process: rp.id}}}
	})
	if err != nil {
		return workers.Stack{}, err
	}
	if r.Error != "" {
		return workers.Stack{}, fmt.Errorf("node %s: %w", rp.node, peerError(r.Error))
	}
	return workers.Stack{PID: int(r.Pid), Method: r.Method, Text: r.Text}, nil
}

// Usage asks the agent what the process uses now.
func (rp *remoteProc) Usage(ctx context.Context) (workers.ProcUsage, error) {
	r, err := ask(ctx, rp.s, rp.s.usages, func(id uint64) *agentpb.HeadMessage {
		return &agentpb.HeadMessage{Msg: &agentpb.HeadMessage_Usage{Usage: &agentpb.UsageRequest{Id: id, Process: rp.id}}}
	})
	if err != nil {
		return workers.ProcUsage{}, err
	}
	if r.Error != "" {
		return workers.ProcUsage{}, fmt.Errorf("node %s: %w", rp.node, peerError(r.Error))
	}
	return workers.ProcUsage{PID: rp.feed.Process().Pid(), CPUSeconds: r.CpuSeconds, RSS: workers.Bytes(r.RssBytes), Processes: int(r.Processes)}, nil
}

// reply hands r to the request awaiting it under id in pending, one of the
// session's tables of replies awaited; a reply nobody awaits any more (the
// request gave up) is dropped.
func reply[R any](s *session, pending map[uint64]chan R, id uint64, r R) {
	s.mu.Lock()
	ch := pending[id]
	delete(pending, id)
	s.mu.Unlock()
	if ch != nil {
		ch <- r
	}
}

// ask sends the agent the request msg(id) and waits for its reply, which
// comes on the channel ask registers under id in pending, one of the
// session's tables of replies awaited.
func ask[R any](ctx context.Context, s *session, pending map[uint64]chan R, msg func(id uint64) *agentpb.HeadMessage) (R, error) {
	var none R
	id := s.newID()
	ch := make(chan R, 1)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return none, s.lostErr()
	}
	pending[id] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(pending, id)
		s.mu.Unlock()
	}()
	if err := s.send(msg(id)); err != nil {
		return none, err
	}
	select {
	case r := <-ch:
		return r, nil
	case <-s.ctx.Done():
		return none, s.lostErr()
	case <-ctx.Done():
		return none, ctx.Err()
	}
}

// Fetch brings a folder the process handed over to this node.
func (rp *remoteProc) Fetch(ctx context.Context, dir string) (string, error) {
	s := rp.s
	if s.shared {
		wd, err := filepath.Abs(rp.spec.Dir)
		if err != nil {
			return "", err
		}
		return workers.Confine(rp.spec.Scratch, absUnder(wd, dir))
	}
	rp.mu.Lock()
	rp.fetches++
	n := rp.fetches
	rp.mu.Unlock()
	root := rp.spec.Scratch
	if root == "" {
		return workers.Confine("", dir) // nothing can be handed over
	}
	f := &fetchReq{dest: filepath.Join(root, "fetched-"+strconv.Itoa(n)), done: make(chan error, 1)}
	id := s.newID()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return "", s.lostErr()
	}
	s.fetches[id] = f
	s.mu.Unlock()
	if err := s.send(&agentpb.HeadMessage{Msg: &agentpb.HeadMessage_Fetch{Fetch: &agentpb.Fetch{Id: id, Process: rp.id, Path: dir}}}); err != nil {
		s.takeFetch(id)
		return "", err
	}
	select {
	case err := <-f.done:
		if err != nil {
			return "", fmt.Errorf("fetch %s from node %s: %w", dir, rp.node, err)
		}
		return f.dest, nil
	case <-ctx.Done():
		s.takeFetch(id)
		return "", ctx.Err()
	}
}

// remoteControl is a remote process's control stream as the head sees it.
type remoteControl struct{ rp *remoteProc }

func (c remoteControl) Read(b []byte) (int, error) {
	n, err := c.rp.ctl.Read(b)
	if err != nil {
		c.drained()
	}
	return n, err
}

func (c remoteControl) Write(b []byte) (int, error) {
	data := append([]byte(nil), b...)
	err := c.rp.s.send(&agentpb.HeadMessage{Msg: &agentpb.HeadMessage_Control{Control: &agentpb.ControlData{Id: c.rp.id, Data: data}}})
	if err != nil {
		return 0, err
	}
	return len(b), nil
}

func (c remoteControl) Close() error {
	c.rp.ctl.closeRead()
	c.drained()
	return nil
}

func (c remoteControl) drained() {
	c.rp.mu.Lock()
	c.rp.ctlDrained = true
	c.rp.mu.Unlock()
	c.rp.maybeRelease()
}
