// Package allreduce owns the collective operations a training group uses to
// stay in step: allreduce (sum and mean), and barrier, among the ranks of one
// group.
//
// A Comm is one rank's handle on its group. NewLocal builds the ranks of a
// group whose workers are goroutines of one process.
//
// The package imports nothing else of gotune's.
package allreduce
