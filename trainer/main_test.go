package trainer

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gotune/gotune/allreduce"
)

// TestMain lets the test binary be its own process workers (WorkerMain) and
// its own command workers (argument "gotune-test-command").
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == testCommandArg {
		os.Exit(testCommand(os.Args[2:]))
	}
	WorkerMain()
	// A race-enabled binary sleeps a second at exit unless told not to:
	// the worker processes this test binary starts are race-enabled too.
	if os.Getenv("GORACE") == "" {
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	os.Exit(m.Run())
}

const testCommandArg = "gotune-test-command"

func init() {
	Register("counter", counterFunc)
	Register("exit3", func(ctx context.Context, w *Worker) error {
		if w.Rank() == 1 {
			os.Exit(3)
		}
		<-ctx.Done()
		return ctx.Err()
	})
	Register("panic", func(ctx context.Context, w *Worker) error {
		panic("deliberate")
	})
	Register("badconfig", func(ctx context.Context, w *Worker) error {
		w.Int("lr", 0)
		return nil
	})
	Register("sum", func(ctx context.Context, w *Worker) error {
		buf := []float64{float64(w.Rank() + 1)}
		fmt.Fprintf(os.Stderr, "rank %d adds %g\n", w.Rank(), buf[0])
		if err := w.Comm().AllReduceFloat64(ctx, buf, allreduce.Sum); err != nil {
			return err
		}
		return w.Report(ctx, map[string]float64{"sum": buf[0]})
	})
	Register("whoami", func(ctx context.Context, w *Worker) error {
		return w.Report(ctx, map[string]float64{
			"rank": float64(w.Rank()), "size": float64(w.WorldSize()), "trial": float64(w.Trial()),
			"seed_ok": b2f(w.Seed() == 77), "lr": w.Float("lr", 0), "layers": float64(w.Int("layers", 0)),
			"act_ok": b2f(w.String("act", "") == "relu"), "resumed": b2f(w.ResumeDir() != ""),
		})
	})
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// step is the deterministic "training" of the counter workers: the next
// value from the last, the step, the seed and the rank.
func step(v float64, s int, seed int64, rank int) float64 {
	return math.Mod(v*1.37+float64(s)+float64(seed%97)+float64(rank)/2, 1009)
}

// counterFunc trains the counter for "steps" steps, checkpointing every
// "ckpt_every" steps (its own state file per rank), and resumes from the
// checkpoint it is given. "pid_dir" receives a file per rank with its pid;
// "sleep_ms" slows each step; "hang_marker" makes rank 0 hang at step
// "hang_at" once (the marker file remembers it did).
func counterFunc(ctx context.Context, w *Worker) error {
	if dir := w.String("pid_dir", ""); dir != "" {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("rank%d", w.Rank())), []byte(strconv.Itoa(os.Getpid())), 0o644)
	}
	start, v := 0, 1.0
	if rd := w.ResumeDir(); rd != "" {
		var err error
		if start, v, err = readState(filepath.Join(rd, fmt.Sprintf("state_%d", w.Rank()))); err != nil {
			return err
		}
	}
	every := w.Int("ckpt_every", 1)
	for s := start + 1; s <= w.Int("steps", 5); s++ {
		time.Sleep(time.Duration(w.Int("sleep_ms", 0)) * time.Millisecond)
		v = step(v, s, w.Seed(), w.Rank())
		if marker := w.String("hang_marker", ""); marker != "" && w.Rank() == 0 && s == w.Int("hang_at", 0) {
			if _, err := os.Stat(marker); err != nil {
				os.WriteFile(marker, nil, 0o644)
				<-ctx.Done()
				return ctx.Err()
			}
		}
		var opts []ReportOption
		if s%every == 0 {
			dir, err := w.CheckpointDir()
			if err != nil {
				return err
			}
			if err := writeState(filepath.Join(dir, fmt.Sprintf("state_%d", w.Rank())), s, v); err != nil {
				return err
			}
			opts = append(opts, WithCheckpoint(dir))
		}
		if err := w.Report(ctx, map[string]float64{"step": float64(s), "value": v, "size": float64(w.WorldSize())}, opts...); err != nil {
			return err
		}
	}
	return nil
}

func writeState(path string, s int, v float64) error {
	return os.WriteFile(path, []byte(fmt.Sprintf("%d %v", s, v)), 0o644)
}

func readState(path string) (int, float64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, fmt.Errorf("resume: %w", err)
	}
	var s int
	var v float64
	_, err = fmt.Sscan(string(data), &s, &v)
	return s, v, err
}

// testCommand is the test binary as a command worker: the counter of
// counterFunc, speaking the command-worker contract.
func testCommand(args []string) int {
	fs := flag.NewFlagSet("counter", flag.ContinueOnError)
	steps := fs.Int("steps", 5, "")
	every := fs.Int("ckpt-every", 1, "")
	sleepMS := fs.Int("sleep-ms", 0, "")
	shards := fs.Bool("shards", false, "every rank hands over its own state")
	shardMB := fs.Int("shard-mb", 0, "ranks other than 0 add this many MiB of padding to their shards")
	hangAt := fs.Int("hang-at", 0, "")
	hangMarker := fs.String("hang-marker", "", "")
	pidDir := fs.String("pid-dir", "", "")
	malformed := fs.Bool("malformed", false, "print malformed report lines too")
	background := fs.Bool("background", false, "start a child that would outlive the worker")
	exitAt := fs.Int("exit-at", 0, "exit with status 4 at this step")
	lockstep := fs.Bool("lockstep", false, "ranks meet at a barrier before each step and rank 0 exits last, as DDP ranks do; needs pid-dir")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	rank, _ := strconv.Atoi(os.Getenv(EnvWorldRank))
	seed, _ := strconv.ParseInt(os.Getenv(EnvSeed), 10, 64)
	if *pidDir != "" {
		os.WriteFile(filepath.Join(*pidDir, fmt.Sprintf("rank%d", rank)), []byte(strconv.Itoa(os.Getpid())), 0o644)
	}
	if *background {
		exec.Command("sleep", "300").Start()
	}
	report := func(m map[string]any) {
		data, _ := json.Marshal(m)
		fmt.Printf("@gotune %s\n", data)
	}
	state := "state"
	if *shards {
		state = fmt.Sprintf("state_%d", rank)
	}
	start, v := 0, 1.0
	if rd := os.Getenv(EnvResumeDir); rd != "" {
		var err error
		if start, v, err = readState(filepath.Join(rd, state)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	fmt.Println("a log line")
	size, _ := strconv.Atoi(os.Getenv(EnvWorldSize))
	barrier := func(name string) {
		if !*lockstep {
			return
		}
		// MASTER_PORT tells this group from the one before a restart.
		prefix := filepath.Join(*pidDir, os.Getenv("MASTER_PORT")+"-"+name+"-")
		os.WriteFile(prefix+strconv.Itoa(rank), nil, 0o644)
		for r := 0; r < size; r++ {
			for range 6000 {
				if _, err := os.Stat(prefix + strconv.Itoa(r)); err == nil {
					break
				}
				time.Sleep(2 * time.Millisecond)
			}
		}
	}
	for s := start + 1; s <= *steps; s++ {
		barrier(strconv.Itoa(s))
		time.Sleep(time.Duration(*sleepMS) * time.Millisecond)
		v = step(v, s, seed, 0)
		if s == *hangAt && rank == 0 {
			if _, err := os.Stat(*hangMarker); err != nil {
				os.WriteFile(*hangMarker, nil, 0o644)
				time.Sleep(time.Hour)
			}
		}
		if s == *exitAt {
			os.Exit(4)
		}
		if *malformed {
			fmt.Println("@gotune {not json")
			fmt.Println(`@gotune {"loss": "high"}`)
		}
		m := map[string]any{}
		if rank == 0 {
			m["step"], m["value"] = s, v
		}
		if s%*every == 0 && (rank == 0 || *shards) {
			dir, err := os.MkdirTemp(os.Getenv(EnvCheckpointDir), "ckpt-")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			if err := writeState(filepath.Join(dir, state), s, v); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			if rank > 0 && *shardMB > 0 {
				pad := make([]byte, *shardMB<<20)
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("pad_%d", rank)), pad, 0o644); err != nil {
					fmt.Fprintln(os.Stderr, err)
					return 1
				}
			}
			m["checkpoint"] = dir
		}
		if len(m) > 0 {
			report(m)
		}
	}
	if *lockstep && rank > 0 {
		rank0 := readPidFile(filepath.Join(*pidDir, "rank0"))
		for range 6000 {
			if !running(rank0) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return 0
}

func readPidFile(path string) int {
	data, _ := os.ReadFile(path)
	pid, _ := strconv.Atoi(string(data))
	return pid
}

// running reports whether pid is a process that has not exited.
func running(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// collect is a Sink that records results and events, and calls on (when
// set) for every result to decide.
type collect struct {
	mu      sync.Mutex
	results []Result
	events  []Event
	on      func(Result) Action
}

func (c *collect) Report(_ context.Context, r Result) (Action, error) {
	c.mu.Lock()
	c.results = append(c.results, r)
	on := c.on
	c.mu.Unlock()
	if on != nil {
		return on(r), nil
	}
	return Continue, nil
}

func (c *collect) Event(_ context.Context, e Event) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, e)
	return nil
}

// runCollecting runs spec to its end, failing the test on an error, and
// returns what it reported and told.
func runCollecting(t *testing.T, spec Spec) *collect {
	t.Helper()
	sink := &collect{}
	if _, err := Run(context.Background(), spec, sink); err != nil {
		t.Fatal(err)
	}
	return sink
}

// causes returns the causes of the events of kind, in order.
func (c *collect) causes(kind EventKind) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, e := range c.events {
		if e.Kind == kind {
			out = append(out, e.Cause)
		}
	}
	return out
}

// restarts returns the restart events, leaving out the others (such as
// the reports_skipped a failure may add when a report races it).
func (c *collect) restarts() []Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Event
	for _, e := range c.events {
		if e.Kind == EventRestart {
			out = append(out, e)
		}
	}
	return out
}

// series renders the results as "iteration:value" pairs, to compare runs.
func (c *collect) series() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, r := range c.results {
		fmt.Fprintf(&b, "%d:%v ", r.Iteration, r.Metrics["value"])
	}
	return b.String()
}

// testStore is a CheckpointStore that keeps every checkpoint in a folder,
// merging shards as storage.CheckpointDir does for distinct file names.
type testStore struct {
	dir string
	mu  sync.Mutex
	its []int
}

func (s *testStore) Commit(iteration int, _ map[string]float64, shards []string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.its); n > 0 && s.its[n-1] >= iteration {
		return "", fmt.Errorf("iteration %d after %d", iteration, s.its[n-1])
	}
	dst := filepath.Join(s.dir, fmt.Sprintf("checkpoint_%06d", iteration))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return "", err
	}
	for _, sh := range shards {
		entries, err := os.ReadDir(sh)
		if err != nil {
			return "", err
		}
		for _, e := range entries {
			if err := os.Rename(filepath.Join(sh, e.Name()), filepath.Join(dst, e.Name())); err != nil {
				return "", err
			}
		}
		os.RemoveAll(sh)
	}
	s.its = append(s.its, iteration)
	return dst, nil
}

// leftovers returns the live processes (zombies aside) whose environment
// names experiment, waiting a moment for killed ones to finish dying.
func leftovers(t *testing.T, experiment string) []int {
	t.Helper()
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("needs /proc to check the process table")
	}
	needle := []byte(EnvExperiment + "=" + experiment + "\x00")
	var found []int
	for range 500 {
		found = found[:0]
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == os.Getpid() {
				continue
			}
			env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
			if err != nil || !bytes.Contains(env, needle) {
				continue
			}
			if running(pid) {
				found = append(found, pid)
			}
		}
		if len(found) == 0 {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return found
}

// uniqueName is an experiment name no other test run uses, for leftovers.
func uniqueName(t *testing.T) string {
	return fmt.Sprintf("%s-%d-%d", strings.ReplaceAll(t.Name(), "/", "-"), os.Getpid(), time.Now().UnixNano())
}

// killWorker kills with SIGKILL the worker whose pid file is path. It may
// run outside the test's goroutine, so it reports with Error.
func killWorker(t *testing.T, path string) {
	pid := readPidFile(path)
	if pid <= 0 {
		t.Errorf("no pid in %s", path)
		return
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Errorf("kill worker %d: %v", pid, err)
	}
}

func errorContains(err error, want string) bool {
	return err != nil && strings.Contains(err.Error(), want)
}
