// Package allreduce owns the collective operations a training group uses to
// stay in step: allreduce (sum and mean), broadcast, allgather and barrier,
// on float32 and float64 slices, among the ranks of one group.
//
// A Comm is one rank's handle on its group. There are two transports:
//
//   - NewLocal builds the ranks of a group whose workers are goroutines of
//     one process; they exchange data through shared memory.
//   - JoinTCP joins a rank to a group whose workers are processes, on one
//     machine or several. The ranks find each other through a Rendezvous
//     service that the driver runs for all of its groups (no fixed ports:
//     every rank listens on an ephemeral port and advertises it), then
//     connect as a ring: over TCP between hosts; between ranks on one host
//     through Unix-domain sockets, with large frames in shared memory.
//     Allreduce is a ring reduce-scatter followed by a
//     ring allgather, cut into frames and pipelined so that every rank
//     sends, receives and adds at the same time; broadcast is a pipelined
//     chain, allgather and barrier are rings.
//
// Reductions are deterministic for a given world size, and both transports
// add in the same order, so a group gives the same bits whichever transport
// it uses (see Comm).
//
// Failures never hang a group. Over TCP, a rank that exits or closes its
// Comm closes its connections, and the ranks waiting on it fail at once; a
// rank that is alive but stopped, or whose node vanished, sends no more
// heartbeats, and the rank waiting on it fails after TCPConfig.Timeout. The
// failure travels round the ring as each failing rank closes its own
// connections. After an error a Comm is unusable: close it and form the
// group again (a Rendezvous forgets a group once it has formed, so the same
// name can be used again).
//
// The package imports nothing else of gotune's.
package allreduce
