// Package searchspace owns the hyperparameter search space: the domains a
// parameter can be drawn from (uniform, log-uniform, integer ranges, choices,
// constants), their validation, and sampling a complete configuration.
//
// A configuration is a map from parameter name to value. Values are float64,
// int64, string or bool; nothing else ever appears in a sampled configuration.
//
// The package imports nothing else of gotune's.
package searchspace
