package allreduce

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"strings"
	"sync"
)

// Ranks on one host connect through Unix-domain sockets rather than TCP:
// the frames and the failure handling are the same, the kernel moves the
// bytes at about twice the rate of TCP loopback, and the socket can hand
// over a shared-memory file for large frames (see shareSlots). Each
// rank listens on an abstract socket (no file to clean up) besides its TCP
// port and advertises it, with its host key, as its local endpoint; a rank
// whose host key matches dials that socket, and falls back to TCP when it
// cannot.

// hostKey identifies this host and network namespace: the kernel's boot id
// and the namespace's inode, the scope in which an abstract Unix socket can
// be reached. It is "" where they cannot be read (not Linux), which turns
// local endpoints off.
var hostKey = sync.OnceValue(func() string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	ns, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(boot)) + "/" + ns
})

// listenLocal listens on a fresh abstract Unix socket and returns it with
// its local endpoint, "<host key> <socket name>"; ok is false when this
// host offers none.
func listenLocal() (ln net.Listener, endpoint string, ok bool) {
	key := hostKey()
	if key == "" {
		return nil, "", false
	}
	var id [8]byte
	rand.Read(id[:])
	name := "@gotune-allreduce-" + hex.EncodeToString(id[:])
	ln, err := net.Listen("unix", name)
	if err != nil {
		return nil, "", false
	}
	return ln, key + " " + name, true
}

// localSocket returns the socket name of a local endpoint when it is on
// this host (and network namespace).
func localSocket(endpoint string) (string, bool) {
	key, name, ok := strings.Cut(endpoint, " ")
	if !ok || key == "" || key != hostKey() {
		return "", false
	}
	return name, true
}
