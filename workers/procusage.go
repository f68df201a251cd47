package workers

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ProcUsage is what a worker process uses at one moment, together with
// every process of its process group (the processes it started: data
// loader workers, a script's children).
type ProcUsage struct {
	PID int
	// CPUSeconds is the user and system CPU time the processes alive now
	// have used since they started; the difference between two samples
	// over the time between them is the CPU use (1 = one core busy).
	CPUSeconds float64
	// RSS is the memory the processes hold in RAM, summed.
	RSS Bytes
	// Processes counts the processes summed.
	Processes int
}

// clockTicks is the unit of /proc's CPU times: USER_HZ, 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// ProcessUsage reads from /proc what process pid of this node and the
// other processes of its process group use now.
func ProcessUsage(pid int) (ProcUsage, error) {
	leader, err := readProcStat(pid)
	if err != nil {
		return ProcUsage{}, fmt.Errorf("usage of pid %d: the process is gone", pid)
	}
	u := ProcUsage{PID: pid}
	add := func(s procStat) {
		u.CPUSeconds += float64(s.utime+s.stime) / clockTicks
		u.RSS += Bytes(s.rssPages * int64(os.Getpagesize()))
		u.Processes++
	}
	add(leader)
	for _, p := range groupMembers(pid) {
		if s, err := readProcStat(p); err == nil {
			add(s)
		}
	}
	return u, nil
}

// procStat is what gotune reads of /proc/PID/stat.
type procStat struct {
	state        byte
	ppid, pgrp   int
	utime, stime int64
	rssPages     int64
}

func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	s := string(b)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	// Fields after the name, from field 3 (state): ppid is field 4, pgrp
	// 5, utime 14, stime 15, rss 24.
	f := strings.Fields(s[end+1:])
	if len(f) < 22 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	st := procStat{state: f[0][0]}
	var errs [5]error
	st.ppid, errs[4] = strconv.Atoi(f[1])
	st.pgrp, errs[0] = strconv.Atoi(f[2])
	st.utime, errs[1] = strconv.ParseInt(f[11], 10, 64)
	st.stime, errs[2] = strconv.ParseInt(f[12], 10, 64)
	st.rssPages, errs[3] = strconv.ParseInt(f[21], 10, 64)
	for _, err := range errs {
		if err != nil {
			return procStat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
	}
	return st, nil
}

// Usage reads what the process and its process group use now, on the node
// it runs on: over the agent's session for a process of another node.
func (p *Process) Usage(ctx context.Context) (ProcUsage, error) {
	if p.remote != nil {
		return p.remote.Usage(ctx)
	}
	return ProcessUsage(p.pid)
}
