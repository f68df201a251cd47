package workers

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortStaysOutOfTheEphemeralRange: the ports handed out lie below
// the kernel's ephemeral range (so no port-0 bind or outgoing connection
// takes one before its worker listens), are free, and differ from each
// other, also while the first ones are still unused.
func TestFreePortStaysOutOfTheEphemeralRange(t *testing.T) {
	low, high := namedPortRange()
	seen := map[int]bool{}
	for range 200 {
		port, err := freePort("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if port < low || port >= high {
			t.Errorf("port %d outside [%d, %d)", port, low, high)
		}
		if seen[port] {
			t.Errorf("port %d handed out twice", port)
		}
		seen[port] = true
	}
	// A port some other program holds is never handed out.
	held, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(low))
	if err != nil {
		t.Skipf("cannot hold port %d: %v", low, err)
	}
	defer held.Close()
	for range 200 {
		port, err := freePort("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if port == low {
			t.Errorf("port %d is held, yet handed out", low)
		}
	}
}
