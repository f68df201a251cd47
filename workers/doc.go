// Package workers owns the compute a sweep runs on: the node's inventory
// (CPUs and memory) and the pool that places a training group's workers
// all-or-nothing, so that no trial ever holds part of a group while it waits.
//
// The package imports nothing else of gotune's.
package workers
