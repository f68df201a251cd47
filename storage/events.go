package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Event kinds. The store records start, complete, stop, error, restart and
// resume itself, with the writes that imply them (CreateTrial, FinishTrial,
// RestartTrial, ResumeExperiment); the tuner records the others with
// AddEvent. Any other kind may be recorded too.
const (
	EventStart     = "start"     // a trial was created and started
	EventComplete  = "complete"  // a trial ran to completion
	EventStop      = "stop"      // a trial was stopped early
	EventError     = "error"     // a trial failed
	EventEnd       = "end"       // a trial ended with another status
	EventRestart   = "restart"   // a trial restarted; data: cause, from_iteration, discarded_reports
	EventResume    = "resume"    // an interrupted experiment was resumed
	EventExtend    = "extend"    // a run raised the experiment's num_samples
	EventPause     = "pause"     // the scheduler paused a trial
	EventPromotion = "promotion" // the scheduler promoted a paused trial
	EventDecision  = "decision"  // a scheduler decision; data e.g. action, rung, cutoff
	EventParams    = "params"    // a trial's params changed (SetTrialParams); data: the new params
	EventResize    = "resize"    // an elastic group changed size; data: attempt (the new group's, as its workers'), workers
	// EventCheckpointRefused: a worker handed over a checkpoint outside its
	// own scratch folder (or unreadable); it was left untouched.
	EventCheckpointRefused = "checkpoint_refused"
	// EventReportsSkipped: reports of a trial's group were not recorded;
	// the message says how many and why (they repeated steps recorded
	// before a restart, or came after the group ended).
	EventReportsSkipped = "reports_skipped"
	EventInterrupt      = "interrupt" // the run stopped (e.g. on SIGTERM) while the trial ran; a resumed run continues it; data: iteration, checkpoint_iteration
	// EventHung: a trial's group went silent past its heartbeat timeout;
	// data: attempt (as its workers'), workers, stacks (each worker's,
	// taken before it was stopped).
	EventHung = "hung"
	// EventStraggler: a worker's step rate stayed well below its group's;
	// data: straggler (rank, step_rate, median, fraction, below_seconds)
	// and, when sampled, its CPU and RSS beside the group's medians.
	EventStraggler = "straggler"
)

// Event is something that happened to an experiment or one of its trials.
type Event struct {
	// Trial is the trial's number, 0 for an event of the whole experiment.
	Trial   int
	Time    time.Time
	Kind    string
	Message string
	// Data is the event's details as a JSON object, nil when it has none.
	Data json.RawMessage
}

// insertEvent takes experiment_id (NULL: the trial's experiment), trial_id
// (NULL: an experiment event), time, kind, message and data_json.
const insertEvent = `INSERT INTO events (experiment_id, trial_id, time, kind, message, data_json)
VALUES (coalesce(?1, (SELECT experiment_id FROM trials WHERE id = ?2)), ?2, ?3, ?4, ?5, ?6)`

// AddEvent durably records an event of experiment expID, or of the trial
// with database id trialID (Trial.ID) when trialID is not 0, in which case
// expID may be 0. data is encoded as JSON; nil records none.
func (db *DB) AddEvent(ctx context.Context, expID, trialID int64, kind, message string, data any) error {
	apply, err := db.eventWrite(expID, trialID, kind, message, data)
	if err == nil {
		err = db.write(ctx, apply)
	}
	if err != nil {
		return fmt.Errorf("record %s event: %w", kind, err)
	}
	return nil
}

// QueueEvent is AddEvent that returns without waiting for the commit, as
// LogSchedulerInput does: the event commits in order, after the writes
// queued or made before it and before those made after it, so a crash may
// lose the latest queued events but never leaves a later write without
// them. For a scheduler's decisions, which its journaled inputs can
// replay. It returns the failure of an earlier queued write, if one failed.
func (db *DB) QueueEvent(expID, trialID int64, kind, message string, data any) error {
	apply, err := db.eventWrite(expID, trialID, kind, message, data)
	if err == nil && db.w == nil {
		err = ErrReadOnly
	}
	if err == nil {
		err = db.w.enqueue(apply)
	}
	if err != nil {
		return fmt.Errorf("record %s event: %w", kind, err)
	}
	return nil
}

// eventWrite is the write that records an event (see AddEvent), stamped
// with the time now.
func (db *DB) eventWrite(expID, trialID int64, kind, message string, data any) (func(tx *wtx) error, error) {
	if expID == 0 && trialID == 0 {
		return nil, errors.New("name an experiment or a trial")
	}
	var d any
	if data != nil {
		b, err := json.Marshal(data)
		if err != nil {
			return nil, fmt.Errorf("encode: %w", err)
		}
		d = string(b)
	}
	now := unixSeconds(db.now())
	return func(tx *wtx) error {
		_, err := tx.exec(insertEvent, nullID(expID), nullID(trialID), now, kind, message, d)
		return err
	}, nil
}

// nullID maps the zero id to SQL NULL.
func nullID(id int64) any {
	if id == 0 {
		return nil
	}
	return id
}

// Events returns the events of experiment exp in the order they happened:
// every event when trial is 0, else those of trial number trial.
func (db *DB) Events(ctx context.Context, exp string, trial int) ([]Event, error) {
	return db.events(ctx, exp, trial, 0)
}

// RecentEvents is Events limited to the latest n (n > 0), still oldest
// first; it reads only those, however long the history.
func (db *DB) RecentEvents(ctx context.Context, exp string, trial, n int) ([]Event, error) {
	if n <= 0 {
		return nil, fmt.Errorf("recent events: n must be positive, got %d", n)
	}
	return db.events(ctx, exp, trial, n)
}

// ExperimentEvents returns the events of experiment exp that are of no
// trial (Event.Trial 0: notices, resumes, an exhausted search), in the
// order they happened; it reads only those, however many trials it has.
func (db *DB) ExperimentEvents(ctx context.Context, exp string) ([]Event, error) {
	return db.events(ctx, exp, experimentOnly, 0)
}

// experimentOnly is the trial number that asks events for the events of
// no trial.
const experimentOnly = -1

// events reads the latest n events (0: all) of exp, or of its trial (of
// none: experimentOnly).
func (db *DB) events(ctx context.Context, exp string, trial, n int) ([]Event, error) {
	e, err := db.experimentRecord(ctx, exp)
	if err != nil {
		return nil, err
	}
	// One trial's events through the index on (experiment, trial), so that
	// reading them costs the same however many trials the experiment has.
	filter, args := `v.experiment_id = ?1`, []any{e.ID}
	if trial == 0 && n > 0 {
		// The latest events: walking the table back from its newest row
		// (the unary + keeps SQLite off the index by experiment, which
		// would sort all of them) reads about n rows.
		filter = `+v.experiment_id = ?1`
	}
	switch {
	case trial == experimentOnly:
		filter += ` AND v.trial_id IS NULL`
	case trial != 0:
		filter += ` AND v.trial_id = (SELECT id FROM trials WHERE experiment_id = ?1 AND number = ?2)`
		args = append(args, trial)
	}
	order := `ORDER BY v.id`
	if n > 0 {
		order = fmt.Sprintf(`ORDER BY v.id DESC LIMIT %d`, n)
	}
	rows, err := db.rq.QueryContext(ctx, `
SELECT coalesce(t.number, 0), v.time, v.kind, v.message, v.data_json
FROM events v LEFT JOIN trials t ON t.id = v.trial_id
WHERE `+filter+`
`+order, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var ev Event
		var ts float64
		var data *string
		if err := rows.Scan(&ev.Trial, &ts, &ev.Kind, &ev.Message, &data); err != nil {
			return nil, err
		}
		ev.Time = fromUnixSeconds(ts)
		if data != nil {
			ev.Data = json.RawMessage(*data)
		}
		out = append(out, ev)
	}
	if n > 0 {
		slices.Reverse(out)
	}
	return out, rows.Err()
}
