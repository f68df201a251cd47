package allreduce

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"
)

// Rendezvous is the service through which the ranks of TCP groups find each
// other: a driver (the tuner) runs one for all its trials, and each rank
// joins with its group's name, its rank and the group's size (JoinTCP).
// Once every rank of a group has joined, each gets the others' addresses and
// the group is forgotten, so its name may form a group again (a restarted
// trial). Any number of groups form concurrently.
type Rendezvous struct {
	ln net.Listener

	mu     sync.Mutex
	groups map[string]*rvGroup
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// rvGroup is a group that is forming.
type rvGroup struct {
	size    int
	members map[int]*rvMember
}

type rvMember struct {
	conn  net.Conn
	addr  string
	local string
}

// joinMsg is what a rank sends the rendezvous: one JSON line.
type joinMsg struct {
	Group string `json:"group"`
	Rank  int    `json:"rank"`
	Size  int    `json:"size"`
	Addr  string `json:"addr"`
	// Local is where ranks on the same host may connect instead (see
	// listenLocal); empty when the rank offers none.
	Local string `json:"local,omitempty"`
}

// rvMsg is what the rendezvous answers, one JSON line at a time: the ranks
// that have arrived so far, whenever that changes; then either every rank's
// address (the group has formed) or an error.
type rvMsg struct {
	Arrived []int    `json:"arrived,omitempty"`
	Addrs   []string `json:"addrs,omitempty"`
	Locals  []string `json:"locals,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// rvWriteTimeout bounds how long the service waits on a rank reading its
// answer, and rvJoinTimeout how long on a new connection sending its join.
const (
	rvWriteTimeout = 10 * time.Second
	rvJoinTimeout  = 10 * time.Second
)

// NewRendezvous starts a rendezvous service listening on addr, such as
// "127.0.0.1:0" (port 0 picks a free port; Addr tells which). It serves until
// Close.
func NewRendezvous(addr string) (*Rendezvous, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("allreduce: rendezvous cannot listen on %s: %w", addr, err)
	}
	r := &Rendezvous{ln: ln, groups: map[string]*rvGroup{}, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// Addr is the host:port the service listens on, for TCPConfig.Rendezvous.
func (r *Rendezvous) Addr() string { return r.ln.Addr().String() }

// Close stops the service: ranks still waiting for their group fail. It
// waits for the service's goroutines to end and returns nil.
func (r *Rendezvous) Close() error {
	r.mu.Lock()
	r.closed = true
	r.ln.Close()
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
	return nil
}

func (r *Rendezvous) accept() {
	defer r.wg.Done()
	for {
		conn, err := r.ln.Accept()
		if err != nil {
			if isTimeout(err) {
				continue
			}
			return // closed
		}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			conn.Close()
			return
		}
		r.conns[conn] = struct{}{}
		r.wg.Add(1)
		r.mu.Unlock()
		go r.serve(conn)
	}
}

// serve handles one rank's join, then holds its connection until the group
// forms or the rank goes away.
func (r *Rendezvous) serve(conn net.Conn) {
	defer r.wg.Done()
	defer func() {
		r.mu.Lock()
		delete(r.conns, conn)
		r.mu.Unlock()
		conn.Close()
	}()
	conn.SetReadDeadline(time.Now().Add(rvJoinTimeout))
	var j joinMsg
	if err := json.NewDecoder(conn).Decode(&j); err != nil {
		return
	}
	conn.SetReadDeadline(time.Time{})
	m := &rvMember{conn: conn, addr: j.Addr, local: j.Local}
	if err := r.join(j, m); err != nil {
		send(conn, rvMsg{Error: err.Error()})
		return
	}
	// The rank sends nothing more: a read ends when the rank goes away or
	// the group has formed and its connection is closed.
	io.Copy(io.Discard, conn)
	r.leave(j.Group, j.Rank, m)
}

// join adds m to its group, and tells every member who has arrived, or
// everyone's address when the group is complete.
func (r *Rendezvous) join(j joinMsg, m *rvMember) error {
	if j.Group == "" || j.Size < 1 || j.Rank < 0 || j.Rank >= j.Size || j.Addr == "" {
		return fmt.Errorf("invalid join: group %q, rank %d, size %d, address %q", j.Group, j.Rank, j.Size, j.Addr)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.groups[j.Group]
	if g == nil {
		g = &rvGroup{size: j.Size, members: map[int]*rvMember{}}
		r.groups[j.Group] = g
	}
	if g.size != j.Size {
		return fmt.Errorf("rank %d joined group %q as one of %d ranks, but the ranks already there expect %d; give every rank the same size", j.Rank, j.Group, j.Size, g.size)
	}
	if prior, ok := g.members[j.Rank]; ok {
		return fmt.Errorf("rank %d of group %q has already joined from %s; give every rank of a group a different rank", j.Rank, j.Group, prior.addr)
	}
	g.members[j.Rank] = m
	if len(g.members) < g.size {
		g.tell(rvMsg{Arrived: g.arrived()})
		return nil
	}
	addrs, locals := make([]string, g.size), make([]string, g.size)
	for rank, m := range g.members {
		addrs[rank], locals[rank] = m.addr, m.local
	}
	g.tell(rvMsg{Addrs: addrs, Locals: locals})
	for _, m := range g.members {
		m.conn.Close()
	}
	delete(r.groups, j.Group)
	return nil
}

// leave removes a rank that went away before its group formed.
func (r *Rendezvous) leave(group string, rank int, m *rvMember) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.groups[group]
	if g == nil || g.members[rank] != m {
		return
	}
	delete(g.members, rank)
	if len(g.members) == 0 {
		delete(r.groups, group)
		return
	}
	g.tell(rvMsg{Arrived: g.arrived()})
}

func (g *rvGroup) arrived() []int {
	ranks := make([]int, 0, len(g.members))
	for rank := range g.members {
		ranks = append(ranks, rank)
	}
	slices.Sort(ranks)
	return ranks
}

// tell sends msg to every member; a member that cannot take it is dropped
// when its connection fails.
func (g *rvGroup) tell(msg rvMsg) {
	for _, m := range g.members {
		send(m.conn, msg)
	}
}

func send(conn net.Conn, msg rvMsg) {
	conn.SetWriteDeadline(time.Now().Add(rvWriteTimeout))
	if err := json.NewEncoder(conn).Encode(msg); err != nil {
		conn.Close()
	}
}

// peer is where a rank of a formed group listens: its TCP address and,
// when it offers one, its same-host endpoint (listenLocal).
type peer struct {
	addr, local string
}

// rendezvous joins cfg's group at the rendezvous service, advertising this
// rank's addresses, and returns every rank's once the group has formed.
func rendezvous(ctx context.Context, cfg TCPConfig, self peer, deadline time.Time, timeout time.Duration) ([]peer, error) {
	d := net.Dialer{Deadline: deadline}
	conn, err := d.DialContext(ctx, "tcp", cfg.Rendezvous)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("allreduce: rank %d of group %q: %w", cfg.Rank, cfg.Group, ctx.Err())
		}
		return nil, fmt.Errorf("allreduce: rank %d of group %q cannot reach the rendezvous at %s: %w; check that the driver is running and that this node can reach that address", cfg.Rank, cfg.Group, cfg.Rendezvous, err)
	}
	defer conn.Close()
	conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()

	if err := json.NewEncoder(conn).Encode(joinMsg{Group: cfg.Group, Rank: cfg.Rank, Size: cfg.Size, Addr: self.addr, Local: self.local}); err != nil {
		return nil, fmt.Errorf("allreduce: rank %d of group %q: sending its join to the rendezvous at %s: %w", cfg.Rank, cfg.Group, cfg.Rendezvous, err)
	}
	dec := json.NewDecoder(conn)
	arrived := []int{cfg.Rank}
	for {
		var m rvMsg
		err := dec.Decode(&m)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return nil, fmt.Errorf("allreduce: rank %d of group %q left the rendezvous: %w", cfg.Rank, cfg.Group, ctx.Err())
		case isTimeout(err):
			return nil, fmt.Errorf("allreduce: group %q did not form within %v: %s never joined the rendezvous at %s; check that those workers started, that they were given this rendezvous address and group name, and that they can reach it",
				cfg.Group, timeout, missing(arrived, cfg.Size), cfg.Rendezvous)
		default:
			return nil, fmt.Errorf("allreduce: rank %d of group %q lost the rendezvous at %s: %w; was the driver stopped?", cfg.Rank, cfg.Group, cfg.Rendezvous, err)
		}
		switch {
		case m.Error != "":
			return nil, fmt.Errorf("allreduce: the rendezvous at %s refused rank %d: %s", cfg.Rendezvous, cfg.Rank, m.Error)
		case m.Addrs != nil:
			if len(m.Addrs) != cfg.Size || (m.Locals != nil && len(m.Locals) != cfg.Size) {
				return nil, fmt.Errorf("allreduce: the rendezvous at %s sent %d addresses for a group of %d", cfg.Rendezvous, len(m.Addrs), cfg.Size)
			}
			peers := make([]peer, cfg.Size)
			for rank, addr := range m.Addrs {
				peers[rank].addr = addr
				if m.Locals != nil {
					peers[rank].local = m.Locals[rank]
				}
			}
			return peers, nil
		}
		arrived = m.Arrived
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// missing describes the ranks of [0, size) not in arrived.
func missing(arrived []int, size int) string {
	var ranks []string
	for r := range size {
		if !slices.Contains(arrived, r) {
			ranks = append(ranks, fmt.Sprint(r))
		}
	}
	if len(ranks) == 1 {
		return fmt.Sprintf("rank %s of %d", ranks[0], size)
	}
	return fmt.Sprintf("ranks %s of %d", strings.Join(ranks, ", "), size)
}

// The handshake on a ring connection: the dialing rank sends a hello, the
// accepting one answers a single helloOK byte if it is the rank's expected
// predecessor in the same group.
const (
	helloMagic   = "gotuneAR"
	helloVersion = 1
	helloOK      = 1
)

func hello(group string, rank, size int) []byte {
	b := []byte(helloMagic)
	b = binary.LittleEndian.AppendUint16(b, helloVersion)
	b = binary.NativeEndian.AppendUint16(b, 0x0102) // byte-order probe
	b = binary.LittleEndian.AppendUint32(b, uint32(rank))
	b = binary.LittleEndian.AppendUint32(b, uint32(size))
	b = binary.LittleEndian.AppendUint16(b, uint16(len(group)))
	return append(b, group...)
}

// readHello reads a hello and returns the sender's group, rank and size.
func readHello(r io.Reader) (group string, rank, size int, err error) {
	var h [len(helloMagic) + 14]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return "", 0, 0, err
	}
	if string(h[:8]) != helloMagic || binary.LittleEndian.Uint16(h[8:]) != helloVersion {
		return "", 0, 0, errors.New("not a gotune allreduce peer of this version")
	}
	if binary.NativeEndian.Uint16(h[10:]) != 0x0102 {
		return "", 0, 0, errors.New("the peer's byte order differs from this machine's; mixed-endian groups are not supported")
	}
	g := make([]byte, binary.LittleEndian.Uint16(h[20:]))
	if _, err := io.ReadFull(r, g); err != nil {
		return "", 0, 0, err
	}
	return string(g), int(binary.LittleEndian.Uint32(h[12:])), int(binary.LittleEndian.Uint32(h[16:])), nil
}

// connect dials the next rank and accepts the previous one on any of lns.
func (c *tcpComm) connect(ctx context.Context, lns []net.Listener, peers []peer, deadline time.Time) error {
	next, prev := (c.rank+1)%c.size, mod(c.rank-1, c.size)
	type result struct {
		conn net.Conn
		err  error
	}
	dialed, accepted := make(chan result, 1), make(chan result, 1)
	go func() {
		conn, err := c.dial(ctx, peers[next], next, deadline)
		dialed <- result{conn, err}
	}()
	go func() {
		conn, err := c.acceptPrev(lns, prev, peers[prev].addr, deadline)
		accepted <- result{conn, err}
	}()
	stop := context.AfterFunc(ctx, func() { closeListeners(lns) })
	defer stop()
	d, a := <-dialed, <-accepted
	if d.err != nil || a.err != nil {
		for _, r := range []result{d, a} {
			if r.conn != nil {
				r.conn.Close()
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("allreduce: rank %d of group %q: %w", c.rank, c.group, ctx.Err())
		}
		return errors.Join(d.err, a.err)
	}
	c.next, c.prev = d.conn, a.conn
	return nil
}

func closeListeners(lns []net.Listener) {
	for _, ln := range lns {
		ln.Close()
	}
}

// dial connects to rank peer and introduces this rank: through the peer's
// local endpoint when it is on this host, else (or when that fails) over TCP.
func (c *tcpComm) dial(ctx context.Context, p peer, peer int, deadline time.Time) (net.Conn, error) {
	d := net.Dialer{Deadline: deadline}
	if name, ok := localSocket(p.local); ok {
		if conn, err := d.DialContext(ctx, "unix", name); err == nil {
			if conn, err := c.introduce(conn, name, peer, deadline); err == nil {
				return conn, nil
			}
		}
	}
	conn, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, fmt.Errorf("allreduce: rank %d of group %q cannot connect to rank %d at %s: %w; check that this node can reach it (firewall, TCPConfig.Host)", c.rank, c.group, peer, p.addr, err)
	}
	return c.introduce(conn, p.addr, peer, deadline)
}

// introduce sends this rank's hello on conn, dialed to rank peer at addr,
// and waits for the peer to accept it; it closes conn when that fails.
func (c *tcpComm) introduce(conn net.Conn, addr string, peer int, deadline time.Time) (net.Conn, error) {
	conn.SetDeadline(deadline)
	var ok [1]byte
	_, err := conn.Write(hello(c.group, c.rank, c.size))
	if err == nil {
		_, err = io.ReadFull(conn, ok[:])
	}
	if err != nil || ok[0] != helloOK {
		conn.Close()
		return nil, fmt.Errorf("allreduce: rank %d of group %q: %s did not accept it as rank %d's predecessor (%v); is another process listening there?", c.rank, c.group, addr, peer, err)
	}
	conn.SetDeadline(time.Time{})
	return conn, nil
}

// acceptPrev waits on lns for rank prev, until the deadline. Connections
// that are not it (junk, other groups, other ranks) are checked
// concurrently, so none can hold up the real one, and closed.
func (c *tcpComm) acceptPrev(lns []net.Listener, prev int, addr string, deadline time.Time) (net.Conn, error) {
	incoming := make(chan net.Conn)
	failed := make(chan error, len(lns))
	done := make(chan struct{})
	for _, ln := range lns {
		ln.(interface{ SetDeadline(time.Time) error }).SetDeadline(deadline)
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					failed <- err
					return
				}
				select {
				case incoming <- conn:
				case <-done:
					conn.Close()
					return
				}
			}
		}()
	}
	winner := make(chan net.Conn, 1)
	var mu sync.Mutex
	pending := map[net.Conn]struct{}{}
	var wg sync.WaitGroup
	defer func() {
		close(done)
		closeListeners(lns) // ends the Accept loops
		mu.Lock()
		for conn := range pending {
			conn.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()
	for stopped := 0; ; {
		var conn net.Conn
		select {
		case w := <-winner:
			return w, nil
		case err := <-failed:
			if stopped++; stopped < len(lns) {
				continue
			}
			select {
			case w := <-winner:
				return w, nil
			default:
			}
			return nil, fmt.Errorf("allreduce: rank %d of group %q: rank %d (%s) did not connect: %w; check that it can reach this node at %s (firewall, TCPConfig.Host)", c.rank, c.group, prev, addr, err, lns[0].Addr())
		case conn = <-incoming:
		}
		mu.Lock()
		pending[conn] = struct{}{}
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn.SetDeadline(deadline)
			group, rank, size, err := readHello(conn)
			ok := err == nil && group == c.group && rank == prev && size == c.size
			mu.Lock()
			delete(pending, conn)
			mu.Unlock()
			if ok {
				if _, err := conn.Write([]byte{helloOK}); err == nil {
					conn.SetDeadline(time.Time{})
					select {
					case winner <- conn:
						return
					default:
					}
				}
			}
			conn.Close()
		}()
	}
}
