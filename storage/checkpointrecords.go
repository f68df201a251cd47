package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// CheckpointRecord is the database's record of a committed checkpoint: where
// its files are and the metrics of the report it came with. The files
// themselves are managed on disk separately; the record says whether they
// are still kept.
type CheckpointRecord struct {
	ID int64
	// Trial is the trial's number within its experiment.
	Trial     int
	Iteration int
	Path      string
	Metrics   map[string]float64
	CreatedAt time.Time
	// DeletedAt is when retention removed the files; zero while they are kept.
	DeletedAt time.Time
}

// Kept reports whether the checkpoint's files are still on disk.
func (c *CheckpointRecord) Kept() bool { return c.DeletedAt.IsZero() }

// RecordCheckpoint durably records a checkpoint committed at path for the
// report of iteration of the trial with database id trialID, and returns
// the record's id.
func (db *DB) RecordCheckpoint(ctx context.Context, trialID int64, iteration int, path string, metrics map[string]float64) (int64, error) {
	m := encodeMetrics(metrics)
	now := unixSeconds(db.now())
	var id int64
	err := db.write(ctx, func(tx *wtx) error {
		res, err := tx.exec(`INSERT INTO checkpoints (trial_id, iteration, path, metrics_json, created_at) VALUES (?, ?, ?, ?, ?)`,
			trialID, iteration, path, m, now)
		if err != nil {
			return err
		}
		id, err = res.LastInsertId()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("record checkpoint of iteration %d: %w", iteration, err)
	}
	return id, nil
}

// MarkCheckpointDeleted records that retention removed the files of
// checkpoint id.
func (db *DB) MarkCheckpointDeleted(ctx context.Context, id int64) error {
	now := unixSeconds(db.now())
	err := db.write(ctx, func(tx *wtx) error {
		res, err := tx.exec(`UPDATE checkpoints SET deleted_at = coalesce(deleted_at, ?) WHERE id = ?`, now, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(err, ErrNotFound)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("mark checkpoint %d deleted: %w", id, err)
	}
	return nil
}

const selectCheckpoints = `
SELECT c.id, t.number, c.iteration, c.path, c.metrics_json, c.created_at, c.deleted_at
FROM checkpoints c JOIN trials t ON t.id = c.trial_id JOIN experiments e ON e.id = t.experiment_id
WHERE e.name = ? AND t.number = ?`

// CheckpointRecords returns every checkpoint recorded for trial number trial
// of experiment exp, kept or deleted, oldest first.
func (db *DB) CheckpointRecords(ctx context.Context, exp string, trial int) ([]CheckpointRecord, error) {
	if _, err := db.Trial(ctx, exp, trial); err != nil {
		return nil, err
	}
	return scanCheckpoints(db.rq.QueryContext(ctx, selectCheckpoints+` ORDER BY c.iteration, c.id`, exp, trial))
}

// LatestCheckpoint returns the kept checkpoint of the highest iteration of
// trial number trial of experiment exp: where a restarted trial resumes. It
// returns ErrNotFound when the trial has none.
func (db *DB) LatestCheckpoint(ctx context.Context, exp string, trial int) (*CheckpointRecord, error) {
	cs, err := scanCheckpoints(db.rq.QueryContext(ctx, selectCheckpoints+` AND c.deleted_at IS NULL ORDER BY c.iteration DESC, c.id DESC LIMIT 1`, exp, trial))
	if err != nil {
		return nil, err
	}
	if len(cs) == 0 {
		return nil, fmt.Errorf("checkpoint of trial %d of %q: %w", trial, exp, ErrNotFound)
	}
	return &cs[0], nil
}

// BestCheckpoint returns the kept checkpoint of trial number trial of
// experiment exp whose metrics hold the best value of the experiment's
// metric (the latest of equals); when none holds the metric, the latest kept
// one. It returns ErrNotFound when the trial has none.
func (db *DB) BestCheckpoint(ctx context.Context, exp string, trial int) (*CheckpointRecord, error) {
	e, err := db.experimentRecord(ctx, exp)
	if err != nil {
		return nil, err
	}
	order := "ASC"
	if e.Mode == "max" {
		order = "DESC"
	}
	cs, err := scanCheckpoints(db.rq.QueryContext(ctx, selectCheckpoints+` AND c.deleted_at IS NULL
ORDER BY json_extract(c.metrics_json, ?3) `+order+` NULLS LAST, c.iteration DESC, c.id DESC LIMIT 1`,
		exp, trial, jsonPath(e.Metric)))
	if err != nil {
		return nil, err
	}
	if len(cs) == 0 {
		return nil, fmt.Errorf("checkpoint of trial %d of %q: %w", trial, exp, ErrNotFound)
	}
	return &cs[0], nil
}

func scanCheckpoints(rows *sql.Rows, err error) ([]CheckpointRecord, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []CheckpointRecord
	for rows.Next() {
		var c CheckpointRecord
		var m string
		var created float64
		var deleted *float64
		if err := rows.Scan(&c.ID, &c.Trial, &c.Iteration, &c.Path, &m, &created, &deleted); err != nil {
			return nil, err
		}
		if c.Metrics, err = decodeMetrics(m); err != nil {
			return nil, fmt.Errorf("checkpoint %d: decode metrics: %w", c.ID, err)
		}
		c.CreatedAt = fromUnixSeconds(created)
		if deleted != nil {
			c.DeletedAt = fromUnixSeconds(*deleted)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}
