//go:build unix && !linux

package workers

import (
	"os/exec"
	"syscall"
)

// sysProcAttr puts a worker in a process group of its own. This platform
// has no parent-death signal: a worker outlives a launcher killed with
// SIGKILL.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// reap waits for cmd's process, then calls killGroup. Without waitid's
// WNOWAIT the leader is reaped first, so in the moment between the two its
// group id could in principle be reused.
func reap(cmd *exec.Cmd, killGroup func()) error {
	err := cmd.Wait()
	killGroup()
	return err
}
