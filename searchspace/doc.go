// Package searchspace owns the hyperparameter search space: the domains a
// parameter can be drawn from (uniform, log-uniform, quantised, integer
// ranges, choices, grids, constants), their validation, the sweep-file
// syntax of each (see Parse), sampling a complete configuration, and the
// expansion of grid parameters into their cartesian product.
//
// A configuration is a map from parameter name to value. Values are float64,
// int64, string or bool; nothing else ever appears in a sampled configuration.
//
// The package imports nothing else of gotune's.
package searchspace
