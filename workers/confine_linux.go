package workers

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A worker process may start processes that leave its process group
// (setsid, a daemon's double fork), which a signal to the group misses. Three
// things find them:
//
//   - a cgroup v2 of its own per worker process, where the system has a
//     cgroup2 file system this process may write to: every descendant stays
//     in it whatever it does, and cgroup.kill ends them all at once;
//   - the mark TagVar in the environment, which descendants inherit: the
//     processes that carry a worker's mark are found in /proc;
//   - Subreap, which makes the launching program adopt the descendants
//     whose parent died, instead of init, so that they are reaped.

// cgroupRoot is the cgroup v2 folder of this process, under which each
// worker process gets a cgroup of its own; "" where there is none, and
// cgroupWhyNot says why.
var (
	cgroupOnce   sync.Once
	cgroupRoot   string
	cgroupWhyNot error
	cgroupSeq    struct {
		sync.Mutex
		n int
	}
)

// findCgroupRoot locates this process's cgroup in a cgroup2 file system:
// the mount point from /proc/self/mountinfo, the path from the "0::" line
// of /proc/self/cgroup.
func findCgroupRoot() (string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	var rel string
	found := false
	for _, line := range strings.Split(string(data), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			rel, found = p, true
		}
	}
	if !found {
		return "", errors.New("this process is in no cgroup v2 hierarchy")
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options... - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(tail) < 1 || tail[0] != "cgroup2" {
			continue
		}
		root := fields[4]
		if fields[3] != "/" {
			// A mount of part of the hierarchy: the path is relative to it.
			r, ok := strings.CutPrefix(rel, fields[3])
			if !ok {
				continue
			}
			return filepath.Join(root, r), nil
		}
		return filepath.Join(root, rel), nil
	}
	return "", errors.New("no cgroup2 file system is mounted")
}

// cgroup is a worker process's own cgroup v2.
type cgroup struct {
	path string
	dir  *os.File // passed to clone3 (SysProcAttr.CgroupFD)
}

// newCgroup creates a cgroup for a worker process below this process's
// own. It fails where the system has no cgroup v2 this process may write to.
func newCgroup() (*cgroup, error) {
	cgroupOnce.Do(func() {
		cgroupRoot, cgroupWhyNot = findCgroupRoot()
		if cgroupWhyNot == nil {
			removeStaleCgroups(cgroupRoot)
		}
	})
	if cgroupWhyNot != nil {
		return nil, cgroupWhyNot
	}
	cgroupSeq.Lock()
	cgroupSeq.n++
	name := fmt.Sprintf("gotune-%d-%d", os.Getpid(), cgroupSeq.n)
	cgroupSeq.Unlock()
	path := filepath.Join(cgroupRoot, name)
	if err := os.Mkdir(path, 0o755); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(path, "cgroup.procs")); err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("%s is not a cgroup v2 folder", cgroupRoot)
	}
	dir, err := os.Open(path)
	if err != nil {
		os.Remove(path)
		return nil, err
	}
	return &cgroup{path: path, dir: dir}, nil
}

// removeStaleCgroups removes the empty cgroups that gotune processes which
// are gone left below root.
func removeStaleCgroups(root string) {
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "gotune-")
		if !ok || !e.IsDir() {
			continue
		}
		owner, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(owner)
		if err != nil || pid == os.Getpid() || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			continue // not gotune's, or its owner may live
		}
		path := filepath.Join(root, e.Name())
		os.WriteFile(filepath.Join(path, "cgroup.kill"), []byte("1"), 0)
		os.Remove(path)
	}
}

// pids lists the processes in the cgroup.
func (c *cgroup) pids() []int {
	data, _ := os.ReadFile(filepath.Join(c.path, "cgroup.procs"))
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// signal sends sig to every process in the cgroup: through cgroup.kill for
// SIGKILL where the kernel has it, one by one otherwise.
func (c *cgroup) signal(sig syscall.Signal) {
	if sig == syscall.SIGKILL && os.WriteFile(filepath.Join(c.path, "cgroup.kill"), []byte("1"), 0) == nil {
		return
	}
	for _, pid := range c.pids() {
		syscall.Kill(pid, sig)
	}
}

// remove deletes the cgroup once its processes are gone, waiting for them
// up to a few seconds after killing them.
func (c *cgroup) remove() {
	c.dir.Close()
	for i := 0; i < 100; i++ {
		if err := os.Remove(c.path); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		c.signal(syscall.SIGKILL)
		time.Sleep(20 * time.Millisecond)
	}
}

// sysProcAttr puts a worker in a process group of its own, and in cg when
// not nil, and has the kernel kill it when the launching process dies.
func sysProcAttr(cg *cgroup) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if cg != nil {
		a.UseCgroupFD, a.CgroupFD = true, int(cg.dir.Fd())
	}
	return a
}

// signalTagged sends sig to every process of this node whose environment
// holds TagVar with a value that match accepts, and returns how many it
// signalled. It reads other users' processes only where it may.
func signalTagged(match func(tag string) bool, sig syscall.Signal) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	self := os.Getpid()
	n := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if signalIfTagged(pid, match, sig) {
			n++
		}
	}
	return n
}

// signalIfTagged signals pid if it carries a matching mark. The process is
// held by a pidfd while its environment is read, so that a pid reused in
// the meantime is not signalled.
func signalIfTagged(pid int, match func(tag string) bool, sig syscall.Signal) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, syscall.ENOSYS) {
			// A kernel before 5.3: no pidfd, read then signal.
			if tag, ok := processTag(pid); ok && match(tag) {
				return syscall.Kill(pid, sig) == nil
			}
		}
		return false
	}
	defer unix.Close(fd)
	tag, ok := processTag(pid)
	if !ok || !match(tag) {
		return false
	}
	return unix.PidfdSendSignal(fd, unix.Signal(sig), nil, 0) == nil
}

// processTag reads TagVar from pid's environment.
func processTag(pid int) (string, bool) {
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return "", false
	}
	key := []byte(TagVar + "=")
	for kv := range bytes.SplitSeq(env, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, key); ok {
			return string(v), true
		}
	}
	return "", false
}

// KillTagged kills with SIGKILL every process of this node whose TagVar
// starts with prefix, until none is left or a few seconds have passed, and
// returns how many it killed. It ends what an earlier run of gotune,
// killed itself, left running: its workers' processes carry their scratch
// folders as their mark.
func KillTagged(prefix string) int {
	match := func(tag string) bool { return strings.HasPrefix(tag, prefix) }
	total := 0
	for i := 0; i < 100; i++ {
		n := signalTagged(match, syscall.SIGKILL)
		total += n
		if n == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return total
}

// started counts, by pid, the processes StartProcess started and has not
// reaped yet: the reaper of Subreap leaves them to their exec.Cmd. It
// counts rather than marks, because a new process may get the pid of one
// reaped a moment ago before that one is unregistered.
var (
	startedMu sync.Mutex
	started   = map[int]int{}
	reaping   sync.Once
)

// register records a process StartProcess started; call it with startMu
// held for reading.
func register(pid int) {
	startedMu.Lock()
	defer startedMu.Unlock()
	started[pid]++
}

// unregister forgets a process once it has been reaped.
func unregister(pid int) {
	startedMu.Lock()
	defer startedMu.Unlock()
	if started[pid]--; started[pid] <= 0 {
		delete(started, pid)
	}
}

func isStarted(pid int) bool {
	startedMu.Lock()
	defer startedMu.Unlock()
	return started[pid] > 0
}

// Subreap makes this process the subreaper of its descendants (Linux 3.4
// and later): a process of a worker whose parent exits is adopted by this
// process rather than by init, so that it stays in reach, and a goroutine
// reaps such adopted processes as they exit. It also has the first worker
// process start a warden (see WardenMain), which kills what the workers
// started should this process be killed with SIGKILL. Call it early in
// main, after WardenMain, in a program that starts child processes only
// through this package: from then on, the goroutine reaps every child
// process that StartProcess did not start, which an exec.Cmd of the
// program's own would then fail to wait for.
func Subreap() error {
	warden.Lock()
	warden.wanted = true
	warden.Unlock()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("become a subreaper: %w", err)
	}
	reaping.Do(func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGCHLD)
		go func() {
			t := time.NewTicker(5 * time.Second)
			for {
				select {
				case <-ch:
				case <-t.C:
				}
				reapAdopted()
			}
		}()
	})
	return nil
}

// reapAdopted reaps the exited child processes that StartProcess did not
// start.
func reapAdopted() {
	startMu.Lock()
	defer startMu.Unlock()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || isStarted(pid) {
			continue
		}
		if st, err := readProcStat(pid); err == nil && st.ppid == self && st.state == 'Z' {
			var ws unix.WaitStatus
			unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		}
	}
}
