// Command trainer measures how fast gotune starts and restarts a training
// group of process workers:
//
//   - start: from "group placed" (the Placer returned) to "first line of
//     user code running" in every one of the group's workers, for Go process
//     workers, for command workers that are Go programs (this binary), and
//     for command workers that are Python scripts, with torchrun starting
//     the same script as the peer where PyTorch is installed;
//   - restart: from a worker's death (SIGKILL) to the restarted group's first
//     report, for Go process workers and Go command workers.
//
// It prints one JSON object per measurement.
//
//	go run ./bench/trainer [-workers 4] [-runs 20]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gotune/gotune/trainer"
)

// The probes: the first thing each does is to note the time.
func init() {
	trainer.Register("start-probe", func(ctx context.Context, w *trainer.Worker) error {
		noteStart(w.String("dir", ""), w.Rank())
		return w.Report(ctx, map[string]float64{"ok": 1})
	})
	trainer.Register("steps", func(ctx context.Context, w *trainer.Worker) error {
		for s := 1; s <= w.Int("steps", 20); s++ {
			if err := w.Report(ctx, map[string]float64{"step": float64(s)}); err != nil {
				return err
			}
		}
		return nil
	})
}

func noteStart(dir string, rank int) {
	now := time.Now().UnixNano()
	os.WriteFile(filepath.Join(dir, fmt.Sprintf("start-%d", rank)), []byte(strconv.FormatInt(now, 10)), 0o644)
}

const pythonProbe = `import os, time
t = time.time_ns()
open(os.path.join(os.environ["PROBE_DIR"], "start-" + os.environ["RANK"]), "w").write(str(t))
print('@gotune {"ok": 1}', flush=True)
`

func main() {
	trainer.WorkerMain()
	if len(os.Args) > 1 && os.Args[1] == "command-probe" {
		os.Exit(commandProbe(os.Args[2:]))
	}
	workers := flag.Int("workers", 4, "workers per group")
	runs := flag.Int("runs", 20, "groups started per measurement; medians are reported")
	flag.Parse()
	if err := measure(*workers, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "bench/trainer:", err)
		os.Exit(1)
	}
}

// commandProbe is this binary as a command worker: "start DIR" notes its
// start and reports; "steps N" reports N times, a step every 5 ms.
func commandProbe(args []string) int {
	rank, _ := strconv.Atoi(os.Getenv("RANK"))
	switch args[0] {
	case "start":
		noteStart(args[1], rank)
		fmt.Println(`@gotune {"ok": 1}`)
	case "steps":
		n, _ := strconv.Atoi(args[1])
		for s := 1; s <= n; s++ {
			time.Sleep(5 * time.Millisecond)
			if rank == 0 {
				fmt.Printf("@gotune {\"step\": %d}\n", s)
			}
		}
	}
	return 0
}

func measure(workers, runs int) error {
	dir, err := os.MkdirTemp("", "gotune-bench-trainer-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	out := json.NewEncoder(os.Stdout)

	starts := []struct {
		kind string
		spec func(probeDir string) trainer.Spec
	}{
		{"process", func(d string) trainer.Spec {
			return trainer.Spec{Process: "start-probe", Config: map[string]any{"dir": d}}
		}},
		{"command-go", func(d string) trainer.Spec {
			return trainer.Spec{Command: []string{exe, "command-probe", "start", d}}
		}},
	}
	python := exec.Command("/usr/bin/python3", "-c", "pass").Run() == nil
	if python {
		starts = append(starts, struct {
			kind string
			spec func(string) trainer.Spec
		}{"command-python", func(d string) trainer.Spec {
			os.Setenv("PROBE_DIR", d)
			return trainer.Spec{Command: []string{"/usr/bin/python3", "-c", pythonProbe}}
		}})
	}
	for _, s := range starts {
		group, worker, err := startTimes(dir, workers, runs, s.spec)
		if err != nil {
			return fmt.Errorf("%s start: %w", s.kind, err)
		}
		line := map[string]any{
			"bench": "trainer_start", "system": "gotune", "kind": s.kind, "workers": workers, "runs": runs,
			"group_start_ms_median": ms(median(group)), "group_start_ms_p90": ms(quantile(group, 0.9)),
			"worker_start_ms_median": ms(median(worker)),
		}
		if s.kind == "process" {
			line["target_ms"] = 50
		}
		if s.kind == "command-python" {
			if peer, err := torchrunStart(dir, workers, min(runs, 5)); err == nil {
				line["peer"] = "torchrun"
				line["peer_runs"] = min(runs, 5)
				line["peer_group_start_ms_median"] = ms(median(peer))
				line["ratio"] = round(median(group)/median(peer), 3)
			} else {
				line["peer_error"] = err.Error()
			}
		}
		out.Encode(line)
	}

	restarts := []struct {
		kind string
		spec trainer.Spec
	}{
		{"process", trainer.Spec{Process: "steps", Config: map[string]any{"steps": int64(40)}}},
		{"command-go", trainer.Spec{Command: []string{exe, "command-probe", "steps", "400"}}},
	}
	for _, r := range restarts {
		lat, err := restartTimes(dir, workers, runs, r.spec)
		if err != nil {
			return fmt.Errorf("%s restart: %w", r.kind, err)
		}
		out.Encode(map[string]any{
			"bench": "trainer_restart", "system": "gotune", "kind": r.kind, "workers": workers, "runs": runs,
			"restart_ms_median": ms(median(lat)), "restart_ms_p90": ms(quantile(lat, 0.9)), "target_ms": 1000,
			"note": "kill -9 of one worker to the restarted group's first report, its start-up included",
		})
	}
	return nil
}

// timedPlacer notes when it has placed the group.
type timedPlacer struct{ placed time.Time }

func (p *timedPlacer) Place(_ context.Context, _, hi int) (trainer.Placement, error) {
	p.placed = time.Now()
	return fixed(make([]trainer.Slot, hi)), nil
}

type fixed []trainer.Slot

func (f fixed) Slots() []trainer.Slot { return f }
func (f fixed) Grow(int) int          { return 0 }
func (f fixed) Release()              {}

// discard is a Sink that lets every report pass.
type discard struct{}

func (discard) Report(context.Context, trainer.Result) (trainer.Action, error) {
	return trainer.Continue, nil
}

// startTimes starts runs groups and returns, per run, the time from
// placement to the last worker's first line, and every worker's own.
func startTimes(dir string, workers, runs int, spec func(string) trainer.Spec) (group, worker []float64, err error) {
	for i := range runs {
		probe := filepath.Join(dir, fmt.Sprintf("probe-%d", i))
		os.MkdirAll(probe, 0o755)
		s := spec(probe)
		p := &timedPlacer{}
		s.Experiment, s.Trial, s.Placer = "bench", i+1, p
		s.Scaling = trainer.ScalingConfig{NumWorkers: workers}
		if _, err := trainer.Run(context.Background(), s, discard{}); err != nil {
			return nil, nil, err
		}
		last, err := readStarts(probe, workers, p.placed, &worker)
		if err != nil {
			return nil, nil, err
		}
		group = append(group, last)
	}
	return group, worker, nil
}

// readStarts reads the workers' start times, appends each one's delay
// after t0 to all and returns the largest.
func readStarts(probe string, workers int, t0 time.Time, all *[]float64) (float64, error) {
	var last float64
	for r := range workers {
		data, err := os.ReadFile(filepath.Join(probe, fmt.Sprintf("start-%d", r)))
		if err != nil {
			return 0, err
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		if err != nil {
			return 0, err
		}
		d := time.Unix(0, ns).Sub(t0).Seconds()
		*all = append(*all, d)
		last = math.Max(last, d)
	}
	return last, nil
}

// torchrunStart measures the peer: from starting torchrun to the last of
// its workers running the same probe.
func torchrunStart(dir string, workers, runs int) ([]float64, error) {
	if exec.Command("/usr/bin/python3", "-c", "import torch.distributed.run").Run() != nil {
		return nil, errors.New("no PyTorch")
	}
	script := filepath.Join(dir, "probe.py")
	if err := os.WriteFile(script, []byte(pythonProbe), 0o644); err != nil {
		return nil, err
	}
	var group []float64
	for i := range runs {
		probe := filepath.Join(dir, fmt.Sprintf("torchrun-%d", i))
		os.MkdirAll(probe, 0o755)
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		cmd := exec.Command("/usr/bin/python3", "-m", "torch.distributed.run",
			"--nproc_per_node="+strconv.Itoa(workers), "--master_addr=127.0.0.1", "--master_port="+port,
			"--redirects", "9:0", "--tee", "9:0", script)
		cmd.Env = append(os.Environ(), "PROBE_DIR="+probe)
		t0 := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("torchrun: %v\n%s", err, out)
		}
		var all []float64
		last, err := readStarts(probe, workers, t0, &all)
		if err != nil {
			return nil, err
		}
		group = append(group, last)
	}
	return group, nil
}

// restartTimes kills one worker at the fifth report of each run and
// returns the times from the kill to the restarted group's first report.
func restartTimes(dir string, workers, runs int, spec trainer.Spec) ([]float64, error) {
	var lat []float64
	for i := range runs {
		s := spec
		s.Experiment, s.Trial = "bench", i+1
		s.Scaling = trainer.ScalingConfig{NumWorkers: workers}
		s.Failure = trainer.FailureConfig{MaxFailures: 1}
		s.ScratchDir = filepath.Join(dir, fmt.Sprintf("restart-%d", i))
		k := &killer{}
		if _, err := trainer.Run(context.Background(), s, k); err != nil {
			return nil, err
		}
		if k.first.IsZero() {
			return nil, errors.New("the restarted group never reported")
		}
		lat = append(lat, k.first.Sub(k.killed).Seconds())
	}
	return lat, nil
}

// killer kills rank 1 of the group at the fifth report and notes when the
// restarted group first reports. Rank 1 is found by its environment.
type killer struct {
	mu        sync.Mutex
	killed    time.Time
	restarted bool
	first     time.Time
}

func (k *killer) Report(_ context.Context, r trainer.Result) (trainer.Action, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case k.killed.IsZero() && r.Iteration == 5:
		pid, err := findRank(1)
		if err != nil {
			return trainer.Stop, err
		}
		k.killed = time.Now()
		syscall.Kill(pid, syscall.SIGKILL)
	case k.restarted && k.first.IsZero():
		k.first = time.Now()
	}
	return trainer.Continue, nil
}

func (k *killer) Event(context.Context, trainer.Event) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.restarted = true
	return nil
}

// findRank finds this process's worker of the given rank in /proc.
func findRank(rank int) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	want := fmt.Sprintf("%s=%d\x00", trainer.EnvWorldRank, rank)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !strings.Contains(string(env), want) || !strings.Contains(string(env), trainer.EnvExperiment+"=bench\x00") {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue
		}
		if ppid := parentOf(string(stat)); ppid == os.Getpid() {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no worker of rank %d found", rank)
}

func parentOf(stat string) int {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(stat[i+1:])
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}

func median(xs []float64) float64 { return quantile(xs, 0.5) }

func quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[int(math.Round(q*float64(len(s)-1)))]
}

func ms(s float64) float64 { return round(s*1000, 2) }

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}
