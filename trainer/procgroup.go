package trainer

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gotune/gotune/allreduce"
	"github.com/gotune/gotune/workers"
)

// procGroup is an attempt's worker processes, started by the process and
// command kinds. It stops them when the attempt ends (SIGTERM then SIGKILL
// after the grace period for a stop, SIGKILL at once for a failure), ends
// the attempt when one of them fails, and returns from wait only once every
// process of every worker's process group is gone.
type procGroup struct {
	a     *attempt
	grace time.Duration

	mu       sync.Mutex
	procs    []*workers.Process
	down     bool      // torn down: start no more
	killedAt time.Time // when the teardown began
	graceful bool
	wg       sync.WaitGroup
	failures []rankFailure
	outside  bool // a worker died of a signal the group did not send
}

// rankFailure is a worker process that failed, and when.
type rankFailure struct {
	at  time.Time
	err error
}

// procHooks are what a worker kind adds to a process's life.
type procHooks struct {
	// onReport receives the process's report lines (command workers).
	onReport func(line string)
	// exited runs once the process is gone, before its exit is judged. It
	// returns a failure to blame instead of the exit status, or nil to
	// judge by the exit status.
	exited func(p *workers.Process) (explain error)
	// finished runs when the process exited with status 0 and exited
	// returned nil.
	finished func()
}

func newProcGroup(a *attempt) *procGroup {
	pg := &procGroup{a: a, grace: a.r.spec.KillTimeout}
	if pg.grace == 0 {
		pg.grace = DefaultKillTimeout
	}
	a.onEnd(pg.teardown)
	return pg
}

// start launches rank's process. Several may start at once. A start
// failure (no such program) is permanent: the attempt ends with it.
func (pg *procGroup) start(rank int, spec workers.LaunchSpec, hooks procHooks) (*workers.Process, error) {
	pg.mu.Lock()
	if pg.down {
		pg.mu.Unlock()
		return nil, errors.New("the group is stopping")
	}
	pg.wg.Add(1)
	pg.mu.Unlock()
	var p *workers.Process
	// The heading is written before the process's first line can be read:
	// a process that exits at once still has it in its log.
	spec.Heading = func(pid int) string {
		return fmt.Sprintf("attempt %d: worker %d of %d, pid %d: %s", pg.a.trialAttempt()+1, rank, pg.a.size(), pid, strings.Join(spec.Args, " "))
	}
	// Starting creates the worker's log: on a full disk, wait for space.
	err := whileDiskFull(pg.a.ctx, func() (err error) {
		p, err = pg.a.launcher(rank).Start(spec, hooks.onReport)
		return err
	}, pg.a.diskFull)
	if err != nil {
		pg.wg.Done()
		err = fmt.Errorf("worker %d: %w%s", rank, err, pg.a.r.spec.programHint(spec.Args[0], err))
		if !errors.Is(err, workers.ErrNodeLost) {
			err = Permanent(err) // a restart would fail the same way
		}
		pg.a.fail(err) // tears down the workers already started
		return nil, err
	}
	pg.a.workers.start(rank, p.Pid(), p.LogPath())
	pg.a.setProbe(rank, p)
	pg.mu.Lock()
	pg.procs = append(pg.procs, p)
	if pg.down { // the attempt ended while this one started
		if pg.graceful {
			p.Stop(pg.grace)
		} else {
			p.Kill()
		}
	}
	pg.mu.Unlock()
	go pg.watch(rank, p, spec, hooks)
	return p, nil
}

// startAll starts every rank's process at once: launch(rank) prepares and
// starts one. It returns once every start has returned.
func startAll(n int, launch func(rank int)) {
	var wg sync.WaitGroup
	for rank := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			launch(rank)
		}()
	}
	wg.Wait()
}

// watch waits for rank's process p, launched by launch, to end, and
// fails the attempt when it ended badly.
func (pg *procGroup) watch(rank int, p *workers.Process, launch workers.LaunchSpec, hooks procHooks) {
	defer pg.wg.Done()
	<-p.Done()
	var explain error
	if hooks.exited != nil {
		explain = hooks.exited(p)
	}
	err := p.Err()
	if err == nil && explain == nil {
		pg.a.workers.end(rank, WorkerExited)
		if hooks.finished != nil {
			hooks.finished()
		}
		return
	}
	var cause error
	if explain != nil {
		cause = fmt.Errorf("worker %d: %w", rank, explain)
	} else {
		cause = exitFailure(rank, p, err, pg.a.r.spec, launch)
	}
	pg.mu.Lock()
	if stoppedFromOutside(err) {
		pg.outside = true
	}
	settle := pg.outside
	pg.mu.Unlock()
	if settle {
		// Whatever stopped a worker (a batch system ending the job, an
		// operator) most likely stops this program too: give its signal
		// time to arrive, so that the trial is interrupted, not failed.
		// The other workers' failures wait too: they may be the
		// consequences.
		select {
		case <-time.After(outsideStopSettle):
		case <-pg.a.ctx.Done():
		}
		if pg.a.ended().kind == endCancelled {
			pg.a.workers.end(rank, WorkerStopped)
			return
		}
	}
	pg.mu.Lock()
	if pg.killedAt.IsZero() || p.ExitedAt().Before(pg.killedAt) {
		pg.failures = append(pg.failures, rankFailure{p.ExitedAt(), cause})
		pg.a.workers.end(rank, WorkerFailed)
	} else {
		pg.a.workers.end(rank, WorkerStopped) // the teardown ended it
	}
	pg.mu.Unlock()
	pg.a.fail(cause)
}

// maxQuotedLine bounds each line of a worker's log that an error quotes,
// in bytes.
const maxQuotedLine = 300

// quotedTail is how many of a worker's last log lines an error quotes.
const quotedTail = 5

// quoteLines writes lines of a worker's log into an error, indented; they
// may hold escape sequences or be long.
func quoteLines(b *strings.Builder, lines []string) {
	for _, line := range lines {
		b.WriteString("\n    " + workers.Printable(line, maxQuotedLine, false))
	}
}

// outsideStopSettle is how long a worker's death by SIGTERM or SIGINT that
// the group did not send waits before it fails the attempt.
const outsideStopSettle = 2 * time.Second

// stoppedFromOutside reports whether err is a worker's death by SIGTERM or
// SIGINT. The group itself stops workers only after its teardown began, so
// such a death before that came from outside.
func stoppedFromOutside(err error) bool {
	var ee *workers.ExitError
	return errors.As(err, &ee) && ee.Code < 0 && (ee.Signal == syscall.SIGTERM || ee.Signal == syscall.SIGINT)
}

// exitFailure describes a worker process that ended badly, quoting its
// log: its last Python traceback, which holds the cause even when ordinary
// output followed it, and the end of the log. For a command's process of
// this node, launched by launch for spec's trial, a missing file it names
// that lies beside the sweep file is pointed out (see
// Spec.missingFileHint), and so is an interpreter that lacks a module the
// worker imports (see interpreterHint).
func exitFailure(rank int, p *workers.Process, err error, spec Spec, launch workers.LaunchSpec) error {
	var b strings.Builder
	var quoted []string // the traceback and the log's end after it, or the log's end
	fmt.Fprintf(&b, "worker %d (pid %d) %v", rank, p.Pid(), err)
	where := ""
	if p.LogPath() != "" {
		where = fmt.Sprintf(" (%s)", p.LogPath())
	}
	tail, tb := p.Tail(), p.Traceback()
	if tb != nil {
		fmt.Fprintf(&b, "; its last Python traceback%s:", where)
		quoteLines(&b, tb.Lines[:1])
		if tb.Omitted > 0 {
			fmt.Fprintf(&b, "\n    … %d lines left out", tb.Omitted)
		}
		quoteLines(&b, tb.Lines[1:])
		quoted = slices.Clone(tb.Lines)
		if after := min(tb.LinesAfter, quotedTail, len(tail)); after > 0 {
			if tb.LinesAfter > after {
				fmt.Fprintf(&b, "\n  followed, %d lines later, by the end of its log:", tb.LinesAfter-after)
			} else {
				b.WriteString("\n  followed by:")
			}
			quoteLines(&b, tail[len(tail)-after:])
			quoted = append(quoted, tail[len(tail)-after:]...)
		}
	} else if len(tail) > 0 {
		fmt.Fprintf(&b, "; the end of its log%s:", where)
		quoted = tail[max(0, len(tail)-quotedTail):]
		quoteLines(&b, quoted)
	}
	if p.Node() == "" && spec.Command != nil {
		dir := launch.Dir
		if dir == "" {
			dir, _ = os.Getwd()
		}
		b.WriteString(spec.missingFileHint(quoted, dir, launch.Args))
		b.WriteString(interpreterHint(quoted, launch.Args[0]))
	}
	// The line that names the exception: the traceback's last, or the
	// log's (Python prints a script's own SyntaxError without a heading).
	var last string
	if tb != nil {
		last = tb.Lines[len(tb.Lines)-1]
	} else if len(tail) > 0 {
		last = tail[len(tail)-1]
	}
	unfixable := unfixableException(last)
	if unfixable != "" && spec.Failure.MaxFailures != 0 {
		article := "a"
		if strings.ContainsRune("AEIOU", rune(unfixable[0])) {
			article = "an"
		}
		fmt.Fprintf(&b, "\n  not restarted: %s %s fails every attempt alike, since a restart runs the same code in the same environment", article, unfixable)
	}
	var failure error = errors.New(b.String())
	var ee *workers.ExitError
	if errors.As(err, &ee) {
		failure = &workerExit{msg: b.String(), exit: ee}
	}
	if unfixable != "" {
		return Permanent(failure)
	}
	return failure
}

// unfixableExceptionLine matches a Python exception line that no restart
// can fix (after torchrun's "[rank0]: ", if any): a module that cannot be
// imported, or code that does not compile.
var unfixableExceptionLine = regexp.MustCompile(`^(?:\[[^\]]*\]:\s*)?(ModuleNotFoundError|ImportError|SyntaxError|IndentationError|TabError)(?::|$)`)

// unfixableException returns the class of the exception that line, the
// last of a failed Python worker's traceback or log, names when no
// restart can fix it, else "".
func unfixableException(line string) string {
	if m := unfixableExceptionLine.FindStringSubmatch(line); m != nil {
		return m[1]
	}
	return ""
}

// workerExit is a worker process's bad exit, with its status.
type workerExit struct {
	msg  string
	exit *workers.ExitError
}

func (e *workerExit) Error() string { return e.msg }
func (e *workerExit) Unwrap() error { return e.exit }

func (pg *procGroup) teardown(graceful bool) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	pg.down = true
	pg.killedAt = time.Now()
	pg.graceful = graceful
	for _, p := range pg.procs {
		if graceful {
			p.Stop(pg.grace)
		} else {
			p.Kill()
		}
	}
}

// wait returns once every process is gone. When the attempt failed, the
// failure blamed is the earliest worker failure that the teardown did not
// cause.
func (pg *procGroup) wait() {
	pg.wg.Wait()
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if len(pg.failures) > 0 {
		first := pg.failures[0]
		for _, f := range pg.failures[1:] {
			if f.at.Before(first.at) {
				first = f
			}
		}
		if end := pg.a.ended(); end.kind == endFailed && !IsPermanent(end.err) {
			pg.a.setFailure(first.err)
		}
	}
}

// logPath is rank's log file, "" when the spec keeps none.
func (a *attempt) logPath(rank int) string {
	if a.r.spec.LogDir == "" {
		return ""
	}
	return workerLog(a.r.spec.LogDir, rank)
}

// workerLog is rank's log file in the folder logDir (Spec.LogDir).
func workerLog(logDir string, rank int) string {
	return filepath.Join(logDir, fmt.Sprintf("worker_%d.log", rank))
}

// checkpointDir creates rank's scratch folder for checkpoints, waiting for
// space on a full disk.
func (a *attempt) checkpointDir(rank int) (string, error) {
	dir := a.rankScratch(rank)
	if err := whileDiskFull(a.ctx, func() error { return os.MkdirAll(dir, 0o755) }, a.diskFull); err != nil {
		return "", fmt.Errorf("checkpoint scratch folder: %w", err)
	}
	return dir, nil
}

// groupEnv is what every process of an attempt shares in its environment.
type groupEnv struct {
	masterAddr string
	masterPort int
	rendezvous string
	group      string
	closeRdv   func()
}

// newGroupEnv picks the address of torch's store, on rank 0's node, and
// when the group has several workers starts the rendezvous their
// collectives form through, on this node's host.
func (a *attempt) newGroupEnv() (groupEnv, error) {
	ge := groupEnv{closeRdv: func() {}}
	l := a.launcher(0)
	port, err := l.FreePort(a.ctx)
	if err != nil {
		err = fmt.Errorf("pick a port for MASTER_PORT: %w", err)
		if !errors.Is(err, workers.ErrNodeLost) && a.ctx.Err() == nil {
			err = Permanent(err)
		}
		return ge, err
	}
	ge.masterAddr, ge.masterPort = l.Host(), port
	if a.size() > 1 {
		rdv, err := allreduce.NewRendezvous(net.JoinHostPort(a.r.localLauncher().Host(), "0"))
		if err != nil {
			return ge, fmt.Errorf("start the group's rendezvous: %w", err)
		}
		ge.rendezvous, ge.closeRdv = rdv.Addr(), func() { rdv.Close() }
		ge.group = fmt.Sprintf("%s/trial-%d/attempt-%d", a.r.spec.Experiment, a.r.spec.Trial, a.trialAttempt()+1)
	}
	return ge, nil
}

func (a *attempt) env(ge groupEnv, rank int, place rankInfo, checkpointDir string) []string {
	spec := a.r.spec
	tag, err := filepath.Abs(checkpointDir)
	if err != nil {
		tag = "" // the process gets a tag of its own
	}
	errorFile := a.errorFile(rank)
	if errorFile != "" {
		// torch's @record opens the file without creating its folder,
		// which the worker's log otherwise creates only with its first
		// line. Run removes the folder again when it stays empty; one that
		// cannot be made leaves torch to warn that it cannot write there.
		os.MkdirAll(filepath.Dir(errorFile), 0o755)
	}
	return workerEnv(os.Environ(), envSpec{
		tag:           tag,
		experiment:    spec.Experiment,
		trial:         spec.Trial,
		seed:          spec.Seed,
		config:        spec.Config,
		place:         place,
		checkpointDir: checkpointDir,
		resumeDir:     a.resume.dir,
		masterAddr:    ge.masterAddr,
		masterPort:    ge.masterPort,
		rendezvous:    ge.rendezvous,
		group:         ge.group,
		host:          a.launcher(rank).Host(),
		trialDir:      spec.TrialDir,
		runID:         fmt.Sprintf("%s-trial-%d", spec.Experiment, spec.Trial),
		restartCount:  spec.Restarts + a.r.restarts,
		maxRestarts:   spec.Failure.MaxFailures,
		errorFile:     errorFile,
		ompThreads:    max(int(spec.Scaling.CPUs()), 1),
		extra:         spec.Env,
	})
}

// errorFile is where torch's @record writes rank's failure, beside its
// log; "" when the spec keeps no logs, and for a worker on another node,
// where the log folder may not exist.
func (a *attempt) errorFile(rank int) string {
	if a.r.spec.LogDir == "" || a.slots[rank].remote() {
		return ""
	}
	return filepath.Join(a.r.spec.LogDir, fmt.Sprintf("worker_%d.error.json", rank))
}

// launchFolders are the folders a worker process's LaunchSpec names, so
// that a launcher on another node can provide them there: its scratch
// folder, and the checkpoint it resumes from.
func (a *attempt) launchFolders(spec *workers.LaunchSpec, checkpointDir string) {
	spec.Scratch = checkpointDir
	if a.resume.dir != "" {
		spec.Inputs = []string{a.resume.dir}
	}
}
