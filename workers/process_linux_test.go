package workers

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// withoutCgroups makes the processes the test starts do without cgroups of
// their own, as on a system that has none.
func withoutCgroups(t *testing.T) {
	cgroupOnce.Do(func() { cgroupRoot, cgroupWhyNot = findCgroupRoot() })
	root, why := cgroupRoot, cgroupWhyNot
	cgroupRoot, cgroupWhyNot = "", errors.New("turned off by the test")
	t.Cleanup(func() { cgroupRoot, cgroupWhyNot = root, why })
}

// confinements are the ways a worker's processes are kept together: its
// own cgroup, where this system lets the test create one, and its tag.
func confinements(t *testing.T) []string {
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("needs /proc")
	}
	cg, err := newCgroup()
	if err != nil {
		t.Logf("no cgroup v2 here (%v): only the tag is tested", err)
		return []string{"tag"}
	}
	cg.remove()
	return []string{"cgroup", "tag"}
}

// TestProcessLeavesNoEscapedDescendant starts workers whose child leaves
// the process group with setsid: it dies with the worker, whether the
// worker exits, is killed, or is stopped.
func TestProcessLeavesNoEscapedDescendant(t *testing.T) {
	for _, how := range confinements(t) {
		t.Run(how, func(t *testing.T) {
			if how == "tag" {
				withoutCgroups(t)
			}
			for _, end := range []string{"exit", "kill", "stop"} {
				script := `setsid sleep 1000 & echo "@pid $!"; wait`
				if end == "exit" {
					script = `setsid sleep 1000 & echo "@pid $!"; sleep 0.2; exit 0`
				}
				p, got := shell(t, script, "@pid ")
				waitFor(t, func() bool { return len(got.get()) == 1 })
				pid, _ := strconv.Atoi(got.get()[0])
				waitFor(t, func() bool { _, ok := processTag(pid); return ok }) // setsid has exec'd sleep
				if how == "cgroup" {
					data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
					if !strings.Contains(string(data), "/gotune-") {
						t.Errorf("%s: the escaped child is in cgroup %s", end, data)
					}
				}
				switch end {
				case "kill":
					p.Kill()
				case "stop":
					p.Stop(time.Hour)
				}
				wait(t, p)
				if !gone(pid) {
					t.Errorf("%s: the child %d that called setsid outlived its worker", end, pid)
					syscall.Kill(pid, syscall.SIGKILL)
				}
				if p.cg != nil {
					if _, err := os.Stat(p.cg.path); err == nil {
						t.Errorf("%s: cgroup %s is still there", end, p.cg.path)
					}
				}
			}
		})
	}
}

// TestKillTagged kills what a worker left behind by its tag's prefix, as
// a run after a killed one does, and nothing else.
func TestKillTagged(t *testing.T) {
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("needs /proc")
	}
	prefix := filepath.Join(t.TempDir(), "exp") + "/"
	start := func(tag string) int {
		cmd := exec.Command("sh", "-c", "setsid sleep 1000 >/dev/null 2>&1 & echo $!")
		cmd.Env = append(os.Environ(), TagVar+"="+tag)
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(out)))
		t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
		waitFor(t, func() bool { _, ok := processTag(pid); return ok })
		return pid
	}
	mine := []int{start(prefix + "trial_1/rank-0"), start(prefix + "trial_2/rank-1")}
	other := start(strings.TrimSuffix(prefix, "/") + "2/trial_1/rank-0")
	if n := KillTagged(prefix); n != 2 {
		t.Errorf("killed %d, want 2", n)
	}
	for _, pid := range mine {
		if !gone(pid) {
			t.Errorf("%d survived", pid)
		}
	}
	if !alive(other) {
		t.Errorf("%d of another experiment was killed", other)
	}
}

// TestSubreap runs itself again as a program that calls Subreap and
// starts a worker whose child starts a process and exits: the orphan is
// adopted by the program rather than by init, dies with the worker, and
// is reaped.
func TestSubreap(t *testing.T) {
	if os.Getenv("GOTUNE_TEST_SUBREAP") != "1" {
		if _, err := os.Stat("/proc/self/stat"); err != nil {
			t.Skip("needs /proc")
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestSubreap$", "-test.v")
		cmd.Env = append(os.Environ(), "GOTUNE_TEST_SUBREAP=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return
	}
	if err := Subreap(); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(t.TempDir(), "pid")
	p, got := shell(t, `sh -c 'setsid sleep 1000 >/dev/null 2>&1 & echo $! > "$0"' `+pidFile+`; echo "@pid $(cat `+pidFile+`)"; sleep 100`, "@pid ")
	waitFor(t, func() bool { return len(got.get()) == 1 })
	pid, _ := strconv.Atoi(got.get()[0])
	waitFor(t, func() bool { _, ok := processTag(pid); return ok })
	if st, _ := readProcStat(pid); st.ppid != os.Getpid() {
		t.Errorf("the orphan's parent is %d, want this process, %d", st.ppid, os.Getpid())
	}
	p.Kill()
	wait(t, p)
	for range 300 {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			return // killed and reaped
		}
		time.Sleep(10 * time.Millisecond)
	}
	st, _ := readProcStat(pid)
	t.Errorf("the orphan %d is still there, in state %c", pid, st.state)
}

// TestRunCommandUnderSubreap runs short commands in a program that called
// Subreap: RunCommand gets every exit status, none taken by the reaper.
func TestRunCommandUnderSubreap(t *testing.T) {
	if os.Getenv("GOTUNE_TEST_SUBREAP") != "1" {
		if _, err := os.Stat("/proc/self/stat"); err != nil {
			t.Skip("needs /proc")
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestRunCommandUnderSubreap$", "-test.v")
		cmd.Env = append(os.Environ(), "GOTUNE_TEST_SUBREAP=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return
	}
	if err := Subreap(); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		err := RunCommand(exec.Command("sh", "-c", "exit 3"))
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 {
			t.Fatalf("run %d: %v, want exit status 3", i, err)
		}
	}
}
