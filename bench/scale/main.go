// Command scale measures whether a trial costs the same at the end of a
// large sweep as at its start. It runs N instant command trials (each
// worker is /bin/echo printing one report line), 64 at a time under the
// ASHA scheduler, against a fresh database, and prints one JSON line per N
// with:
//
//   - trials_per_s: the trial rate in each tenth of the sweep (a flat cost
//     per trial keeps the last tenth near the first; flat_ratio is last/first);
//   - tuner_cpu_ms_per_trial: the CPU time of this process (the tuner, its
//     storage and its trainer goroutines; getrusage RUSAGE_SELF) per trial,
//     also by tenth (flat whatever else the machine runs), and
//     workers_cpu_ms_per_trial: that of the worker processes;
//   - peak_rss_mb: the tuner's peak resident memory, and sweep_peak_rss_mb
//     that peak when the last trial ended, before Fit reads every trial
//     back for its Result;
//   - disk_bytes_per_trial: the blocks the database (with its WAL) and the
//     trials' folders occupy, per trial, and the folders left behind.
//
// Each N runs in a process of its own, so that its peak memory is its own.
//
// With -cli, each N runs through the gotune binary instead, built with go
// build into a temporary folder: `gotune run sweep.toml` in a fresh folder,
// with the same trials, once as the sweep file leaves [trainer]
// report_files out (every trial's folder gets a TensorBoard event file and
// reports.csv) and once with report_files = false. Its lines (mode "cli")
// give the trial rate, wall time, CPU per trial of gotune and its workers
// together, gotune's peak memory, and the bytes on disk per trial, all in
// and of the trials' folders alone (trial_files_bytes_per_trial), with the
// folders left behind.
//
// With -sleep D, each trial is instead a Go function that sleeps D and
// reports once, the bookkeeping workload of Ray's scalability tests (10,000
// trials of 1 s on 160 slots: -n 10000 -concurrent 160 -sleep 1s); the
// line adds floor_s, ⌈N/concurrent⌉·D (the least time the trials take: 63 s
// there, where N·D/concurrent is 62.5 s), and the wall time's overhead over
// it.
//
//	go run ./bench/scale [-n 1000,10000] [-big] [-concurrent 64] [-scheduler asha] [-sleep D] [-cpuprofile FILE]
//	go run ./bench/scale -cli [-n 1000,10000] [-big] [-concurrent 64] [-scheduler asha]
//
// -big adds N = 100,000 (about 6 minutes on 2 busy cores).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gotune/gotune/schedulers"
	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/tuner"
	"github.com/gotune/gotune/workers"
)

func main() {
	sizes := flag.String("n", "1000,10000", "comma-separated trial counts, each run in a process of its own")
	big := flag.Bool("big", false, "also run 100,000 trials")
	concurrent := flag.Int("concurrent", 64, "trials running at once")
	scheduler := flag.String("scheduler", "asha", "the scheduler kind")
	sleep := flag.Duration("sleep", 0, "run Go-function trials that sleep `D` and report once, instead of commands")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the sweep to `FILE` (with a single -n)")
	keep := flag.String("keep", "", "run in `DIR` and leave the database and folders there (with a single -n)")
	memProfile := flag.String("memprofile", "", "write a heap profile to `FILE` when 90% of the trials have ended (with a single -n)")
	cli := flag.Bool("cli", false, "run the sweep through the gotune binary, as gotune run sweep.toml does, once with the default report files and once with report_files = false")
	flag.Parse()
	var ns []int
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 10 {
			fmt.Fprintf(os.Stderr, "bench/scale: -n %q: want trial counts of at least 10\n", s)
			os.Exit(2)
		}
		ns = append(ns, n)
	}
	if *big {
		ns = append(ns, 100_000)
	}
	if *cli {
		if *sleep > 0 || *cpuProfile != "" || *keep != "" || *memProfile != "" {
			fmt.Fprintln(os.Stderr, "bench/scale: -cli takes -n, -big, -concurrent and -scheduler only")
			os.Exit(2)
		}
		if err := runCLI(ns, *concurrent, *scheduler); err != nil {
			fmt.Fprintln(os.Stderr, "bench/scale:", err)
			os.Exit(1)
		}
		return
	}
	if len(ns) > 1 {
		// One process per size, each with its own peak RSS.
		self, err := os.Executable()
		if err == nil {
			for _, n := range ns {
				cmd := exec.Command(self, "-n", strconv.Itoa(n), "-concurrent", strconv.Itoa(*concurrent), "-scheduler", *scheduler, "-sleep", sleep.String())
				cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
				if err = cmd.Run(); err != nil {
					break
				}
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench/scale:", err)
			os.Exit(1)
		}
		return
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench/scale:", err)
			os.Exit(1)
		}
	}
	res, err := measure(ns[0], *concurrent, *scheduler, *sleep, *keep, *memProfile)
	pprof.StopCPUProfile()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/scale:", err)
		os.Exit(1)
	}
	json.NewEncoder(os.Stdout).Encode(res)
}

// slices counts trial ends and notes when each tenth of the sweep is done.
type slices struct {
	mu    sync.Mutex
	n     int
	ended int
	at    []time.Time     // at[k]: when (k+1) tenths had ended
	cpu   []time.Duration // cpu[k]: this process's CPU time then
	// heap, when set, receives a heap profile once 9 tenths have ended.
	heap    string
	heapErr error
	// sweepRSS is the process's peak resident memory when the last trial
	// ended, before Fit lists the trials for its Result (kB; 0 unknown).
	sweepRSS int64
}

func (s *slices) OnReport(int, trainer.Result) {}

func (s *slices) OnTrialEnd(int, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended++
	if s.ended*10 >= (len(s.at)+1)*s.n {
		s.at = append(s.at, time.Now())
		s.cpu = append(s.cpu, cpu(rusage().self))
		if len(s.at) == 9 && s.heap != "" {
			s.heapErr = writeHeap(s.heap)
		}
		if len(s.at) == 10 {
			s.sweepRSS = peakRSS()
		}
	}
}

// peakRSS is the process's peak resident memory so far in kB (VmHWM), 0
// where /proc does not say.
func peakRSS() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}

func writeHeap(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	return errors.Join(pprof.WriteHeapProfile(f), f.Close())
}

func measure(n, concurrent int, scheduler string, sleep time.Duration, keep, memProfile string) (map[string]any, error) {
	dir := keep
	if dir == "" {
		d, err := os.MkdirTemp("", "gotune-bench-scale-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	space, err := searchspace.New(searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: 0, High: 1}})
	if err != nil {
		return nil, err
	}
	cfg := tuner.Config{
		Name:      "scale",
		Storage:   filepath.Join(dir, "gotune.db"),
		Seed:      1,
		Objective: tuner.Objective{Metric: "loss", Mode: "min"},
		Search:    tuner.SearchConfig{Algorithm: "random", NumSamples: n, MaxConcurrent: concurrent, Space: space},
		Scheduler: schedulers.Config{Kind: scheduler},
		Trainer: trainer.Config{
			Command: []string{"/bin/echo", `@gotune {"loss": {x}}`},
			Scaling: trainer.ScalingConfig{NumWorkers: 1, CPUsPerWorker: 1},
		},
		Resources: workers.Declared{CPUs: float64(concurrent)},
	}
	obs := &slices{n: n, heap: memProfile}
	opts := []tuner.Option{tuner.WithObserver(obs)}
	if sleep > 0 {
		cfg.Trainer = trainer.Config{Scaling: trainer.ScalingConfig{NumWorkers: 1, CPUsPerWorker: 1}}
		opts = append(opts, tuner.WithTrainFunc(func(ctx context.Context, w *trainer.Worker) error {
			select {
			case <-time.After(sleep):
			case <-ctx.Done():
				return ctx.Err()
			}
			return w.Report(ctx, map[string]float64{"loss": w.Float("x", 0)})
		}))
	}
	t, err := tuner.New(cfg, opts...)
	if err != nil {
		return nil, err
	}
	before := rusage()
	start := time.Now()
	if _, err := t.Fit(context.Background()); err != nil {
		return nil, err
	}
	wall := time.Since(start)
	after := rusage()
	if obs.heapErr != nil {
		return nil, obs.heapErr
	}

	rates := make([]float64, 0, 10)
	prev := start
	for _, at := range obs.at {
		rates = append(rates, round(float64(n)/10/at.Sub(prev).Seconds(), 1))
		prev = at
	}
	// CPU per trial by tenth does not depend on what else the machine runs.
	cpus := make([]float64, 0, 10)
	prevCPU := cpu(before.self)
	for _, c := range obs.cpu {
		cpus = append(cpus, round((c-prevCPU).Seconds()*1000/(float64(n)/10), 3))
		prevCPU = c
	}
	disk, folders, err := diskUsage(dir)
	if err != nil {
		return nil, err
	}
	self := cpu(after.self) - cpu(before.self)
	children := cpu(after.children) - cpu(before.children)
	out := map[string]any{
		"bench":                    "scale",
		"trials":                   n,
		"concurrent":               concurrent,
		"scheduler":                scheduler,
		"wall_s":                   round(wall.Seconds(), 2),
		"trials_per_s":             round(float64(n)/wall.Seconds(), 1),
		"trials_per_s_by_tenth":    rates,
		"tuner_cpu_ms_per_trial":   round(self.Seconds()*1000/float64(n), 3),
		"tuner_cpu_ms_by_tenth":    cpus,
		"workers_cpu_ms_per_trial": round(children.Seconds()*1000/float64(n), 3),
		"peak_rss_mb":              round(float64(after.self.Maxrss)/1024, 1),
		"sweep_peak_rss_mb":        round(float64(obs.sweepRSS)/1024, 1),
		"disk_bytes_per_trial":     round(float64(disk)/float64(n), 0),
		"folders":                  folders,
		"cpus":                     runtime.NumCPU(),
	}
	if len(rates) == 10 {
		out["flat_ratio"] = round(rates[9]/rates[0], 2)
	}
	if sleep > 0 {
		floor := sleep.Seconds() * math.Ceil(float64(n)/float64(concurrent))
		out["sleep_s"] = sleep.Seconds()
		out["floor_s"] = round(floor, 2)
		out["overhead_pct"] = round(100*(wall.Seconds()-floor)/floor, 2)
	}
	return out, nil
}

type usage struct{ self, children syscall.Rusage }

func rusage() usage {
	var u usage
	syscall.Getrusage(syscall.RUSAGE_SELF, &u.self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &u.children)
	return u
}

func cpu(r syscall.Rusage) time.Duration {
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}

// diskUsage is the bytes of the blocks the files under dir occupy, and the
// number of folders below dir.
func diskUsage(dir string) (bytes int64, folders int, err error) {
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			bytes += st.Blocks * 512
		}
		if d.IsDir() && path != dir {
			folders++
		}
		return nil
	})
	return bytes, folders, err
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}
