// Command schedulers measures how much compute the early-stopping
// schedulers save: for each scheduler, the worker-iterations it spends and
// whether the best configuration it trains to max_t is within 1% of the best
// that FIFO random search finds with the same configurations (same
// num_samples, same seed). Target: ASHA at most 1/3 of FIFO's compute at
// that quality.
//
//	go run ./bench/schedulers [-samples 81] [-max-t 27] [-seeds 10] [-workers 4]
//	go run ./bench/schedulers -mlp   # also the built-in mlp on digits (minutes)
//
// Workloads:
//
//   - synthetic: the learning curves of schedulers/sim (known best 0.05),
//     simulated exactly by sim.Simulate on a simulated clock and workers.
//     Optuna's SuccessiveHalvingPruner with its TPE sampler (and with its
//     random sampler) runs on the same curves in the same run, through
//     /usr/bin/python3; it is skipped with a note when Optuna is missing.
//   - mlp-digits (-mlp): the built-in mlp sweep of a sweep file (default
//     examples/quickstart.toml) through tuner.Fit, epochs = max_t. A
//     scheduler the tuner refuses (one that needs the loop to pause and
//     resume trials) is reported as skipped with the tuner's reason.
//
// Each line is one JSON object per workload, system and scheduler, with
// medians over the seeds:
//
//	compute            worker-iterations trained in all
//	ratio              compute / FIFO's compute on the same seed
//	compute_to_target  worker-iterations trained until a trial first reached
//	                   max_t within 1% of FIFO's best (seeds that got there)
//	ratio_to_target    compute_to_target / FIFO's compute_to_target
//	quality_reached    fraction of seeds whose best is within 1% of FIFO's
//	target_met         fraction of seeds with quality reached and ratio ≤ 1/3
package main

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/gotune/gotune/cmd/gotune/sweepfile"
	"github.com/gotune/gotune/schedulers"
	"github.com/gotune/gotune/schedulers/sim"
	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/tuner"
)

//go:embed optuna_sha.py
var optunaScript []byte

type options struct {
	samples, maxT, eta, grace, workers, seeds int
	quality                                   float64
	python                                    string
	optuna, verbose                           bool
	mlp                                       bool
	mlpSweep                                  string
	mlpSamples, mlpMaxT, mlpSeeds             int
}

func main() {
	var o options
	flag.IntVar(&o.samples, "samples", 81, "trials per run (num_samples)")
	flag.IntVar(&o.maxT, "max-t", 27, "iterations of a fully trained trial (max_t)")
	flag.IntVar(&o.eta, "eta", 3, "reduction factor η")
	flag.IntVar(&o.grace, "grace", 1, "grace period: the first rung")
	flag.IntVar(&o.workers, "workers", 4, "simulated workers (trials at once)")
	flag.IntVar(&o.seeds, "seeds", 10, "seeds to run; medians are reported")
	flag.Float64Var(&o.quality, "quality", 0.01, "how close to FIFO's best counts as found (relative)")
	flag.StringVar(&o.python, "python", "/usr/bin/python3", "the Python with Optuna")
	flag.BoolVar(&o.optuna, "optuna", true, "run Optuna's pruner beside gotune's schedulers")
	flag.BoolVar(&o.verbose, "v", false, "also print one line per seed")
	flag.BoolVar(&o.mlp, "mlp", false, "also run the built-in mlp sweep (slow: real training)")
	flag.StringVar(&o.mlpSweep, "mlp-sweep", "examples/quickstart.toml", "the mlp sweep file")
	flag.IntVar(&o.mlpSamples, "mlp-samples", 27, "trials per mlp run")
	flag.IntVar(&o.mlpMaxT, "mlp-max-t", 27, "epochs of a fully trained mlp trial")
	flag.IntVar(&o.mlpSeeds, "mlp-seeds", 1, "seeds of the mlp workload")
	flag.Parse()
	if err := bench(o); err != nil {
		fmt.Fprintln(os.Stderr, "schedulers:", err)
		os.Exit(1)
	}
}

// outcome is one run's cost and what it found.
type outcome struct {
	// compute is the worker-iterations trained in all.
	compute int
	// finals are the results of trials at max_t (lower is better) with the
	// compute spent when each arrived, in the order they arrived.
	finals []final
}

type final struct {
	compute int
	value   float64
}

func (o outcome) best() (float64, bool) {
	if len(o.finals) == 0 {
		return 0, false
	}
	b := math.Inf(1)
	for _, f := range o.finals {
		b = min(b, f.value)
	}
	return b, true
}

func (o outcome) computeTo(target float64) (int, bool) {
	for _, f := range o.finals {
		if f.value <= target {
			return f.compute, true
		}
	}
	return 0, false
}

// workload runs one experiment of a scheduler kind on a seed.
type workload interface {
	name() string
	// metric names the objective and turns a lower-is-better value back
	// into the metric's own terms.
	metric() (string, func(float64) float64)
	run(kind string, seed uint64) (outcome, error)
}

// errSkipped marks a scheduler a workload cannot run (yet).
type errSkipped struct{ err error }

func (e errSkipped) Error() string { return e.err.Error() }

// kinds are the schedulers compared, FIFO first.
var kinds = []string{"fifo", "asha-stop", "asha-promote", "hyperband"}

func schedulerConfig(kind string, maxT, grace, eta int) schedulers.Config {
	c := schedulers.Config{MaxT: float64(maxT), GracePeriod: float64(grace), ReductionFactor: float64(eta)}
	switch kind {
	case "fifo":
		return schedulers.Config{}
	case "asha-stop":
		c.Kind, c.Mode = "asha", "stop"
	case "asha-promote":
		c.Kind, c.Mode = "asha", "promote"
	case "hyperband":
		c.Kind = "hyperband"
	}
	return c
}

// synthetic is sim.Curve simulated on o.workers workers.
type synthetic struct{ o options }

func (synthetic) name() string { return "synthetic" }

func (synthetic) metric() (string, func(float64) float64) {
	return "loss", func(v float64) float64 { return v }
}

func (w synthetic) run(kind string, seed uint64) (outcome, error) {
	s, err := schedulers.New(schedulerConfig(kind, w.o.maxT, w.o.grace, w.o.eta), schedulers.Env{Metric: "loss", Checkpoints: true})
	if err != nil {
		return outcome{}, err
	}
	space, rng := sim.CurveSpace(), rand.New(rand.NewPCG(seed, 1))
	configs := make([]map[string]any, w.o.samples)
	for i := range configs {
		configs[i] = space.Sample(rng)
	}
	run, err := sim.Simulate(s, sim.Options{Workers: w.o.workers, NumSamples: w.o.samples, MaxIter: w.o.maxT,
		Config: func(n int) map[string]any { return configs[n-1] }, Model: sim.Curve{}})
	if err != nil {
		return outcome{}, err
	}
	out := outcome{compute: run.Compute}
	for _, r := range run.Reports {
		if r.Iter == w.o.maxT {
			out.finals = append(out.finals, final{r.Compute, r.Score})
		}
	}
	return out, nil
}

// seedResult compares one seed's run of a scheduler with FIFO's.
type seedResult struct {
	compute              int
	target, best         float64
	hasBest, reached     bool
	toTarget             int
	ratio, ratioToTarget float64
}

// newResult measures a run that spent compute, found best (when hasBest)
// and first got within quality of FIFO's best after toTarget (when
// reached), against FIFO's run on the same seed.
func newResult(fifo outcome, quality float64, compute int, best float64, hasBest bool, toTarget int, reached bool) seedResult {
	t := target(fifo, quality)
	fifoToTarget, _ := fifo.computeTo(t)
	r := seedResult{compute: compute, target: t, best: best, hasBest: hasBest, toTarget: toTarget, reached: reached,
		ratio: float64(compute) / float64(fifo.compute)}
	if reached {
		r.ratioToTarget = float64(toTarget) / float64(fifoToTarget)
	}
	return r
}

// target is the value within quality of FIFO's best.
func target(fifo outcome, quality float64) float64 {
	b, _ := fifo.best()
	return b + quality*math.Abs(b)
}

func compare(out, fifo outcome, quality float64) seedResult {
	best, hasBest := out.best()
	to, reached := out.computeTo(target(fifo, quality))
	return newResult(fifo, quality, out.compute, best, hasBest, to, reached)
}

func bench(o options) error {
	enc := json.NewEncoder(os.Stdout)
	common := map[string]any{"bench": "schedulers", "cpus": runtime.NumCPU(), "quality": o.quality, "eta": o.eta, "grace": o.grace}
	fifos, err := measure(enc, common, synthetic{o}, o.seeds, o.samples, o.maxT, o.workers, o.quality, o.verbose)
	if err != nil {
		return err
	}
	if o.optuna {
		for _, sampler := range []string{"tpe", "random"} {
			if err := optuna(enc, common, o, sampler, fifos); err != nil {
				return err
			}
		}
	}
	if o.mlp {
		w, err := newMLP(o)
		if err != nil {
			return err
		}
		defer os.RemoveAll(w.dir)
		common["workers_per_trial"] = w.base.Trainer.Scaling.Workers()
		_, err = measure(enc, common, w, o.mlpSeeds, o.mlpSamples, o.mlpMaxT, w.base.Search.MaxConcurrent, o.quality, o.verbose)
		return err
	}
	return nil
}

// measure runs every kind on every seed of a workload, prints a line per
// kind, and returns FIFO's outcome per seed.
func measure(enc *json.Encoder, common map[string]any, w workload, seeds, samples, maxT, atOnce int, quality float64, verbose bool) ([]outcome, error) {
	metric, display := w.metric()
	common = merge(common, map[string]any{"workload": w.name(), "metric": metric})
	fifos := make([]outcome, seeds)
	results := map[string][]seedResult{}
	skipped := map[string]error{}
	for i := range seeds {
		seed := uint64(i + 1)
		var err error
		if fifos[i], err = w.run("fifo", seed); err != nil {
			return nil, fmt.Errorf("%s fifo seed %d: %w", w.name(), seed, err)
		}
		for _, kind := range kinds {
			if skipped[kind] != nil {
				continue
			}
			out := fifos[i]
			if kind != "fifo" {
				out, err = w.run(kind, seed)
			}
			var skip errSkipped
			if errors.As(err, &skip) {
				skipped[kind] = skip.err
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("%s %s seed %d: %w", w.name(), kind, seed, err)
			}
			r := compare(out, fifos[i], quality)
			results[kind] = append(results[kind], r)
			if verbose {
				line := merge(common, map[string]any{"system": "gotune", "scheduler": kind, "seed": seed})
				perSeed(line, r, display)
				if err := enc.Encode(line); err != nil {
					return nil, err
				}
			}
		}
	}
	for _, kind := range kinds {
		line := merge(common, map[string]any{"system": "gotune", "scheduler": kind,
			"samples": samples, "max_t": maxT, "trials_at_once": atOnce, "seeds": seeds})
		if err := skipped[kind]; err != nil {
			line["skipped"] = err.Error()
		} else {
			summarise(line, results[kind], display)
		}
		if err := enc.Encode(line); err != nil {
			return nil, err
		}
	}
	return fifos, nil
}

func perSeed(line map[string]any, r seedResult, display func(float64) float64) {
	line["compute"] = r.compute
	line["ratio"] = round(r.ratio, 4)
	line["target"] = round(display(r.target), 6)
	if r.hasBest {
		line["best"] = round(display(r.best), 6)
	}
	line["quality_reached"] = r.reached
	if r.reached {
		line["compute_to_target"] = r.toTarget
		line["ratio_to_target"] = round(r.ratioToTarget, 4)
	}
}

// summarise adds the medians over seeds to line.
func summarise(line map[string]any, rs []seedResult, display func(float64) float64) {
	var compute, ratio, best, toTarget, ratioToTarget []float64
	reached, met := 0, 0
	for _, r := range rs {
		compute = append(compute, float64(r.compute))
		ratio = append(ratio, r.ratio)
		if r.hasBest {
			best = append(best, r.best)
		}
		if r.reached {
			reached++
			toTarget = append(toTarget, float64(r.toTarget))
			ratioToTarget = append(ratioToTarget, r.ratioToTarget)
			if r.ratio <= 1.0/3 {
				met++
			}
		}
	}
	line["compute"] = medianOf(compute)
	line["ratio"] = round(medianOf(ratio), 4)
	if len(best) > 0 {
		line["best"] = round(display(medianOf(best)), 6)
	}
	if len(toTarget) > 0 {
		line["compute_to_target"] = medianOf(toTarget)
		line["ratio_to_target"] = round(medianOf(ratioToTarget), 4)
	}
	line["quality_reached"] = round(float64(reached)/float64(len(rs)), 3)
	line["target_met"] = round(float64(met)/float64(len(rs)), 3)
}

// optuna runs Optuna's pruner with sampler on the synthetic curves of each
// seed, measured against gotune's FIFO on the same seed.
func optuna(enc *json.Encoder, common map[string]any, o options, sampler string, fifos []outcome) error {
	line := merge(common, map[string]any{"workload": "synthetic", "metric": "loss", "system": "optuna", "scheduler": "successive-halving+" + sampler,
		"samples": o.samples, "max_t": o.maxT, "trials_at_once": 1, "seeds": o.seeds})
	var seeds, targets []string
	for i, f := range fifos {
		seeds = append(seeds, strconv.Itoa(i+1))
		targets = append(targets, strconv.FormatFloat(target(f, o.quality), 'g', -1, 64))
	}
	cmd := exec.Command(o.python, "-", "--n", strconv.Itoa(o.samples), "--max-t", strconv.Itoa(o.maxT),
		"--eta", strconv.Itoa(o.eta), "--grace", strconv.Itoa(o.grace), "--sampler", sampler,
		"--seeds", strings.Join(seeds, ","), "--targets", strings.Join(targets, ","))
	cmd.Stdin = bytes.NewReader(optunaScript)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:]
		}
		line["skipped"] = fmt.Sprintf("%s with Optuna did not run (%v: %s); install python3-optuna to compare", o.python, err, msg)
		return enc.Encode(line)
	}
	var rs []seedResult
	sc := bufio.NewScanner(bytes.NewReader(stdout))
	for i := 0; sc.Scan(); i++ {
		var p struct {
			Seed            uint64   `json:"seed"`
			Compute         int      `json:"compute"`
			Best            *float64 `json:"best"`
			ComputeToTarget *int     `json:"compute_to_target"`
			Optuna          string   `json:"optuna"`
		}
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			return fmt.Errorf("optuna output %q: %w", sc.Text(), err)
		}
		if i >= len(fifos) {
			return fmt.Errorf("optuna printed more lines than seeds")
		}
		var best float64
		if p.Best != nil {
			best = *p.Best
		}
		var to int
		if p.ComputeToTarget != nil {
			to = *p.ComputeToTarget
		}
		r := newResult(fifos[i], o.quality, p.Compute, best, p.Best != nil, to, p.ComputeToTarget != nil)
		rs = append(rs, r)
		line["optuna"] = p.Optuna
		if o.verbose {
			l := merge(common, map[string]any{"workload": "synthetic", "metric": "loss", "system": "optuna", "scheduler": line["scheduler"], "seed": p.Seed})
			perSeed(l, r, func(v float64) float64 { return v })
			if err := enc.Encode(l); err != nil {
				return err
			}
		}
	}
	summarise(line, rs, func(v float64) float64 { return v })
	return enc.Encode(line)
}

// mlp runs a built-in model's sweep file through the tuner.
type mlp struct {
	o    options
	base tuner.Config
	dir  string
}

func newMLP(o options) (*mlp, error) {
	cfg, err := sweepfile.Load(o.mlpSweep)
	if err != nil {
		return nil, err
	}
	var params []searchspace.Param
	for _, p := range cfg.Search.Space.Params() {
		if p.Name != "epochs" {
			params = append(params, p)
		}
	}
	params = append(params, searchspace.Param{Name: "epochs", Domain: searchspace.Constant{Value: int64(o.mlpMaxT)}})
	if cfg.Search.Space, err = searchspace.New(params...); err != nil {
		return nil, err
	}
	cfg.Search.NumSamples = o.mlpSamples
	if cfg.Search.MaxConcurrent == 0 {
		cfg.Search.MaxConcurrent = 2
	}
	dir, err := os.MkdirTemp("", "gotune-bench-schedulers-")
	if err != nil {
		return nil, err
	}
	return &mlp{o: o, base: cfg, dir: dir}, nil
}

func (*mlp) name() string { return "mlp-digits" }

func (w *mlp) metric() (string, func(float64) float64) {
	if w.base.Objective.Mode == "max" {
		return w.base.Objective.Metric, func(v float64) float64 { return -v }
	}
	return w.base.Objective.Metric, func(v float64) float64 { return v }
}

func (w *mlp) run(kind string, seed uint64) (outcome, error) {
	cfg := w.base
	cfg.Name = fmt.Sprintf("%s-%d", kind, seed)
	cfg.Storage = filepath.Join(w.dir, cfg.Name+".db")
	cfg.Seed = int64(seed)
	cfg.Scheduler = schedulerConfig(kind, w.o.mlpMaxT, w.o.grace, w.o.eta)
	cfg.Scheduler.TimeAttr = "epoch"
	t, err := tuner.New(cfg)
	var ce *tuner.ConfigError
	if errors.As(err, &ce) && strings.HasPrefix(ce.Key, "scheduler.") {
		return outcome{}, errSkipped{err}
	}
	if err != nil {
		return outcome{}, err
	}
	ctx := context.Background()
	res, err := t.Fit(ctx)
	if err != nil {
		return outcome{}, err
	}
	db, err := storage.OpenReadOnly(cfg.Storage)
	if err != nil {
		return outcome{}, err
	}
	defer db.Close()
	type rep struct {
		trial int
		storage.Report
	}
	var reps []rep
	for _, tr := range res.Trials {
		rs, err := db.Reports(ctx, cfg.Name, tr.Number)
		if err != nil {
			return outcome{}, err
		}
		for _, r := range rs {
			reps = append(reps, rep{tr.Number, r})
		}
	}
	slices.SortStableFunc(reps, func(a, b rep) int {
		if c := a.Time.Compare(b.Time); c != 0 {
			return c
		}
		return a.trial - b.trial
	})
	perReport := cfg.Trainer.Scaling.Workers()
	var out outcome
	for _, r := range reps {
		out.compute += perReport
		v, ok := r.Metrics[cfg.Objective.Metric]
		if !ok || r.Metrics["epoch"] != float64(w.o.mlpMaxT) {
			continue
		}
		if cfg.Objective.Mode == "max" {
			v = -v
		}
		out.finals = append(out.finals, final{out.compute, v})
	}
	return out, nil
}

func merge(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func medianOf(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}
