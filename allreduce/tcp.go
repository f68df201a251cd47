package allreduce

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// DefaultTimeout is the TCPConfig.Timeout used when it is zero.
const DefaultTimeout = 60 * time.Second

// TCPConfig says how a rank joins a group whose ranks talk over TCP: the
// ranks of one group may be processes of one machine or of several.
type TCPConfig struct {
	// Rendezvous is the host:port of the Rendezvous service the group forms
	// through (the driver's; see NewRendezvous). Required.
	Rendezvous string
	// Group names the group; every rank of the group passes the same name,
	// and concurrent groups on one Rendezvous need different names.
	// Required.
	Group string
	// Rank is this member's index in [0, Size); every rank of the group
	// joins with a different one.
	Rank int
	// Size is the number of ranks in the group, at least 1.
	Size int
	// Host is the address this rank listens on (on an ephemeral port) and
	// that the other ranks connect to. Empty means the local address that
	// routes to the Rendezvous, which is right unless that address is not
	// reachable from the other ranks' nodes.
	Host string
	// Timeout bounds how long forming the group may take, and how long a
	// peer this rank waits on in a collective may stay silent before the
	// collective fails (a live peer sends a heartbeat every Timeout/4, so
	// silence means its process is stopped or its node is gone; a peer that
	// exits is noticed at once). Zero means DefaultTimeout.
	Timeout time.Duration
	// TCPOnly makes ranks on the same host connect over TCP too. By default
	// they connect through Unix-domain sockets and pass large frames
	// through shared memory (see shareSlots), which moves them at over
	// twice the rate of TCP loopback with less than half its CPU; ranks on
	// other hosts (or in other network namespaces) always use TCP.
	TCPOnly bool
}

// JoinTCP joins this rank to the group cfg names and returns its Comm once
// every rank of the group has joined and the ring of connections between
// them is up (over TCP, or Unix-domain sockets and shared memory between
// ranks on one host; see TCPConfig.TCPOnly). It fails when ctx ends or
// after cfg.Timeout, naming the ranks that never arrived.
func JoinTCP(ctx context.Context, cfg TCPConfig) (Comm, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	host := cfg.Host
	if host == "" {
		h, err := routeTo(cfg.Rendezvous)
		if err != nil {
			return nil, err
		}
		host = h
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("allreduce: rank %d cannot listen on %s: %w; set TCPConfig.Host to an address of this node", cfg.Rank, host, err)
	}
	lns := []net.Listener{ln}
	defer func() { closeListeners(lns) }()
	self := peer{addr: ln.Addr().String()}
	if cfg.Size > 1 && !cfg.TCPOnly {
		if local, endpoint, ok := listenLocal(); ok {
			lns, self.local = append(lns, local), endpoint
		}
	}

	peers, err := rendezvous(ctx, cfg, self, deadline, timeout)
	if err != nil {
		return nil, err
	}
	c := &tcpComm{
		rank: cfg.Rank, size: cfg.Size, group: cfg.Group, timeout: timeout,
		chunk: defaultChunk, width: defaultWidth,
		broken: make(chan struct{}),
	}
	if cfg.Size > 1 {
		if err := c.connect(ctx, lns, peers, deadline); err != nil {
			return nil, err
		}
		if err := c.shareSlots(deadline); err != nil {
			c.next.Close()
			c.prev.Close()
			return nil, err
		}
		c.rd = bufio.NewReaderSize(c.prev, readBuffer)
		c.lastWrite.Store(time.Now().UnixNano())
		c.wg.Add(1)
		go c.heartbeat()
		if c.out != nil {
			c.wg.Add(1)
			go c.readCredits()
		}
	}
	return c, nil
}

func (cfg *TCPConfig) validate() error {
	switch {
	case cfg.Rendezvous == "":
		return errors.New("allreduce: TCPConfig.Rendezvous is empty: set it to the driver's rendezvous address (Rendezvous.Addr)")
	case cfg.Group == "":
		return errors.New("allreduce: TCPConfig.Group is empty: give every group a name, the same on all of its ranks")
	case cfg.Size < 1:
		return fmt.Errorf("allreduce: TCPConfig.Size is %d: a group needs at least one rank", cfg.Size)
	case cfg.Rank < 0 || cfg.Rank >= cfg.Size:
		return fmt.Errorf("allreduce: TCPConfig.Rank %d is outside [0, %d)", cfg.Rank, cfg.Size)
	case cfg.Timeout < 0:
		return fmt.Errorf("allreduce: TCPConfig.Timeout %v is negative", cfg.Timeout)
	}
	return nil
}

// routeTo returns the local IP address that routes to addr (host:port).
func routeTo(addr string) (string, error) {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return "", fmt.Errorf("allreduce: no route to the rendezvous %s: %w; check the address, or set TCPConfig.Host", addr, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

const (
	// defaultChunk is about the payload of one frame of a large collective.
	// On loopback between processes, 1 MiB frames cost less CPU per byte
	// than 256 or 512 KiB ones (fewer wakeups and goroutine handoffs) and
	// pipeline better than 2 or 4 MiB ones.
	defaultChunk = 1 << 20
	// defaultWidth is how many columns of a ring collective are in flight.
	defaultWidth = 2
	// readBuffer buffers frame headers; payloads bypass it.
	readBuffer = 8 << 10
)

// tcpComm is one rank of a group connected as a ring: it sends to rank+1
// over next and receives from rank-1 over prev.
type tcpComm struct {
	rank, size int
	group      string
	timeout    time.Duration
	chunk      int // bytes per frame of a large collective
	width      int // columns of a ring collective in flight

	next, prev net.Conn
	rd         *bufio.Reader // reads prev
	wmu        sync.Mutex    // one frame at a time on next
	lastWrite  atomic.Int64  // unix nanoseconds of the last frame sent
	iov        [2][]byte     // a data frame's header and payload, under wmu
	rhdr       [headerLen]byte
	scratch    []float64 // receives frames that are added, not stored
	seq        uint32    // collectives called so far
	busy       atomic.Bool

	// Shared-memory slots between ranks of one host (see shareSlots): out
	// is written for the next rank, free holds a token per slot of out
	// that may be written, and in is read from the previous rank; nil when
	// the connection has none. outN and inN count the frames each way
	// that went through slots. noCredits is closed when the next rank's
	// credits end (its end of the connection closed).
	out, in   *slotRing
	free      chan struct{}
	noCredits chan struct{}
	outN, inN int

	failOnce sync.Once
	err      error         // why the Comm broke; set before broken closes
	broken   chan struct{} // closed when the Comm breaks
	wg       sync.WaitGroup
}

func (c *tcpComm) Rank() int { return c.rank }
func (c *tcpComm) Size() int { return c.size }

// Close breaks the Comm and waits for its heartbeat to stop.
func (c *tcpComm) Close() error {
	c.fail(broken(nil, "allreduce: rank %d closed its Comm", c.rank))
	c.wg.Wait()
	return nil
}

// fail breaks the Comm for err, once: it closes the connections, which ends
// any frame being sent or received.
func (c *tcpComm) fail(err error) {
	c.failOnce.Do(func() {
		c.err = err
		close(c.broken)
		if c.next != nil {
			c.next.Close()
			c.prev.Close()
		}
	})
}

// failure returns why the Comm broke, or nil.
func (c *tcpComm) failure() error {
	select {
	case <-c.broken:
		return c.err
	default:
		return nil
	}
}

// heartbeat sends a ping to the next rank whenever nothing else has been
// sent for a quarter of the timeout, so that the next rank can tell a slow
// peer from a dead one.
func (c *tcpComm) heartbeat() {
	defer c.wg.Done()
	interval := max(c.timeout/4, time.Millisecond)
	t := time.NewTicker(interval)
	defer t.Stop()
	var ping [headerLen]byte
	ping[0] = framePing
	for {
		select {
		case <-c.broken:
			return
		case <-t.C:
		}
		if time.Since(time.Unix(0, c.lastWrite.Load())) < interval {
			continue
		}
		c.wmu.Lock()
		_, err := c.next.Write(ping[:])
		c.wmu.Unlock()
		if err != nil {
			return // the next collective reports the broken connection
		}
		c.lastWrite.Store(time.Now().UnixNano())
	}
}

// Frames: a 24-byte header, then the payload. The header's integers are
// little-endian; payloads are the elements in the machine's byte order,
// which the handshake checks is the same on every rank.
const (
	headerLen = 24
	frameData = 'D'
	framePing = 'P'
	// frameSlot is a data frame whose payload is in the sender's next
	// shared-memory slot rather than after the header.
	frameSlot = 'S'
)

// stream is a collective as two sequences of frames: nOut sent to the next
// rank and nIn received from the previous one.
type stream struct {
	call      call
	nOut, nIn int
	// need returns how many incoming frames must have been handled before
	// outgoing frame k is sent; it must not decrease with k.
	need func(k int) int
	// out returns the payload of outgoing frame k.
	out func(k int) []byte
	// in returns where the payload of incoming frame k goes.
	in func(k int) []byte
	// after, if not nil, handles incoming frame k once it has arrived.
	after func(k int)
	// take, if not nil, handles incoming frame k whose payload arrived in
	// shared memory, src, rather than in in(k): it does what storing src in
	// in(k) and calling after would.
	take func(k int, src []byte)
	// settled, if not nil, returns how many outgoing frames must have been
	// sent before incoming frame k may be stored: those that read the
	// memory it overwrites.
	settled func(k int) int
}

// deliver handles incoming frame k whose payload is src.
func (s *stream) deliver(k int, src []byte) {
	if s.take != nil {
		s.take(k, src)
		return
	}
	copy(s.in(k), src)
	if s.after != nil {
		s.after(k)
	}
}

// run performs one collective: a goroutine sends the outgoing frames as
// their inputs become ready while the caller receives and handles the
// incoming ones.
func (c *tcpComm) run(ctx context.Context, s *stream) error {
	if !c.busy.CompareAndSwap(false, true) {
		return fmt.Errorf("allreduce: rank %d: %v called while another collective is running on the same Comm; a Comm's collectives must be called one at a time", c.rank, s.call)
	}
	defer c.busy.Store(false)
	if err := c.failure(); err != nil {
		return broken(err, "allreduce: rank %d cannot run %v: the group broke earlier", c.rank, s.call)
	}
	c.seq++
	if c.size == 1 {
		return nil
	}
	if ctx.Done() != nil {
		if err := ctx.Err(); err != nil {
			c.fail(fmt.Errorf("allreduce: rank %d left %v: %w", c.rank, s.call, err))
			return c.err
		}
		stop := context.AfterFunc(ctx, func() {
			c.fail(fmt.Errorf("allreduce: rank %d left %v: %w", c.rank, s.call, ctx.Err()))
		})
		defer stop()
	}

	var handled, progress atomic.Int64
	kick := make(chan struct{}, 1)
	sent := make(chan struct{})
	if s.nOut > 0 {
		go func() {
			defer close(sent)
			c.send(s, &handled, kick, &progress)
		}()
	} else {
		close(sent)
	}
	for k := range s.nIn {
		src, err := c.receive(s, k, &progress)
		if err != nil {
			c.fail(err)
			break
		}
		if src != nil {
			s.deliver(k, src)
			// A predecessor that has finished may close before it reads
			// this; one that is gone fails the next receive.
			c.prev.Write(credit[:])
		} else if s.after != nil {
			s.after(k)
		}
		handled.Store(int64(k + 1))
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	<-sent
	return c.failure()
}

// send writes the outgoing frames of s in order, each once the incoming
// frames it needs have been handled. It breaks the Comm when it fails.
// It counts the frames it has sent in progress.
func (c *tcpComm) send(s *stream, handled *atomic.Int64, kick <-chan struct{}, progress *atomic.Int64) {
	var hdr [headerLen]byte
	for k := range s.nOut {
		for need := int64(s.need(k)); handled.Load() < need; {
			select {
			case <-kick:
			case <-c.broken:
				return
			}
		}
		p := s.out(k)
		putHeader(hdr[:], c.seq, s.call, k, len(p))
		if c.out != nil && len(p) > 0 && len(p) <= c.out.size {
			select {
			case <-c.free:
				copy(c.out.slot(c.outN), p)
				c.outN++
				hdr[0], p = frameSlot, nil
			case <-c.noCredits:
				// The next rank closed: send inline, which reports it.
			case <-c.broken:
				return
			}
		}
		c.wmu.Lock()
		c.iov[0], c.iov[1] = hdr[:], p
		bufs := net.Buffers(c.iov[:])
		_, err := bufs.WriteTo(c.next)
		c.iov[0], c.iov[1] = nil, nil
		c.wmu.Unlock()
		if err != nil {
			c.fail(c.connError(err, "sending to", c.rank+1))
			return
		}
		progress.Store(int64(k + 1))
		c.lastWrite.Store(time.Now().UnixNano())
	}
}

// credit is what a rank sends back to hand a shared-memory slot back.
var credit = [1]byte{'C'}

// receive reads incoming frame k of s, skipping pings, and checks that the
// previous rank sent the frame this rank expects. The payload is read into
// s.in(k), or, when the frame came through shared memory, returned as src:
// the slot it is in, which must be handed back once handled. progress
// counts the frames this rank has sent.
func (c *tcpComm) receive(s *stream, k int, progress *atomic.Int64) (src []byte, err error) {
	p := s.in(k)
	for {
		c.prev.SetReadDeadline(time.Now().Add(c.timeout))
		if _, err := io.ReadFull(c.rd, c.rhdr[:]); err != nil {
			return nil, c.connError(err, "receiving from", c.rank-1)
		}
		if c.rhdr[0] == framePing {
			continue
		}
		inSlot := c.rhdr[0] == frameSlot
		if inSlot {
			c.rhdr[0] = frameData
		}
		seq, peer, index, n, err := parseHeader(c.rhdr[:])
		if err != nil {
			return nil, fmt.Errorf("allreduce: rank %d: from rank %d: %w", c.rank, mod(c.rank-1, c.size), err)
		}
		if seq != c.seq || peer != s.call {
			return nil, fmt.Errorf("allreduce: the ranks of the group made different calls: rank %d's collective #%d is %v, rank %d's is #%d %v; every rank must make the same sequence of calls",
				mod(c.rank-1, c.size), seq, peer, c.rank, c.seq, s.call)
		}
		if index != k || n != len(p) {
			return nil, fmt.Errorf("allreduce: rank %d: frame %d of %v from rank %d has %d bytes, want frame %d of %d bytes (ranks on different versions?)",
				c.rank, index, s.call, mod(c.rank-1, c.size), n, k, len(p))
		}
		if s.settled != nil {
			// The frames that read the memory this one overwrites were
			// sent before it came round the ring; loading progress orders
			// that memory for the race detector too.
			for need := int64(s.settled(k)); progress.Load() < need && c.failure() == nil; {
				runtime.Gosched()
			}
		}
		if inSlot {
			if c.in == nil || n > c.in.size {
				return nil, fmt.Errorf("allreduce: rank %d: rank %d sent frame %d of %v through shared memory it did not offer", c.rank, mod(c.rank-1, c.size), k, s.call)
			}
			src = c.in.slot(c.inN)[:n]
			c.inN++
			return src, nil
		}
		if _, err := io.ReadFull(c.rd, p); err != nil {
			return nil, c.connError(err, "receiving from", c.rank-1)
		}
		return nil, nil
	}
}

// connError explains a failed read or write on the connection with peer.
func (c *tcpComm) connError(err error, doing string, peer int) error {
	if prior := c.failure(); prior != nil {
		return prior
	}
	peer = mod(peer, c.size)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return broken(err, "allreduce: rank %d heard nothing from rank %d for %v: its process is stopped or hung, or its node is unreachable", c.rank, peer, c.timeout)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return broken(err, "allreduce: rank %d lost its connection with rank %d, which exited, crashed or closed its Comm", c.rank, peer)
	}
	return broken(err, "allreduce: rank %d: %s rank %d", c.rank, doing, peer)
}

func putHeader(h []byte, seq uint32, cl call, index, n int) {
	h[0] = frameData
	h[1] = byte(cl.kind)
	binary.LittleEndian.PutUint16(h[2:], uint16(cl.param))
	binary.LittleEndian.PutUint32(h[4:], seq)
	binary.LittleEndian.PutUint64(h[8:], uint64(cl.count))
	binary.LittleEndian.PutUint32(h[16:], uint32(index))
	binary.LittleEndian.PutUint32(h[20:], uint32(n))
}

func parseHeader(h []byte) (seq uint32, cl call, index, n int, err error) {
	if h[0] != frameData {
		return 0, call{}, 0, 0, fmt.Errorf("corrupt frame header % x", h)
	}
	cl = call{
		kind:  kind(h[1]),
		param: int(binary.LittleEndian.Uint16(h[2:])),
		count: int(binary.LittleEndian.Uint64(h[8:])),
	}
	return binary.LittleEndian.Uint32(h[4:]), cl, int(binary.LittleEndian.Uint32(h[16:])), int(binary.LittleEndian.Uint32(h[20:])), nil
}

// scratchBytes returns the scratch buffer, grown to at least n bytes.
func (c *tcpComm) scratchBytes(n int) []byte {
	if len(c.scratch)*8 < n {
		c.scratch = make([]float64, (n+7)/8)
	}
	return bytesOf(c.scratch)
}

func (c *tcpComm) Barrier(ctx context.Context) error {
	cl := call{kind: kindBarrier}
	p := &ringPlan{rank: c.rank, size: c.size, steps: c.size - 1, cols: 1, width: 1, elem: 1,
		seg: func(int) (int, int) { return 0, 0 }}
	return c.run(ctx, ringStream(p, cl, nil, nil, nil))
}

func (c *tcpComm) AllReduceFloat64(ctx context.Context, buf []float64, op Op) error {
	return tcpAllReduce(ctx, c, buf, op, kindAllReduce64)
}

func (c *tcpComm) AllReduceFloat32(ctx context.Context, buf []float32, op Op) error {
	return tcpAllReduce(ctx, c, buf, op, kindAllReduce32)
}

func (c *tcpComm) BroadcastFloat64(ctx context.Context, buf []float64, root int) error {
	return tcpBroadcast(ctx, c, buf, root, kindBroadcast64)
}

func (c *tcpComm) BroadcastFloat32(ctx context.Context, buf []float32, root int) error {
	return tcpBroadcast(ctx, c, buf, root, kindBroadcast32)
}

func (c *tcpComm) AllGatherFloat64(ctx context.Context, dst, src []float64) error {
	return tcpAllGather(ctx, c, dst, src, kindAllGather64)
}

func (c *tcpComm) AllGatherFloat32(ctx context.Context, dst, src []float32) error {
	return tcpAllGather(ctx, c, dst, src, kindAllGather32)
}

// ringStream turns a ring plan over buf into a stream; frames that are added
// are received into scratch and then reduced into buf by add.
func ringStream(p *ringPlan, cl call, buf, scratch []byte, add func(dst, src []byte, last bool)) *stream {
	n := p.frames()
	s := &stream{call: cl, nOut: n, nIn: n, need: p.need,
		out: func(k int) []byte {
			lo, hi := p.out(k)
			return buf[lo:hi]
		},
		in: func(k int) []byte {
			lo, hi, added, _ := p.in(k)
			if added {
				return scratch[:hi-lo]
			}
			return buf[lo:hi]
		},
	}
	if add != nil {
		s.after = func(k int) {
			lo, hi, added, last := p.in(k)
			if added {
				add(buf[lo:hi], scratch[:hi-lo], last)
			}
		}
	}
	// An allgather step's frame overwrites the column this rank sent size-1
	// steps earlier, (size-1)·width frames back in the stream.
	s.settled = func(k int) int {
		step, _, width := p.at(k)
		if step < p.size-1 {
			return 0
		}
		return k - (p.size-1)*width + 1
	}
	// A frame in shared memory is added (or stored) straight from there.
	s.take = func(k int, src []byte) {
		lo, hi, added, last := p.in(k)
		if added {
			add(buf[lo:hi], src, last)
		} else {
			copy(buf[lo:hi], src)
		}
	}
	return s
}

func tcpAllReduce[T float](ctx context.Context, c *tcpComm, buf []T, op Op, k kind) error {
	if err := checkOp(op); err != nil {
		return err
	}
	elem := sizeOf[T]()
	n := len(buf)
	maxSeg := (n + c.size - 1) / c.size
	p := &ringPlan{rank: c.rank, size: c.size, steps: 2 * (c.size - 1), reduce: c.size - 1,
		cols: columns(maxSeg, elem, c.chunk), width: c.width, elem: elem,
		seg: func(s int) (int, int) { return segment(n, c.size, s) }}
	scratch := c.scratchBytes((maxSeg/p.cols + 1) * elem)
	size := T(c.size)
	add := func(dst, src []byte, last bool) {
		if last && op == Mean {
			addDivTo(floatsOf[T](dst), floatsOf[T](src), size)
		} else {
			addTo(floatsOf[T](dst), floatsOf[T](src))
		}
	}
	return c.run(ctx, ringStream(p, call{kind: k, param: int(op), count: n}, bytesOf(buf), scratch, add))
}

func tcpAllGather[T float](ctx context.Context, c *tcpComm, dst, src []T, k kind) error {
	if err := checkGather(len(dst), len(src), c.size); err != nil {
		return err
	}
	elem := sizeOf[T]()
	m := len(src)
	copy(dst[c.rank*m:(c.rank+1)*m], src)
	p := &ringPlan{rank: c.rank, size: c.size, steps: c.size - 1,
		cols: columns(m, elem, c.chunk), width: c.width, elem: elem,
		seg: func(s int) (int, int) { return s * m, (s + 1) * m }}
	return c.run(ctx, ringStream(p, call{kind: k, count: m}, bytesOf(dst), nil, nil))
}

func tcpBroadcast[T float](ctx context.Context, c *tcpComm, buf []T, root int, k kind) error {
	if err := checkRoot(root, c.size); err != nil {
		return err
	}
	// A chain from the root round the ring: each rank forwards a frame as
	// soon as it has received it. The last rank then sends the root an empty
	// frame, so that every rank, the root included, checks that its
	// predecessor made the same call.
	b := bytesOf(buf)
	elem := sizeOf[T]()
	cols := columns(len(buf), elem, c.chunk)
	col := func(j int) []byte {
		lo, hi := segment(len(buf), cols, j)
		return b[lo*elem : hi*elem]
	}
	empty := func(int) []byte { return nil }
	s := &stream{call: call{kind: k, param: root, count: len(buf)}, nIn: cols, nOut: cols, out: col, in: col,
		need: func(k int) int { return k + 1 }}
	switch mod(c.rank-root, c.size) {
	case 0:
		s.nIn, s.in = 1, empty
		s.need = func(int) int { return 0 }
	case c.size - 1:
		s.nOut, s.out = 1, empty
		s.need = func(int) int { return cols }
	}
	return c.run(ctx, s)
}
