package workers

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The warden is a helper process of the same program, started with the
// first worker process once Subreap has been called. A worker process dies
// with its launcher (a parent-death signal), but what it started does not:
// the warden outlives a launcher killed with SIGKILL and kills, for each
// worker process still running then, the rest of its cgroup or the
// processes that carry its tag. The launcher tells it of each worker
// process as it starts and ends, one line each on the warden's stdin; the
// warden acts when that pipe closes, that is when the launcher is gone
// however it ended, and then exits.

// wardenVar is set in the environment of a warden process.
const wardenVar = "GOTUNE_WARDEN"

var warden struct {
	sync.Mutex
	wanted  bool     // Subreap was called: start one with the first process
	started bool     // tried already
	w       *os.File // the warden's stdin; nil without a warden
}

// WardenMain runs this process as the warden when it was started as one,
// and exits; otherwise it returns at once. A program that calls Subreap
// must call WardenMain first thing in main.
func WardenMain() {
	if os.Getenv(wardenVar) != "1" {
		return
	}
	// Signals for the launcher's terminal are not for the warden: it ends
	// when the launcher has.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	watched := map[string]bool{}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		op, what, ok := strings.Cut(sc.Text(), " ")
		switch {
		case !ok:
		case op == "+":
			watched[what] = true
		case op == "-":
			delete(watched, what)
		}
	}
	for what := range watched {
		kind, value, _ := strings.Cut(what, " ")
		switch kind {
		case "cgroup":
			c := &cgroup{path: value}
			c.signal(syscall.SIGKILL)
			for i := 0; i < 100 && os.Remove(value) != nil; i++ {
				time.Sleep(20 * time.Millisecond)
			}
		case "tag":
			for i := 0; i < 10 && signalTagged(func(tag string) bool { return tag == value }, syscall.SIGKILL) > 0; i++ {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	os.Exit(0)
}

// watch tells the warden that p runs (on) or has ended (off), starting
// the warden first where Subreap asked for one. It returns why there is no
// warden when one was wanted but could not start.
func (p *Process) watch(on bool) error {
	warden.Lock()
	defer warden.Unlock()
	var err error
	if warden.wanted && !warden.started {
		warden.started = true
		warden.w, err = startWarden()
	}
	if warden.w == nil {
		return err
	}
	what := "tag " + p.tag
	if p.cg != nil {
		what = "cgroup " + p.cg.path
	}
	op := "-"
	if on {
		op = "+"
	}
	if strings.ContainsAny(what, "\n") {
		return nil // a tag the protocol cannot carry: found by the next run only
	}
	fmt.Fprintf(warden.w, "%s %s\n", op, what)
	return nil
}

// startWarden starts this program as the warden and returns its stdin.
// The warden leads a process group of its own, so that signals for the
// launcher's group (a terminal's Ctrl-C) do not reach it; it has no
// parent-death signal, so that it outlives the launcher.
func startWarden() (*os.File, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("no warden: %w", err)
	}
	r, w, err := os.Pipe() // close-on-exec: no worker inherits w
	if err != nil {
		return nil, fmt.Errorf("no warden: %w", err)
	}
	defer r.Close()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), wardenVar+"=1")
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Not registered as started: the reaper of Subreap reaps it, should it
	// end before this process does.
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("no warden: %w", err)
	}
	return w, nil
}
