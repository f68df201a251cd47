package storage

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Experiment statuses.
const (
	ExperimentRunning  = "RUNNING"
	ExperimentFinished = "FINISHED"
	ExperimentFailed   = "FAILED"
)

// Trial statuses.
const (
	TrialPending    = "PENDING"
	TrialRunning    = "RUNNING"
	TrialTerminated = "TERMINATED" // ran to completion
	TrialStopped    = "STOPPED"    // stopped early by the scheduler
	TrialError      = "ERROR"
)

// Experiment is one sweep: its objective, its configuration and a summary of its trials.
type Experiment struct {
	ID     int64
	Name   string
	Status string
	// Metric and Mode are the objective: the reported metric and whether
	// lower ("min") or higher ("max") is better.
	Metric string
	Mode   string
	// Config is the sweep's configuration as JSON, kept for reference and resume.
	Config    json.RawMessage
	CreatedAt time.Time
	// Trials counts the experiment's trials; Best is the best value of the
	// metric any trial reported, nil when none did.
	Trials int
	Best   *float64
}

// Trial is one configuration's run within an experiment.
type Trial struct {
	Experiment string
	// Number identifies the trial within its experiment, from 1.
	Number int
	Status string
	Params map[string]any
	// Iterations is the number of reports the trial has made.
	Iterations int
	// LastMetric and BestMetric are the latest and best values of the
	// experiment's metric; nil until a report carries it.
	LastMetric *float64
	BestMetric *float64
	Restarts   int
	Error      string

	id int64
}

// ID is the trial's key in the database, what AddReport and FinishTrial take.
func (t *Trial) ID() int64 { return t.id }

// Report is one result of a trial.
type Report struct {
	// Iteration counts the trial's reports from 1.
	Iteration int
	Time      time.Time
	Metrics   map[string]float64
}

// CreateExperiment records a new experiment in status RUNNING and returns it.
func (db *DB) CreateExperiment(ctx context.Context, name, metric, mode string, config any) (*Experiment, error) {
	cfg, err := json.Marshal(config)
	if err != nil {
		return nil, fmt.Errorf("encode experiment config: %w", err)
	}
	now := time.Now()
	res, err := db.w.ExecContext(ctx,
		`INSERT INTO experiments (name, status, metric, mode, config_json, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
		name, ExperimentRunning, metric, mode, string(cfg), unixSeconds(now))
	if err != nil {
		return nil, fmt.Errorf("create experiment %q: %w", name, err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return nil, err
	}
	return &Experiment{ID: id, Name: name, Status: ExperimentRunning, Metric: metric, Mode: mode,
		Config: cfg, CreatedAt: now.UTC()}, nil
}

// FinishExperiment sets the final status of an experiment.
func (db *DB) FinishExperiment(ctx context.Context, id int64, status string) error {
	_, err := db.w.ExecContext(ctx, `UPDATE experiments SET status = ?, ended_at = ? WHERE id = ?`,
		status, unixSeconds(time.Now()), id)
	return err
}

// CreateTrial records trial number of experiment expID with its params, in status RUNNING.
func (db *DB) CreateTrial(ctx context.Context, expID int64, number int, params map[string]any) (*Trial, error) {
	p, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("encode params of trial %d: %w", number, err)
	}
	res, err := db.w.ExecContext(ctx,
		`INSERT INTO trials (experiment_id, number, status, params_json, created_at) VALUES (?, ?, ?, ?, ?)`,
		expID, number, TrialRunning, string(p), unixSeconds(time.Now()))
	if err != nil {
		return nil, fmt.Errorf("create trial %d: %w", number, err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return nil, err
	}
	return &Trial{Number: number, Status: TrialRunning, Params: params, id: id}, nil
}

// AddReport durably records one report of a trial and updates the trial's
// iteration count and metric summary. objective is the value of the
// experiment's metric in r, or nil when r does not carry it. It returns once
// the report is committed.
func (db *DB) AddReport(ctx context.Context, trialID int64, r Report, objective *float64) error {
	m, err := json.Marshal(r.Metrics)
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx,
		`INSERT INTO reports (trial_id, iteration, time, metrics_json) VALUES (?, ?, ?, ?)`,
		trialID, r.Iteration, unixSeconds(r.Time), string(m)); err != nil {
		return fmt.Errorf("record report %d: %w", r.Iteration, err)
	}
	if _, err := tx.ExecContext(ctx, `
UPDATE trials SET
	iterations = ?2,
	last_metric = coalesce(?3, last_metric),
	best_metric = CASE
		WHEN ?3 IS NULL THEN best_metric
		WHEN best_metric IS NULL THEN ?3
		WHEN (SELECT mode FROM experiments e WHERE e.id = trials.experiment_id) = 'max' THEN max(best_metric, ?3)
		ELSE min(best_metric, ?3) END
WHERE id = ?1`, trialID, r.Iteration, objective); err != nil {
		return fmt.Errorf("update trial after report %d: %w", r.Iteration, err)
	}
	return tx.Commit()
}

// FinishTrial sets a trial's final status and, for ERROR, its error message.
func (db *DB) FinishTrial(ctx context.Context, trialID int64, status, errMsg string) error {
	_, err := db.w.ExecContext(ctx, `UPDATE trials SET status = ?, error = nullif(?, ''), ended_at = ? WHERE id = ?`,
		status, errMsg, unixSeconds(time.Now()), trialID)
	return err
}

// Experiment returns the experiment called name, or ErrNotFound.
func (db *DB) Experiment(ctx context.Context, name string) (*Experiment, error) {
	rows, err := db.experiments(ctx, `WHERE e.name = ?`, name)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("experiment %q: %w", name, ErrNotFound)
	}
	return rows[0], nil
}

// Experiments lists every experiment, oldest first.
func (db *DB) Experiments(ctx context.Context) ([]*Experiment, error) {
	return db.experiments(ctx, "")
}

func (db *DB) experiments(ctx context.Context, where string, args ...any) ([]*Experiment, error) {
	rows, err := db.r.QueryContext(ctx, `
SELECT e.id, e.name, e.status, e.metric, e.mode, e.config_json, e.created_at,
	(SELECT count(*) FROM trials t WHERE t.experiment_id = e.id),
	(SELECT CASE e.mode WHEN 'max' THEN max(best_metric) ELSE min(best_metric) END
	 FROM trials t WHERE t.experiment_id = e.id)
FROM experiments e `+where+` ORDER BY e.id`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Experiment
	for rows.Next() {
		var e Experiment
		var cfg string
		var created float64
		if err := rows.Scan(&e.ID, &e.Name, &e.Status, &e.Metric, &e.Mode, &cfg, &created, &e.Trials, &e.Best); err != nil {
			return nil, err
		}
		e.Config = json.RawMessage(cfg)
		e.CreatedAt = fromUnixSeconds(created)
		out = append(out, &e)
	}
	return out, rows.Err()
}

// Trials returns the trials of experiment exp in trial-number order.
func (db *DB) Trials(ctx context.Context, exp string) ([]*Trial, error) {
	if _, err := db.Experiment(ctx, exp); err != nil {
		return nil, err
	}
	return db.trials(ctx, `WHERE e.name = ? ORDER BY t.number`, exp)
}

// BestTrial returns the trial of exp with the best value of the experiment's
// metric, or ErrNotFound when no trial has reported it yet.
func (db *DB) BestTrial(ctx context.Context, exp string) (*Trial, error) {
	if _, err := db.Experiment(ctx, exp); err != nil {
		return nil, err
	}
	ts, err := db.trials(ctx, `WHERE e.name = ? AND t.best_metric IS NOT NULL
ORDER BY CASE e.mode WHEN 'max' THEN -t.best_metric ELSE t.best_metric END, t.number LIMIT 1`, exp)
	if err != nil {
		return nil, err
	}
	if len(ts) == 0 {
		return nil, fmt.Errorf("best trial of %q: no trial has reported the metric yet: %w", exp, ErrNotFound)
	}
	return ts[0], nil
}

func (db *DB) trials(ctx context.Context, tail string, args ...any) ([]*Trial, error) {
	rows, err := db.r.QueryContext(ctx, `
SELECT t.id, e.name, t.number, t.status, t.params_json, t.iterations, t.last_metric,
	t.best_metric, t.restarts, coalesce(t.error, '')
FROM trials t JOIN experiments e ON e.id = t.experiment_id `+tail, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Trial
	for rows.Next() {
		var t Trial
		var params string
		if err := rows.Scan(&t.id, &t.Experiment, &t.Number, &t.Status, &params, &t.Iterations,
			&t.LastMetric, &t.BestMetric, &t.Restarts, &t.Error); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(params), &t.Params); err != nil {
			return nil, fmt.Errorf("trial %d: decode params: %w", t.Number, err)
		}
		out = append(out, &t)
	}
	return out, rows.Err()
}

// Reports returns every report of trial number of experiment exp, in order.
func (db *DB) Reports(ctx context.Context, exp string, number int) ([]Report, error) {
	rows, err := db.r.QueryContext(ctx, `
SELECT r.iteration, r.time, r.metrics_json FROM reports r
JOIN trials t ON t.id = r.trial_id JOIN experiments e ON e.id = t.experiment_id
WHERE e.name = ? AND t.number = ? ORDER BY r.iteration`, exp, number)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Report
	for rows.Next() {
		var r Report
		var ts float64
		var m string
		if err := rows.Scan(&r.Iteration, &ts, &m); err != nil {
			return nil, err
		}
		r.Time = fromUnixSeconds(ts)
		if err := json.Unmarshal([]byte(m), &r.Metrics); err != nil {
			return nil, fmt.Errorf("decode report %d: %w", r.Iteration, err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
