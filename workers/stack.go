package workers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// How a stack was taken, in Stack.Method.
const (
	// StackDumped: the process dumped its own stack when sent StackSignal
	// (a Go process worker: every goroutine; a Python script that imported
	// gotune.py: every thread's Python stack).
	StackDumped = "dump"
	// StackGDB: gdb attached to the process and printed every thread's
	// native backtrace, preceded by its Python stack (py-bt) when gdb has
	// the interpreter's extension (Debian's python3-dbg, or the
	// python*-gdb.py installed beside a Python built from source).
	StackGDB = "gdb"
	// StackProc: without gdb, each thread's scheduler state and wait
	// channel from /proc, and the kernel stack where /proc shows it.
	StackProc = "proc"
	// StackGoroutines: the goroutines of a worker that runs in the
	// tuner's own process.
	StackGoroutines = "goroutines"
)

// Stack is what one worker process was doing at one moment.
type Stack struct {
	PID    int
	Method string
	Text   string
}

// StackSignal asks a process that installed a stack dump (see
// InstallStackDump and python/gotune.py) to write its stack to its
// StackFile.
const StackSignal = syscall.SIGUSR2

// stackFilePrefix starts the name of a process's stack file.
const stackFilePrefix = ".gotune-stack-"

// StackFile is the file where the process pid dumps its stack when sent
// StackSignal. dir is the process's GOTUNE_CHECKPOINT_DIR: each worker has
// that folder to itself, on its own node. The file's existence is the
// process's promise that it handles the signal: a process without one is
// never sent it (its default action would end the process).
func StackFile(dir string, pid int) string {
	return filepath.Join(dir, stackFilePrefix+strconv.Itoa(pid))
}

// InstallStackDump makes this process write all its goroutines' stacks
// to StackFile(dir, own pid) whenever it receives StackSignal. It does
// nothing when dir is "".
func InstallStackDump(dir string) error {
	if dir == "" {
		return nil
	}
	f, err := os.OpenFile(StackFile(dir, os.Getpid()), os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("stack dump file: %w", err)
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, StackSignal)
	go func() {
		for range ch {
			var b bytes.Buffer
			pprof.Lookup("goroutine").WriteTo(&b, 2)
			f.Write(b.Bytes()) // one write: the reader sees it whole
		}
	}()
	return nil
}

// stackTimeout bounds how long ProcessStack waits for a dump or for gdb.
var stackTimeout = 10 * time.Second

// maxGroupStacks bounds how many processes of a worker's process group
// besides the worker's own have their stacks taken.
const maxGroupStacks = 16

// ProcessStack takes the current stack of process pid of this node, by the
// best means available: the process's own dump (StackDumped) when it
// installed one, else gdb (StackGDB), else /proc (StackProc). When pid
// leads a process group, as a worker process does, the stacks of the other
// processes of the group (the script a shell or a launcher such as
// torchrun started, data loader workers) follow in Text, each under a line
// that names it and how its stack was taken; Method is the leader's.
func ProcessStack(ctx context.Context, pid int) (Stack, error) {
	if pid <= 0 {
		return Stack{}, fmt.Errorf("stack: no process id")
	}
	ctx, cancel := context.WithTimeout(ctx, stackTimeout)
	defer cancel()
	st, err := oneStack(ctx, pid)
	if err != nil {
		return Stack{}, err
	}
	members := groupMembers(pid)
	if len(members) > maxGroupStacks {
		members = members[:maxGroupStacks]
	}
	others := make([]string, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name, _ := parseStatFile(m)
			if s, err := oneStack(ctx, m); err != nil {
				others[i] = fmt.Sprintf("--- pid %d (%s): no stack: %v\n", m, name, err)
			} else {
				others[i] = fmt.Sprintf("--- pid %d (%s), by %s\n%s", m, name, s.Method, s.Text)
			}
		}()
	}
	wg.Wait()
	for _, o := range others {
		if !strings.HasSuffix(st.Text, "\n") {
			st.Text += "\n"
		}
		st.Text += "\n" + o
	}
	return st, nil
}

// groupMembers lists the processes of the process group that pid leads,
// but pid, in pid order; none when pid leads no group.
func groupMembers(pid int) []int {
	if s, err := readProcStat(pid); err != nil || s.pgrp != pid {
		return nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil || p == pid {
			continue
		}
		if s, err := readProcStat(p); err == nil && s.pgrp == pid {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// parseStatFile is parseStat of /proc/PID/stat.
func parseStatFile(pid int) (name, state string) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "?", "?"
	}
	return parseStat(string(b))
}

// oneStack takes the stack of process pid alone.
func oneStack(ctx context.Context, pid int) (Stack, error) {
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
		return Stack{}, fmt.Errorf("stack of pid %d: the process is gone", pid)
	}
	if dir := processEnv(pid, "GOTUNE_CHECKPOINT_DIR"); dir != "" {
		if text, err := dumpedStack(ctx, pid, StackFile(dir, pid)); err == nil {
			return Stack{PID: pid, Method: StackDumped, Text: text}, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return Stack{}, fmt.Errorf("stack of pid %d: %w", pid, err)
		}
	}
	if gdb, err := exec.LookPath("gdb"); err == nil {
		if text, err := gdbStack(ctx, gdb, pid); err == nil {
			return Stack{PID: pid, Method: StackGDB, Text: text}, nil
		}
	}
	text, err := procStack(pid)
	if err != nil {
		return Stack{}, fmt.Errorf("stack of pid %d: %w", pid, err)
	}
	return Stack{PID: pid, Method: StackProc, Text: text}, nil
}

// processEnv is the value of variable key in the environment process pid
// started with, "" when unset or unreadable.
func processEnv(pid int, key string) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return ""
	}
	for _, kv := range bytes.Split(b, []byte{0}) {
		if k, v, ok := bytes.Cut(kv, []byte{'='}); ok && string(k) == key {
			return string(v)
		}
	}
	return ""
}

// dumpedStack sends StackSignal to pid and returns what it appended to its
// stack file; it fails with os.ErrNotExist when there is no stack file.
func dumpedStack(ctx context.Context, pid int, path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	from := fi.Size()
	if err := syscall.Kill(pid, StackSignal); err != nil {
		return "", err
	}
	// The dump is written at once by a Python process (from the signal
	// handler) and in one write by a Go one; wait for the file to grow and
	// then stay the same size for a moment.
	last, still := from, 0
	for still < 3 {
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no stack dump within %v", stackTimeout)
		case <-time.After(20 * time.Millisecond):
		}
		fi, err := os.Stat(path)
		if err != nil {
			return "", err
		}
		if fi.Size() > from && fi.Size() == last {
			still++
		} else {
			still = 0
		}
		last = fi.Size()
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b := make([]byte, last-from)
	if _, err := f.ReadAt(b, from); err != nil {
		return "", err
	}
	return string(b), nil
}

// gdbStack attaches gdb to pid for a moment and prints every thread's
// Python stack (when gdb knows the interpreter) and native backtrace.
func gdbStack(ctx context.Context, gdb string, pid int) (string, error) {
	cmd := exec.CommandContext(ctx, gdb, "-p", strconv.Itoa(pid), "-batch", "-nx",
		"-iex", "set auto-load safe-path /", "-iex", "set pagination off", "-iex", "set print frame-arguments none",
		"-ex", "thread apply all py-bt", "-ex", "thread apply all bt")
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := RunCommand(cmd)
	text := out.String()
	if !strings.Contains(text, "Thread ") {
		if err == nil {
			err = errors.New("gdb printed no thread")
		}
		return "", fmt.Errorf("gdb: %w: %s", err, strings.TrimSpace(text))
	}
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return cleanGDB(text, strings.HasPrefix(filepath.Base(exe), "python")), nil
}

// noPyBT stands in a Python worker's stack for gdb's complaint that it
// lacks the interpreter's extension.
const noPyBT = "(no Python stack: gdb lacks the Python interpreter's extension; install python3-dbg " +
	"(Debian, Ubuntu) or the python*-gdb.py of your Python, or import gotune in the script, " +
	"which dumps its own Python stack without gdb)"

// cleanGDB keeps gdb's threads, from the first "Thread" line on, without
// its chatter about missing sources and its detaching. Without the
// interpreter's extension gdb answers py-bt with "Undefined command":
// that goes, and for a Python process (python) noPyBT says what to
// install instead.
func cleanGDB(text string, python bool) string {
	noExtension := false
	var b strings.Builder
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, `Undefined command: "py-bt"`) {
			noExtension = true
		}
	}
	if noExtension && python {
		b.WriteString(noPyBT + "\n")
	}
	if i := strings.Index(text, "\nThread "); i >= 0 {
		text = text[i+1:]
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "[Inferior ") || strings.HasSuffix(line, ": No such file or directory.") ||
			strings.HasPrefix(line, `Undefined command: "py-bt"`) {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return strings.TrimSpace(b.String()) + "\n"
}

// procStack describes each thread of pid from /proc: its name, state and
// wait channel, and its kernel stack where this process may read it.
func procStack(pid int) (string, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, t := range tasks {
		dir := fmt.Sprintf("/proc/%d/task/%s", pid, t.Name())
		stat, err := os.ReadFile(dir + "/stat")
		if err != nil {
			continue // the thread ended
		}
		name, state := parseStat(string(stat))
		wchan, _ := os.ReadFile(dir + "/wchan")
		fmt.Fprintf(&b, "thread %s (%s): state %s, wchan %s\n", t.Name(), name, state, orNone(string(wchan)))
		if ks, err := os.ReadFile(dir + "/stack"); err == nil && len(ks) > 0 {
			for _, line := range strings.Split(strings.TrimSpace(string(ks)), "\n") {
				b.WriteString("    " + line + "\n")
			}
		}
	}
	return b.String(), nil
}

// parseStat picks the command name and state out of a /proc stat line;
// the name is in parentheses and may hold spaces.
func parseStat(s string) (name, state string) {
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return "?", "?"
	}
	name = s[open+1 : end]
	if f := strings.Fields(s[end+1:]); len(f) > 0 {
		state = f[0]
	}
	return name, state
}

func orNone(s string) string {
	if s == "" || s == "0" {
		return "-"
	}
	return s
}

// Stack takes the process's current stack (see ProcessStack) on the node it
// runs on: over the agent's session for a process of another node.
func (p *Process) Stack(ctx context.Context) (Stack, error) {
	if p.remote != nil {
		return p.remote.Stack(ctx)
	}
	return ProcessStack(ctx, p.pid)
}
