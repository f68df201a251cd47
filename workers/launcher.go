package workers

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
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
