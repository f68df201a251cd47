package storage

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// MLflowRun records what was delivered of one MLflow run to one tracking
// target: a trial's run, or the sweep's parent run (Trial 0). It lets a
// resumed sweep, or a second sync, send only what the target lacks.
type MLflowRun struct {
	// Trial is the trial's number, 0 for the sweep's parent run.
	Trial int
	// RunID is the run's id on the tracking server.
	RunID string
	// ParamsSent is whether the trial's params were delivered.
	ParamsSent bool
	// Tags are the tags delivered last, by key.
	Tags map[string]string
	// Status is the final run status delivered, "" while the run is open.
	Status string

	// sent marks the trial's newest delivered report; see MLflowPending.
	sent reportMark
}

// reportMark is a report's place in its trial's chain, as the database
// keeps it: time exactly as stored, and iteration. Reports are appended
// to a chain in time order, restarts included, so the reports after a
// mark are those recorded after it.
type reportMark struct {
	set       bool
	time      float64
	iteration int
}

// PendingReport is a report that MLflowPending found undelivered; pass it
// to MLflowRun.Delivered once the target has it.
type PendingReport struct {
	Report
	mark reportMark
}

// Delivered records that the target has report p (and every report of the
// trial before it); SaveMLflowRun makes that durable.
func (r *MLflowRun) Delivered(p PendingReport) { r.sent = p.mark }

// MLflowRuns returns what was delivered to target of experiment expID's
// runs, by trial number (0: the parent run).
func (db *DB) MLflowRuns(ctx context.Context, expID int64, target string) (map[int]*MLflowRun, error) {
	rows, err := db.rq.QueryContext(ctx, `
SELECT trial, run_id, params_sent, sent_time, sent_iteration, tags_json, coalesce(status, '')
FROM mlflow_runs WHERE experiment_id = ? AND target = ?`, expID, target)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int]*MLflowRun{}
	for rows.Next() {
		var r MLflowRun
		var t sql.NullFloat64
		var it sql.NullInt64
		var tags string
		if err := rows.Scan(&r.Trial, &r.RunID, &r.ParamsSent, &t, &it, &tags, &r.Status); err != nil {
			return nil, err
		}
		if t.Valid {
			r.sent = reportMark{set: true, time: t.Float64, iteration: int(it.Int64)}
		}
		if err := json.Unmarshal([]byte(tags), &r.Tags); err != nil {
			return nil, fmt.Errorf("mlflow run of trial %d: decode tags: %w", r.Trial, err)
		}
		out[r.Trial] = &r
	}
	return out, rows.Err()
}

// SaveMLflowRun durably records r as what target has of experiment expID's
// run r.Trial, replacing what was recorded before.
func (db *DB) SaveMLflowRun(ctx context.Context, expID int64, target string, r *MLflowRun) error {
	tags, err := json.Marshal(r.Tags)
	if err != nil {
		return err
	}
	if r.Tags == nil {
		tags = []byte("{}")
	}
	var t, it any
	if r.sent.set {
		t, it = r.sent.time, r.sent.iteration
	}
	return db.write(ctx, func(tx *wtx) error {
		_, err := tx.exec(`
INSERT INTO mlflow_runs (experiment_id, target, trial, run_id, params_sent, sent_time, sent_iteration, tags_json, status)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, nullif(?, ''))
ON CONFLICT (experiment_id, target, trial) DO UPDATE SET
	run_id = excluded.run_id, params_sent = excluded.params_sent, sent_time = excluded.sent_time,
	sent_iteration = excluded.sent_iteration, tags_json = excluded.tags_json, status = excluded.status`,
			expID, target, r.Trial, r.RunID, r.ParamsSent, t, it, string(tags), r.Status)
		return err
	})
}

// MLflowPending returns the reports of the trial with database id trialID
// (Trial.ID) that r has not delivered, in iteration order: every report
// when r is nil or has delivered none, else those recorded after the last
// one delivered. After a restart, the reports the trial makes again of
// iterations already delivered are new reports, and pending.
func (db *DB) MLflowPending(ctx context.Context, trialID int64, r *MLflowRun) ([]PendingReport, error) {
	var m reportMark
	if r != nil {
		m = r.sent
	}
	// newer holds for a report after m; the walk from the newest report
	// back stops at the first that is not.
	newer := `(NOT ?2 OR r.time > ?3 OR (r.time = ?3 AND r.iteration > ?4))`
	rows, err := db.rq.QueryContext(ctx, `
WITH RECURSIVE chain(id) AS (
	SELECT last_report_id FROM trial_progress WHERE trial_id = ?1 AND last_report_id IS NOT NULL
	UNION ALL
	SELECT r.prev_id FROM chain c JOIN reports r ON r.id = c.id WHERE r.prev_id IS NOT NULL AND `+newer+`
)
SELECT r.id, r.iteration, r.time, r.metrics_json FROM chain c JOIN reports r ON r.id = c.id
WHERE `+newer+` ORDER BY r.iteration`, trialID, m.set, m.time, m.iteration)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []PendingReport
	for rows.Next() {
		var p PendingReport
		var ms string
		if err := rows.Scan(&p.Seq, &p.Iteration, &p.mark.time, &ms); err != nil {
			return nil, err
		}
		p.mark.set, p.mark.iteration = true, p.Iteration
		p.Time = fromUnixSeconds(p.mark.time)
		if p.Metrics, err = decodeMetrics(ms); err != nil {
			return nil, fmt.Errorf("decode report %d: %w", p.Iteration, err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// LockMLflow takes the exclusive lock on sending experiment name of this
// database to MLflow target, so that two senders (a sweep's and a sync)
// do not send the same reports at once. Like LockExperiment it does not
// wait: when another holds it, it fails with an error that wraps
// ErrExperimentRunning and names the holder's process id.
func (db *DB) LockMLflow(name, target string) (*ExperimentLock, error) {
	sum := sha256.Sum256([]byte(name + "\x00" + target))
	return lockFile(db.path+".mlflow-"+hex.EncodeToString(sum[:8])+".lock", func(holder, path string) error {
		return fmt.Errorf("%w: %q in %s is being sent to %s by %s (lock %s); wait for it to end",
			ErrExperimentRunning, name, db.path, target, holder, path)
	})
}

// Times returns when the trial with database id trialID (Trial.ID) was
// created and ended, or, when trialID is 0, experiment expID; end is zero
// while it runs. It returns ErrNotFound when there is no such row.
func (db *DB) Times(ctx context.Context, expID, trialID int64) (start, end time.Time, err error) {
	q := `SELECT created_at, ended_at FROM experiments WHERE id = ?`
	id := expID
	if trialID != 0 {
		q, id = `SELECT created_at, ended_at FROM trials WHERE id = ?`, trialID
	}
	rows, err := db.rq.QueryContext(ctx, q, id)
	if err != nil {
		return start, end, err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return start, end, err
		}
		return start, end, ErrNotFound
	}
	var s float64
	var e sql.NullFloat64
	if err := rows.Scan(&s, &e); err != nil {
		return start, end, err
	}
	start = fromUnixSeconds(s)
	if e.Valid {
		end = fromUnixSeconds(e.Float64)
	}
	return start, end, nil
}
