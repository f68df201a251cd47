// Package pareto ranks points of several objectives, all lower-is-better,
// as multi-objective searchers and schedulers do: dominance, non-dominated
// fronts, crowding distance, the crowded order NSGA-II selects by (with
// Deb's constrained domination), and hypervolume.
//
// It owns these primitives for the whole project: search (NSGA-II, MOTPE)
// and schedulers (ASHA's and HyperBand's rung fronts) build on it rather
// than keep copies. It is pure computation and imports nothing of gotune's.
package pareto
