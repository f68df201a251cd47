// Package tuner owns the experiment loop: it validates a sweep's Config,
// asks a search.Searcher for each trial's configuration, places and runs
// the trial's training group through the trainer, records every report in
// storage before the scheduler decides on it, and returns the experiment's
// trials and best trial when it is done. It also owns resuming an
// interrupted experiment (replaying its searcher and scheduler), the
// control socket, trial groups and the sweep's configuration.
//
// The searchers live in package search: newSearcher (search.go) builds the
// one a SearchConfig describes, crossed with grid parameters and preceded
// by points to try first; WithSearcher plugs in one of your own. The names
// the searchers had in this package (tuner.Searcher, tuner.NewTPE, ...)
// remain for one release as deprecated aliases and forwards
// (deprecated.go).
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
// It imports searchspace, search, pareto (for a deprecated forward only),
// schedulers, storage, trainer, workers, cluster and python; none of them
// imports it, only what reads results or wires a sweep (dashboard,
// dashboard/trialfiles, cmd/gotune and its sweepfile). See
// docs/architecture.md.
package tuner
