package allreduce

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// FuzzReadHello feeds arbitrary bytes to the ring handshake's parser, which
// reads whatever connects to a rank's port: it must not panic, and what it
// accepts must encode back to the same bytes.
func FuzzReadHello(f *testing.F) {
	f.Add(hello("trial-7", 3, 8))
	f.Add(hello("", 0, 1))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add(hello("g", 1, 2)[:15])
	f.Fuzz(func(t *testing.T, b []byte) {
		group, rank, size, err := readHello(bytes.NewReader(b))
		if err != nil {
			return
		}
		if enc := hello(group, rank, size); !bytes.HasPrefix(b, enc) {
			t.Fatalf("parsed %q as (%q, %d, %d), which encodes as %q", b, group, rank, size, enc)
		}
	})
}

// TestRendezvousSurvivesGarbage checks that connections that do not speak
// the protocol do not disturb the service.
func TestRendezvousSurvivesGarbage(t *testing.T) {
	rv, err := NewRendezvous("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer rv.Close()
	for _, junk := range []string{"garbage\n", `{"group":"g","rank":5,"size":2,"addr":"x"}` + "\n", `{"group":1}`} {
		conn, err := net.Dial("tcp", rv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		conn.Write([]byte(junk))
		conn.Close()
	}
	comms := make([]Comm, 2)
	for rank, err := range parallel(2, func(rank int) (err error) {
		comms[rank], err = JoinTCP(context.Background(), TCPConfig{Rendezvous: rv.Addr(), Group: "g", Rank: rank, Size: 2})
		return err
	}) {
		if err != nil {
			t.Fatalf("rank %d: %v", rank, err)
		}
	}
	defer closeAll(comms)
	each(t, comms, "allreduce", checkedSum)
}

// TestStrayConnectionsAreIgnored connects to a rank's TCP port and its
// local socket with junk and with hellos of other groups and ranks, as a
// port scanner or a stale rank might, before its real predecessor arrives
// through the local socket: only the predecessor is accepted.
func TestStrayConnectionsAreIgnored(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	local, endpoint, ok := listenLocal()
	if !ok {
		t.Fatal("no local socket on this host")
	}
	name, ok := localSocket(endpoint)
	if !ok {
		t.Fatalf("this host's endpoint %q is not on this host", endpoint)
	}
	lns := []net.Listener{ln, local}
	defer closeListeners(lns)
	c := &tcpComm{rank: 1, size: 3, group: "g"}
	type result struct {
		conn net.Conn
		err  error
	}
	accepted := make(chan result, 1)
	go func() {
		conn, err := c.acceptPrev(lns, 0, "rank 0's address", time.Now().Add(time.Minute))
		accepted <- result{conn, err}
	}()
	var strays []net.Conn
	for _, junk := range [][]byte{[]byte("SSH-2.0-OpenSSH\r\n"), hello("other", 0, 3), hello("g", 2, 3), hello("g", 0, 4)} {
		for _, to := range []struct{ network, addr string }{{"tcp", ln.Addr().String()}, {"unix", name}} {
			conn, err := net.Dial(to.network, to.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.Write(junk)
			strays = append(strays, conn)
		}
	}
	conn, err := net.Dial("unix", name)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write(hello("g", 0, 3))
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil || b[0] != helloOK {
		t.Fatalf("the real predecessor got %v, %v; want the OK byte", b, err)
	}
	r := <-accepted
	if r.err != nil {
		t.Fatal(r.err)
	}
	r.conn.Close()
	for i, conn := range strays {
		if n, _ := conn.Read(b[:]); n != 0 {
			t.Errorf("stray %d was answered %v", i, b)
		}
	}
}

// TestLocalEndpoints checks which endpoints count as this host's: only
// those with this host's key, so ranks in other hosts or network
// namespaces fall back to TCP.
func TestLocalEndpoints(t *testing.T) {
	key := hostKey()
	if key == "" {
		t.Fatal("no host key: /proc is needed to tell ranks on this host")
	}
	for _, tc := range []struct {
		endpoint string
		want     bool
	}{
		{key + " @gotune-allreduce-1", true},
		{"", false},
		{"@gotune-allreduce-1", false},
		{" @gotune-allreduce-1", false},
		{"00000000-0000-0000-0000-000000000000/net:[1] @gotune-allreduce-1", false},
	} {
		name, ok := localSocket(tc.endpoint)
		if ok != tc.want || (ok && name != "@gotune-allreduce-1") {
			t.Errorf("localSocket(%q) = %q, %v; want ok %v", tc.endpoint, name, ok, tc.want)
		}
	}
}
