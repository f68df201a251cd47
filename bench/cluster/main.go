// Command cluster measures gotune's multi-node path: a head in this
// process and node agents as separate processes of this binary, each on a
// loopback address of its own (127.0.0.2, .3, …), talking gRPC over TCP:
//
//   - place_start: from asking the resource manager for a group of
//     -workers process workers spread over the agents to the group's
//     first report, which needs every worker started on its node, joined
//     to the group's collectives (a TCP ring across the nodes) and
//     reporting;
//   - recover_kill: from the SIGKILL of the agent running a group (its
//     workers die with it) to the restarted group's first report on
//     another node, resumed from the latest checkpoint, which the agents
//     stream to the head and back (-ckpt-kb per checkpoint);
//   - recover_stop: the same after SIGSTOP, an agent that goes silent
//     without closing its connection, as a node cut off from the network
//     does: detection waits for the heartbeat timeout (-timeout).
//
// It prints one JSON object per measurement, with medians over -runs.
// No peer is measured: Ray, the natural one, is not installed here.
//
//	go run ./bench/cluster [-agents 4] [-workers 16] [-runs 5] [-timeout 2s]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gotune/gotune/cluster"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/workers"
)

func init() {
	// steps reports every 10 ms until stopped; rank 0 hands over a
	// checkpoint of ckpt_kb KiB every 10 reports and resumes from it.
	trainer.Register("steps", func(ctx context.Context, w *trainer.Worker) error {
		start := 0
		if rd := w.ResumeDir(); rd != "" {
			fmt.Sscan(readFile(filepath.Join(rd, "step")), &start)
		}
		payload := make([]byte, w.Int("ckpt_kb", 0)<<10)
		for s := start + 1; ; s++ {
			time.Sleep(10 * time.Millisecond)
			var opts []trainer.ReportOption
			if w.Rank() == 0 && s%10 == 0 {
				dir, err := w.CheckpointDir()
				if err != nil {
					return err
				}
				os.WriteFile(filepath.Join(dir, "step"), []byte(fmt.Sprint(s)), 0o644)
				os.WriteFile(filepath.Join(dir, "payload"), payload, 0o644)
				opts = append(opts, trainer.WithCheckpoint(dir))
			}
			if err := w.Report(ctx, map[string]float64{"step": float64(s)}, opts...); err != nil {
				return err
			}
		}
	})
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

const token = "bench"

func main() {
	trainer.WorkerMain()
	if len(os.Args) > 1 && os.Args[1] == "agent" {
		os.Exit(agentMain(os.Args[2:]))
	}
	agents := flag.Int("agents", 4, "agent processes, 127.0.0.2 and up")
	workersN := flag.Int("workers", 16, "workers of the group placed and started")
	runs := flag.Int("runs", 5, "measurements of each kind; medians are reported")
	timeout := flag.Duration("timeout", 2*time.Second, "the head's heartbeat timeout")
	ckptKB := flag.Int("ckpt-kb", 1024, "checkpoint size in KiB for the recovery measurements")
	flag.Parse()
	if *workersN%*agents != 0 {
		fmt.Fprintln(os.Stderr, "bench/cluster: -workers must be a multiple of -agents")
		os.Exit(2)
	}
	b := &bench{agents: *agents, perAgent: *workersN / *agents, timeout: *timeout, ckptKB: *ckptKB}
	if err := b.run(*workersN, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "bench/cluster:", err)
		os.Exit(1)
	}
}

// agentMain is this binary as a node agent.
func agentMain(args []string) int {
	fs := flag.NewFlagSet("agent", flag.ExitOnError)
	head := fs.String("head", "", "")
	host := fs.String("host", "", "")
	name := fs.String("name", "", "")
	cpus := fs.Float64("cpus", 4, "")
	fs.Parse(args)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := cluster.RunAgent(ctx, cluster.AgentConfig{
		Head: *head, Token: token, Host: *host, Node: workers.Node{Name: *name, CPUs: *cpus},
		Retry: 20 * time.Millisecond, Logf: func(string, ...any) {},
	})
	if err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		return 1
	}
	return 0
}

type bench struct {
	agents, perAgent int
	timeout          time.Duration
	ckptKB           int

	h     *cluster.Head
	exe   string
	mu    sync.Mutex
	procs map[string]*exec.Cmd // agent processes by node name
}

func (b *bench) run(workersN, runs int) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	b.exe, b.procs = exe, map[string]*exec.Cmd{}
	h, err := cluster.ListenHead("127.0.0.1:0", cluster.HeadConfig{
		Manager: workers.NewManager(nil, workers.ManagerConfig{}), Token: token, Timeout: b.timeout,
		Logf: func(string, ...any) {},
	})
	if err != nil {
		return err
	}
	defer h.Close()
	b.h = h
	defer b.stopAgents()
	for i := range b.agents {
		if err := b.startAgent(i); err != nil {
			return err
		}
	}
	if err := b.waitAgents(); err != nil {
		return err
	}
	out := json.NewEncoder(os.Stdout)

	var places, starts []time.Duration
	for range runs {
		place, start, err := b.placeStart(workersN)
		if err != nil {
			return fmt.Errorf("place and start: %w", err)
		}
		places, starts = append(places, place), append(starts, start)
	}
	out.Encode(map[string]any{
		"bench": "cluster_place_start", "system": "gotune", "agents": b.agents, "workers": workersN, "runs": runs,
		"place_ms_median": ms(median(places)), "place_start_ms_median": ms(median(starts)),
		"place_start_ms_max": ms(slices.Max(starts)),
	})

	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP} {
		var detect, running []time.Duration
		for range runs {
			d, r, err := b.recover(sig)
			if err != nil {
				return fmt.Errorf("recover after %v: %w", sig, err)
			}
			detect, running = append(detect, d), append(running, r)
		}
		kind := map[syscall.Signal]string{syscall.SIGKILL: "kill", syscall.SIGSTOP: "stop"}[sig]
		out.Encode(map[string]any{
			"bench": "cluster_recover_" + kind, "system": "gotune", "agents": b.agents, "workers": b.perAgent,
			"runs": runs, "heartbeat_timeout_ms": ms(b.timeout), "checkpoint_kib": b.ckptKB,
			"restart_ms_median": ms(median(detect)), "running_again_ms_median": ms(median(running)),
			"running_again_ms_max": ms(slices.Max(running)),
		})
	}
	return nil
}

func agentName(i int) string { return fmt.Sprintf("agent%d", i) }

// startAgent starts agent i as a process of this binary on 127.0.0.(i+2).
func (b *bench) startAgent(i int) error {
	cmd := exec.Command(b.exe, "agent", "-head", b.h.Addr(), "-host", fmt.Sprintf("127.0.0.%d", i+2),
		"-name", agentName(i), "-cpus", fmt.Sprint(b.perAgent))
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	go cmd.Wait()
	b.mu.Lock()
	b.procs[agentName(i)] = cmd
	b.mu.Unlock()
	return nil
}

func (b *bench) stopAgents() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, cmd := range b.procs {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
	}
}

// waitAgents waits until every agent's node is live.
func (b *bench) waitAgents() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		live := 0
		for _, a := range b.h.Agents() {
			if !a.Lost {
				live++
			}
		}
		if live == b.agents {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%d of %d agents joined: %w", live, b.agents, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// placer places groups through the head's manager and starts each worker
// on its node, as the tuner does.
type placer struct {
	h   *cluster.Head
	req workers.Request

	mu     sync.Mutex
	placed time.Time
	slots  []trainer.Slot
}

func (p *placer) Place(ctx context.Context, lo, hi int) (trainer.Placement, error) {
	req := p.req
	req.Workers = hi
	a, err := p.h.Manager().Acquire(ctx, req)
	if err != nil {
		return nil, err
	}
	pl := &placement{a: a, h: p.h}
	p.mu.Lock()
	p.placed, p.slots = time.Now(), pl.Slots()
	p.mu.Unlock()
	return pl, nil
}

type placement struct {
	a *workers.Allocation
	h *cluster.Head
}

func (p *placement) Slots() []trainer.Slot {
	ws := p.a.Workers()
	slots := make([]trainer.Slot, len(ws))
	for i, w := range ws {
		slots[i].Node = w.Node
		if l := p.h.Launcher(w.NodeIndex); l != nil {
			slots[i].Launcher = l
		}
	}
	return slots
}

func (p *placement) Grow(int) int { return 0 }
func (p *placement) Release()     { p.a.Release() }

// sink notes when reports and restarts arrive and stops the group once
// told to.
type sink struct {
	mu       sync.Mutex
	reports  []time.Time
	restarts []time.Time
	first    chan struct{} // closed at the first report
	stop     bool
}

func newSink() *sink { return &sink{first: make(chan struct{})} }

func (s *sink) Report(_ context.Context, r trainer.Result) (trainer.Action, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reports = append(s.reports, time.Now())
	if len(s.reports) == 1 {
		close(s.first)
	}
	if s.stop {
		return trainer.Stop, nil
	}
	return trainer.Continue, nil
}

func (s *sink) Event(_ context.Context, e trainer.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.restarts = append(s.restarts, e.Time)
	return nil
}

// firstReportAfter is the first report after t and whether there is one.
func (s *sink) firstReportAfter(t time.Time) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.reports {
		if r.After(t) {
			return r, true
		}
	}
	return time.Time{}, false
}

func (b *bench) spec(n int, p *placer, scratch string) trainer.Spec {
	return trainer.Spec{
		Experiment: "bench", Trial: 1, Process: "steps",
		Config:  map[string]any{"ckpt_kb": int64(b.ckptKB)},
		Scaling: trainer.ScalingConfig{NumWorkers: n}, Placer: p, Launcher: b.h.Local(),
		Failure:    trainer.FailureConfig{MaxFailures: -1},
		ScratchDir: scratch, Checkpoints: &store{dir: filepath.Join(scratch, "store")}, KillTimeout: 2 * time.Second,
	}
}

// placeStart times one group of n workers from placement to first report.
func (b *bench) placeStart(n int) (place, start time.Duration, err error) {
	scratch, err := os.MkdirTemp("", "gotune-bench-cluster-")
	if err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(scratch)
	p := &placer{h: b.h, req: workers.Request{Name: "bench", Per: workers.Resources{CPUs: 1}, Placement: workers.Spread}}
	s := newSink()
	s.stop = true
	t0 := time.Now()
	_, err = trainer.Run(context.Background(), b.spec(n, p, scratch), s)
	if err != nil {
		return 0, 0, err
	}
	nodes := map[string]bool{}
	for _, sl := range p.slots {
		nodes[sl.Node] = true
	}
	if len(nodes) != b.agents {
		return 0, 0, fmt.Errorf("the group used %d nodes, want all %d agents'", len(nodes), b.agents)
	}
	first, _ := s.firstReportAfter(t0)
	return p.placed.Sub(t0), first.Sub(t0), nil
}

// recover runs a group of one agent's size, signals its agent once it
// runs, and times the restart and the first report after it.
func (b *bench) recover(sig syscall.Signal) (restart, running time.Duration, err error) {
	scratch, err := os.MkdirTemp("", "gotune-bench-cluster-")
	if err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(scratch)
	p := &placer{h: b.h, req: workers.Request{Name: "bench", Per: workers.Resources{CPUs: 1}, Placement: workers.Pack}}
	s := newSink()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := trainer.Run(ctx, b.spec(b.perAgent, p, scratch), s)
		done <- err
	}()
	finish := func() {
		cancel()
		<-done
	}
	select {
	case <-s.first:
	case err := <-done:
		cancel()
		return 0, 0, fmt.Errorf("the group ended before its first report: %v", err)
	}
	time.Sleep(150 * time.Millisecond) // a checkpoint or more is committed
	p.mu.Lock()
	victim := p.slots[0].Node
	p.mu.Unlock()
	b.mu.Lock()
	cmd := b.procs[victim]
	b.mu.Unlock()
	t0 := time.Now()
	if err := cmd.Process.Signal(sig); err != nil {
		finish()
		return 0, 0, err
	}
	deadline := time.Now().Add(time.Minute + 2*b.timeout)
	var first time.Time
	for {
		var ok bool
		if first, ok = s.firstReportAfter(t0); ok && len(s.restartTimes()) > 0 {
			break
		}
		if time.Now().After(deadline) {
			finish()
			return 0, 0, errors.New("the group did not run again")
		}
		time.Sleep(time.Millisecond)
	}
	restarted := s.restartTimes()[0]
	finish()
	// Bring the node back for the next run: a killed agent is started
	// again under its name; a stopped one resumes and joins again.
	if sig == syscall.SIGSTOP {
		cmd.Process.Signal(syscall.SIGCONT)
	} else {
		var i int
		fmt.Sscanf(strings.TrimPrefix(victim, "agent"), "%d", &i)
		if err := b.startAgent(i); err != nil {
			return 0, 0, err
		}
	}
	if err := b.waitAgents(); err != nil {
		return 0, 0, err
	}
	return restarted.Sub(t0), first.Sub(t0), nil
}

func (s *sink) restartTimes() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.restarts)
}

// store commits checkpoints by renaming the first shard, enough for the
// one rank that hands them over.
type store struct {
	dir string
	mu  sync.Mutex
}

func (s *store) Commit(iteration int, _ map[string]float64, shards []string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return "", err
	}
	dst := filepath.Join(s.dir, fmt.Sprintf("checkpoint_%06d", iteration))
	if err := os.Rename(shards[0], dst); err != nil {
		return "", err
	}
	for _, sh := range shards[1:] {
		os.RemoveAll(sh)
	}
	return dst, nil
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
