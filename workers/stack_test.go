package workers

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startStackTarget starts args with env on top of this process's. A Python
// target prints "ready" from inside the function it then waits in; the call
// returns once that line is out, so the stack is taken at its waiting point.
func startStackTarget(t *testing.T, env []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	if !strings.HasSuffix(filepath.Base(args[len(args)-1]), ".py") {
		time.Sleep(200 * time.Millisecond)
		return cmd
	}
	ready := make(chan bool, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line == "ready\n"
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("%v did not print ready", args)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%v did not start within 30 s", args)
	}
	return cmd
}

func TestProcessStack(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("stacks come from /proc, gdb and signals: Linux only")
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	_, gdbErr := exec.LookPath("gdb")
	helper, _ := filepath.Abs("../python")
	script := filepath.Join(t.TempDir(), "wait.py")
	os.WriteFile(script, []byte(`import os, sys, time
if os.environ.get("WITH_GOTUNE"):
    import gotune
def waiting_here():
    print("ready", flush=True)
    time.sleep(60)
waiting_here()
`), 0o644)
	for _, tc := range []struct {
		name       string
		args       []string
		env        []string
		wantMethod string
		want       string
	}{
		{name: "python with gotune.py", args: []string{python, script},
			env:        []string{"WITH_GOTUNE=1", "PYTHONPATH=" + helper, "GOTUNE_TRIAL_ID=1", "GOTUNE_CHECKPOINT_DIR=" + t.TempDir()},
			wantMethod: StackDumped, want: "in waiting_here"},
		{name: "plain python", args: []string{python, script}, wantMethod: StackGDB, want: "waiting_here"},
		{name: "native", args: []string{"sleep", "60"}, wantMethod: StackGDB, want: "nanosleep"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.wantMethod == StackGDB && gdbErr != nil {
				tc.wantMethod, tc.want = StackProc, "state S"
			}
			cmd := startStackTarget(t, tc.env, tc.args...)
			st, err := ProcessStack(context.Background(), cmd.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			if st.Method != tc.wantMethod || st.PID != cmd.Process.Pid {
				t.Errorf("method, pid: got %q, %d, want %q, %d", st.Method, st.PID, tc.wantMethod, cmd.Process.Pid)
			}
			if !strings.Contains(st.Text, tc.want) {
				t.Errorf("stack does not hold %q:\n%s", tc.want, st.Text)
			}
			// The process lives on: taking a stack does not end it.
			if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
				t.Errorf("the process is gone after its stack was taken: %v", err)
			}
		})
	}
}

func TestProcStack(t *testing.T) {
	cmd := startStackTarget(t, nil, "sleep", "60")
	text, err := procStack(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "(sleep): state S") {
		t.Errorf("got %q, want the thread's name and sleeping state", text)
	}
}

func TestProcessStackOfNoProcess(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	_, err := ProcessStack(context.Background(), cmd.Process.Pid)
	if err == nil || !strings.Contains(err.Error(), "gone") {
		t.Errorf("got %v, want an error saying the process is gone", err)
	}
}

func slicesContains(lines []string, s string) bool {
	for _, l := range lines {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// A worker that is a shell running a script has the script's stack too:
// the other processes of its process group follow the leader's.
func TestProcessStackOfAGroup(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	helper, _ := filepath.Abs("../python")
	script := filepath.Join(t.TempDir(), "child.py")
	os.WriteFile(script, []byte("import gotune, time\ndef child_waits():\n    print('ready', flush=True)\n    time.sleep(60)\nchild_waits()\n"), 0o644)
	spec := sh(`"$PY" "$SCRIPT"; echo done`, "PY="+python, "SCRIPT="+script, "PYTHONPATH="+helper,
		"GOTUNE_TRIAL_ID=1", "GOTUNE_CHECKPOINT_DIR="+t.TempDir())
	p, err := StartProcess(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { p.Kill(); waitDone(t, p) }()
	until(t, "the script starts", func() bool { return slicesContains(p.Tail(), "ready") })
	st, err := p.Stack(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?s)\n--- pid \d+ \(python[^)]*\), by dump\n.*in child_waits`).MatchString(st.Text) {
		t.Errorf("no stack of the shell's child (leader's by %s):\n%s", st.Method, st.Text)
	}
}

func TestCleanGDB(t *testing.T) {
	native := `[Thread debugging using libthread_db enabled]
Using host libthread_db library "/lib/x86_64-linux-gnu/libthread_db.so.1".
0x00007f in __GI___clock_nanosleep () at clock_nanosleep.c:71
71	clock_nanosleep.c: No such file or directory.

Thread 1 (Thread 0x7f (LWP 5) "sleep"):
#0  0x00007f in __GI___clock_nanosleep () at clock_nanosleep.c:71
#1  0x000055 in main ()
[Inferior 1 (process 5) detached]
`
	// gdb without the interpreter's extension, as Debian's without
	// python3-dbg answers py-bt.
	noExtension := `0x00007f in __GI___select () at select.c:69
Undefined command: "py-bt".  Try "help".

Thread 1 (Thread 0x7f (LWP 6) "python3"):
#0  0x00007f in __GI___select () at select.c:69
[Inferior 1 (process 6) detached]
`
	threads := `Thread 1 (Thread 0x7f (LWP 6) "python3"):
#0  0x00007f in __GI___select () at select.c:69
`
	for _, c := range []struct {
		name   string
		in     string
		python bool
		want   string
	}{
		{"native", native, false, `Thread 1 (Thread 0x7f (LWP 5) "sleep"):
#0  0x00007f in __GI___clock_nanosleep () at clock_nanosleep.c:71
#1  0x000055 in main ()
`},
		{"python without the extension", noExtension, true, noPyBT + "\n" + threads},
		{"a native program, gdb without the extension", noExtension, false, threads},
	} {
		if got := cleanGDB(c.in, c.python); got != c.want {
			t.Errorf("%s: got:\n%s\nwant:\n%s", c.name, got, c.want)
		}
	}
}
