package main

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gotune/gotune/pareto"
	"github.com/gotune/gotune/search"
	"github.com/gotune/gotune/searchspace"
)

// problem is a multi-objective benchmark problem over [0, 1]^dims, every
// objective minimised. optuna_peer.py defines the same problems under the
// same names.
type problem struct {
	name string
	dims int
	// ref bounds the hypervolume: only points below it in every objective
	// count.
	ref []float64
	f   func(x []float64) []float64
}

// zdtG is the distance term of Zitzler, Deb and Thiele's problems.
func zdtG(x []float64) float64 {
	s := 0.0
	for _, v := range x[1:] {
		s += v
	}
	return 1 + 9*s/float64(len(x)-1)
}

// problems: ZDT1 (convex front f2 = 1 − √f1) and ZDT2 (concave, 1 − f1²)
// in 10 dimensions, and DTLZ2 (a sphere's octant) with 3 objectives in 7.
var problems = []problem{
	{"zdt1", 10, []float64{1.1, 11}, func(x []float64) []float64 {
		g := zdtG(x)
		return []float64{x[0], g * (1 - math.Sqrt(x[0]/g))}
	}},
	{"zdt2", 10, []float64{1.1, 11}, func(x []float64) []float64 {
		g := zdtG(x)
		return []float64{x[0], g * (1 - (x[0]/g)*(x[0]/g))}
	}},
	{"dtlz2", 7, []float64{1.1, 1.1, 1.1}, func(x []float64) []float64 {
		g := 0.0
		for _, v := range x[2:] {
			g += (v - 0.5) * (v - 0.5)
		}
		a, b := x[0]*math.Pi/2, x[1]*math.Pi/2
		return []float64{(1 + g) * math.Cos(a) * math.Cos(b), (1 + g) * math.Cos(a) * math.Sin(b), (1 + g) * math.Sin(a)}
	}},
}

// pickProblems returns the problems named in a comma-separated list.
func pickProblems(names []string) ([]problem, error) {
	var out []problem
	for _, n := range names {
		i := slices.IndexFunc(problems, func(p problem) bool { return p.name == n })
		if i < 0 {
			return nil, fmt.Errorf("unknown problem %q (have zdt1, zdt2, dtlz2)", n)
		}
		out = append(out, problems[i])
	}
	return out, nil
}

// gotuneMultiSystems are gotune's searchers of several objectives.
var gotuneMultiSystems = []string{"gotune_random", "gotune_tpe", "gotune_nsga2"}

// solve drives one of gotune's searchers on p for n trials, one at a
// time, and returns every trial's objectives.
func solve(p problem, system string, seed int64, n int) ([][]float64, error) {
	var params []searchspace.Param
	for i := range p.dims {
		params = append(params, searchspace.Param{Name: fmt.Sprintf("x%d", i), Domain: searchspace.Uniform{Low: 0, High: 1}})
	}
	space, err := searchspace.New(params...)
	if err != nil {
		return nil, err
	}
	var objs []search.Objective
	for i := range p.ref {
		objs = append(objs, search.Objective{Metric: fmt.Sprintf("f%d", i+1), Mode: "min"})
	}
	var s search.Searcher
	switch system {
	case "gotune_random":
		s = search.NewRandomSearch(space, seed)
	case "gotune_tpe":
		s, err = search.NewTPE(space, seed, search.TPEObjectives(objs))
	case "gotune_nsga2":
		s, err = search.NewNSGA2(space, seed, objs, nil)
	}
	if err != nil {
		return nil, err
	}
	var points [][]float64
	for trial := 1; trial <= n; trial++ {
		cfg, err := s.Suggest(trial)
		if err != nil {
			return nil, err
		}
		x := make([]float64, p.dims)
		for i := range x {
			x[i] = cfg[fmt.Sprintf("x%d", i)].(float64)
		}
		fs := p.f(x)
		metrics := map[string]float64{}
		for i, v := range fs {
			metrics[objs[i].Metric] = v
		}
		obs := search.Observation{Step: 1, Score: fs[0], Metrics: metrics}
		s.OnTrialEnd(trial, search.TrialEnd{Status: search.TrialCompleted, Last: &obs})
		points = append(points, fs)
	}
	return points, nil
}

// each checkpoint c.
func hypervolumeAfter(points [][]float64, ref []float64, checkpoints []int) map[int]float64 {
	out := map[int]float64{}
	for _, c := range checkpoints {
		out[c] = pareto.Hypervolume(points[:min(c, len(points))], ref)
	}
	return out
}

// runMulti measures the multi-objective searchers, Optuna's beside them.
func runMulti(o options, out *json.Encoder, peerOK bool) error {
	var peer *peerRun
	if peerOK {
		names := make([]string, len(o.problems))
		for i, p := range o.problems {
			names[i] = p.name
		}
		peer = startPeer(o, "multi", "--problems", strings.Join(names, ","), "--samplers", "nsga2,tpe",
			"--first-seed", strconv.Itoa(o.firstSeed), "--seeds", strconv.Itoa(o.seeds), "--trials", strconv.Itoa(o.trials))
	}
	hv := map[string][]float64{}
	for _, p := range o.problems {
		for _, system := range gotuneMultiSystems {
			for seed := int64(o.firstSeed); seed < int64(o.firstSeed+o.seeds); seed++ {
				points, err := solve(p, system, seed, o.trials)
				if err != nil {
					return fmt.Errorf("%s on %s, seed %d: %w", system, p.name, seed, err)
				}
				for c, v := range hypervolumeAfter(points, p.ref, o.checkpoints) {
					hv[key(system, p.name, c)] = append(hv[key(system, p.name, c)], v)
				}
			}
		}
	}
	if peer != nil {
		peer.lines(out, func(m map[string]any) {
			raw, _ := m["points"].([]any)
			var points [][]float64
			for _, r := range raw {
				var fs []float64
				for _, v := range r.([]any) {
					fs = append(fs, v.(float64))
				}
				points = append(points, fs)
			}
			i := slices.IndexFunc(o.problems, func(p problem) bool { return p.name == m["problem"] })
			if i < 0 {
				return
			}
			for c, v := range hypervolumeAfter(points, o.problems[i].ref, o.checkpoints) {
				k := key("optuna_"+fmt.Sprint(m["sampler"]), o.problems[i].name, c)
				hv[k] = append(hv[k], v)
			}
		})
	}
	for _, p := range o.problems {
		for _, c := range o.checkpoints {
			line := map[string]any{"bench": "search", "figure": "hypervolume", "statistic": "median", "problem": p.name,
				"ref": p.ref, "trials": c, "seeds": o.seeds, "first_seed": o.firstSeed}
			for _, system := range append(slices.Clone(gotuneMultiSystems), "optuna_nsga2", "optuna_tpe") {
				if vs := hv[key(system, p.name, c)]; len(vs) > 0 {
					line[system] = round(median(vs))
				}
			}
			for _, alg := range []string{"tpe", "nsga2"} {
				g, gok := line["gotune_"+alg].(float64)
				q, qok := line["optuna_"+alg].(float64)
				if gok && qok && c == o.trials {
					line[alg+"_target_met"] = g >= q
				}
			}
			out.Encode(line)
		}
	}
	return nil
}

// constrainedBranin is the constraint of the constrained Branin: feasible
// at or below 0.
func constrainedBranin(x []float64) float64 {
	return (x[0]-2.5)*(x[0]-2.5) + (x[1]-7.5)*(x[1]-7.5) - 20
}

// runConstrained measures TPE on the constrained Branin, Optuna's beside it.
func runConstrained(o options, out *json.Encoder, peerOK bool) error {
	var peer *peerRun
	if peerOK {
		peer = startPeer(o, "constrained", "--first-seed", strconv.Itoa(o.firstSeed), "--seeds", strconv.Itoa(o.seeds),
			"--trials", strconv.Itoa(o.trials), "--checkpoints", joinInts(o.checkpoints))
	}
	space, err := searchspace.New(
		searchspace.Param{Name: "x0", Domain: searchspace.Uniform{Low: -5, High: 10}},
		searchspace.Param{Name: "x1", Domain: searchspace.Uniform{Low: 0, High: 15}})
	if err != nil {
		return err
	}
	cs := []search.Constraint{{Metric: "c", Op: "<=", Bound: 0}}
	best := map[int][]float64{}
	for seed := int64(o.firstSeed); seed < int64(o.firstSeed+o.seeds); seed++ {
		s, err := search.NewTPE(space, seed, search.TPEConstraints(cs))
		if err != nil {
			return err
		}
		b := math.Inf(1)
		for trial := 1; trial <= o.trials; trial++ {
			cfg, err := s.Suggest(trial)
			if err != nil {
				return err
			}
			x := []float64{cfg["x0"].(float64), cfg["x1"].(float64)}
			v, c := branin(x), constrainedBranin(x)
			obs := search.Observation{Step: 1, Score: v, Metrics: map[string]float64{"value": v, "c": c}}
			s.OnTrialEnd(trial, search.TrialEnd{Status: search.TrialCompleted, Last: &obs})
			if c <= 0 {
				b = min(b, v)
			}
			if slices.Contains(o.checkpoints, trial) {
				best[trial] = append(best[trial], b)
			}
		}
	}
	theirs := map[int][]float64{}
	if peer != nil {
		peer.lines(out, func(m map[string]any) {
			bs, _ := m["best"].(map[string]any)
			for c, v := range bs {
				n, _ := strconv.Atoi(c)
				if f, ok := v.(float64); ok {
					theirs[n] = append(theirs[n], f)
				}
			}
		})
	}
	for _, c := range o.checkpoints {
		line := map[string]any{"bench": "search", "figure": "constrained_best_value", "statistic": "median",
			"function": "branin, (x0−2.5)²+(x1−7.5)² ≤ 20", "trials": c, "seeds": o.seeds, "first_seed": o.firstSeed,
			"gotune_tpe": round(median(best[c]))}
		if vs := theirs[c]; len(vs) > 0 {
			line["optuna_tpe"] = round(median(vs))
			if c == o.trials {
				line["tpe_target_met"] = median(best[c]) <= median(vs)
			}
		}
		out.Encode(line)
	}
	return nil
}
