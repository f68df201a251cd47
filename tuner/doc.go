// Package tuner owns the experiment loop: it validates a sweep's Config,
// asks a Searcher for each trial's configuration, places and runs the
// trial's training group through the trainer, records every report in
// storage before the scheduler decides on it, and returns the experiment's
// trials and best trial when it is done.
//
// Configurations come from a Searcher: RandomSearch, TPE (a multivariate
// Tree-structured Parzen Estimator, grown from Optuna's TPE sampler; MOTPE
// with several objectives), BOHB (TPE fitted at HyperBand's budgets),
// NSGA-II and CMAES (through goptuna's sampler), preceded by Points to
// try first, crossed with grid parameters by a GridSearch and bounded by a
// Limiter, as SearchConfig describes; or from a Searcher of your own, given
// with WithSearcher. TPE, MOTPE and BOHB count the trials still running as
// bad ones (a constant liar), and in a finite space none suggests a
// configuration twice unless repeats are allowed.
//
// The smallest Go program that tunes a training function:
//
//	space, _ := searchspace.New(searchspace.Param{Name: "lr", Domain: searchspace.LogUniform{Low: 1e-4, High: 1e-1}})
//	cfg := tuner.Config{Name: "demo", Objective: tuner.Objective{Metric: "loss"},
//		Search: tuner.SearchConfig{NumSamples: 8, Space: space}}
//	t, err := tuner.New(cfg, tuner.WithTrainFunc(train))
//	...
//	res, err := t.Fit(ctx)
//
// It imports searchspace, schedulers, storage, trainer, workers and python;
// none of them imports it, only what reads results or wires a sweep
// (dashboard, dashboard/trialfiles, cmd/gotune and its sweepfile). See
// docs/architecture.md.
package tuner
