// Package workers owns the compute a sweep runs on and hands it out to
// training groups.
//
// The inventory is a list of nodes (Node): CPUs, memory and GPUs, found on
// this machine by Discover (GPUs through NVIDIA's management library, NVML,
// including MIG devices) or declared (Declared: the sweep file's
// [resources] section and the --resources flag). Without an NVIDIA driver
// a node simply has no GPUs, and Node.GPUNote says why.
//
// A Manager places each trial's group of workers on the nodes all or
// nothing: a group never holds part of its resources while it waits.
// Fractional GPU shares are packed onto devices without exceeding one
// device; groups are packed onto few nodes or spread over many; a group
// that has waited long reserves its place so a stream of small groups
// cannot starve it; a group that could never fit fails at once. Elastic
// groups (a minimum and a maximum of workers) start as soon as their
// minimum fits and learn when they could grow. Placement itself is a set
// of pure functions (place.go) that the Manager calls under its lock.
//
// A Sampler reads GPU utilisation and memory every few seconds while
// trials run; Allocation.Attribute assigns the samples to workers.
//
// A Process runs on this node (StartProcess, LocalLauncher), or on another
// node whose side of it is a Remote (NewRemoteProcess): package cluster
// implements that side over its agents' sessions. workers owns what runs
// on one node; it imports nothing of gotune's, and never package cluster,
// which imports it.
package workers
