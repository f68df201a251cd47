package storage

import (
	"context"
	"fmt"
	"time"
)

// WorkerRecord is one worker process (or goroutine) of a trial's training
// group, as the trainer last reported it.
type WorkerRecord struct {
	// ID is the worker's key in the database, set by SetWorker's return and
	// by reads; ResourceSample.WorkerID refers to it.
	ID int64
	// Attempt numbers the start of the trial's group the worker belongs
	// to: 0 for the first, then one more at each start after it (a
	// restart after a failure, a resize, a paused trial going on, a
	// resumed sweep).
	Attempt int
	Rank    int
	// Node names the machine the worker runs on.
	Node string
	// PID is the worker's process id, 0 for an in-process worker.
	PID int
	// Status is the worker's state in the trainer's words, e.g. RUNNING,
	// EXITED, FAILED.
	Status string
	// LogPath is the file that keeps the worker's output, "" for none.
	LogPath string
	// StepRate is the worker's training steps per second, 0 when unknown.
	StepRate  float64
	StartedAt time.Time
	UpdatedAt time.Time
}

const upsertWorker = `
INSERT INTO workers (trial_id, attempt, rank, node, pid, status, log_path, step_rate, started_at, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9)
ON CONFLICT (trial_id, attempt, rank) DO UPDATE SET
	node = excluded.node, pid = excluded.pid, status = excluded.status,
	log_path = excluded.log_path, step_rate = excluded.step_rate, updated_at = excluded.updated_at
RETURNING id`

// SetWorker records worker w of the trial with database id trialID, or
// replaces what was recorded of the same rank in the same attempt, and
// returns the worker's id. Give every field each time: a zero PID, LogPath
// or StepRate is stored as unknown.
func (db *DB) SetWorker(ctx context.Context, trialID int64, w WorkerRecord) (int64, error) {
	var id int64
	err := db.write(ctx, db.workersWrite(trialID, []WorkerRecord{w}, func(_ int, got int64) { id = got }))
	if err != nil {
		return 0, err
	}
	return id, nil
}

// QueueWorkers records workers ws of the trial with database id trialID as
// SetWorker does, in one write that returns without waiting for the commit
// (ordered like QueueEvent). learned, when not nil, is told each worker's
// id, from the writer's goroutine, before the write commits; it must not
// block. It returns the failure of an earlier queued write, if one failed.
func (db *DB) QueueWorkers(trialID int64, ws []WorkerRecord, learned func(rank int, id int64)) error {
	if db.w == nil {
		return ErrReadOnly
	}
	if err := db.w.enqueue(db.workersWrite(trialID, ws, learned)); err != nil {
		return fmt.Errorf("record workers: %w", err)
	}
	return nil
}

// workersWrite is the write that records workers ws (see SetWorker),
// stamped with the time now, telling learned each one's id.
func (db *DB) workersWrite(trialID int64, ws []WorkerRecord, learned func(rank int, id int64)) func(tx *wtx) error {
	now := unixSeconds(db.now())
	return func(tx *wtx) error {
		for _, w := range ws {
			var id int64
			if err := tx.queryRow(upsertWorker, trialID, w.Attempt, w.Rank, w.Node, nullInt(w.PID), w.Status,
				nullString(w.LogPath), nullFloat(w.StepRate), now).Scan(&id); err != nil {
				return fmt.Errorf("record worker %d: %w", w.Rank, err)
			}
			if learned != nil {
				learned(w.Rank, id)
			}
		}
		return nil
	}
}

// EndRunningWorkers sets status on the workers of experiment expID that
// are still recorded as RUNNING, and returns how many there were. A run
// that continues an interrupted experiment calls it: the workers of the
// run that was interrupted are gone, whatever the database last heard.
func (db *DB) EndRunningWorkers(ctx context.Context, expID int64, status string) (int, error) {
	now := unixSeconds(db.now())
	var n int64
	err := db.write(ctx, func(tx *wtx) error {
		res, err := tx.exec(`UPDATE workers SET status = ?, updated_at = ?
WHERE status = 'RUNNING' AND trial_id IN (SELECT id FROM trials WHERE experiment_id = ?)`, status, now, expID)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("end the workers an interrupted run left running: %w", err)
	}
	return int(n), nil
}

// Workers returns the workers of trial number trial of experiment exp, by
// attempt and rank.
func (db *DB) Workers(ctx context.Context, exp string, trial int) ([]WorkerRecord, error) {
	if _, err := db.Trial(ctx, exp, trial); err != nil {
		return nil, err
	}
	rows, err := db.rq.QueryContext(ctx, `
SELECT w.id, w.attempt, w.rank, w.node, coalesce(w.pid, 0), w.status, coalesce(w.log_path, ''),
	coalesce(w.step_rate, 0), w.started_at, w.updated_at
FROM workers w JOIN trials t ON t.id = w.trial_id JOIN experiments e ON e.id = t.experiment_id
WHERE e.name = ? AND t.number = ? ORDER BY w.attempt, w.rank`, exp, trial)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []WorkerRecord
	for rows.Next() {
		var w WorkerRecord
		var started, updated float64
		if err := rows.Scan(&w.ID, &w.Attempt, &w.Rank, &w.Node, &w.PID, &w.Status, &w.LogPath,
			&w.StepRate, &started, &updated); err != nil {
			return nil, err
		}
		w.StartedAt, w.UpdatedAt = fromUnixSeconds(started), fromUnixSeconds(updated)
		out = append(out, w)
	}
	return out, rows.Err()
}

// NoGPU is ResourceSample.GPU for a sample of the host's CPUs and memory.
const NoGPU = -1

// ResourceSample is one measurement of a GPU's or a host's use.
type ResourceSample struct {
	Time time.Time
	Node string
	// WorkerID is the id SetWorker returned for the worker using the
	// device, 0 when the sample is the node's alone.
	WorkerID int64
	// GPU is the device's index on the node (0 is the first GPU), or NoGPU
	// for the host's CPUs and memory.
	GPU int
	// Util is the utilisation in percent, 0 to 100 per device (host CPU
	// utilisation is summed over its cores' share, also 0 to 100). A
	// sample with GPU NoGPU and a WorkerID is a worker's processes' CPU
	// use in percent of one core (above 100 when it keeps several busy)
	// and their RSS in MemoryUsed, not the host's.
	Util float64
	// MemoryUsed and MemoryTotal are in bytes.
	MemoryUsed  int64
	MemoryTotal int64
}

const insertResourceSample = `INSERT INTO resource_samples
(experiment_id, time, node, worker_id, gpu_index, util, memory_used, memory_total) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`

// AddResourceSamples durably records samples taken during experiment expID,
// in one transaction.
func (db *DB) AddResourceSamples(ctx context.Context, expID int64, samples []ResourceSample) error {
	rows := make([][]any, len(samples))
	for i, s := range samples {
		var gpu any = s.GPU
		if s.GPU == NoGPU {
			gpu = nil
		}
		rows[i] = []any{expID, unixSeconds(s.Time), s.Node, nullID(s.WorkerID), gpu, s.Util, s.MemoryUsed, s.MemoryTotal}
	}
	err := db.write(ctx, func(tx *wtx) error {
		for _, r := range rows {
			if _, err := tx.exec(insertResourceSample, r...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record resource samples: %w", err)
	}
	return nil
}

// ResourceSamples returns the samples of experiment exp taken at or after
// since (the zero time: all), oldest first.
func (db *DB) ResourceSamples(ctx context.Context, exp string, since time.Time) ([]ResourceSample, error) {
	e, err := db.experimentRecord(ctx, exp)
	if err != nil {
		return nil, err
	}
	var from float64
	if !since.IsZero() {
		from = unixSeconds(since)
	}
	rows, err := db.rq.QueryContext(ctx, `
SELECT time, node, coalesce(worker_id, 0), coalesce(gpu_index, ?), util, memory_used, memory_total
FROM resource_samples WHERE experiment_id = ? AND time >= ? ORDER BY time, id`, NoGPU, e.ID, from)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ResourceSample
	for rows.Next() {
		var s ResourceSample
		var ts float64
		if err := rows.Scan(&ts, &s.Node, &s.WorkerID, &s.GPU, &s.Util, &s.MemoryUsed, &s.MemoryTotal); err != nil {
			return nil, err
		}
		s.Time = fromUnixSeconds(ts)
		out = append(out, s)
	}
	return out, rows.Err()
}

func nullInt(v int) any {
	if v == 0 {
		return nil
	}
	return v
}

func nullString(v string) any {
	if v == "" {
		return nil
	}
	return v
}

func nullFloat(v float64) any {
	if v == 0 {
		return nil
	}
	return v
}
