// Command curves replays real learning curves to measure what early
// stopping buys each searcher: the built-in mlp's validation accuracy
// after every epoch (1 to 27) for random configurations on the 8x8
// digits, generated once by a sweep and read from its database:
//
//	gotune run --db curves.db bench/curves/digits.toml
//	gotune query --db curves.db --json "$(cat bench/curves/table.sql)" > curves.json
//	go run ./bench/curves -table curves.json [-seeds 20] [-first-seed 1] [-epochs 5400]
//
// A suggested configuration trains as the nearest configuration of the
// table (in the space's units: log scales for lr, hidden and batch_size),
// so every system replays the same measured curves, and an epoch is a
// table lookup. Each system runs one trial at a time until it has spent
// -epochs epochs (200 full-budget trials by default):
//
//	random+asha  random search, ASHA (stop mode, grace 1, η 3, max_t 27)
//	tpe+asha     TPE, the same ASHA
//	bohb         BOHB under HyperBand (η 3, max_t 27)
//	tpe          TPE with every trial trained 27 epochs (FIFO)
//
// and, from the same table through /usr/bin/python3 (optuna_curves.py),
// Optuna 3.1's TPESampler with its HyperbandPruner and with its
// SuccessiveHalvingPruner (min_resource 1, reduction_factor 3, max 27).
// Optuna's runs are slow (about 40 s each): -optuna-dir reads runs made
// beforehand, in the background, by
//
//	/usr/bin/python3 bench/curves/optuna_curves.py --table curves.json --pruner hyperband --seeds 20 > optuna-hyperband.json
//
// and the same with --pruner sha into optuna-sha.json.
//
// Regret after e epochs is the table's best final accuracy minus the best
// final (epoch 27) accuracy of a trial that reached epoch 27 by then (1
// before any did). It prints one JSON line per system with the median
// regret over the seeds at a few epoch counts and at the end, and how
// many epochs the median run took to reach the goals' regrets.
package main

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gotune/gotune/schedulers"
	"github.com/gotune/gotune/search"
	"github.com/gotune/gotune/searchspace"
)

//go:embed optuna_curves.py
var optunaScript []byte

const maxT = 27

// systems are gotune's systems, in the order they run and print.
var systems = []string{"tpe", "random+asha", "tpe+asha", "bohb"}

// row is one measured configuration and its curve.
type row struct {
	params map[string]any
	// x is the configuration in the space's units, for the nearest lookup.
	x     []float64
	curve []float64
}

// space is digits.toml's space, less its constants.
func space() *searchspace.Space {
	s, err := searchspace.New(
		searchspace.Param{Name: "lr", Domain: searchspace.LogUniform{Low: 0.0003, High: 0.3}},
		searchspace.Param{Name: "momentum", Domain: searchspace.Uniform{Low: 0, High: 0.99}},
		searchspace.Param{Name: "hidden", Domain: searchspace.LogRandInt{Low: 8, High: 257}},
		searchspace.Param{Name: "layers", Domain: searchspace.RandInt{Low: 1, High: 4}},
		searchspace.Param{Name: "dropout", Domain: searchspace.Uniform{Low: 0, High: 0.5}},
		searchspace.Param{Name: "batch_size", Domain: searchspace.Choice{Values: []any{int64(16), int64(32), int64(64), int64(128), int64(256)}}},
	)
	if err != nil {
		panic(err)
	}
	return s
}

func num(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case int64:
		return float64(x)
	case int:
		return float64(x)
	}
	panic(fmt.Sprintf("not a number: %v (%T)", v, v))
}

// coords maps a configuration to [0, 1] per parameter, log-scaled where
// the domain is.
func coords(p map[string]any) []float64 {
	lin := func(v, lo, hi float64) float64 { return (v - lo) / (hi - lo) }
	lg := func(v, lo, hi float64) float64 { return lin(math.Log(v), math.Log(lo), math.Log(hi)) }
	return []float64{
		lg(num(p["lr"]), 0.0003, 0.3),
		lin(num(p["momentum"]), 0, 0.99),
		lg(num(p["hidden"]), 8, 256),
		lin(num(p["layers"]), 1, 3),
		lin(num(p["dropout"]), 0, 0.5),
		lg(num(p["batch_size"]), 16, 256),
	}
}

func load(path string) ([]row, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var recs []struct {
		Params string `json:"params_json"`
		Curve  string `json:"curve"`
	}
	if err := json.Unmarshal(b, &recs); err != nil {
		return nil, err
	}
	var rows []row
	for _, r := range recs {
		var rw row
		if err := json.Unmarshal([]byte(r.Params), &rw.params); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(r.Curve), &rw.curve); err != nil {
			return nil, err
		}
		if len(rw.curve) != maxT {
			return nil, fmt.Errorf("a curve of %d epochs, want %d", len(rw.curve), maxT)
		}
		rw.x = coords(rw.params)
		rows = append(rows, rw)
	}
	return rows, nil
}

// nearest is the table row closest to cfg.
func nearest(rows []row, cfg map[string]any) int {
	x := coords(cfg)
	best, bestD := 0, math.Inf(1)
	for i := range rows {
		d := 0.0
		for k := range x {
			d += (x[k] - rows[i].x[k]) * (x[k] - rows[i].x[k])
		}
		if d < bestD {
			best, bestD = i, d
		}
	}
	return best
}

// trace is a run's regret after each epoch it spent: trace[e] after e+1.
type trace []float64

// run replays one system with seed until it spent budget epochs.
func run(rows []row, system string, seed int64, budget int, top float64) (trace, error) {
	sp := space()
	var sched schedulers.Config
	var s search.Searcher
	var err error
	switch system {
	case "random+asha":
		sched = schedulers.Config{Kind: "asha", Mode: "stop", MaxT: maxT, GracePeriod: 1, ReductionFactor: 3}
		s = search.NewRandomSearch(sp, seed, search.RandomAllowRepeats())
	case "tpe+asha":
		sched = schedulers.Config{Kind: "asha", Mode: "stop", MaxT: maxT, GracePeriod: 1, ReductionFactor: 3}
		s, err = search.NewTPE(sp, seed, search.TPEAllowRepeats())
	case "bohb":
		sched = schedulers.Config{Kind: "hyperband", MaxT: maxT, GracePeriod: 1, ReductionFactor: 3}
		s, err = search.NewBOHB(sp, seed, sched.WithDefaults().HyperBandBudgets(), search.TPEAllowRepeats())
	case "tpe":
		sched = schedulers.Config{Kind: "fifo"}
		s, err = search.NewTPE(sp, seed, search.TPEAllowRepeats())
	default:
		return nil, fmt.Errorf("unknown system %q", system)
	}
	if err != nil {
		return nil, err
	}
	sch, err := schedulers.New(sched.WithDefaults(), schedulers.Env{Metric: "val_acc", Mode: "max", Checkpoints: true})
	if err != nil {
		return nil, err
	}
	var tr trace
	best := 0.0
	type state struct {
		row, epoch int
	}
	trials := map[int]*state{}
	last := map[int]*search.Observation{}
	// train runs trial from its epoch until the scheduler stops or pauses
	// it, or it ends; true when it ended.
	train := func(n int) bool {
		st := trials[n]
		for st.epoch < maxT && len(tr) < budget {
			st.epoch++
			acc := rows[st.row].curve[st.epoch-1]
			if st.epoch == maxT {
				best = max(best, acc)
			}
			tr = append(tr, top-best)
			obs := search.Observation{Step: float64(st.epoch), Score: -acc, Metrics: map[string]float64{"val_acc": acc}}
			last[n] = &obs
			s.OnResult(n, obs)
			d := sch.OnResult(schedulers.Result{Trial: n, Time: float64(st.epoch), Score: -acc, Checkpoint: true})
			switch d.Action {
			case schedulers.Stop:
				sch.OnTrialEnd(n)
				s.OnTrialEnd(n, search.TrialEnd{Status: search.TrialStopped, Last: &obs})
				return true
			case schedulers.Pause:
				return false
			}
		}
		sch.OnTrialEnd(n)
		s.OnTrialEnd(n, search.TrialEnd{Status: search.TrialCompleted, Last: last[n]})
		return true
	}
	next := 1
	for len(tr) < budget {
		if o, ok := sch.Next(schedulers.Capacity{CanResume: true, MoreTrials: true}); ok {
			switch o.Action {
			case schedulers.Stop:
				sch.OnTrialEnd(o.Trial)
				s.OnTrialEnd(o.Trial, search.TrialEnd{Status: search.TrialStopped, Last: last[o.Trial]})
			default:
				train(o.Trial)
			}
			continue
		}
		cfg, err := s.Suggest(next)
		if err != nil {
			return nil, err
		}
		trials[next] = &state{row: nearest(rows, cfg)}
		sch.OnTrialAdd(next, cfg)
		train(next)
		next++
	}
	return tr, nil
}

// summary is one system's line.
type summary struct {
	System string             `json:"system"`
	Seeds  int                `json:"seeds"`
	Regret map[string]float64 `json:"median_regret_at_epochs"`
	Final  float64            `json:"median_final_regret"`
	// ToRegret is, for each target regret, the median over seeds of the
	// epochs spent until the regret was at most it (budget+1 for a seed
	// that never got there).
	ToRegret map[string]float64 `json:"median_epochs_to_regret,omitempty"`
	// SeedsReaching is, for each target regret, how many seeds were at
	// most at it after half the epochs and after all of them: the median
	// reaches a target by then when more than half of them were.
	SeedsReaching map[string][2]int `json:"seeds_at_regret_by_half_and_end,omitempty"`
	Note          string            `json:"note,omitempty"`
}

var marks = []int{270, 540, 1080, 2700, 5400}

func summarise(system string, traces []trace, budget int, targets []float64) summary {
	out := summary{System: system, Seeds: len(traces), Regret: map[string]float64{}, ToRegret: map[string]float64{}, SeedsReaching: map[string][2]int{}}
	at := func(e int) float64 {
		var xs []float64
		for _, t := range traces {
			xs = append(xs, t[min(e, len(t))-1])
		}
		return median(xs)
	}
	for _, m := range marks {
		if m <= budget {
			out.Regret[strconv.Itoa(m)] = round(at(m))
		}
	}
	out.Final = round(at(budget))
	for _, target := range targets {
		var xs []float64
		for _, t := range traces {
			i := slices.IndexFunc(t, func(r float64) bool { return r <= target+1e-12 })
			if i < 0 {
				xs = append(xs, float64(budget+1))
			} else {
				xs = append(xs, float64(i+1))
			}
		}
		name := strconv.FormatFloat(round(target), 'g', -1, 64)
		out.ToRegret[name] = median(xs)
		var reaching [2]int
		for _, x := range xs {
			if x <= float64(budget/2) {
				reaching[0]++
			}
			if x <= float64(budget) {
				reaching[1]++
			}
		}
		out.SeedsReaching[name] = reaching
	}
	return out
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func round(x float64) float64 { return math.Round(x*1e5) / 1e5 }

func main() {
	table := flag.String("table", "curves.json", "the curves, as bench/curves/table.sql prints them with gotune query --json")
	seeds := flag.Int("seeds", 20, "seeds per system")
	firstSeed := flag.Int("first-seed", 1, "the first of gotune's seeds, the others following it: another range checks a change on seeds it was not tuned on")
	budget := flag.Int("epochs", 200*maxT, "epochs each run spends")
	python := flag.String("python", "/usr/bin/python3", "the Python with Optuna")
	optunaSeeds := flag.Int("optuna-seeds", 0, "seeds for Optuna's runs; 0 for -seeds")
	optunaDir := flag.String("optuna-dir", "", "a folder holding Optuna's runs made beforehand, optuna-hyperband.json and optuna-sha.json as optuna_curves.py prints them, read instead of running Optuna")
	only := flag.String("systems", strings.Join(systems, ","), "gotune's systems to run, comma-separated")
	flag.Parse()
	rows, err := load(*table)
	if err != nil {
		fmt.Fprintln(os.Stderr, "curves:", err)
		os.Exit(1)
	}
	top := 0.0
	for _, r := range rows {
		top = max(top, r.curve[maxT-1])
	}
	enc := json.NewEncoder(os.Stdout)
	enc.Encode(map[string]any{"configurations": len(rows), "best_final_val_acc": top, "epochs": *budget})
	chosen := strings.Split(*only, ",")
	results := map[string][]trace{}
	for _, system := range chosen {
		for seed := *firstSeed; seed < *firstSeed+*seeds; seed++ {
			t, err := run(rows, system, int64(seed), *budget, top)
			if err != nil {
				fmt.Fprintln(os.Stderr, "curves:", system, err)
				os.Exit(1)
			}
			results[system] = append(results[system], t)
		}
	}
	peerSeeds := *optunaSeeds
	if peerSeeds == 0 {
		peerSeeds = *seeds
	}
	type peer struct {
		name, version string
		traces        []trace
		err           error
	}
	var peers []peer
	for _, pruner := range []string{"hyperband", "sha"} {
		p := peer{name: "optuna tpe+" + pruner}
		if *optunaDir != "" {
			p.traces, p.version, p.err = readOptuna(filepath.Join(*optunaDir, "optuna-"+pruner+".json"))
		} else {
			p.traces, p.version, p.err = optuna(*python, *table, pruner, peerSeeds, *budget)
		}
		peers = append(peers, p)
	}
	// The goals' targets: full-budget TPE's regret at 200 trials, and
	// Optuna TPE+HyperbandPruner's final regret.
	var targets []float64
	if results["tpe"] != nil {
		targets = append(targets, summarise("tpe", results["tpe"], *budget, nil).Final)
	}
	if peers[0].err == nil {
		targets = append(targets, summarise(peers[0].name, peers[0].traces, *budget, nil).Final)
	}
	for _, system := range chosen {
		enc.Encode(summarise(system, results[system], *budget, targets))
	}
	for _, p := range peers {
		if p.err != nil {
			enc.Encode(map[string]string{"system": p.name, "skipped": p.err.Error()})
			continue
		}
		s := summarise(p.name, p.traces, *budget, targets)
		s.Note = "optuna " + p.version
		enc.Encode(s)
	}
}

// optuna runs optuna_curves.py over the table and returns its traces.
func optuna(python, table, pruner string, seeds, budget int) ([]trace, string, error) {
	cmd := exec.Command(python, "-", "--table", table, "--pruner", pruner, "--seeds", strconv.Itoa(seeds), "--epochs", strconv.Itoa(budget))
	cmd.Stdin = bytes.NewReader(optunaScript)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:]
		}
		return nil, "", fmt.Errorf("%v: %s", err, msg)
	}
	return parseOptuna(out)
}

// readOptuna reads the output of a run of optuna_curves.py saved in path.
func readOptuna(path string) ([]trace, string, error) {
	out, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	return parseOptuna(out)
}

// parseOptuna parses what optuna_curves.py prints.
func parseOptuna(out []byte) ([]trace, string, error) {
	var res struct {
		Optuna string  `json:"optuna"`
		Traces []trace `json:"traces"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, "", err
	}
	return res.Traces, res.Optuna, nil
}
