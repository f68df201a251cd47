// Command mlp measures the built-in mlp's data-parallel training: the
// samples it trains per second and its final validation accuracy, next to
// PyTorch DDP on CPU training the same network on the same rows with the
// same settings (the peer script torch_mlp_digits.py, launched as one
// process per worker with torchrun's environment), in the same run.
//
//	go run ./bench/mlp [-workers 2] [-epochs 20] [-hidden 128] [-batch 64]
//	                   [-lr 0.05] [-momentum 0.9] [-runs 3] [-anchor PATH]
//
// It prints one JSON line per system, then one comparing them. The peer is
// skipped, with a note, when the anchor script is missing or `python3 -c
// "import torch"` fails. Throughput is the median over epochs of the
// training samples of an epoch (all workers, padded as PyTorch's
// DistributedSampler pads) divided by the epoch's time; the median run of
// -runs is reported. For gotune an epoch's time runs from one report to the
// next, so it includes validation and the report; the anchor times its
// training loop alone.
package main

import (
	"bufio"
	"bytes"
	"cmp"
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
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gotune/gotune/trainer"
)

type settings struct {
	workers, epochs, hidden, batch, runs int
	lr, momentum                         float64
	dataset, split, scale                string
	anchor, python                       string
	seed                                 int64
}

func main() {
	var s settings
	flag.IntVar(&s.workers, "workers", 2, "data-parallel workers")
	flag.IntVar(&s.epochs, "epochs", 20, "training epochs")
	flag.IntVar(&s.hidden, "hidden", 128, "hidden units (one hidden layer)")
	flag.IntVar(&s.batch, "batch", 64, "batch size per worker")
	flag.Float64Var(&s.lr, "lr", 0.05, "learning rate")
	flag.Float64Var(&s.momentum, "momentum", 0.9, "SGD momentum")
	flag.IntVar(&s.runs, "runs", 3, "runs per system; the median run is reported")
	flag.StringVar(&s.dataset, "dataset", "examples/data/digits.csv", "the data set")
	flag.StringVar(&s.split, "split", "examples/data/digits_split.csv", "the train/validation split the anchor uses")
	flag.StringVar(&s.scale, "scale", "standard", "gotune's feature scaling: standard, minmax or none")
	flag.Int64Var(&s.seed, "seed", 0, "training seed")
	flag.StringVar(&s.anchor, "anchor", "../shared/anchors/torch_mlp_digits.py", "the PyTorch DDP peer script")
	flag.StringVar(&s.python, "python", "/usr/bin/python3", "the Python with torch installed")
	flag.Parse()
	if s.runs < 1 || s.workers < 1 {
		fmt.Fprintln(os.Stderr, "bench/mlp: -runs and -workers must be at least 1")
		os.Exit(2)
	}
	if err := run(s); err != nil {
		fmt.Fprintln(os.Stderr, "bench/mlp:", err)
		os.Exit(1)
	}
}

// figures is one run of one system.
type figures struct {
	samplesPerS, wallS, valAcc float64
}

func run(s settings) error {
	ctx := context.Background()
	out := json.NewEncoder(os.Stdout)
	common := map[string]any{
		"bench": "mlp", "workers": s.workers, "epochs": s.epochs, "hidden": s.hidden,
		"batch_size": s.batch, "lr": s.lr, "momentum": s.momentum, "split": s.split,
		"runs": s.runs, "cpus": runtime.NumCPU(),
	}

	ours, err := measureGotune(ctx, s)
	if err != nil {
		return err
	}
	g := median(ours)
	if err := out.Encode(with(common, map[string]any{
		"system": "gotune", "scale": s.scale,
		"samples_per_s": round(g.samplesPerS, 0), "samples_per_s_runs": samplesList(ours),
		"wall_s": round(g.wallS, 3), "val_acc": round(g.valAcc, 4),
		"timing": "report to report: training, validation and the report",
	})); err != nil {
		return err
	}

	version, why := torchVersion(ctx, s)
	if why != "" {
		return out.Encode(with(common, map[string]any{"system": "pytorch-ddp", "skipped": why}))
	}
	var theirs []figures
	for range s.runs {
		f, err := measureAnchor(ctx, s)
		if err != nil {
			return err
		}
		theirs = append(theirs, f)
	}
	p := median(theirs)
	if err := out.Encode(with(common, map[string]any{
		"system": "pytorch-ddp", "torch": version, "threads_per_worker": 1,
		"samples_per_s": round(p.samplesPerS, 0), "samples_per_s_runs": samplesList(theirs),
		"wall_s": round(p.wallS, 3), "val_acc": round(p.valAcc, 4),
		"timing": "the training loop of each epoch",
	})); err != nil {
		return err
	}
	return out.Encode(map[string]any{
		"bench": "mlp", "compare": "gotune/pytorch-ddp",
		"throughput_ratio":     round(g.samplesPerS/p.samplesPerS, 2),
		"val_acc_gotune":       round(g.valAcc, 4),
		"val_acc_pytorch":      round(p.valAcc, 4),
		"target_val_acc_0_95":  g.valAcc >= 0.95,
		"target_throughput_1x": g.samplesPerS >= p.samplesPerS,
	})
}

// measureGotune trains the built-in mlp s.runs times through the trainer,
// timing each epoch from report to report.
func measureGotune(ctx context.Context, s settings) ([]figures, error) {
	cfg := trainer.Config{Model: "mlp", Dataset: s.dataset, Split: s.split, Scale: s.scale}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	train, err := trainer.Builtin(cfg)
	if err != nil {
		return nil, err
	}
	data, err := trainer.LoadCSV(s.dataset, "label")
	if err != nil {
		return nil, err
	}
	trainRows, _, err := trainer.LoadSplit(s.split, data.Rows())
	if err != nil {
		return nil, err
	}
	// The rows of an epoch, padded to a multiple of the workers.
	perEpoch := float64((len(trainRows) + s.workers - 1) / s.workers * s.workers)
	params := map[string]any{
		"hidden": int64(s.hidden), "layers": int64(1), "batch_size": int64(s.batch),
		"epochs": int64(s.epochs), "lr": s.lr, "momentum": s.momentum, "optimizer": "sgd",
		"checkpoint_every": int64(0), // the anchor writes no checkpoints either
	}
	var runs []figures
	for range s.runs {
		sink := &timingSink{start: time.Now()}
		spec := trainer.Spec{Experiment: "bench-mlp", Seed: s.seed, Config: params, Train: train,
			Scaling: trainer.ScalingConfig{NumWorkers: s.workers}}
		if _, err := trainer.Run(ctx, spec, sink); err != nil {
			return nil, err
		}
		wall := time.Since(sink.start).Seconds()
		var rates []float64
		prev := sink.start
		for _, t := range sink.times {
			rates = append(rates, perEpoch/t.Sub(prev).Seconds())
			prev = t
		}
		runs = append(runs, figures{samplesPerS: medianOf(rates), wallS: wall, valAcc: sink.last["val_acc"]})
	}
	return runs, nil
}

// timingSink records when each report arrives and keeps the last metrics.
type timingSink struct {
	mu    sync.Mutex
	start time.Time
	times []time.Time
	last  map[string]float64
}

func (t *timingSink) Report(_ context.Context, r trainer.Result) (trainer.Action, error) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.times = append(t.times, now)
	t.last = r.Metrics
	return trainer.Continue, nil
}

// torchVersion returns PyTorch's version, or why the peer cannot run.
func torchVersion(ctx context.Context, s settings) (version, why string) {
	if _, err := os.Stat(s.anchor); err != nil {
		return "", fmt.Sprintf("no anchor script: %v (set -anchor)", err)
	}
	cmd := exec.CommandContext(ctx, s.python, "-c", "import torch; print(torch.__version__)")
	outb, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Sprintf(`%s -c "import torch" failed: %v: %s`, s.python, err, lastLine(outb))
	}
	return strings.TrimSpace(string(outb)), ""
}

// measureAnchor runs the peer script once as s.workers processes with
// torchrun's environment and reads rank 0's summary line.
func measureAnchor(ctx context.Context, s settings) (figures, error) {
	port, err := freePort()
	if err != nil {
		return figures{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	args := []string{s.anchor, "--hidden", fmt.Sprint(s.hidden), "--lr", fmt.Sprint(s.lr),
		"--momentum", fmt.Sprint(s.momentum), "--batch-size", fmt.Sprint(s.batch),
		"--epochs", fmt.Sprint(s.epochs), "--seed", fmt.Sprint(s.seed)}
	cmds := make([]*exec.Cmd, s.workers)
	stderr := make([]bytes.Buffer, s.workers)
	for rank := range cmds {
		cmd := exec.CommandContext(ctx, s.python, args...)
		cmd.Env = append(os.Environ(),
			fmt.Sprintf("RANK=%d", rank), fmt.Sprintf("LOCAL_RANK=%d", rank),
			fmt.Sprintf("WORLD_SIZE=%d", s.workers), fmt.Sprintf("LOCAL_WORLD_SIZE=%d", s.workers),
			"MASTER_ADDR=127.0.0.1", fmt.Sprintf("MASTER_PORT=%d", port), "OMP_NUM_THREADS=1")
		cmd.Stderr = &stderr[rank]
		if err := cmd.Start(); err != nil {
			return figures{}, fmt.Errorf("anchor: %w", err)
		}
		cmds[rank] = cmd
	}
	var errs []error
	for rank, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("anchor rank %d: %w: %s", rank, err, lastLine(stderr[rank].Bytes())))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return figures{}, err
	}
	var done struct {
		Event       string   `json:"event"`
		WallS       float64  `json:"wall_s"`
		FinalValAcc *float64 `json:"final_val_acc"`
		MedianSPS   *float64 `json:"median_samples_per_s"`
	}
	sc := bufio.NewScanner(&stderr[0])
	for sc.Scan() {
		var line struct {
			Event string `json:"event"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Event == "done" {
			if err := json.Unmarshal(sc.Bytes(), &done); err != nil {
				return figures{}, fmt.Errorf("anchor summary: %w", err)
			}
		}
	}
	if done.Event != "done" || done.FinalValAcc == nil || done.MedianSPS == nil {
		return figures{}, fmt.Errorf("anchor %s printed no summary line", filepath.Base(s.anchor))
	}
	return figures{samplesPerS: *done.MedianSPS, wallS: done.WallS, valAcc: *done.FinalValAcc}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// median returns the run with the median throughput.
func median(runs []figures) figures {
	sorted := slices.Clone(runs)
	slices.SortFunc(sorted, func(a, b figures) int { return cmp.Compare(a.samplesPerS, b.samplesPerS) })
	return sorted[len(sorted)/2]
}

func medianOf(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func samplesList(runs []figures) []float64 {
	var out []float64
	for _, r := range runs {
		out = append(out, round(r.samplesPerS, 0))
	}
	return out
}

func with(a, b map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}
