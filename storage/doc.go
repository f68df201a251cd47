// Package storage owns gotune's results database: the SQLite schema and its
// migrations, the writes a running sweep makes (experiments, trials, reports)
// and the queries the CLI and the Go API answer from it.
//
// The database runs in WAL mode so that readers in other processes (the
// dashboard, `gotune trials`) never block the sweep, and every write returns
// only once it is committed.
//
// The package imports nothing else of gotune's.
package storage
