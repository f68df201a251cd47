package workers

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// LaunchSpec describes one worker process. It is plain data, so that a node
// agent can receive it over the network and start the same process on its
// own node.
type LaunchSpec struct {
	// Args is the command line. Args[0] is the program: looked up in the
	// PATH of Env when it holds no slash, taken relative to Dir when it is a
	// relative path with a slash.
	Args []string `json:"args"`
	// Dir is the working directory; "" is the launcher's own.
	Dir string `json:"dir,omitempty"`
	// Env is the process's complete environment, as "KEY=value" entries.
	Env []string `json:"env"`
	// LogPath is the file that receives the process's stderr and every
	// stdout line that is not a report line. It is appended to, and created
	// with its folders. "" keeps no log file (the last lines are still kept
	// in memory: see Process.Tail).
	LogPath string `json:"log_path,omitempty"`
	// LogMaxBytes caps the log file: a line that would take it past the
	// cap first rotates it (LogPath becomes LogPath.1, LogPath.1 becomes
	// LogPath.2, and so on up to LogKeep, the oldest dropped) and starts a
	// new file. Only a line longer than the cap itself makes a file pass
	// it. 0 means no cap.
	LogMaxBytes Bytes `json:"log_max_bytes,omitempty"`
	// LogKeep is how many rotated files are kept besides LogPath; with 0
	// the file starts over empty when it reaches LogMaxBytes.
	LogKeep int `json:"log_keep,omitempty"`
	// ReportPrefix marks the stdout lines handed to the report handler
	// instead of the log. "" hands over no line.
	ReportPrefix string `json:"report_prefix,omitempty"`
	// OnOutput, when not nil, receives every line the process writes to
	// its log (stdout lines that are not report lines, and stderr), from
	// the goroutines reading its output, so possibly from two at once; for
	// a process on another node, as the lines come back. gotune's own notes
	// are not passed.
	OnOutput func(line string) `json:"-"`
	// Heading, when not nil, gives a note (see Process.Notef) that the log
	// holds ahead of anything the process writes, once its pid is known.
	Heading func(pid int) string `json:"-"`
	// Control gives the process a private two-way byte stream on file
	// descriptor ControlFD, for a protocol between the launcher and a
	// process it knows (a Go worker of the same binary). The launcher's end
	// is Process.Control.
	Control bool `json:"control,omitempty"`
	// Self says that Args[0] is this program (a process worker that runs
	// a registered function): a launcher on another node runs its own
	// program instead, which must be the same one.
	Self bool `json:"self,omitempty"`
	// Scratch is the process's own folder for files it hands over (its
	// checkpoints), "" for none. A launcher on a node that does not share
	// this node's files gives the process a folder of that node instead,
	// wherever an argument or a variable of Env holds Scratch's path or a
	// path inside it, and Process.Fetch brings handed-over folders back
	// into Scratch.
	Scratch string `json:"scratch,omitempty"`
	// Inputs are folders the process reads (the checkpoint it resumes
	// from). A launcher on a node that does not share this node's files
	// copies each there first and likewise puts the copy's path in their
	// place.
	Inputs []string `json:"inputs,omitempty"`
}

// ControlFD is the file descriptor of a process's control stream when its
// LaunchSpec asks for one.
const ControlFD = 3

// TagVar is the environment variable that marks a worker process, and
// every process it starts that keeps its environment, as the worker's: it
// finds those that left the worker's process group (setsid) when the
// worker ends, and lets a later run end what a launcher killed with
// SIGKILL left running (see KillTagged). A LaunchSpec may set it in Env;
// StartProcess gives each process a unique one otherwise.
const TagVar = "GOTUNE_TAG"

// startMu orders starts before the reaper of Subreap: a start holds it for
// reading until the new process is registered, the reaper for writing.
var startMu sync.RWMutex

// RunCommand runs cmd and waits for it, as cmd.Run does, also in a
// program that called Subreap, whose reaper would otherwise take the
// command's exit before cmd.Wait sees it.
func RunCommand(cmd *exec.Cmd) error {
	startMu.RLock()
	err := cmd.Start()
	if err == nil {
		register(cmd.Process.Pid)
	}
	startMu.RUnlock()
	if err != nil {
		return err
	}
	defer unregister(cmd.Process.Pid)
	return cmd.Wait()
}

// tailLines is how many of a process's last log lines are kept in memory
// for error messages.
const tailLines = 20

// MaxReportLine bounds a report line, in bytes: a longer line goes to the
// log, and the report handler receives OversizeReport's line in its place.
const MaxReportLine = 1 << 20

// OversizeReport is the line a report handler receives in place of a
// report line of n bytes, over MaxReportLine: it starts with a NUL byte,
// which no report line holds (JSON cannot), and ParseOversizeReport reads
// it back.
func OversizeReport(n int) string { return "\x00oversize " + strconv.Itoa(n) }

// ParseOversizeReport reports whether line is one that OversizeReport
// made, and the size of the report line it stands for.
func ParseOversizeReport(line string) (n int, ok bool) {
	rest, ok := strings.CutPrefix(line, "\x00oversize ")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil
}

// Process is a running worker process and its process group. The process
// leads a group of its own, so that stopping it stops every process it
// started; when the leader exits, whatever is left of its group is killed,
// so no descendant outlives it. On Linux a descendant that left the group
// (setsid) goes with it too: it is in the worker's own cgroup v2 where the
// system lets this process create one (the worker's log says when not),
// and otherwise found by the worker's TagVar in its environment. On Linux
// the leader is also killed if the launching process dies; what it started
// is then ended by KillTagged in a later run.
//
// A Process may also run on another node (see NewRemoteProcess; package
// cluster starts such processes through a node's agent): its output,
// control stream and exit then travel over the network, and its log file
// is kept on this node.
type Process struct {
	pid     int
	cmd     *exec.Cmd          // nil for a remote process
	control io.ReadWriteCloser // nil without a control stream
	remote  Remote             // nil for a process of this node
	log     *processLog
	tag     string  // the value of TagVar in the process's environment
	cg      *cgroup // the process's own cgroup; nil for none
	readers sync.WaitGroup
	done    chan struct{}
	// scratch is LaunchSpec.Scratch, and wd the absolute working folder
	// that a relative handed-over path is relative to (of a process of
	// this node).
	scratch, wd string

	mu       sync.Mutex
	exited   bool // the leader has exited and the rest of its group has been killed
	err      error
	exitedAt time.Time
	killer   *time.Timer
	stopped  bool // Stop or Kill was called: a failure is not the process's own
}

// StartProcess starts spec's process. onReport, when not nil, receives every
// stdout line that starts with spec.ReportPrefix, without the prefix and
// the line end, in order, from one goroutine; while it runs, the process's
// stdout is not read. A report line longer than MaxReportLine goes to the
// log, and onReport receives OversizeReport's line in its place. It fails
// when the program cannot be found or started; such an error names the
// program.
func StartProcess(spec LaunchSpec, onReport func(line string)) (*Process, error) {
	if len(spec.Args) == 0 {
		return nil, errors.New("launch: no command")
	}
	path, err := lookPath(spec)
	if err != nil {
		return nil, err
	}
	log := newProcessLog(spec)
	wd, err := filepath.Abs(spec.Dir)
	if err != nil {
		log.close()
		return nil, fmt.Errorf("launch: working folder: %w", err)
	}
	p := &Process{log: log, done: make(chan struct{}), scratch: spec.Scratch, wd: wd}
	env := spec.Env
	if env == nil {
		env = []string{} // nil would mean the launcher's environment
	}
	if tag, ok := envValue(env, TagVar); ok && tag != "" {
		p.tag = tag
	} else {
		p.tag = "gotune-" + randomID()
		env = append(slices.Clip(env), TagVar+"="+p.tag)
	}
	cg, cgErr := newCgroup()
	p.cg = cg
	var controlFile io.Closer
	var closeAfterStart []io.Closer
	fail := func(err error) (*Process, error) {
		for _, c := range closeAfterStart {
			c.Close()
		}
		if p.cg != nil {
			p.cg.remove()
		}
		log.close()
		if controlFile != nil {
			controlFile.Close()
		}
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	closeAfterStart = append(closeAfterStart, outW)
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		return fail(err)
	}
	closeAfterStart = append(closeAfterStart, errW)
	var extra []*os.File
	if spec.Control {
		fds, err := socketpair()
		if err != nil {
			outR.Close()
			errR.Close()
			return fail(fmt.Errorf("launch: control stream: %w", err))
		}
		p.control = os.NewFile(uintptr(fds[0]), "control")
		controlFile = p.control
		child := os.NewFile(uintptr(fds[1]), "control")
		closeAfterStart = append(closeAfterStart, child)
		extra = []*os.File{child} // descriptor 3 == ControlFD
	}
	newCmd := func() *exec.Cmd {
		return &exec.Cmd{
			Path:        path,
			Args:        spec.Args,
			Dir:         spec.Dir,
			Env:         env,
			Stdout:      outW,
			Stderr:      errW,
			ExtraFiles:  extra,
			SysProcAttr: sysProcAttr(p.cg),
		}
	}
	startMu.RLock()
	cmd := newCmd()
	err = cmd.Start()
	if err != nil && p.cg != nil {
		// A kernel that cannot start a process in a cgroup (clone3 with
		// CLONE_INTO_CGROUP came with Linux 5.7): start it without.
		cgErr = fmt.Errorf("start in cgroup %s: %w", p.cg.path, err)
		p.cg.remove()
		p.cg = nil
		cmd = newCmd()
		err = cmd.Start()
	}
	if err == nil {
		register(cmd.Process.Pid)
	}
	startMu.RUnlock()
	if err != nil {
		outR.Close()
		errR.Close()
		return fail(fmt.Errorf("launch %s: %w", spec.Args[0], err))
	}
	for _, c := range closeAfterStart {
		c.Close()
	}
	if cgErr != nil {
		p.Logf("no cgroup of its own (%v): a process it starts that leaves its process group is found by its %s only", cgErr, TagVar)
	}
	if err := p.watch(true); err != nil {
		p.Logf("%v: should gotune be killed, what this process started is ended by the next run only", err)
	}
	p.cmd, p.pid = cmd, cmd.Process.Pid
	if spec.Heading != nil {
		p.Notef("%s", spec.Heading(p.pid))
	}
	p.readers.Add(2)
	go p.readStdout(outR, spec.ReportPrefix, onReport)
	go p.readStderr(errR)
	go p.wait(outR, errR)
	return p, nil
}

// socketpair returns a connected pair of Unix stream sockets, both
// close-on-exec (ExtraFiles clears the flag on the child's copy).
func socketpair() ([2]int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		return fds, err
	}
	syscall.CloseOnExec(fds[0])
	syscall.CloseOnExec(fds[1])
	return fds, nil
}

// lookPath resolves spec.Args[0] as exec.Command would, but against the
// PATH of spec.Env and relative to spec.Dir.
func lookPath(spec LaunchSpec) (string, error) {
	name := spec.Args[0]
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) && spec.Dir != "" {
			name = filepath.Join(spec.Dir, name)
		}
		if err := Executable(name); err != nil {
			return "", fmt.Errorf("launch %s: %w", spec.Args[0], err)
		}
		return name, nil
	}
	pathList, ok := envValue(spec.Env, "PATH")
	if !ok {
		pathList = os.Getenv("PATH")
	}
	path, err := LookPathIn(name, pathList, spec.Dir)
	if err != nil {
		return "", fmt.Errorf("launch %s: %w", name, err)
	}
	return path, nil
}

// LookPathIn finds the bare program name in the folders of pathList (a
// PATH value; an empty entry is the current folder), a relative folder
// taken relative to dir ("" for this process's working folder). Its error
// wraps exec.ErrNotFound.
func LookPathIn(name, pathList, dir string) (string, error) {
	for _, d := range filepath.SplitList(pathList) {
		if d == "" {
			d = "."
		}
		cand := filepath.Join(d, name)
		if !filepath.IsAbs(cand) && dir != "" {
			cand = filepath.Join(dir, cand)
		}
		if Executable(cand) == nil {
			return cand, nil
		}
	}
	return "", exec.ErrNotFound
}

// Executable says why path is not a file that may be executed, or nil when
// it is. Its error wraps exec.ErrNotFound for a folder or a file without
// execute permission.
func Executable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%s: %w: not an executable file", path, exec.ErrNotFound)
	}
	return nil
}

func envValue(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// Pid is the process's id, which is also its process group's id, on the
// node it runs on.
func (p *Process) Pid() int { return p.pid }

// Control is the launcher's end of the process's control stream; nil unless
// the LaunchSpec asked for one. It is closed when the process has ended.
func (p *Process) Control() io.ReadWriter {
	if p.control == nil {
		return nil
	}
	return p.control
}

// Done is closed once the process has exited, the rest of its process group
// has been killed, and its output has been read to the end.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is how the process ended, valid once Done is closed: nil for exit
// status 0, an *ExitError otherwise.
func (p *Process) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// ExitedAt is when the process was seen to exit, valid once Done is closed.
func (p *Process) ExitedAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitedAt
}

// Stop asks the process group to end with SIGTERM and kills it with SIGKILL
// if the leader has not exited after grace. It returns at once; wait on Done.
func (p *Process) Stop(grace time.Duration) {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	if p.remote != nil {
		p.remote.Signal(false, grace)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited || p.killer != nil {
		return
	}
	p.signalLocked(syscall.SIGTERM)
	p.killer = time.AfterFunc(grace, p.Kill)
}

// Kill kills the process group with SIGKILL at once. It returns at once;
// wait on Done.
func (p *Process) Kill() {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	if p.remote != nil {
		p.remote.Signal(true, 0)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.signalLocked(syscall.SIGKILL)
}

// signalLocked signals the whole group while its leader has not been reaped,
// so that the group id cannot have been reused, and the processes that
// left the group.
func (p *Process) signalLocked(sig syscall.Signal) {
	if !p.exited {
		syscall.Kill(-p.pid, sig)
		p.signalEscaped(sig)
	}
}

// signalEscaped signals the processes of the worker outside its process
// group: those in its cgroup, or without one those that carry its tag.
func (p *Process) signalEscaped(sig syscall.Signal) int {
	if p.cg != nil {
		p.cg.signal(sig)
		return 0
	}
	return signalTagged(func(tag string) bool { return tag == p.tag }, sig)
}

// Logf writes a line of gotune's own into the process's log, prefixed
// "gotune: ", for warnings about the process's output.
func (p *Process) Logf(format string, args ...any) {
	p.log.write([]byte("gotune: "+fmt.Sprintf(format, args...)), false)
}

// Notef is Logf for a line that only describes the process (its command,
// its pid): the line waits until another line is written to the log, or
// the process fails, and goes before it, so that a process that writes
// nothing and succeeds leaves no log file.
func (p *Process) Notef(format string, args ...any) {
	p.log.note([]byte("gotune: " + fmt.Sprintf(format, args...)))
}

// Tail returns the last lines the process wrote to its log (stderr and
// stdout that was not a report, without Logf's lines), oldest first.
func (p *Process) Tail() []string { return p.log.tail() }

// Traceback returns the last Python traceback the process wrote to its
// log, nil when it wrote none. A script's last lines are often ordinary
// output written after the traceback, so an error that quotes only the end
// of the log can miss its cause.
func (p *Process) Traceback() *Traceback { return p.log.traceback() }

// LogPath is the process's log file, "" when it keeps none. For a remote
// process it is on this node: the agent streams the lines here.
func (p *Process) LogPath() string { return p.log.path }

// Node is the name of the node the process runs on, "" for this one.
func (p *Process) Node() string {
	if p.remote == nil {
		return ""
	}
	return p.remote.Node()
}

// Fetch takes over a folder the process has handed over (a checkpoint it
// finished writing) and returns its path on this node. The folder must lie
// inside the LaunchSpec's Scratch, as Confine checks (on the process's own
// node); anything else is refused with an error that wraps
// ErrOutsideScratch, and nothing is touched. For a process of this node, or
// of an agent that shares this node's files, the path returned is dir's
// real path; a relative dir is relative to the process's working folder
// (Dir, taken on this node). Otherwise the agent sends the folder's files,
// which land in a new folder inside the LaunchSpec's Scratch, and deletes
// its own copy. It fails when ctx ends, the folder cannot be read, or the
// node is lost (an error wrapping ErrNodeLost). Call it as the report that
// names dir arrives: from onReport, or, for a process with a control
// stream, before reading the stream's next message; once the process has
// exited and its output has been delivered (and its control stream read to
// its end) the agent deletes the process's folders.
func (p *Process) Fetch(ctx context.Context, dir string) (string, error) {
	if p.remote == nil {
		return Confine(p.scratch, absUnder(p.wd, dir))
	}
	return p.remote.Fetch(ctx, dir)
}

// absUnder is dir made absolute against the folder wd.
func absUnder(wd, dir string) string {
	if filepath.IsAbs(dir) {
		return dir
	}
	return filepath.Join(wd, dir)
}

// wait reaps the process, kills what is left of its group, and waits for
// its output.
func (p *Process) wait(outR, errR *os.File) {
	err := reap(p.cmd, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.exitedAt = time.Now()
		syscall.Kill(-p.pid, syscall.SIGKILL)
		// Processes that escaped the group may be starting others: kill
		// until none is left.
		for i := 0; i < 10 && p.signalEscaped(syscall.SIGKILL) > 0; i++ {
			time.Sleep(10 * time.Millisecond)
		}
		p.exited = true // the group is dead: no signal is sent after this
		if p.killer != nil {
			p.killer.Stop()
		}
	})
	unregister(p.pid)
	p.watch(false)

	// The pipes reach end of file once every process that holds them is
	// gone. One that escaped the group could hold them forever: stop
	// reading after a while.
	drained := make(chan struct{})
	go func() { p.readers.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(2 * time.Second):
		outR.Close()
		errR.Close()
		<-drained
	}
	err = exitError(err)
	p.keepLogOfFailure(err)
	p.log.close()
	if p.cg != nil {
		p.cg.remove()
	}

	p.mu.Lock()
	p.err = err
	p.mu.Unlock()
	if p.control != nil {
		p.control.Close()
	}
	close(p.done)
}

// keepLogOfFailure keeps the log of a process that failed by itself (err
// is how it exited), with its held notes, even when it wrote nothing.
func (p *Process) keepLogOfFailure(err error) {
	p.mu.Lock()
	stopped := p.stopped
	p.mu.Unlock()
	if err != nil && !stopped {
		p.log.keep()
	}
}

// ExitError is how a process that did not exit with status 0 ended.
type ExitError struct {
	// Code is the exit status, or -1 when a signal ended the process.
	Code int
	// Signal is the signal that ended the process, 0 when it exited.
	Signal syscall.Signal
}

func (e *ExitError) Error() string {
	if e.Code < 0 {
		return fmt.Sprintf("was killed by signal %d (%v)", int(e.Signal), e.Signal)
	}
	return fmt.Sprintf("exited with status %d", e.Code)
}

func exitError(err error) error {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return err
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return &ExitError{Code: -1, Signal: ws.Signal()}
	}
	return &ExitError{Code: ee.ExitCode()}
}

func (p *Process) readStdout(r io.ReadCloser, prefix string, onReport func(string)) {
	defer p.readers.Done()
	defer r.Close()
	pre := []byte(prefix)
	report := func(line []byte) bool { return len(pre) > 0 && onReport != nil && bytes.HasPrefix(line, pre) }
	longReport, size := false, 0
	readLines(r, func(piece []byte, start, end bool) {
		if start && end && report(piece) {
			onReport(string(piece[len(pre):]))
			return
		}
		if start {
			longReport, size = report(piece), 0
		}
		size += len(piece)
		if start || len(piece) > 0 {
			p.log.writeLine(piece)
		}
		if end && longReport {
			onReport(OversizeReport(size))
		}
	})
}

func (p *Process) readStderr(r io.ReadCloser) {
	defer p.readers.Done()
	defer r.Close()
	readLines(r, func(piece []byte, start, _ bool) {
		if start || len(piece) > 0 {
			p.log.writeLine(piece)
		}
	})
}

// readLines calls f with each line of r, without its line end. A line
// longer than MaxReportLine is passed in pieces: start is true for a line's
// first piece and end for its last, both for a line passed whole. So is a
// line that a script rewrites with carriage returns and no newline (a
// progress line, "\r[Epoch 3/200] [Batch 12/938] [D loss: 0.69]", written
// for a whole run): each 64 KiB of it, up to its last carriage return,
// so that the piece ends with a whole state of the line, which is what
// a terminal would show then.
func readLines(r io.Reader, f func(piece []byte, start, end bool)) {
	const chunkSize = 64 << 10
	br := bufio.NewReaderSize(r, chunkSize)
	var line, rest []byte
	long := false
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if err == bufio.ErrBufferFull {
			if i := bytes.LastIndexByte(line, '\r'); i > 0 && len(line)-i <= chunkSize {
				rest = append(rest[:0], line[i+1:]...)
				f(line[:i+1], !long, false)
				line, long = append(line[:0], rest...), true
			} else if len(line) > MaxReportLine {
				f(line, !long, false)
				line, long = line[:0], true
			}
			continue
		}
		if len(line) > 0 || long {
			line = bytes.TrimRight(line, "\r\n")
			f(line, !long, true)
		}
		line, long = line[:0], false
		if err != nil {
			return
		}
	}
}

// processLog is a process's log file and its last lines. The file, and
// its folder, are created by the first line written to it, so that a
// process that writes nothing leaves nothing on disk.
type processLog struct {
	path      string
	max       int64             // rotate rather than pass it; 0: never
	keepFiles int               // rotated files kept
	onLine    func(line string) // set before the process starts; nil for none
	mu        sync.Mutex
	f         *os.File
	size      int64 // of f
	// held are notes (Notef) waiting for the file's first line. shut: no
	// more lines reach the file, because it could not be created or the
	// log is closed; they still reach the tail.
	held [][]byte
	shut bool
	last [tailLines]string
	n    int
	tb   traceback
}

// newProcessLog is spec's log, created by its first line.
func newProcessLog(spec LaunchSpec) *processLog {
	return &processLog{path: spec.LogPath, max: int64(spec.LogMaxBytes), keepFiles: max(spec.LogKeep, 0), onLine: spec.OnOutput}
}

// rotate moves the log file to path.1 (after moving path.1 to path.2 and
// so on) and starts a new one. Called with mu held; on an error the
// process's output is no longer logged, but still read.
func (l *processLog) rotate() {
	l.f.Close()
	l.f, l.size = nil, 0
	if l.keepFiles == 0 {
		os.Remove(l.path)
	}
	for i := l.keepFiles; i >= 1; i-- {
		from := l.path
		if i > 1 {
			from = fmt.Sprintf("%s.%d", l.path, i-1)
		}
		os.Rename(from, fmt.Sprintf("%s.%d", l.path, i))
	}
	if f, err := os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644); err == nil {
		l.f = f
	}
}

// writeLine logs a line of the process's output.
func (l *processLog) writeLine(line []byte) {
	l.write(line, true)
	if l.onLine != nil {
		l.onLine(string(line))
	}
}

func (l *processLog) write(line []byte, own bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if own {
		text := string(line)
		l.last[l.n%tailLines] = text
		l.n++
		l.tb.follow(text, l.n)
	}
	if l.f == nil && l.path != "" && !l.shut {
		l.create()
	}
	if l.f == nil {
		return
	}
	data := append(line, '\n')
	if l.max > 0 && l.size > 0 && l.size+int64(len(data)) > l.max {
		l.rotate()
		if l.f == nil {
			return
		}
	}
	n, _ := l.f.Write(data)
	l.size += int64(n)
}

// note holds line until the log's first other line, or until the process
// fails (keep). It writes it at once when the file exists already, as when
// an earlier attempt of the worker wrote it.
func (l *processLog) note(line []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil && l.path != "" && !l.shut {
		if _, err := os.Stat(l.path); err == nil {
			l.create()
		}
	}
	switch {
	case l.f != nil:
		n, _ := l.f.Write(append(line, '\n'))
		l.size += int64(n)
	case l.path != "" && !l.shut:
		l.held = append(l.held, line)
	}
}

// keep writes the held notes, creating the file: a process that failed
// leaves its log, with its command, even when it wrote nothing.
func (l *processLog) keep() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil && len(l.held) > 0 && !l.shut {
		l.create()
	}
}

// create opens the log file, creating its folder, and writes the held
// notes into it. A log that cannot be created is given up: the process
// must not fail for it, and its last lines still reach Tail.
func (l *processLog) create() {
	if err := os.MkdirAll(filepath.Dir(l.path), 0o755); err != nil {
		l.shut = true
		return
	}
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		l.shut = true
		return
	}
	l.f = f
	if fi, err := f.Stat(); err == nil {
		l.size = fi.Size()
	}
	for _, h := range l.held {
		n, _ := f.Write(append(h, '\n'))
		l.size += int64(n)
	}
	l.held = nil
}

func (l *processLog) tail() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := min(l.n, tailLines)
	out := make([]string, 0, k)
	for i := l.n - k; i < l.n; i++ {
		out = append(out, l.last[i%tailLines])
	}
	return out
}

// traceback returns the log's last Python traceback, nil for none.
func (l *processLog) traceback() *Traceback {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tb.lines == nil {
		return nil
	}
	return &Traceback{Lines: slices.Clone(l.tb.lines), Omitted: l.tb.omitted, LinesAfter: l.n - l.tb.end}
}

func (l *processLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
	l.shut, l.held = true, nil
}

// randomID is 16 random bytes in hex, for a worker's tag.
func randomID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}
