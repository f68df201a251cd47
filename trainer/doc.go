// Package trainer owns the life of one trial's training group: its scaling,
// the worker context user code sees (configuration, ranks, collectives,
// reports), running the group's workers and stopping them on the tuner's
// decision, and the built-in models a sweep file can name without writing code.
//
// It imports allreduce for the group's collectives and workers for compute.
package trainer
