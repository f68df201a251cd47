package storage

import (
	"context"
	"encoding/json"
	"fmt"
)

// SchedulerInput is one call a tuner made to its scheduler, recorded so that
// a resumed run can make the same calls, in the same order, on a new
// scheduler. The store keeps Kind and Data as given; their meaning is the
// tuner's.
type SchedulerInput struct {
	// Seq orders an experiment's inputs: later inputs have larger Seq.
	Seq   int64
	Trial int
	Kind  string
	Data  json.RawMessage
}

// LogSchedulerInput queues in as experiment expID's next scheduler input
// and returns without waiting for the commit. Inputs commit in the order
// they are logged and before any write made after them, so whatever a
// decision caused in the database implies the input that led to it is
// recorded too. It returns the failure of an earlier queued write, if one
// failed.
func (db *DB) LogSchedulerInput(expID int64, in SchedulerInput) error {
	if db.w == nil {
		return ErrReadOnly
	}
	var data any
	if in.Data != nil {
		data = string(in.Data)
	}
	err := db.w.enqueue(func(tx *wtx) error {
		_, err := tx.exec(insertSchedulerInput, expID, in.Trial, in.Kind, data)
		return err
	})
	if err != nil {
		return fmt.Errorf("record scheduler input: %w", err)
	}
	return nil
}

const insertSchedulerInput = `INSERT INTO scheduler_inputs (experiment_id, trial, kind, data_json) VALUES (?, ?, ?, ?)`

// SchedulerInputs returns experiment expID's scheduler inputs in the order
// they were logged.
func (db *DB) SchedulerInputs(ctx context.Context, expID int64) ([]SchedulerInput, error) {
	rows, err := db.rq.QueryContext(ctx,
		`SELECT id, trial, kind, data_json FROM scheduler_inputs WHERE experiment_id = ? ORDER BY id`, expID)
	if err != nil {
		return nil, fmt.Errorf("read scheduler inputs: %w", err)
	}
	defer rows.Close()
	var out []SchedulerInput
	for rows.Next() {
		var in SchedulerInput
		var data *string
		if err := rows.Scan(&in.Seq, &in.Trial, &in.Kind, &data); err != nil {
			return nil, fmt.Errorf("read scheduler inputs: %w", err)
		}
		if data != nil {
			in.Data = json.RawMessage(*data)
		}
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read scheduler inputs: %w", err)
	}
	return out, nil
}
