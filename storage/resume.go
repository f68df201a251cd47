package storage

import (
	"context"
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
	// Attempts is the number the group's next start takes: one past the
	// last attempt whose workers were recorded (WorkerRecord.Attempt), 0
	// when none were.
	Attempts int
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

// UpTo returns s as it stood at checkpoint c (ok: there is one): with the
// reports up to its iteration, none when there is no checkpoint.
func (s TrialState) UpTo(c CheckpointInfo, ok bool) TrialState {
	n := 0
	if ok {
		for n < len(s.Reports) && s.Reports[n].Iteration <= c.Iteration {
			n++
		}
	}
	s.Reports = s.Reports[:n:n]
	return s
}

// ResumeState reads experiment exp's trials, their reports and their latest
// checkpoints from one snapshot. It fails with ErrNotFound when there is no
// such experiment. Hold the experiment's lock (LockExperiment) while acting
// on it, so that no other run changes it meanwhile.
func (db *DB) ResumeState(ctx context.Context, exp string) (*ResumeState, error) {
	var st *ResumeState
	err := db.Snapshot(ctx, func(s *DB) error {
		e, err := s.Experiment(ctx, exp)
		if err != nil {
			return err
		}
		ts, err := s.Trials(ctx, exp)
		if err != nil {
			return err
		}
		attempts, err := s.attempts(ctx, e.ID)
		if err != nil {
			return err
		}
		st = &ResumeState{Experiment: e, Trials: make([]TrialState, len(ts))}
		for i, t := range ts {
			state := TrialState{Trial: t, Attempts: attempts[t.id]}
			if state.Reports, err = s.Reports(ctx, exp, t.Number); err != nil {
				return err
			}
			state.Checkpoint, err = s.LatestCheckpoint(ctx, exp, t.Number)
			if err != nil && !errors.Is(err, ErrNotFound) {
				return fmt.Errorf("trial %d: %w", t.Number, err)
			}
			st.Trials[i] = state
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// attempts maps the trials of experiment expID that recorded workers to
// one past their last attempt.
func (db *DB) attempts(ctx context.Context, expID int64) (map[int64]int, error) {
	rows, err := db.rq.QueryContext(ctx, `
SELECT w.trial_id, max(w.attempt) + 1 FROM workers w JOIN trials t ON t.id = w.trial_id
WHERE t.experiment_id = ? GROUP BY w.trial_id`, expID)
	if err != nil {
		return nil, fmt.Errorf("read attempts: %w", err)
	}
	defer rows.Close()
	out := map[int64]int{}
	for rows.Next() {
		var id int64
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		out[id] = n
	}
	return out, rows.Err()
}
