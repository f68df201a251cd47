package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/gotune/gotune/cluster/agentpb"
	"github.com/gotune/gotune/workers"
)

// DefaultAgentTimeout is how long the head waits without a word from an
// agent before it declares the agent's node lost, when HeadConfig.Timeout
// is 0.
const DefaultAgentTimeout = 10 * time.Second

// HeadConfig configures a Head.
type HeadConfig struct {
	// Manager places the sweep's groups; agents' nodes are added to it as
	// they join. Required.
	Manager *workers.Manager
	// Token is the shared secret every agent must present. Required.
	Token string
	// TLS, when not nil, makes the head serve TLS (see ServerTLS);
	// otherwise it speaks plaintext and the token travels in the clear.
	TLS *TLSFiles
	// Timeout is how long an agent may stay silent before its node is
	// declared lost; both sides send a heartbeat every Timeout/4. 0 means
	// DefaultAgentTimeout.
	Timeout time.Duration
	// Host is the address of this node that agents' workers reach it at:
	// where groups' rendezvous and this node's workers listen. "" means
	// the host of the listening address when it names one, otherwise the
	// address agents reach the head at, as the first agent's connection
	// shows (127.0.0.1 until one joins).
	Host string
	// Logf receives one line per join, loss and refused call; nil means
	// the standard logger.
	Logf func(format string, args ...any)
	// Programs are the programs the sweep's command starts that every
	// node must have, bare names looked up in the agent's PATH or absolute
	// paths: an agent whose node lacks one is refused when it joins,
	// naming the program and the node, and the sweep goes on without it.
	Programs []string
}

// Head is the service node agents join to lend their nodes to a sweep.
// It adds each agent's node to the Manager, starts worker processes there
// on request (Launcher), and watches the agent's heartbeats: an agent that
// stops answering, or whose connection breaks, is declared lost, its node
// is marked lost in the Manager (Manager.LoseNode), and its processes fail
// with an error wrapping workers.ErrNodeLost so that their groups restart
// elsewhere. An agent that joins again under the same name gets its node
// back.
type Head struct {
	cfg    HeadConfig
	ln     net.Listener
	srv    *grpc.Server
	served chan struct{}
	wg     sync.WaitGroup // handlers and sessions' goroutines, added to under mu while open

	mu       sync.Mutex
	host     string
	own      map[string]bool // names of the manager's nodes that are no agent's
	agents   map[int]*agentNode
	byName   map[string]int
	sessions map[string]*session
	joined   chan struct{} // closed and replaced at every join
	closed   bool
}

// agentNode is a manager node an agent lends, and its current session.
type agentNode struct {
	index    int
	name     string
	host     string
	session  *session // nil while the node is lost
	launcher *RemoteLauncher
}

// AgentInfo describes a node an agent lends.
type AgentInfo struct {
	// Name is the node's name in the sweep, Index its index in the
	// Manager's nodes.
	Name  string
	Index int
	// Host is the address its workers listen on.
	Host string
	// Lost is true while no agent serves the node.
	Lost bool
}

// ListenHead starts a head listening on addr (host:port; port 0 picks one,
// see Addr) and serving agents until Close.
func ListenHead(addr string, cfg HeadConfig) (*Head, error) {
	switch {
	case cfg.Manager == nil:
		return nil, errors.New("head: no resource manager")
	case cfg.Token == "":
		return nil, errors.New("head: a token is required, so that only your agents can join: set one (for example GOTUNE_TOKEN=$(openssl rand -hex 16))")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultAgentTimeout
	}
	if cfg.Logf == nil {
		cfg.Logf = log.Printf
	}
	cfg.Logf = printableLogf(cfg.Logf)
	// A connection that stops acknowledging what the head sends (a node
	// cut off) is closed after the timeout too, so that no send to it
	// blocks for longer (TCP_USER_TIMEOUT).
	opts := []grpc.ServerOption{grpc.KeepaliveParams(keepalive.ServerParameters{Time: cfg.Timeout, Timeout: cfg.Timeout})}
	if cfg.TLS != nil {
		tc, err := ServerTLS(*cfg.TLS)
		if err != nil {
			return nil, fmt.Errorf("head: %w", err)
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	guard := newTokenGuard(cfg.Token, cfg.Logf)
	opts = append(opts, grpc.ChainStreamInterceptor(guard.stream), grpc.ChainUnaryInterceptor(guard.unary))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("head: listen on %s: %w", addr, err)
	}
	h := &Head{
		cfg: cfg, ln: ln, srv: grpc.NewServer(opts...), served: make(chan struct{}),
		own: map[string]bool{}, agents: map[int]*agentNode{}, byName: map[string]int{},
		sessions: map[string]*session{}, joined: make(chan struct{}),
	}
	h.host = cfg.Host
	if h.host == "" {
		if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsUnspecified() {
			h.host = ip.String()
		}
	}
	for _, n := range cfg.Manager.Nodes() {
		h.own[n.Name] = true
	}
	agentpb.RegisterHeadServer(h.srv, &headServer{h: h})
	go func() {
		defer close(h.served)
		h.srv.Serve(ln)
	}()
	return h, nil
}

// Addr is the address the head listens on, for agents' --head.
func (h *Head) Addr() string { return h.ln.Addr().String() }

// Manager is the head's resource manager.
func (h *Head) Manager() *workers.Manager { return h.cfg.Manager }

// Host is the address of this node that other nodes reach it at (see
// HeadConfig.Host).
func (h *Head) Host() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.host == "" {
		return "127.0.0.1"
	}
	return h.host
}

// Local is the launcher of this node's workers, listening on Host.
func (h *Head) Local() workers.LocalLauncher { return workers.LocalLauncher{Address: h.Host()} }

// Launcher is the launcher of node index's workers when an agent lends
// that node, nil for the head's own nodes. It stays valid across the
// agent's losses and rejoins.
func (h *Head) Launcher(index int) *RemoteLauncher {
	h.mu.Lock()
	defer h.mu.Unlock()
	if a := h.agents[index]; a != nil {
		return a.launcher
	}
	return nil
}

// Agents lists the nodes agents lend, connected or lost, by index.
func (h *Head) Agents() []AgentInfo {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]AgentInfo, 0, len(h.agents))
	for _, a := range h.agents {
		out = append(out, AgentInfo{Name: a.name, Index: a.index, Host: a.host, Lost: a.session == nil})
	}
	slices.SortFunc(out, func(a, b AgentInfo) int { return a.Index - b.Index })
	return out
}

// WaitAgents waits until at least n agents are connected, or ctx ends.
func (h *Head) WaitAgents(ctx context.Context, n int) error {
	for {
		h.mu.Lock()
		live := 0
		for _, a := range h.agents {
			if a.session != nil {
				live++
			}
		}
		joined := h.joined
		h.mu.Unlock()
		if live >= n {
			return nil
		}
		select {
		case <-joined:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s (%d connected): %w", count(n, "agent"), live, ctx.Err())
		}
	}
}

// Close stops the head: every session ends (agents kill their workers and
// try to join again until they are stopped), and Close waits for the
// head's goroutines.
func (h *Head) Close() error {
	h.mu.Lock()
	h.closed = true // no handler starts from now on
	sessions := make([]*session, 0, len(h.sessions))
	for _, s := range h.sessions {
		sessions = append(sessions, s)
	}
	h.mu.Unlock()
	for _, s := range sessions {
		s.end(errors.New("the head is shutting down"))
	}
	h.srv.Stop()
	<-h.served
	h.wg.Wait()
	return nil
}

func (h *Head) logf(format string, args ...any) { h.cfg.Logf(format, args...) }

// enter counts a handler in, so that Close waits for it; it fails once
// the head is closing.
func (h *Head) enter() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return status.Error(codes.Unavailable, "the head is shutting down")
	}
	h.wg.Add(1)
	return nil
}

// attach registers a joining agent's session: it rejoins the lost node of
// its name, or adds a new node to the manager. The name is made unique
// among the nodes in use by a suffix -2, -3, …
func (h *Head) attach(s *session, n workers.Node, host string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return errors.New("the head is shutting down")
	}
	// The name is the agent's to choose: it becomes printable and short
	// before anything shows or stores it.
	base := workers.Printable(n.Name, workers.MaxNodeName, false)
	if base == "" {
		base = "agent"
	}
	for k := 1; ; k++ {
		name := base
		if k > 1 {
			name = base + "-" + strconv.Itoa(k)
		}
		if h.own[name] {
			continue
		}
		if i, ok := h.byName[name]; ok {
			a := h.agents[i]
			if a.session != nil {
				continue
			}
			if err := h.cfg.Manager.RejoinNode(i, n); err != nil {
				continue // another GPU count: it becomes a node of another name
			}
			a.session, a.host = s, host
			s.node, s.name = i, name
			break
		}
		n.Name = name
		i := h.cfg.Manager.AddNode(n)
		a := &agentNode{index: i, name: name, host: host, session: s}
		a.launcher = &RemoteLauncher{h: h, node: i}
		h.agents[i], h.byName[name] = a, i
		s.node, s.name = i, name
		break
	}
	h.sessions[s.id] = s
	h.logf("agent %s joined from %s: %s", s.name, host, n.Describe())
	close(h.joined)
	h.joined = make(chan struct{})
	return nil
}

// detach ends a session's hold on its node: the node is lost.
func (h *Head) detach(s *session) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.sessions, s.id)
	if a := h.agents[s.node]; a != nil && a.session == s {
		a.session = nil
		h.cfg.Manager.LoseNode(s.node)
	}
}

// withdraw takes the node of a stopping agent's session out of placement
// (Manager.LoseNode) while its processes finish, so that no group starts
// there only to fail when the session ends.
func (h *Head) withdraw(s *session) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if a := h.agents[s.node]; a != nil && a.session == s {
		h.cfg.Manager.LoseNode(s.node)
		h.logf("agent %s is stopping: no more work goes to it", s.name)
	}
	s.mu.Lock()
	s.leaving = true
	s.mu.Unlock()
}

// live returns node index's current session, or an error wrapping
// workers.ErrNodeLost.
func (h *Head) live(index int) (*session, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := h.agents[index]
	if a == nil {
		return nil, fmt.Errorf("node %d is no agent's", index)
	}
	if a.session == nil {
		return nil, &workers.NodeLostError{Node: a.name, Cause: errors.New("no agent serves it now")}
	}
	return a.session, nil
}

// sessionOf returns the live session a file transfer names.
func (h *Head) sessionOf(ctx context.Context) (*session, uint64, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	ids := md.Get("gotune-session")
	if len(ids) != 1 {
		return nil, 0, status.Error(codes.InvalidArgument, "no session named")
	}
	h.mu.Lock()
	s := h.sessions[ids[0]]
	h.mu.Unlock()
	if s == nil {
		return nil, 0, status.Error(codes.NotFound, "no such session: it has ended")
	}
	var req uint64
	if v := md.Get("gotune-request"); len(v) == 1 {
		req, _ = strconv.ParseUint(v[0], 10, 64)
	}
	return s, req, nil
}

// learnHost takes the address an agent reached the head at as the head's
// host when none was given.
func (h *Head) learnHost(ctx context.Context) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.LocalAddr == nil {
		return
	}
	tcp, ok := p.LocalAddr.(*net.TCPAddr)
	if !ok {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.host == "" {
		h.host = tcp.IP.String()
	}
}

// headServer implements the gRPC service.
type headServer struct {
	agentpb.UnimplementedHeadServer
	h *Head
}

func (hs *headServer) Session(stream agentpb.Head_SessionServer) error {
	h := hs.h
	if err := h.enter(); err != nil {
		return err
	}
	defer h.wg.Done()
	first, err := recvWithin(stream, h.cfg.Timeout, "Join")
	if err != nil {
		return err
	}
	join := first.GetJoin()
	if join == nil || join.Node == nil {
		return status.Error(codes.InvalidArgument, "a session starts with a Join")
	}
	if join.Version != protocolVersion {
		return status.Errorf(codes.FailedPrecondition, "the agent speaks protocol %d, the head %d: run the same gotune version on both", join.Version, protocolVersion)
	}
	node := nodeFromPB(join.Node)
	if err := node.Validate(); err != nil {
		return status.Errorf(codes.InvalidArgument, "the agent's node: %v", err)
	}
	h.learnHost(stream.Context())
	host := join.Host
	if host == "" {
		if p, ok := peer.FromContext(stream.Context()); ok {
			if tcp, ok := p.Addr.(*net.TCPAddr); ok {
				host = tcp.IP.String()
			}
		}
	}
	if err := h.require(stream, node, host); err != nil {
		return err
	}
	s := newSession(h, host, join.Shared)
	if err := h.attach(s, node, host); err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	interval := heartbeatInterval(h.cfg.Timeout)
	if err := stream.Send(&agentpb.HeadMessage{Msg: &agentpb.HeadMessage_Welcome{Welcome: &agentpb.Welcome{
		Session: s.id, Name: s.name,
		HeartbeatMillis: interval.Milliseconds(), TimeoutMillis: h.cfg.Timeout.Milliseconds(),
	}}}); err != nil {
		s.end(fmt.Errorf("welcome: %w", err))
	}
	s.run(stream, interval)
	cause := context.Cause(s.ctx)
	h.detach(s)
	s.failAll(cause)
	s.mu.Lock()
	left := s.leaving
	s.mu.Unlock()
	if left {
		h.logf("agent %s left", s.name)
	} else {
		h.logf("agent %s lost: %v", s.name, cause)
	}
	return status.Error(codes.Unavailable, cause.Error())
}

// require asks a joining agent for the sweep's programs and refuses its
// node when it lacks one, before the node takes any work.
func (h *Head) require(stream agentpb.Head_SessionServer, n workers.Node, host string) error {
	if len(h.cfg.Programs) == 0 {
		return nil
	}
	if err := stream.Send(&agentpb.HeadMessage{Msg: &agentpb.HeadMessage_Require{Require: &agentpb.Require{Programs: h.cfg.Programs}}}); err != nil {
		return err
	}
	m, err := recvWithin(stream, h.cfg.Timeout, "Lacks")
	if err != nil {
		return err
	}
	lacks := m.GetLacks()
	if lacks == nil {
		return status.Errorf(codes.InvalidArgument, "a Require is answered by a Lacks, not %T", m.Msg)
	}
	if len(lacks.Programs) == 0 {
		return nil
	}
	missing := make([]string, len(lacks.Programs))
	for i, p := range lacks.Programs {
		missing[i] = strconv.Quote(workers.Printable(p, 200, false))
	}
	msg := fmt.Sprintf("node %s (%s) lacks the sweep's program %s: install it there, or leave that node out", workers.Printable(n.Name, workers.MaxNodeName, false), host, strings.Join(missing, ", "))
	h.logf("agent refused: %s", msg)
	return status.Error(codes.FailedPrecondition, msg)
}

// recvWithin receives the next message of a stream, failing after d
// without the message it names.
func recvWithin(stream agentpb.Head_SessionServer, d time.Duration, what string) (*agentpb.AgentMessage, error) {
	type got struct {
		m   *agentpb.AgentMessage
		err error
	}
	ch := make(chan got, 1)
	go func() {
		m, err := stream.Recv()
		ch <- got{m, err}
	}()
	select {
	case g := <-ch:
		return g.m, g.err
	case <-time.After(d):
		return nil, status.Errorf(codes.DeadlineExceeded, "no %s in time", what)
	}
}

func (hs *headServer) PutFiles(stream agentpb.Head_PutFilesServer) error {
	if err := hs.h.enter(); err != nil {
		return err
	}
	defer hs.h.wg.Done()
	s, req, err := hs.h.sessionOf(stream.Context())
	if err != nil {
		return err
	}
	f := s.takeFetch(req)
	if f == nil {
		return status.Errorf(codes.NotFound, "no transfer %d is awaited", req)
	}
	err = receiveDir(f.dest, stream.Recv)
	f.finish(err)
	if err != nil {
		return status.Errorf(codes.Aborted, "receive %s: %v", f.dest, err)
	}
	return stream.SendAndClose(&agentpb.PutFilesReply{})
}

func (hs *headServer) GetFiles(req *agentpb.GetFilesRequest, stream agentpb.Head_GetFilesServer) error {
	if err := hs.h.enter(); err != nil {
		return err
	}
	defer hs.h.wg.Done()
	s, _, err := hs.h.sessionOf(stream.Context())
	if err != nil {
		return err
	}
	dir, ok := s.offered(req.Key)
	if !ok {
		return status.Errorf(codes.NotFound, "no folder is offered as %q", req.Key)
	}
	if err := sendDir(dir, stream.Send); err != nil {
		return status.Errorf(codes.Aborted, "send %s: %v", dir, err)
	}
	return nil
}

// protocolVersion is the version of agent.proto both sides speak.
const protocolVersion = 3

// count writes n things, as in "1 agent" or "2 agents".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// printableLogf wraps logf so that every line it logs is printable and at
// most workers.MaxLogLine bytes long, whatever peers put in it.
func printableLogf(logf func(string, ...any)) func(string, ...any) {
	return func(format string, args ...any) {
		logf("%s", workers.Printable(fmt.Sprintf(format, args...), workers.MaxLogLine, false))
	}
}

// absUnder is dir made absolute against the folder wd.
func absUnder(wd, dir string) string {
	if filepath.IsAbs(dir) {
		return dir
	}
	return filepath.Join(wd, dir)
}

// heartbeatInterval is how often each side of a session sends a heartbeat
// when the other gives up after timeout.
func heartbeatInterval(timeout time.Duration) time.Duration {
	return max(timeout/4, time.Millisecond)
}

func nodeFromPB(p *agentpb.Node) workers.Node {
	n := workers.Node{Name: p.Name, CPUs: p.Cpus, Memory: workers.Bytes(p.MemoryBytes), GPUNote: p.GpuNote}
	for _, g := range p.Gpus {
		n.GPUs = append(n.GPUs, workers.GPU{Index: int(g.Index), MIG: int(g.Mig), UUID: g.Uuid, Name: g.Name, Memory: workers.Bytes(g.MemoryBytes)})
	}
	return n
}

func nodeToPB(n workers.Node) *agentpb.Node {
	p := &agentpb.Node{Name: n.Name, Cpus: n.CPUs, MemoryBytes: int64(n.Memory), GpuNote: n.GPUNote}
	for _, g := range n.GPUs {
		p.Gpus = append(p.Gpus, &agentpb.GPU{Index: int32(g.Index), Mig: int32(g.MIG), Uuid: g.UUID, Name: g.Name, MemoryBytes: int64(g.Memory)})
	}
	return p
}

// randomID is 16 random bytes in hex: a session's id, a folder's key.
func randomID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}
