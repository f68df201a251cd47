package workers

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// shell starts sh -c script with the given report prefix and collects the
// report lines.
func shell(t *testing.T, script, prefix string) (*Process, *lines) {
	t.Helper()
	got := &lines{}
	p, err := StartProcess(LaunchSpec{
		Args:         []string{"sh", "-c", script},
		Env:          os.Environ(),
		LogPath:      filepath.Join(t.TempDir(), "logs", "worker.log"),
		ReportPrefix: prefix,
	}, got.add)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		<-p.Done()
	})
	return p, got
}

type lines struct {
	mu sync.Mutex
	l  []string
}

func (l *lines) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.l = append(l.l, s)
}

func (l *lines) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.l...)
}

func wait(t *testing.T, p *Process) error {
	t.Helper()
	select {
	case <-p.Done():
		return p.Err()
	case <-time.After(30 * time.Second):
		t.Fatal("the process did not end")
		return nil
	}
}

func TestProcessReportsLogsAndExitStatus(t *testing.T) {
	p, got := shell(t, `echo hello; echo "@x {\"a\": 1}"; echo "@xy"; echo oops >&2; exit 3`, "@x")
	err := wait(t, p)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 3 || err.Error() != "exited with status 3" {
		t.Errorf("exit: got %v, want exit status 3", err)
	}
	if r := got.get(); len(r) != 2 || r[0] != ` {"a": 1}` || r[1] != "y" {
		t.Errorf("report lines %q", r)
	}
	data, err := os.ReadFile(p.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	log := string(data)
	if !strings.Contains(log, "hello\n") || !strings.Contains(log, "oops\n") || strings.Contains(log, "@x") {
		t.Errorf("log:\n%s", log)
	}
	if tail := p.Tail(); len(tail) != 2 {
		t.Errorf("tail %q", tail)
	}
}

func TestProcessKillAndStop(t *testing.T) {
	p, _ := shell(t, "sleep 100", "")
	p.Kill()
	var ee *ExitError
	if err := wait(t, p); !errors.As(err, &ee) || ee.Signal != syscall.SIGKILL {
		t.Errorf("killed: got %v", err)
	}

	p, _ = shell(t, "sleep 100", "")
	p.Stop(time.Hour)
	if err := wait(t, p); !errors.As(err, &ee) || ee.Signal != syscall.SIGTERM {
		t.Errorf("stopped: got %v, want SIGTERM", err)
	}

	// A process that ignores SIGTERM is killed after the grace period.
	p, ready := shell(t, `trap "" TERM; echo ready; sleep 100`, "ready")
	waitFor(t, func() bool { return len(ready.get()) == 1 })
	p.Stop(50 * time.Millisecond)
	if err := wait(t, p); !errors.As(err, &ee) || ee.Signal != syscall.SIGKILL {
		t.Errorf("stop ignoring SIGTERM: got %v, want SIGKILL", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 3000 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("condition never met")
}

// gone waits until pid is gone or a zombie: a killed process closes its
// files (our pipes) a moment before the kernel marks it a zombie.
func gone(pid int) bool {
	for range 500 {
		if !alive(pid) {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// alive reports whether pid is a live process (not gone, not a zombie).
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func TestProcessGroupLeavesNoOrphan(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc")
	}
	// The leader starts a background child and exits at once.
	p, got := shell(t, `sleep 100 & echo "@pid $!"; exit 0`, "@pid ")
	if err := wait(t, p); err != nil {
		t.Fatalf("leader: %v", err)
	}
	r := got.get()
	if len(r) != 1 {
		t.Fatalf("report lines %q", r)
	}
	pid, err := strconv.Atoi(r[0])
	if err != nil {
		t.Fatal(err)
	}
	if !gone(pid) {
		t.Errorf("the leader's child %d outlived it", pid)
	}

	// Killing a running leader kills its children too.
	p, got = shell(t, `sleep 100 & echo "@pid $!"; wait`, "@pid ")
	waitFor(t, func() bool { return len(got.get()) == 1 })
	pid, _ = strconv.Atoi(got.get()[0])
	p.Kill()
	wait(t, p)
	if !gone(pid) {
		t.Errorf("child %d outlived its killed leader", pid)
	}
}

func TestProcessNotFound(t *testing.T) {
	_, err := StartProcess(LaunchSpec{Args: []string{"gotune-no-such-program"}, Env: os.Environ()}, nil)
	if !errors.Is(err, exec.ErrNotFound) || !strings.Contains(err.Error(), "gotune-no-such-program") {
		t.Errorf("got %v, want exec.ErrNotFound naming the program", err)
	}
	dir := t.TempDir()
	_, err = StartProcess(LaunchSpec{Args: []string{"./missing.sh"}, Dir: dir}, nil)
	if err == nil || !strings.Contains(err.Error(), "missing.sh") {
		t.Errorf("relative path: got %v", err)
	}
}

func TestProcessControlStream(t *testing.T) {
	p, err := StartProcess(LaunchSpec{
		Args:    []string{"sh", "-c", `read line <&3; echo "got $line" >&3`},
		Env:     os.Environ(),
		Control: true,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(p.Control(), "hi")
	reply, err := bufio.NewReader(p.Control()).ReadString('\n')
	if err != nil || reply != "got hi\n" {
		t.Errorf("control reply %q, %v", reply, err)
	}
	if err := wait(t, p); err != nil {
		t.Error(err)
	}
}

func TestProcessLongLines(t *testing.T) {
	// A report line over the limit goes to the log in pieces, and the
	// report handler hears of it; the lines after it still work.
	p, got := shell(t, `printf "@x "; head -c 3000000 /dev/zero | tr "\0" a; echo; echo "@x ok"`, "@x")
	if err := wait(t, p); err != nil {
		t.Fatal(err)
	}
	if r := got.get(); len(r) != 2 || r[0] != OversizeReport(3000003) || r[1] != " ok" {
		t.Errorf("report lines: %.40q, want the oversize line's stand-in, then \" ok\"", r)
	}
	if n, ok := ParseOversizeReport(OversizeReport(3000003)); !ok || n != 3000003 {
		t.Errorf("ParseOversizeReport: %d, %v", n, ok)
	}
	if _, ok := ParseOversizeReport(` {"a": 1}`); ok {
		t.Error("ParseOversizeReport takes a report line for an oversize one")
	}
	fi, err := os.Stat(p.LogPath())
	if err != nil || fi.Size() < 3000000 {
		t.Errorf("log holds %v bytes (%v), want the long line", fi.Size(), err)
	}
}

// TestProcessRewrittenLineComesInStates: a line that a script rewrites
// with carriage returns and ends only when the script does (PyTorch-GAN's
// "\r[Epoch 3/200] [Batch 12/938] [D loss: 0.69]") reaches OnOutput in
// pieces while the script runs, each ending with a whole state.
func TestProcessRewrittenLineComesInStates(t *testing.T) {
	var mu sync.Mutex
	var pieces []string
	dir := t.TempDir()
	p, err := StartProcess(LaunchSpec{
		Args: []string{"sh", "-c", `i=0; while [ $i -lt 6000 ]; do printf '\r[Epoch %d/9] [D loss: 0.%06d]' $((i / 1000)) $i; i=$((i + 1)); done
i=0; until [ -e "$1/seen" ] || [ $i -gt 200 ]; do sleep 0.05; i=$((i + 1)); done; echo`, "sh", dir},
		Env:     os.Environ(),
		LogPath: filepath.Join(dir, "worker.log"),
		OnOutput: func(line string) {
			mu.Lock()
			defer mu.Unlock()
			pieces = append(pieces, line)
			os.WriteFile(filepath.Join(dir, "seen"), nil, 0o644)
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Kill(); <-p.Done() })
	if err := wait(t, p); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(pieces) < 3 {
		t.Fatalf("OnOutput heard %d pieces, want the line in states while it was written, then its end", len(pieces))
	}
	state := regexp.MustCompile(`^\[Epoch \d/9\] \[D loss: 0\.\d{6}\]$`)
	for i, piece := range pieces[:len(pieces)-1] {
		trimmed := strings.TrimSuffix(piece, "\r")
		last := trimmed[strings.LastIndexByte(trimmed, '\r')+1:]
		if !strings.HasSuffix(piece, "\r") || !state.MatchString(last) {
			t.Errorf("piece %d ends with %q, want a whole state and its carriage return", i, piece[max(0, len(piece)-60):])
		}
	}
	if end := pieces[len(pieces)-1]; !strings.HasSuffix(end, "[Epoch 5/9] [D loss: 0.005999]") {
		t.Errorf("the line's end: %q", end[max(0, len(end)-60):])
	}
}

// TestProcessLogRotates caps a chatty process's log: the file is rotated
// into LogKeep older files, none past the cap, and the newest lines are in
// the current file.
func TestProcessLogRotates(t *testing.T) {
	for _, keep := range []int{0, 2} {
		logPath := filepath.Join(t.TempDir(), "worker.log")
		p, err := StartProcess(LaunchSpec{
			Args:        []string{"sh", "-c", `for i in $(seq 1 100); do printf "line %03d %090d\n" $i 0; done`},
			Env:         os.Environ(),
			LogPath:     logPath,
			LogMaxBytes: 1000,
			LogKeep:     keep,
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := wait(t, p); err != nil {
			t.Fatal(err)
		}
		var files []string
		for i := 0; i <= keep+1; i++ {
			path := logPath
			if i > 0 {
				path = fmt.Sprintf("%s.%d", logPath, i)
			}
			data, err := os.ReadFile(path)
			if i == keep+1 {
				if err == nil {
					t.Errorf("keep %d: %s is there, want at most %d rotated files", keep, path, keep)
				}
				continue
			}
			if err != nil || len(data) == 0 || len(data) > 1000 {
				t.Errorf("keep %d: %s: %d bytes, %v; want 1 to 1000", keep, path, len(data), err)
			}
			files = append(files, string(data))
		}
		if !strings.HasSuffix(files[0], fmt.Sprintf("line 100 %090d\n", 0)) {
			t.Errorf("keep %d: the current file does not end with the last line:\n%s", keep, files[0])
		}
		if keep > 0 && !strings.HasPrefix(files[1], "line") {
			t.Errorf("keep %d: the rotated file:\n%s", keep, files[1])
		}
	}
}

// TestLogFileOnlyWhenWritten: a process's log file, and its folder, are
// created by its first line, with the notes about it before that line; a
// process that writes nothing leaves no file unless it fails by itself.
func TestLogFileOnlyWhenWritten(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		stop         bool
		want         string // the log's content; "" for no file
	}{
		{"silent", `echo "@r {}"`, false, ""},
		// The pause lets the note come before what the process does.
		{"writes", `echo "@r {}"; sleep 0.2; echo hello >&2`, false, "gotune: note\nhello\n"},
		{"fails", `sleep 0.2; exit 3`, false, "gotune: note\n"},
		{"stopped", `exec sleep 30`, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "logs")
			p, err := StartProcess(LaunchSpec{
				Args: []string{"sh", "-c", tc.script}, Env: os.Environ(),
				LogPath: filepath.Join(dir, "worker.log"), ReportPrefix: "@r",
			}, func(string) {})
			if err != nil {
				t.Fatal(err)
			}
			p.Notef("note")
			if tc.stop {
				p.Stop(time.Second)
			}
			wait(t, p)
			data, err := os.ReadFile(p.LogPath())
			switch {
			case tc.want == "":
				if _, serr := os.Stat(dir); !errors.Is(serr, os.ErrNotExist) {
					t.Errorf("log folder: %v, want none; log %q", serr, data)
				}
			case err != nil || string(data) != tc.want:
				t.Errorf("log: %q, %v, want %q", data, err, tc.want)
			}
		})
	}
}
