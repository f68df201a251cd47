// Command custom_scheduler tunes a Go training function with a scheduler
// written by the user: a plateau rule that stops a trial once its loss has
// not improved by at least min_delta for patience reports in a row.
//
//	go run ./examples/custom_scheduler [-db FILE]
//
// A custom scheduler implements schedulers.Scheduler. Embedding
// schedulers.FIFO supplies do-nothing OnTrialAdd, OnTrialEnd and Next, so
// a scheduler that only stops trials writes OnResult alone. Results arrive
// with Score lower-is-better (the tuner negates a "max" metric), and the
// tuner calls the scheduler from one goroutine, so it needs no locks.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/gotune/gotune/schedulers"
	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/tuner"
)

// Plateau stops a trial whose score has not improved by at least MinDelta
// for Patience results in a row. It keeps the decisions it took, to print.
type Plateau struct {
	schedulers.FIFO
	// Patience is the number of results without improvement tolerated.
	Patience int
	// MinDelta is the least decrease of the score that counts as one.
	MinDelta float64

	best  map[int]float64
	stale map[int]int
	// Log holds one line per Stop decision, for printing at the end.
	Log []string
}

var _ schedulers.Scheduler = (*Plateau)(nil)

// OnResult implements schedulers.Scheduler.
func (p *Plateau) OnResult(r schedulers.Result) schedulers.Decision {
	best, seen := p.best[r.Trial]
	if !seen || r.Score < best-p.MinDelta {
		p.best[r.Trial], p.stale[r.Trial] = r.Score, 0
		return schedulers.Decision{Action: schedulers.Continue}
	}
	p.stale[r.Trial]++
	if p.stale[r.Trial] < p.Patience {
		return schedulers.Decision{Action: schedulers.Continue}
	}
	d := schedulers.Decision{
		Action: schedulers.Stop,
		Rung:   r.Time,
		Reason: fmt.Sprintf("no improvement of %g in %d results: loss %.4f, best %.4f", p.MinDelta, p.Patience, r.Score, best),
	}
	d.Cutoff, d.HasCutoff = best-p.MinDelta, true
	p.Log = append(p.Log, fmt.Sprintf("trial %d at epoch %g: %s %s", r.Trial, r.Time, d.Action, d.Reason))
	return d
}

// train is the trainable: a loss that decays towards a floor set by lr and
// momentum, at a speed set by lr, plus a little seeded noise.
func train(ctx context.Context, w *trainer.Worker) error {
	lr, momentum := w.Float("lr", 0.01), w.Float("momentum", 0.9)
	floor := 0.05 + 0.2*math.Pow(math.Log10(lr)+2, 2) + 0.5*math.Pow(momentum-0.9, 2)
	speed := 0.1 + 2*lr
	noise := float64(w.Seed()%1000) / 1e6
	for epoch := 1; epoch <= w.Int("epochs", 30); epoch++ {
		loss := floor + (1-floor)*math.Exp(-speed*float64(epoch)) + noise
		if err := w.Report(ctx, map[string]float64{"epoch": float64(epoch), "loss": loss}); err != nil {
			return err
		}
	}
	return nil
}

func main() {
	db := flag.String("db", "", "results database (default: a temporary file)")
	flag.Parse()
	if err := run(*db); err != nil {
		fmt.Fprintln(os.Stderr, "custom_scheduler:", err)
		os.Exit(1)
	}
}

func run(db string) error {
	if db == "" {
		dir, err := os.MkdirTemp("", "gotune-example-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		db = filepath.Join(dir, "gotune.db")
	}
	space, err := searchspace.New(
		searchspace.Param{Name: "lr", Domain: searchspace.LogUniform{Low: 1e-3, High: 0.3}},
		searchspace.Param{Name: "momentum", Domain: searchspace.Uniform{Low: 0.5, High: 0.99}},
		searchspace.Param{Name: "epochs", Domain: searchspace.Constant{Value: int64(30)}},
	)
	if err != nil {
		return err
	}
	cfg := tuner.Config{
		Name:      "custom-scheduler",
		Storage:   db,
		Seed:      11,
		Objective: tuner.Objective{Metric: "loss", Mode: "min"},
		Search:    tuner.SearchConfig{NumSamples: 12, MaxConcurrent: 4, Space: space},
		Scheduler: tuner.SchedulerConfig{TimeAttr: "epoch"},
		Trainer:   trainer.Config{Scaling: trainer.ScalingConfig{NumWorkers: 1, CPUsPerWorker: 0.25}},
	}
	plateau := &Plateau{Patience: 3, MinDelta: 1e-3, best: map[int]float64{}, stale: map[int]int{}}
	t, err := tuner.New(cfg, tuner.WithTrainFunc(train), tuner.WithScheduler(plateau))
	if err != nil {
		return err
	}
	res, err := t.Fit(context.Background())
	if err != nil {
		return err
	}
	for _, line := range plateau.Log {
		fmt.Println(line)
	}
	total := 0
	for _, tr := range res.Trials {
		total += tr.Iterations
		fmt.Printf("trial %2d  %-10s %2d epochs  best loss %.4f  lr %.4g  momentum %.3f\n",
			tr.Number, tr.Status, tr.Iterations, *tr.BestMetric, tr.Params["lr"], tr.Params["momentum"])
	}
	fmt.Printf("best: trial %d, loss %.4f; %d of %d epochs trained\n",
		res.Best.Number, *res.Best.BestMetric, total, len(res.Trials)*30)
	return nil
}
