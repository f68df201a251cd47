// Package mlflow logs gotune sweeps to an MLflow tracking server over
// MLflow's REST API: an experiment per sweep, a parent run for the sweep and
// one nested run per trial, with the trial's params, every report as
// metrics (step = the report's iteration) and tags for its status,
// restarts and checkpoint.
//
// A Tracker reads what it sends from the results database, never from the
// sweep itself, and records in the same database what the server has
// acknowledged: the database stays the source of truth, the server may be
// down or slow without holding the sweep up, and a resumed sweep or a
// second Sync sends only what the server lacks.
//
// It imports storage only; the tuner does not import it.
package mlflow
