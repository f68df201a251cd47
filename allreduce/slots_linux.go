package allreduce

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// Ranks joined through a Unix-domain socket share memory too: the sending
// rank of each connection creates a few slots in an anonymous shared file
// (memfd) and hands its descriptor over the socket. A large frame is then
// copied into a free slot and only its header goes through the socket; the
// receiving rank adds (or copies) the frame straight out of the slot and
// hands the slot back with a one-byte credit on the same socket, in the
// other direction. That halves the copies a frame costs (the kernel copies
// a socket's bytes twice) and leaves one small system call per frame.

// slotCount is how many slots a sender may fill before the receiver hands
// one back: enough for the ring's columns in flight and some slack.
const slotCount = 4

// slotMsgLen is the length of the set-up message a sending rank writes on
// a Unix-domain connection before anything else: 'M', the slot count and
// the slot size (little-endian uint32s), with the memfd's descriptor
// attached; or 'N' and zeros when it offers no slots.
const slotMsgLen = 9

// slotRing is the slots one connection shares, as one side maps them.
type slotRing struct {
	mem  []byte
	size int // bytes per slot
}

func (r *slotRing) slot(i int) []byte {
	i %= len(r.mem) / r.size
	return r.mem[i*r.size : (i+1)*r.size]
}

// mapSlots maps fd's slots and arranges for them to be unmapped once the
// ring is unreachable (a Comm may be closed while a collective that uses
// them is still returning).
func mapSlots(fd, count, size, prot int) (*slotRing, error) {
	mem, err := unix.Mmap(fd, 0, count*size, prot, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	r := &slotRing{mem: mem, size: size}
	runtime.AddCleanup(r, func(mem []byte) { unix.Munmap(mem) }, mem)
	return r, nil
}

// offerSlots creates slotCount slots of size bytes for the rank at the other
// end of conn and sends their descriptor, or a refusal when they cannot be
// made. It returns the sender's mapping, nil when it offers none.
func offerSlots(conn *net.UnixConn, size int) (*slotRing, error) {
	msg := make([]byte, slotMsgLen)
	msg[0] = 'N'
	var ring *slotRing
	var oob []byte
	if fd, err := unix.MemfdCreate("gotune-allreduce", unix.MFD_CLOEXEC); err == nil {
		defer unix.Close(fd)
		if unix.Ftruncate(fd, int64(slotCount*size)) == nil {
			if r, err := mapSlots(fd, slotCount, size, unix.PROT_READ|unix.PROT_WRITE); err == nil {
				ring, oob = r, unix.UnixRights(fd)
				msg[0] = 'M'
				binary.LittleEndian.PutUint32(msg[1:], slotCount)
				binary.LittleEndian.PutUint32(msg[5:], uint32(size))
			}
		}
	}
	if _, _, err := conn.WriteMsgUnix(msg, oob, nil); err != nil {
		return nil, err
	}
	return ring, nil
}

// acceptSlots reads the set-up message the rank at the other end of conn
// sent, and maps the slots it offers; nil when it offers none.
func acceptSlots(conn *net.UnixConn) (*slotRing, error) {
	msg := make([]byte, slotMsgLen)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := conn.ReadMsgUnix(msg, oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	if cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range cmsgs {
			if got, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, got...)
			}
		}
	}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	if n < slotMsgLen {
		if _, err := io.ReadFull(conn, msg[n:]); err != nil {
			return nil, err
		}
	}
	count, size := int(binary.LittleEndian.Uint32(msg[1:])), int(binary.LittleEndian.Uint32(msg[5:]))
	switch {
	case msg[0] == 'N':
		return nil, nil
	case msg[0] != 'M' || len(fds) != 1 || count < 1 || count > 64 || size < 1 || size > 1<<30:
		return nil, fmt.Errorf("bad shared-memory offer % x with %d descriptors", msg, len(fds))
	}
	return mapSlots(fds[0], count, size, unix.PROT_READ)
}

// shareSlots sets up the slots of both of this rank's connections that are
// Unix-domain ones, before any frame goes through them: it offers slots to
// the next rank and maps those the previous rank offers.
func (c *tcpComm) shareSlots(deadline time.Time) error {
	size := (c.chunk + 2*64 + 63) &^ 63 // a frame's payload, rounded up
	if next, ok := c.next.(*net.UnixConn); ok {
		next.SetWriteDeadline(deadline)
		out, err := offerSlots(next, size)
		next.SetWriteDeadline(time.Time{})
		if err != nil {
			return broken(err, "allreduce: rank %d: offering shared memory to rank %d", c.rank, (c.rank+1)%c.size)
		}
		if out != nil {
			c.out, c.free, c.noCredits = out, make(chan struct{}, len(out.mem)/out.size), make(chan struct{})
			for range cap(c.free) {
				c.free <- struct{}{}
			}
		}
	}
	if prev, ok := c.prev.(*net.UnixConn); ok {
		prev.SetReadDeadline(deadline)
		in, err := acceptSlots(prev)
		prev.SetReadDeadline(time.Time{})
		if err != nil {
			return broken(err, "allreduce: rank %d: taking shared memory from rank %d", c.rank, mod(c.rank-1, c.size))
		}
		c.in = in
	}
	return nil
}

// readCredits runs while this rank sends through slots: every byte the next
// rank sends back hands one slot back. When the connection ends it closes
// noCredits; the Comm fails only when it next sends, as over a socket
// alone, since the next rank may have closed after a complete collective.
func (c *tcpComm) readCredits() {
	defer c.wg.Done()
	defer close(c.noCredits)
	var b [64]byte
	for {
		n, err := c.next.Read(b[:])
		for range n {
			select {
			case c.free <- struct{}{}:
			default:
				c.fail(fmt.Errorf("allreduce: rank %d: rank %d handed back more shared-memory slots than it was given", c.rank, (c.rank+1)%c.size))
				return
			}
		}
		if err != nil {
			return
		}
	}
}
