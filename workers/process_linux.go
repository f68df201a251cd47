package workers

import (
	"os/exec"
	"syscall"
	"unsafe"
)

// reap waits for cmd's process to exit, calls killGroup, then reaps it.
// Until it is reaped the exited leader stays a zombie that holds its pid,
// which is also its group's id, so killGroup cannot hit a reused id.
func reap(cmd *exec.Cmd, killGroup func()) error {
	const pPID = 1     // idtype_t P_PID
	var info [128]byte // siginfo_t
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(cmd.Process.Pid),
			uintptr(unsafe.Pointer(&info[0])), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		if errno != syscall.EINTR {
			break
		}
	}
	killGroup()
	return cmd.Wait()
}
