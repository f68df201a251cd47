// Package search owns what to try next: the Searcher interface a tuner
// asks for each trial's configuration and tells each result and trial end,
// with its optional abilities (Replayer, to resume; WarmStarter, to learn
// from another experiment), and every built-in searcher: RandomSearch;
// TPE (a multivariate Tree-structured Parzen Estimator, grown from
// Optuna's TPE sampler; MOTPE with several objectives); BOHB (TPE fitted
// at HyperBand's budgets); NSGA2; CMAES (through goptuna's sampler); and
// the wrappers Points (configurations to try first), GridSearch (grid
// parameters crossed with any searcher) and Limiter. Importance ranks
// parameters by how they set the best trials apart (PED-ANOVA).
//
// A searcher decides and does nothing else: no I/O, no clock, no
// goroutines, called from one goroutine. The tuner records what it is told
// and replays it on resume, which only works while searchers stay pure.
// Scores arrive lower-is-better. TPE, MOTPE and BOHB count the trials
// still running as bad ones (a constant liar), and in a finite space none
// suggests a configuration twice unless repeats are allowed.
//
// A searcher of your own implements Searcher (and Replayer, to resume
// exactly) and is passed to the tuner with tuner.WithSearcher; see
// examples/custom_searcher.
//
// Of gotune's packages it imports searchspace, pareto and schedulers
// (BOHB reads HyperBand's budgets and time rule); never storage, trainer,
// workers or tuner, which would tie deciding to doing. The schedulers
// must not import it.
package search
