// Command storage measures how many reports per second the results store
// writes durably while many trials report at once: each trial is a
// goroutine that calls AddReport (which returns once its report is
// committed) in a loop, as the tuner does for every result before it asks
// the scheduler.
//
// It prints one JSON line per workload and durability setting (sync
// "normal": committed reports survive any process crash; "full": a power
// loss too), with the wall-clock rate and the rate per CPU-second the
// process used (the figure to trust on a busy machine), then, when
// /usr/bin/python3 has optuna, the same per-result workload through
// Optuna's SQLite storage (trial.report + trial.should_prune per result,
// bench/storage/optuna_peer.py) with the ratio to gotune's figure on the
// same workload shape.
//
//	go run ./bench/storage [-trials 500] [-reports 200] [-peer-trials 50] [-peer-reports 20]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/gotune/gotune/storage"
)

func main() {
	trials := flag.Int("trials", 500, "trials reporting concurrently in the sustained workload")
	reports := flag.Int("reports", 200, "reports per trial in the sustained workload")
	peerTrials := flag.Int("peer-trials", 50, "trials of the workload compared with Optuna (run one after another)")
	peerReports := flag.Int("peer-reports", 20, "reports per trial of the workload compared with Optuna")
	python := flag.String("python", "/usr/bin/python3", "the Python that has optuna; \"\" skips the peer")
	script := flag.String("peer-script", "bench/storage/optuna_peer.py", "the Optuna peer script")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of gotune's workloads to `FILE`")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench/storage:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(*trials, *reports, *peerTrials, *peerReports, *python, *script); err != nil {
		fmt.Fprintln(os.Stderr, "bench/storage:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

func run(trials, reports, peerTrials, peerReports int, python, script string) error {
	dir, err := os.MkdirTemp("", "gotune-bench-storage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	out := json.NewEncoder(os.Stdout)
	peerShape := map[bool]float64{}
	for _, full := range []bool{false, true} {
		for _, w := range []workload{
			{name: "sustained", trials: trials, reports: reports, concurrent: trials, fullSync: full},
			{name: "peer", trials: peerTrials, reports: peerReports, concurrent: 1, fullSync: full},
		} {
			res, err := w.measure(filepath.Join(dir, fmt.Sprintf("%s-%v.db", w.name, full)))
			if err != nil {
				return fmt.Errorf("%s workload: %w", w.name, err)
			}
			if w.name == "peer" {
				peerShape[full] = res["reports_per_s"].(float64)
			}
			if err := out.Encode(res); err != nil {
				return err
			}
		}
	}
	peer, err := runPeer(python, script, filepath.Join(dir, "optuna.db"), peerTrials, peerReports)
	if err != nil {
		return err
	}
	if rate, ok := peer["reports_per_s"].(float64); ok && rate > 0 {
		peer["gotune_ratio_sync_normal"] = round(peerShape[false]/rate, 1)
		peer["gotune_ratio_sync_full"] = round(peerShape[true]/rate, 1)
	}
	return out.Encode(peer)
}

// workload is trials trials, concurrent of them at a time, each making
// reports reports of four metrics.
type workload struct {
	name                        string
	trials, reports, concurrent int
	fullSync                    bool
}

func (w workload) measure(path string) (map[string]any, error) {
	ctx := context.Background()
	var opts []storage.Option
	syncMode := "normal"
	if w.fullSync {
		opts, syncMode = append(opts, storage.FullSync()), "full"
	}
	db, err := storage.Open(path, opts...)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	exp, err := db.CreateExperiment(ctx, "bench", "val_loss", "min", nil)
	if err != nil {
		return nil, err
	}
	ts := make([]*storage.Trial, w.trials)
	for i := range ts {
		if ts[i], err = db.CreateTrial(ctx, exp.ID, i+1, map[string]any{"lr": 0.01, "hidden": 64}); err != nil {
			return nil, err
		}
	}
	before := db.WriteStats()
	latencies := make([][]time.Duration, w.trials)
	next := make(chan int)
	errs := make(chan error, w.concurrent)
	var wg sync.WaitGroup
	cpu0, err := cpuTime()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	for range w.concurrent {
		wg.Go(func() {
			for i := range next {
				lat := make([]time.Duration, 0, w.reports)
				for it := 1; it <= w.reports; it++ {
					loss := 1/float64(it) + float64(i%7)/100
					m := map[string]float64{"epoch": float64(it), "train_loss": loss * 0.9, "val_loss": loss, "val_acc": 1 - loss/2}
					t0 := time.Now()
					if err := db.AddReport(ctx, ts[i].ID(), storage.Report{Iteration: it, Time: t0, Metrics: m}, &loss); err != nil {
						errs <- err
						return
					}
					lat = append(lat, time.Since(t0))
				}
				latencies[i] = lat
			}
		})
	}
	go func() {
		for i := range ts {
			next <- i
		}
		close(next)
	}()
	wg.Wait()
	wall := time.Since(start)
	cpu1, err := cpuTime()
	if err != nil {
		return nil, err
	}
	cpu := (cpu1 - cpu0).Seconds()
	close(errs)
	if err := errors.Join(<-errs); err != nil {
		return nil, err
	}
	after := db.WriteStats()
	var all []time.Duration
	for _, l := range latencies {
		all = append(all, l...)
	}
	slices.Sort(all)
	n := len(all)
	commits := after.Commits - before.Commits
	return map[string]any{
		"bench":              "storage",
		"system":             "gotune",
		"workload":           w.name,
		"sync":               syncMode,
		"trials":             w.trials,
		"concurrent_trials":  w.concurrent,
		"reports":            n,
		"wall_s":             round(wall.Seconds(), 3),
		"reports_per_s":      round(float64(n)/wall.Seconds(), 0),
		"cpu_s":              round(cpu, 3),
		"reports_per_cpu_s":  round(float64(n)/cpu, 0),
		"commits":            commits,
		"reports_per_commit": round(float64(after.Writes-before.Writes)/float64(max(commits, 1)), 1),
		"latency_p50_us":     round(float64(all[n/2].Microseconds()), 0),
		"latency_p99_us":     round(float64(all[n*99/100].Microseconds()), 0),
		"cpus":               runtime.NumCPU(),
		"gomaxprocs":         runtime.GOMAXPROCS(0),
	}, nil
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// runPeer runs the Optuna script, or says why it did not.
func runPeer(python, script, db string, trials, reports int) (map[string]any, error) {
	skipped := func(why string) map[string]any {
		return map[string]any{"bench": "storage", "system": "optuna", "skipped": why}
	}
	if python == "" {
		return skipped("-python is empty"), nil
	}
	if err := exec.Command(python, "-c", "import optuna").Run(); err != nil {
		return skipped(python + " has no optuna"), nil
	}
	cmd := exec.Command(python, script, "--trials", fmt.Sprint(trials), "--reports", fmt.Sprint(reports), "--db", db)
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("optuna peer: %w", err)
	}
	var res map[string]any
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("optuna peer printed %q: %w", b, err)
	}
	return res, nil
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}
