// Command custom_searcher tunes a Go training function with a searcher
// written for it: a local search that perturbs the best configuration
// found so far, plugged into the tuner with tuner.WithSearcher.
//
//	go run ./examples/custom_searcher [-db FILE] [-trials 30]
//
// The results go to gotune-custom-searcher.db in the temporary folder
// unless -db names another file (replaced if it exists). The training
// function fits y = 2x + 1 by stochastic gradient descent with momentum
// and reports the validation loss after every epoch. The searcher tunes
// the learning rate and the momentum. Two runs give the same trials: the
// seeds are fixed, and the trials run one at a time, since with several at
// once what the searcher suggests depends on which trials happened to have
// ended and reported, which is timing.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/gotune/gotune/search"
	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/tuner"
)

// LocalSearch is a Searcher: it tries a few random configurations, then
// perturbs the best configuration seen so far (a running trial whose
// latest loss beats every finished one counts too), narrowing the
// perturbation each time a round of trials brings no improvement, and ends
// the search when the perturbation is too small to matter.
//
// The tuner calls it from one goroutine, so it needs no locks. It is also
// a search.Replayer, so that a resumed experiment continues it as if it had
// never been interrupted: each trial draws from search.TrialRand(seed,
// trial), so Replay has no random numbers to re-draw and only records the
// trial as Suggest would have.
type LocalSearch struct {
	seed    int64
	explore int     // random configurations before local moves
	sigma   float64 // perturbation width, in log10 units for lr
	stale   int     // finished trials since the last improvement

	suggested int
	finished  int
	best      map[string]any // the best finished configuration
	bestScore float64
	configs   map[int]map[string]any // configurations of running trials
	latest    map[int]float64        // latest score of each running trial
}

var (
	_ search.Searcher = (*LocalSearch)(nil)
	_ search.Replayer = (*LocalSearch)(nil)
)

// NewLocalSearch returns a local search that explores at random for
// explore trials.
func NewLocalSearch(seed int64, explore int) *LocalSearch {
	return &LocalSearch{
		seed: seed, explore: explore, sigma: 0.5,
		bestScore: math.Inf(1), configs: map[int]map[string]any{}, latest: map[int]float64{},
	}
}

// space is what the local search explores, and the bounds it stays in.
var (
	lrDomain       = searchspace.LogUniform{Low: 1e-4, High: 0.5}
	momentumDomain = searchspace.Uniform{Low: 0, High: 0.99}
)

// Suggest implements search.Searcher.
func (s *LocalSearch) Suggest(trial int) (map[string]any, error) {
	rng := search.TrialRand(s.seed, trial)
	var cfg map[string]any
	switch {
	case s.sigma < 0.01:
		// Moves this small no longer change the loss: the search is done.
		return nil, search.ErrExhausted
	case s.suggested < s.explore || s.best == nil && len(s.configs) == 0:
		cfg = map[string]any{"lr": lrDomain.Sample(rng), "momentum": momentumDomain.Sample(rng)}
	case s.best == nil:
		// Trials run but none has finished: wait for one rather than guess.
		return nil, search.ErrWait
	default:
		center := s.center()
		lr := math.Pow(10, math.Log10(center["lr"].(float64))+s.sigma*rng.NormFloat64())
		m := center["momentum"].(float64) + s.sigma/5*rng.NormFloat64()
		cfg = map[string]any{
			"lr":       min(max(lr, lrDomain.Low), lrDomain.High),
			"momentum": min(max(m, momentumDomain.Low), momentumDomain.High),
		}
	}
	cfg["epochs"] = int64(15)
	s.record(trial, cfg)
	return cfg, nil
}

// Replay implements search.Replayer: trial ran with config, as if Suggest
// had returned it.
func (s *LocalSearch) Replay(trial int, config map[string]any) error {
	s.record(trial, config)
	return nil
}

// record counts trial as suggested and running with cfg.
func (s *LocalSearch) record(trial int, cfg map[string]any) {
	s.suggested++
	s.configs[trial] = cfg
}

// center is the configuration to perturb: the best finished one, or a
// running trial whose latest loss is lower still.
func (s *LocalSearch) center() map[string]any {
	center, score := s.best, s.bestScore
	for trial, latest := range s.latest {
		if latest < score {
			center, score = s.configs[trial], latest
		}
	}
	return center
}

// OnResult implements search.Searcher: it keeps each running trial's latest
// loss, so that a promising trial is built on before it ends.
func (s *LocalSearch) OnResult(trial int, obs search.Observation) { s.latest[trial] = obs.Score }

// OnTrialEnd implements search.Searcher: a completed or stopped trial
// counts with its last loss; a failed one teaches nothing.
func (s *LocalSearch) OnTrialEnd(trial int, end search.TrialEnd) {
	cfg := s.configs[trial]
	delete(s.configs, trial)
	delete(s.latest, trial)
	if end.Status == search.TrialFailed || end.Last == nil {
		return
	}
	s.finished++
	if end.Last.Score < s.bestScore {
		s.best, s.bestScore, s.stale = cfg, end.Last.Score, 0
		return
	}
	if s.stale++; s.stale >= 3 && s.finished > s.explore {
		s.sigma, s.stale = s.sigma/2, 0
	}
}

// train fits y = 2x + 1 with SGD and momentum on data drawn from the
// trial's seed, reporting the validation loss after each epoch.
func train(ctx context.Context, w *trainer.Worker) error {
	lr, momentum := w.Float("lr", 0.01), w.Float("momentum", 0.9)
	r := rand.New(rand.NewPCG(uint64(w.Seed()), 2))
	data := func(n int) (xs, ys []float64) {
		for range n {
			x := r.Float64()*2 - 1
			xs, ys = append(xs, x), append(ys, 2*x+1+0.1*r.NormFloat64())
		}
		return xs, ys
	}
	xs, ys := data(200)
	vx, vy := data(100)
	var a, b, va, vb float64
	for epoch := 1; epoch <= w.Int("epochs", 10); epoch++ {
		for i := range xs {
			e := a*xs[i] + b - ys[i]
			va = momentum*va - lr*2*e*xs[i]
			vb = momentum*vb - lr*2*e
			a, b = a+va, b+vb
		}
		loss := 0.0
		for i := range vx {
			e := a*vx[i] + b - vy[i]
			loss += e * e / float64(len(vx))
		}
		if math.IsNaN(loss) || math.IsInf(loss, 0) {
			return fmt.Errorf("diverged at epoch %d (lr %g is too large)", epoch, lr)
		}
		if err := w.Report(ctx, map[string]float64{"epoch": float64(epoch), "loss": loss}); err != nil {
			return err
		}
	}
	return nil
}

// run tunes train with a LocalSearch for at most trials trials, recording
// results in db.
func run(ctx context.Context, db string, trials int) (*tuner.Result, error) {
	cfg := tuner.Config{
		Name:      "custom-searcher",
		Storage:   db,
		Seed:      1,
		Objective: tuner.Objective{Metric: "loss", Mode: "min"},
		// NumSamples caps the trials; the searcher may end sooner. One
		// trial at a time keeps the search the same from run to run.
		Search:  tuner.SearchConfig{NumSamples: trials, MaxConcurrent: 1},
		Trainer: trainer.Config{Scaling: trainer.ScalingConfig{NumWorkers: 1, CPUsPerWorker: 0.5}},
	}
	searcher := NewLocalSearch(1, 4)
	t, err := tuner.New(cfg, tuner.WithTrainFunc(train), tuner.WithSearcher(searcher))
	if err != nil {
		return nil, err
	}
	return t.Fit(ctx)
}

func main() {
	db := flag.String("db", filepath.Join(os.TempDir(), "gotune-custom-searcher.db"), "the results database (replaced if it exists)")
	trials := flag.Int("trials", 30, "the most trials to run")
	flag.Parse()
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(*db + suffix)
	}
	res, err := run(context.Background(), *db, *trials)
	if err != nil {
		fmt.Fprintln(os.Stderr, "custom_searcher:", err)
		os.Exit(1)
	}
	ended := ""
	if len(res.Trials) < *trials {
		ended = ", the searcher ended the search"
	}
	fmt.Printf("%d trials%s\nbest trial %d: loss %.5f with lr %.4g, momentum %.3f\nresults: %s\n",
		len(res.Trials), ended, res.Best.Number, *res.Best.BestMetric, res.Best.Params["lr"], res.Best.Params["momentum"], *db)
}
