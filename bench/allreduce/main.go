// Command allreduce measures gotune's ring allreduce between processes of
// one host, next to Gloo's (PyTorch's CPU collectives, over TCP loopback)
// in the same run. gotune's ranks on one host connect through Unix-domain
// sockets and pass large frames through shared memory by default
// (transport "shm"); with allreduce.TCPConfig.TCPOnly they use TCP
// loopback as ranks on different hosts do ("tcp-loopback"). Both are
// measured.
//
// For each world size it starts a rendezvous and that many rank processes
// (this program, re-executed), which time a float32 sum allreduce the way
// ../shared/anchors/gloo_allreduce.py times Gloo's: each timed iteration is
// a barrier, then the allreduce; an iteration's time is the slowest rank's,
// and the figure is the median over iterations. Bus bandwidth is
// algbw × 2(n−1)/n, algbw being bytes / time (GB = 1e9 bytes).
//
//	go run ./bench/allreduce [-worlds 2,4] [-sizes-mib 1,16,64] [-iters 10] [-rounds 1] [-transports shm,tcp-loopback]
//
// It prints one JSON object per world and size with gotune's figures (and
// cpu_s, the CPU time all ranks together spend per iteration) and, when
// /usr/bin/python3 can import torch, Gloo's and the ratio of bus bandwidths. With
// -rounds N the systems take turns N times and each reports the median of
// its N medians.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gotune/gotune/allreduce"
)

// Environment of a rank process.
const (
	envRank       = "GOTUNE_BENCH_ALLREDUCE_RANK"
	envSize       = "GOTUNE_BENCH_ALLREDUCE_SIZE"
	envRendezvous = "GOTUNE_BENCH_ALLREDUCE_RENDEZVOUS"
	envConfig     = "GOTUNE_BENCH_ALLREDUCE_CONFIG"
)

// config is what the rank processes measure.
type config struct {
	SizesMiB []float64 `json:"sizes_mib"`
	Warmup   int       `json:"warmup"`
	Iters    int       `json:"iters"`
	// TCPOnly makes the ranks connect over TCP loopback rather than
	// Unix-domain sockets and shared memory.
	TCPOnly bool `json:"tcp_only"`
}

// transports are the ways gotune's ranks on one host connect, by name.
var transports = map[string]bool{"shm": false, "tcp-loopback": true} // name -> TCPOnly

// result is one world and size as a rank 0 measured it, or as Gloo did.
type result struct {
	World    int     `json:"world"`
	Bytes    int     `json:"bytes"`
	MedianS  float64 `json:"median_s"`
	MinS     float64 `json:"min_s"`
	MaxS     float64 `json:"max_s"`
	BusbwGBs float64 `json:"busbw_GBps"`
	Correct  bool    `json:"correct"`
	// CPUS is the CPU time (user and system) all ranks together spent per
	// timed iteration; zero for Gloo, which does not report it.
	CPUS float64 `json:"cpu_s,omitempty"`
}

func main() {
	if os.Getenv(envRank) != "" {
		if err := rank(); err != nil {
			fmt.Fprintln(os.Stderr, "allreduce rank:", err)
			os.Exit(1)
		}
		return
	}
	worlds := flag.String("worlds", "2,4", "comma-separated world sizes (processes)")
	sizes := flag.String("sizes-mib", "1,16,64", "comma-separated buffer sizes in MiB of float32")
	warmup := flag.Int("warmup", 3, "untimed iterations per size")
	iters := flag.Int("iters", 10, "timed iterations per size")
	rounds := flag.Int("rounds", 1, "times each system runs; the median of the rounds' medians is reported")
	anchor := flag.String("anchor", "../shared/anchors/gloo_allreduce.py", "the Gloo peer script")
	python := flag.String("python", "/usr/bin/python3", "the Python that runs the peer")
	via := flag.String("transports", "shm,tcp-loopback", "comma-separated transports of gotune's ranks: shm, tcp-loopback")
	flag.Parse()
	if err := run(*worlds, *sizes, *via, *warmup, *iters, *rounds, *anchor, *python); err != nil {
		fmt.Fprintln(os.Stderr, "allreduce:", err)
		os.Exit(1)
	}
}

func run(worldsFlag, sizesFlag, transportsFlag string, warmup, iters, rounds int, anchor, python string) error {
	worlds, err := parseList(worldsFlag, strconv.Atoi)
	if err != nil {
		return fmt.Errorf("-worlds: %w", err)
	}
	sizes, err := parseList(sizesFlag, func(s string) (float64, error) { return strconv.ParseFloat(s, 64) })
	if err != nil {
		return fmt.Errorf("-sizes-mib: %w", err)
	}
	via := strings.Split(transportsFlag, ",")
	for _, t := range via {
		if _, ok := transports[t]; !ok {
			return fmt.Errorf("-transports: unknown transport %q: want shm or tcp-loopback", t)
		}
	}
	if rounds < 1 || iters < 1 || warmup < 0 {
		return errors.New("-rounds and -iters must be at least 1, -warmup at least 0")
	}
	cfg := config{SizesMiB: sizes, Warmup: warmup, Iters: iters}

	peer := ""
	if out, err := exec.Command(python, "-c", "import torch").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "allreduce: skipping the Gloo peer: %s cannot import torch (%v: %s)\n", python, err, strings.TrimSpace(string(out)))
	} else if _, err := os.Stat(anchor); err != nil {
		fmt.Fprintf(os.Stderr, "allreduce: skipping the Gloo peer: %v\n", err)
	} else {
		peer = anchor
	}

	type key struct {
		transport    string
		world, bytes int
	}
	ours, theirs := map[key][]result{}, map[key][]result{}
	for range rounds {
		for _, w := range worlds {
			for _, t := range via {
				cfg.TCPOnly = transports[t]
				rs, err := measure(w, cfg)
				if err != nil {
					return fmt.Errorf("gotune, %s, %d ranks: %w", t, w, err)
				}
				for _, r := range rs {
					k := key{t, r.World, r.Bytes}
					ours[k] = append(ours[k], r)
				}
			}
			if peer == "" {
				continue
			}
			rs, err := gloo(python, peer, w, cfg)
			if err != nil {
				return fmt.Errorf("gloo, %d ranks: %w", w, err)
			}
			for _, r := range rs {
				theirs[key{"", r.World, r.Bytes}] = append(theirs[key{"", r.World, r.Bytes}], r)
			}
		}
	}

	enc := json.NewEncoder(os.Stdout)
	for _, w := range worlds {
		for _, mib := range sizes {
			for _, t := range via {
				k := key{t, w, mibBytes(mib)}
				r := medianResult(ours[k])
				line := map[string]any{
					"bench":      "allreduce",
					"system":     "gotune",
					"transport":  t,
					"dtype":      "float32",
					"op":         "sum",
					"world":      w,
					"size_mib":   mib,
					"bytes":      k.bytes,
					"median_s":   round(r.MedianS, 6),
					"min_s":      round(r.MinS, 6),
					"max_s":      round(r.MaxS, 6),
					"algbw_GBps": round(float64(k.bytes)/r.MedianS/1e9, 4),
					"busbw_GBps": round(r.BusbwGBs, 4),
					"cpu_s":      round(r.CPUS, 6),
					"correct":    allCorrect(ours[k]),
					"warmup":     warmup,
					"iters":      iters,
					"rounds":     rounds,
					"cpus":       runtime.NumCPU(),
				}
				if g := theirs[key{"", w, k.bytes}]; len(g) > 0 {
					gr := medianResult(g)
					line["gloo_busbw_GBps"] = round(gr.BusbwGBs, 4)
					line["gloo_median_s"] = round(gr.MedianS, 6)
					line["gloo_correct"] = allCorrect(g)
					line["ratio_vs_gloo"] = round(r.BusbwGBs/gr.BusbwGBs, 3)
				}
				if err := enc.Encode(line); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// measure runs world rank processes and returns rank 0's results.
func measure(world int, cfg config) ([]result, error) {
	rv, err := allreduce.NewRendezvous("127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer rv.Close()
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmds := make([]*exec.Cmd, world)
	var out *bufio.Scanner
	for r := range world {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(),
			envRank+"="+strconv.Itoa(r),
			envSize+"="+strconv.Itoa(world),
			envRendezvous+"="+rv.Addr(),
			envConfig+"="+string(cfgJSON))
		cmd.Stderr = os.Stderr
		if r == 0 {
			pipe, err := cmd.StdoutPipe()
			if err != nil {
				return nil, err
			}
			out = bufio.NewScanner(pipe)
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		cmds[r] = cmd
	}
	var results []result
	for out.Scan() {
		var r result
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("rank 0 printed %q: %w", out.Text(), err)
		}
		results = append(results, r)
	}
	var errs []error
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("rank %d: %w", r, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(results) != len(cfg.SizesMiB) {
		return nil, fmt.Errorf("rank 0 reported %d sizes, want %d", len(results), len(cfg.SizesMiB))
	}
	return results, nil
}

// rank is one rank process: it joins the group and measures every size.
func rank() error {
	r, _ := strconv.Atoi(os.Getenv(envRank))
	size, _ := strconv.Atoi(os.Getenv(envSize))
	var cfg config
	if err := json.Unmarshal([]byte(os.Getenv(envConfig)), &cfg); err != nil {
		return err
	}
	ctx := context.Background()
	c, err := allreduce.JoinTCP(ctx, allreduce.TCPConfig{
		Rendezvous: os.Getenv(envRendezvous), Group: "bench", Rank: r, Size: size, Host: "127.0.0.1",
		TCPOnly: cfg.TCPOnly,
	})
	if err != nil {
		return err
	}
	defer c.Close()
	enc := json.NewEncoder(os.Stdout)
	for _, mib := range cfg.SizesMiB {
		n := mibBytes(mib) / 4
		buf := make([]float32, n)
		for i := range buf {
			buf[i] = 1
		}
		for range cfg.Warmup {
			if err := c.AllReduceFloat32(ctx, buf, allreduce.Sum); err != nil {
				return err
			}
		}
		// Correctness on a fresh buffer: each rank contributes rank+1.
		chk := make([]float32, 1024)
		for i := range chk {
			chk[i] = float32(r + 1)
		}
		if err := c.AllReduceFloat32(ctx, chk, allreduce.Sum); err != nil {
			return err
		}
		correct := !slices.ContainsFunc(chk, func(v float32) bool { return v != float32(size*(size+1)/2) })

		times := make([]float64, cfg.Iters)
		cpu0 := cpuTime()
		for i := range times {
			if err := c.Barrier(ctx); err != nil {
				return err
			}
			start := time.Now()
			if err := c.AllReduceFloat32(ctx, buf, allreduce.Sum); err != nil {
				return err
			}
			times[i] = time.Since(start).Seconds()
		}
		cpu := []float64{(cpuTime() - cpu0) / float64(cfg.Iters)}
		if err := c.AllReduceFloat64(ctx, cpu, allreduce.Sum); err != nil {
			return err
		}
		// Each iteration's time is the slowest rank's.
		all := make([]float64, size*len(times))
		if err := c.AllGatherFloat64(ctx, all, times); err != nil {
			return err
		}
		if r != 0 {
			continue
		}
		for i := range times {
			for q := 1; q < size; q++ {
				times[i] = max(times[i], all[q*len(times)+i])
			}
		}
		slices.Sort(times)
		med := median(times)
		bytes := n * 4
		if err := enc.Encode(result{
			World: size, Bytes: bytes, MedianS: med, MinS: times[0], MaxS: times[len(times)-1],
			BusbwGBs: float64(bytes) / med * 2 * float64(size-1) / float64(size) / 1e9, Correct: correct,
			CPUS: cpu[0],
		}); err != nil {
			return err
		}
	}
	return nil
}

// cpuTime returns the CPU time this process has used, in seconds.
func cpuTime() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// gloo runs the peer script for one world size and returns its results.
func gloo(python, script string, world int, cfg config) ([]result, error) {
	args := []string{script, "--worlds", strconv.Itoa(world), "--warmup", strconv.Itoa(cfg.Warmup), "--iters", strconv.Itoa(cfg.Iters), "--sizes-mib"}
	for _, s := range cfg.SizesMiB {
		args = append(args, strconv.FormatFloat(s, 'f', -1, 64))
	}
	cmd := exec.Command(python, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, err
	}
	var results []result
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r result
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, fmt.Errorf("%s printed %q: %w", script, line, err)
		}
		results = append(results, r)
	}
	return results, nil
}

// medianResult returns the result whose median time is the median of rs.
func medianResult(rs []result) result {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b result) int { return cmpFloat(a.MedianS, b.MedianS) })
	return rs[(len(rs)-1)/2]
}

func allCorrect(rs []result) bool {
	return !slices.ContainsFunc(rs, func(r result) bool { return !r.Correct })
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// median of sorted xs, as Python's statistics.median.
func median(xs []float64) float64 {
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

func mibBytes(mib float64) int { return int(mib * (1 << 20)) }

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

func parseList[T any](s string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, f := range strings.Split(s, ",") {
		v, err := parse(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}
