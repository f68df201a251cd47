//go:build unix && !linux

package workers

import (
	"errors"
	"os/exec"
	"syscall"
)

// cgroup is a worker process's own cgroup v2, which this platform does
// not have.
type cgroup struct{ path string }

func newCgroup() (*cgroup, error) { return nil, errors.New("this system has no cgroups") }

func (c *cgroup) signal(syscall.Signal) {}
func (c *cgroup) remove()               {}

// sysProcAttr puts a worker in a process group of its own. This platform
// has no parent-death signal: a worker outlives a launcher killed with
// SIGKILL.
func sysProcAttr(*cgroup) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// signalTagged would find processes by their environment, which this
// platform does not show: it signals none.
func signalTagged(func(tag string) bool, syscall.Signal) int { return 0 }

// KillTagged kills the processes of this node whose TagVar starts with
// prefix, on Linux; this platform does not show other processes'
// environments, so it kills none and returns 0.
func KillTagged(prefix string) int { return 0 }

// Subreap makes this process the subreaper of its descendants on Linux;
// this platform has no subreapers, so it does nothing.
func Subreap() error { return nil }

// WardenMain runs the warden of Subreap on Linux; this platform has none,
// so it returns at once.
func WardenMain() {}

func (p *Process) watch(bool) error { return nil }

func register(int)   {}
func unregister(int) {}

// reap waits for cmd's process, then calls killGroup. Without waitid's
// WNOWAIT the leader is reaped first, so in the moment between the two its
// group id could in principle be reused.
func reap(cmd *exec.Cmd, killGroup func()) error {
	err := cmd.Wait()
	killGroup()
	return err
}
