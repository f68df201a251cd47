// Package storage owns gotune's results database: the SQLite schema and its
// migrations, the writes a running sweep makes (experiments, trials, params,
// reports, checkpoints, events, workers, resource samples), the queries the
// CLI and the Go API answer from it, and the lock that keeps two runs off
// one experiment.
//
// Open starts one writer goroutine that owns the only writing connection;
// Close flushes and stops it. Every write method returns once its
// transaction is committed, and concurrent writes share commits, so many
// trials reporting at once cost one commit per batch, not per report. The
// database runs in WAL mode, so readers in other processes (the dashboard,
// `gotune trials`, `gotune query`) never block the sweep.
//
// Besides its tables, the schema has three views that are a stable, public
// surface for SQL tools: experiments_v, trials_v and reports_v.
//
// A run that continues an interrupted experiment takes LockExperiment (held
// until it ends; the operating system drops it if the process dies), reads
// ResumeState, calls ResumeExperiment, keeps the finished trials, restarts
// each unfinished one with RestartTrial from its Checkpoint's iteration (0
// without one) and runs it from Checkpoint.Path, and numbers new trials
// after the last. A write that fails with ErrDiskFull committed nothing and
// left everything before it intact: end the run there, and the experiment
// can be resumed once there is space.
//
// The package imports nothing else of gotune's.
package storage
