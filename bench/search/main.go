// Command search measures gotune's searchers, side by side with Optuna's
// in the same run when /usr/bin/python3 has optuna:
//
//   - quality: the best value after 50 and 200 trials, median over 10
//     seeds, on Branin, Hartmann6 and 10-D Rosenbrock, for gotune's
//     random, TPE and CMA-ES searchers and Optuna's TPESampler and
//     CmaEsSampler. Trials run one at a time; each searcher is driven
//     through the search.Searcher interface.
//   - multi: the hypervolume after 50 and 200 trials, median over 10
//     seeds, on ZDT1, ZDT2 (10-D) and DTLZ2 (3 objectives, 7-D), for
//     gotune's random, TPE (MOTPE) and NSGA-II searchers and Optuna's
//     NSGAIISampler and TPESampler (its MOTPE), every run's trials
//     measured by the same code here.
//   - constrained: the best feasible Branin value after 50 and 200
//     trials subject to (x0 − 2.5)² + (x1 − 7.5)² ≤ 20, median over 10
//     seeds, for gotune's TPE told the constraint and Optuna's TPESampler
//     with constraints_func.
//   - tabular: the regret (best value minus the table's minimum) after
//     100 and 200 trials, median over -tabular-seeds seeds (Optuna's over
//     -optuna-tabular-seeds), on seven generated tables of finite spaces
//     (see makeTables), with TPE asked
//     for configurations while others are pending: one at a time (k1),
//     in synchronous batches of 8 and 32 (sync8, sync32: ask k, then
//     tell k), and asynchronously with 8 and 32 pending (async8,
//     async32: tell the oldest, ask one). For gotune's TPE, the same
//     TPE ignoring pending trials and allowing repeats (as before it
//     knew of them), and Optuna's multivariate TPESampler with and
//     without constant_liar through study.ask()/tell(); with the
//     suggestions per run that repeat a pending configuration and that
//     repeat any earlier one. With -tabular-runs it writes each of
//     gotune's runs to a file; with -tabular-against, given such a file
//     from other code, it prints how this code's TPE compares with that
//     one, setting by setting (see printTabularAgainst).
//   - overhead: milliseconds for TPE to suggest the 1,000th and the
//     5,000th configuration (median of -repeat suggestions at that history
//     length), on the 3-parameter space of the Optuna overhead anchor
//     (lr log-uniform, width a choice of 4, dropout uniform), after a
//     history of random configurations, as the peer builds Optuna's;
//     gotune's also with 32 trials running.
//
// Run it from the repository root:
//
//	go run ./bench/search [-seeds 10] [-first-seed 0] [-trials 200] [-checkpoints 50,200]
//	    [-functions branin,hartmann6,rosenbrock10] [-lengths 1000,5000]
//	    [-repeat 5] [-problems zdt1,zdt2,dtlz2] [-skip quality,overhead,multi,constrained,tabular]
//	    [-tabular-seeds 5] [-optuna-tabular-seeds 5] [-tabular-peer file]
//	    [-tabular-checkpoints 100,200] [-parallel 1]
//	    [-tabular-runs file] [-tabular-against file]
//	    [-python /usr/bin/python3]
//
// It prints one JSON object per line. Without optuna it prints a line
// saying so and gotune's figures only.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gotune/gotune/search"
	"github.com/gotune/gotune/searchspace"
)

type options struct {
	firstSeed   int
	seeds       int
	trials      int
	checkpoints []int
	functions   []function
	lengths     []int
	repeat      int
	quality     bool
	overhead    bool
	multi       bool
	constrained bool
	tabular     bool
	// tabularSeeds and tabularCheckpoints are the tabular part's seeds
	// and checkpoints.
	tabularSeeds int
	// optunaTabularSeeds is the seeds of Optuna's tabular runs, slower
	// than gotune's; tabularPeer, when set, names a file of saved ones
	// to read instead of running the peer.
	optunaTabularSeeds int
	tabularPeer        string
	// tabularRuns, when set, names a file to write each of gotune's
	// tabular runs to, and tabularAgainst one of such runs (of an
	// earlier version of the code) to compare this run's with.
	tabularRuns, tabularAgainst string
	// parallel bounds the tabular part's runs at once: gotune's, and
	// the peer's processes.
	parallel           int
	tabularCheckpoints []int
	// tabularTables and tabularSystems name the tables and gotune's
	// searchers the tabular part runs; nil for all.
	tabularTables, tabularSystems []string
	problems                      []problem
	python                        string
	peerScript                    string
}

func main() {
	var o options
	var checkpoints, funcs, lengths, skip string
	flag.IntVar(&o.seeds, "seeds", 10, "seeds per function and searcher; the median is reported")
	flag.IntVar(&o.firstSeed, "first-seed", 0, "the first seed; runs use seeds first-seed, first-seed+1, …")
	flag.IntVar(&o.trials, "trials", 200, "trials per run")
	flag.StringVar(&checkpoints, "checkpoints", "50,200", "trial counts at which to report the best value")
	flag.StringVar(&funcs, "functions", "branin,hartmann6,rosenbrock10", "functions to minimise")
	flag.StringVar(&lengths, "lengths", "1000,5000", "TPE suggestions to time: the N-th, after N-1 finished trials")
	flag.IntVar(&o.repeat, "repeat", 5, "suggestions timed at each history length; the median is reported")
	var probs string
	flag.StringVar(&probs, "problems", "zdt1,zdt2,dtlz2", "multi-objective problems")
	flag.StringVar(&skip, "skip", "", `parts to skip, comma-separated: "quality", "overhead", "multi", "constrained", "tabular"`)
	flag.IntVar(&o.tabularSeeds, "tabular-seeds", 5, "seeds per table, setting and searcher in the tabular part")
	flag.IntVar(&o.optunaTabularSeeds, "optuna-tabular-seeds", 0, "seeds of Optuna's runs in the tabular part (0: as -tabular-seeds)")
	flag.StringVar(&o.tabularPeer, "tabular-peer", "", "a file of Optuna's tabular runs, as optuna_peer.py's tabular mode prints them, to read instead of running the peer")
	flag.StringVar(&o.tabularRuns, "tabular-runs", "", "a file to write each of gotune's tabular runs to, a JSON line each, for -tabular-against")
	flag.StringVar(&o.tabularAgainst, "tabular-against", "", "a file of gotune's tabular runs written by -tabular-runs (with other code): print how this run's TPE compares with them")
	flag.IntVar(&o.parallel, "parallel", 1, "the tabular part's runs at once, gotune's and the peer's processes each")
	var tabularCheckpoints string
	flag.StringVar(&tabularCheckpoints, "tabular-checkpoints", "100,200", "trial counts at which the tabular part reports the regret")
	var tabularTables, tabularSystems string
	flag.StringVar(&tabularTables, "tabular-tables", "", "the tables the tabular part runs, comma-separated; empty for all")
	flag.StringVar(&tabularSystems, "tabular-systems", "", `gotune's searchers the tabular part runs, comma-separated ("gotune_tpe", "gotune_tpe_blind"); empty for both`)
	flag.StringVar(&o.python, "python", "/usr/bin/python3", "the Python with optuna for the peer; empty to skip the peer")
	flag.StringVar(&o.peerScript, "peer-script", "bench/search/optuna_peer.py", "the peer script")
	flag.Parse()
	var err error
	if o.checkpoints, err = ints(checkpoints); err == nil {
		o.lengths, err = ints(lengths)
	}
	if err == nil {
		o.tabularCheckpoints, err = ints(tabularCheckpoints)
	}
	if tabularTables != "" {
		o.tabularTables = strings.Split(tabularTables, ",")
	}
	if tabularSystems != "" {
		o.tabularSystems = strings.Split(tabularSystems, ",")
	}
	if o.optunaTabularSeeds == 0 {
		o.optunaTabularSeeds = o.tabularSeeds
	}
	if err == nil && (o.tabularSeeds < 1 || o.optunaTabularSeeds < 1 || o.parallel < 1 || slices.Max(o.tabularCheckpoints) > o.trials) {
		err = errors.New("-tabular-seeds must be at least 1 and -tabular-checkpoints at most -trials")
	}
	if err == nil {
		o.functions, err = pick(funcs)
	}
	if err == nil && (o.seeds < 1 || o.trials < 1 || o.repeat < 1) {
		err = errors.New("-seeds, -trials and -repeat must be at least 1")
	}
	if err == nil && slices.Max(o.checkpoints) > o.trials {
		err = fmt.Errorf("a checkpoint exceeds -trials %d", o.trials)
	}
	if err == nil && slices.Min(o.lengths) <= search.TPEStartupTrials {
		err = fmt.Errorf("-lengths must exceed TPE's %d random startup trials", search.TPEStartupTrials)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "search:", err)
		os.Exit(2)
	}
	if err == nil {
		o.problems, err = pickProblems(strings.Split(probs, ","))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "search:", err)
		os.Exit(2)
	}
	skipped := strings.Split(skip, ",")
	o.quality, o.overhead = !slices.Contains(skipped, "quality"), !slices.Contains(skipped, "overhead")
	o.multi, o.constrained = !slices.Contains(skipped, "multi"), !slices.Contains(skipped, "constrained")
	o.tabular = !slices.Contains(skipped, "tabular")
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "search:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	out := json.NewEncoder(os.Stdout)
	peerOK := o.python != ""
	if peerOK {
		if _, err := os.Stat(o.peerScript); err != nil {
			peerOK = false
			out.Encode(map[string]any{"bench": "search", "peer": "optuna", "available": false, "reason": err.Error()})
		}
	}
	if o.quality {
		// The peer's quality runs take longest: start them first and run
		// gotune's beside them (nothing here is timed).
		var peer *peerRun
		if peerOK {
			names := make([]string, len(o.functions))
			for i, fn := range o.functions {
				names[i] = fn.name
			}
			peer = startPeer(o, "quality", "--functions", strings.Join(names, ","), "--samplers", "tpe,cmaes",
				"--first-seed", strconv.Itoa(o.firstSeed), "--seeds", strconv.Itoa(o.seeds), "--trials", strconv.Itoa(o.trials), "--checkpoints", joinInts(o.checkpoints))
		}
		ours, err := gotuneQuality(o)
		if err != nil {
			return err
		}
		var theirs map[string][]float64
		if peer != nil {
			theirs, peerOK = peerQuality(out, peer)
		}
		for _, fn := range o.functions {
			for _, c := range o.checkpoints {
				out.Encode(qualityLine(o, fn, c, ours, theirs))
			}
		}
	}
	if o.multi {
		if err := runMulti(o, out, peerOK); err != nil {
			return err
		}
	}
	if o.constrained {
		if err := runConstrained(o, out, peerOK); err != nil {
			return err
		}
	}
	if o.tabular {
		if err := runTabular(o, out, peerOK); err != nil {
			return err
		}
	}
	if o.overhead {
		ours, err := gotuneOverhead(o)
		if err != nil {
			return err
		}
		var theirs map[int]float64
		if peerOK {
			theirs = peerOverhead(out, startPeer(o, "overhead", "--lengths", joinInts(o.lengths), "--repeat", strconv.Itoa(o.repeat)))
		}
		for _, n := range o.lengths {
			line := map[string]any{
				"bench": "search", "figure": "tpe_suggest_ms", "suggestion": n, "history": n - 1,
				"space": "lr loguniform, width choice of 4, dropout uniform", "repeat": o.repeat,
				"gotune_ms": round(ours[overheadKey(n, 0)]),
				fmt.Sprintf("gotune_ms_%d_pending", overheadPending): round(ours[overheadKey(n, overheadPending)]),
			}
			if ms, ok := theirs[n]; ok {
				line["optuna_ms"] = round(ms)
				line["ratio"] = round(ours[overheadKey(n, 0)] / ms)
				line["target_met"] = ours[overheadKey(n, 0)] <= ms
			}
			out.Encode(line)
		}
	}
	return nil
}

// gotuneSystems are gotune's searchers, as the figures name them.
var gotuneSystems = []string{"gotune_random", "gotune_tpe", "gotune_cmaes"}

// key names one series of results: a system's searcher on a function at
// a checkpoint.
func key(system, fn string, checkpoint int) string {
	return fmt.Sprintf("%s/%s/%d", system, fn, checkpoint)
}

// gotuneQuality runs every gotune searcher on every function for every
// seed and returns the best values by key.
func gotuneQuality(o options) (map[string][]float64, error) {
	res := map[string][]float64{}
	for _, fn := range o.functions {
		for _, system := range gotuneSystems {
			for seed := int64(o.firstSeed); seed < int64(o.firstSeed+o.seeds); seed++ {
				best, err := minimise(fn, system, seed, o.trials)
				if err != nil {
					return nil, fmt.Errorf("%s on %s, seed %d: %w", system, fn.name, seed, err)
				}
				for _, c := range o.checkpoints {
					res[key(system, fn.name, c)] = append(res[key(system, fn.name, c)], best[c-1])
				}
			}
		}
	}
	return res, nil
}

// minimise drives one of gotune's searchers on fn for n trials, one at a
// time, and returns the best value after each trial.
func minimise(fn function, system string, seed int64, n int) ([]float64, error) {
	space := fn.space()
	var s search.Searcher
	var err error
	switch system {
	case "gotune_random":
		s = search.NewRandomSearch(space, seed)
	case "gotune_tpe":
		s, err = search.NewTPE(space, seed)
	case "gotune_cmaes":
		s, err = search.NewCMAES(space, seed)
	}
	if err != nil {
		return nil, err
	}
	best := make([]float64, n)
	for trial := 1; trial <= n; trial++ {
		cfg, err := s.Suggest(trial)
		if err != nil {
			return nil, err
		}
		obs := search.Observation{Step: 1, Score: fn.eval(cfg)}
		s.OnResult(trial, obs)
		s.OnTrialEnd(trial, search.TrialEnd{Status: search.TrialCompleted, Last: &obs})
		best[trial-1] = obs.Score
		if trial > 1 {
			best[trial-1] = min(obs.Score, best[trial-2])
		}
	}
	return best, nil
}

func qualityLine(o options, fn function, c int, ours, theirs map[string][]float64) map[string]any {
	line := map[string]any{
		"bench": "search", "figure": "best_value", "statistic": "median", "function": fn.name,
		"optimum": fn.optimum, "trials": c, "seeds": o.seeds, "first_seed": o.firstSeed,
	}
	for _, system := range gotuneSystems {
		line[system] = round(median(ours[key(system, fn.name, c)]))
	}
	if theirs == nil {
		return line
	}
	for _, system := range []string{"optuna_tpe", "optuna_cmaes"} {
		if vs := theirs[key(system, fn.name, c)]; len(vs) > 0 {
			line[system] = round(median(vs))
		}
	}
	g, gok := line["gotune_tpe"].(float64)
	p, pok := line["optuna_tpe"].(float64)
	if gok && pok {
		// Distance to the optimum, gotune's over Optuna's: at most 1 when
		// gotune's TPE is at least as good.
		line["tpe_gap_ratio"] = round((g - fn.optimum) / (p - fn.optimum))
		if c == o.trials {
			line["tpe_target_met"] = g <= p
		}
	}
	return line
}

// gotuneOverhead times gotune's TPE suggestions at each history length:
// when N-1 trials of random configurations (from a seeded RandomSearch,
// handed to TPE with Replay, as the peer adds random trials to Optuna's
// study) have finished, it times -repeat suggestions of trial N onwards
// (those trials end as failed, which TPE does not learn from, so the
// history length stays N-1).
func gotuneOverhead(o options) (map[int]float64, error) {
	space, err := searchspace.New(
		searchspace.Param{Name: "lr", Domain: searchspace.LogUniform{Low: 1e-4, High: 1e-1}},
		searchspace.Param{Name: "width", Domain: searchspace.Choice{Values: []any{int64(32), int64(64), int64(128), int64(256)}}},
		searchspace.Param{Name: "dropout", Domain: searchspace.Uniform{Low: 0, High: 0.5}},
	)
	if err != nil {
		return nil, err
	}
	s, err := search.NewTPE(space, 0)
	if err != nil {
		return nil, err
	}
	random := search.NewRandomSearch(space, 0)
	penalty := map[int64]float64{32: 0.12, 64: 0.05, 128: 0, 256: 0.02}
	res := map[int]float64{}
	finished, trial := 0, 0
	for _, n := range slices.Sorted(slices.Values(o.lengths)) {
		for ; finished < n-1; finished++ {
			trial++
			cfg, err := replayRandom(random, s, trial)
			if err != nil {
				return nil, err
			}
			v := 0.05 + 0.15*math.Pow(math.Log10(cfg["lr"].(float64))+2, 2) +
				math.Pow(cfg["dropout"].(float64)-0.2, 2) + penalty[cfg["width"].(int64)]
			s.OnTrialEnd(trial, search.TrialEnd{Status: search.TrialCompleted, Last: &search.Observation{Step: 1, Score: v}})
		}
		for _, pending := range []int{0, overheadPending} {
			// pending trials run (random configurations) while TPE suggests.
			var running []int
			for range pending {
				trial++
				if _, err := replayRandom(random, s, trial); err != nil {
					return nil, err
				}
				running = append(running, trial)
			}
			ms := make([]float64, o.repeat)
			for i := range ms {
				trial++
				start := time.Now()
				if _, err := s.Suggest(trial); err != nil {
					return nil, err
				}
				ms[i] = float64(time.Since(start).Microseconds()) / 1000
				s.OnTrialEnd(trial, search.TrialEnd{Status: search.TrialFailed})
			}
			for _, r := range running {
				s.OnTrialEnd(r, search.TrialEnd{Status: search.TrialFailed})
			}
			res[overheadKey(n, pending)] = median(ms)
		}
	}
	return res, nil
}

// replayRandom draws trial's configuration from random and hands it to
// s as a trial of its own (Replay), as the peer adds random trials to its
// study.
func replayRandom(random *search.RandomSearch, s *search.TPE, trial int) (map[string]any, error) {
	cfg, err := random.Suggest(trial)
	if err != nil {
		return nil, err
	}
	return cfg, s.Replay(trial, cfg)
}

// overheadPending is how many trials run while the overhead part times
// TPE's suggestions a second time.
const overheadPending = 32

// overheadKey keys gotuneOverhead's figures: the suggestion number, and
// the trials running.
func overheadKey(n, pending int) int { return n*1000 + pending }

// peerRun is a running optuna_peer.py.
type peerRun struct {
	cmd    *exec.Cmd
	stdout *bufio.Scanner
	stderr *bytes.Buffer
	err    error
}

func startPeer(o options, args ...string) *peerRun {
	cmd := exec.Command(o.python, append([]string{o.peerScript}, args...)...)
	p := &peerRun{cmd: cmd, stderr: &bytes.Buffer{}}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	p.err = err
	p.stdout = bufio.NewScanner(stdout)
	return p
}

// lines reads the peer's JSON lines until it exits. It reports the peer
// unavailable (on out, once) when it could not start, said so, or failed.
func (p *peerRun) lines(out *json.Encoder, each func(map[string]any)) bool {
	if p.err != nil {
		out.Encode(map[string]any{"bench": "search", "peer": "optuna", "available": false, "reason": p.err.Error()})
		return false
	}
	reason := ""
	for p.stdout.Scan() {
		var m map[string]any
		if err := json.Unmarshal(p.stdout.Bytes(), &m); err != nil {
			continue
		}
		switch m["mode"] {
		case "error":
			reason = fmt.Sprint(m["error"])
		case "version":
			out.Encode(map[string]any{"bench": "search", "peer": "optuna", "available": true, "version": m["optuna"]})
		default:
			each(m)
		}
	}
	if err := p.cmd.Wait(); err != nil && reason == "" {
		reason = fmt.Sprintf("%v: %s", err, lastLine(p.stderr.String()))
	}
	if reason != "" {
		out.Encode(map[string]any{"bench": "search", "peer": "optuna", "available": false, "reason": reason})
		return false
	}
	return true
}

func peerQuality(out *json.Encoder, p *peerRun) (map[string][]float64, bool) {
	res := map[string][]float64{}
	ok := p.lines(out, func(m map[string]any) {
		best, _ := m["best"].(map[string]any)
		for c, v := range best {
			n, _ := strconv.Atoi(c)
			k := key("optuna_"+fmt.Sprint(m["sampler"]), fmt.Sprint(m["function"]), n)
			res[k] = append(res[k], v.(float64))
		}
	})
	if !ok {
		return nil, false
	}
	return res, true
}

func peerOverhead(out *json.Encoder, p *peerRun) map[int]float64 {
	res := map[int]float64{}
	p.lines(out, func(m map[string]any) {
		h, _ := m["history"].(float64)
		ms, _ := m["median_ms"].(float64)
		res[int(h)+1] = ms
	})
	return res
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n == 0 {
		return math.NaN()
	}
	return (s[(n-1)/2] + s[n/2]) / 2
}

// round keeps 6 significant digits.
func round(x float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 6, 64), 64)
	return v
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a list of positive integers", s)
		}
		out = append(out, n)
	}
	return out, nil
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func pick(names string) ([]function, error) {
	var out []function
	for _, name := range strings.Split(names, ",") {
		i := slices.IndexFunc(functions, func(f function) bool { return f.name == name })
		if i < 0 {
			return nil, fmt.Errorf("unknown function %q", name)
		}
		out = append(out, functions[i])
	}
	return out, nil
}
