package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// ResumeState is what a run needs to continue an interrupted experiment,
// read in one consistent snapshot.
type ResumeState struct {
	Experiment *Experiment
	// Trials holds every trial in number order.
	Trials []TrialState
}

// TrialState is one trial of a ResumeState: its record, its reports and
// where it would restart from.
type TrialState struct {
	Trial   *Trial
	Reports []Report
	// Checkpoint is the trial's latest kept checkpoint, nil when it has none
	// (it would restart from scratch).
	Checkpoint *CheckpointRecord
}

// Unfinished reports whether the trial was interrupted before it ended
// (PENDING, RUNNING or PAUSED): a resumed run must run it again.
func (s TrialState) Unfinished() bool {
	switch s.Trial.Status {
	case TrialPending, TrialRunning, TrialPaused:
		return true
	}
	return false
}

// ResumeState reads experiment exp's trials, their reports and their latest
// checkpoints in one read transaction. It fails with ErrNotFound when there
// is no such experiment. Hold the experiment's lock (LockExperiment) while
// acting on it, so that no other run changes it meanwhile.
func (db *DB) ResumeState(ctx context.Context, exp string) (*ResumeState, error) {
	tx, err := db.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	e, err := experiment(ctx, tx, exp)
	if err != nil {
		return nil, err
	}
	ts, err := trials(ctx, tx, `WHERE e.name = ? ORDER BY t.number`, exp)
	if err != nil {
		return nil, err
	}
	st := &ResumeState{Experiment: e, Trials: make([]TrialState, len(ts))}
	for i, t := range ts {
		s := TrialState{Trial: t}
		if s.Reports, err = reports(ctx, tx, exp, t.Number); err != nil {
			return nil, err
		}
		s.Checkpoint, err = latestCheckpoint(ctx, tx, exp, t.Number)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("trial %d: %w", t.Number, err)
		}
		st.Trials[i] = s
	}
	return st, nil
}
