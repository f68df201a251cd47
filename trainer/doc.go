// Package trainer owns the life of one trial's training group: its scaling,
// the worker context user code sees (configuration, ranks, collectives,
// reports, checkpoints), running the group's workers and stopping them on
// the tuner's decision, restarting a failed group from its latest
// checkpoint, resizing elastic groups, and the built-in models a sweep file
// can name without writing code.
//
// Run runs a group of one of three kinds of worker behind one API:
//   - Go functions in goroutines (Spec.Train): the fastest, for development
//     and tests; a worker that crashes takes the process with it;
//   - Go functions in child processes of the same binary (Spec.Process, a
//     name given to Register; main calls WorkerMain first): a panic or an
//     os.Exit in a worker fails only its group;
//   - any command (Spec.Command), per the command-worker contract: the
//     environment torchrun would set plus gotune's own, "@gotune {json}"
//     report lines on stdout (see ParseReportLine), a log file per worker.
//
// Process launching, monitoring and killing is package workers'
// (workers.StartProcess); checkpoint files are committed through the
// consumer-defined CheckpointStore (storage.CheckpointDir behind the tuner),
// and compute is reserved through Placer.
//
// It imports allreduce for the group's collectives, workers for compute
// and processes, and tfevents to read a script's TensorBoard
// files; never storage, schedulers or tuner, which it reaches only through
// the interfaces it defines (Sink, Placer, CheckpointStore).
package trainer
