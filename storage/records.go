package storage

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// Experiment statuses.
const (
	ExperimentRunning  = "RUNNING"
	ExperimentFinished = "FINISHED"
	ExperimentFailed   = "FAILED"
	// ExperimentInterrupted: the run stopped before the sweep ended (a
	// signal, a full disk, a crash); running it again resumes it. A run
	// that stops on its own records it; one that was killed leaves
	// RUNNING, which ShowLiveStatus turns into it.
	ExperimentInterrupted = "INTERRUPTED"
)

// ExperimentEnded reports whether an experiment's status is final
// (FINISHED or FAILED): it cannot be resumed.
func ExperimentEnded(status string) bool {
	return status == ExperimentFinished || status == ExperimentFailed
}

// ShownExperimentStatus is an experiment's recorded status as people
// should read it: RUNNING when no run holds the experiment (live is false,
// see RunLive) is INTERRUPTED. ShowLiveStatus applies it; a reader that
// needs live for its trials too (ShownTrialStatus) calls RunLive once and
// applies both.
func ShownExperimentStatus(status string, live bool) string {
	if !live && status == ExperimentRunning {
		return ExperimentInterrupted
	}
	return status
}

// Trial statuses.
const (
	TrialPending    = "PENDING"
	TrialRunning    = "RUNNING"
	TrialPaused     = "PAUSED"     // paused by the scheduler, may be promoted later
	TrialTerminated = "TERMINATED" // ran to completion
	TrialStopped    = "STOPPED"    // stopped early by the scheduler
	TrialError      = "ERROR"
)

// TrialStatuses lists every trial status, in lifecycle order.
var TrialStatuses = []string{TrialPending, TrialRunning, TrialPaused, TrialTerminated, TrialStopped, TrialError}

// TrialInterrupted is how a trial that a run left PENDING or RUNNING when
// it died is shown (see ShownTrialStatus). It is never recorded: the
// database keeps the status the run wrote last, and the next run continues
// the trial.
const TrialInterrupted = "INTERRUPTED"

// ShownTrialStatus is a trial's recorded status as people should read it:
// a PENDING or RUNNING trial of an experiment that no run holds (live is
// false, see RunLive) is INTERRUPTED.
func ShownTrialStatus(status string, live bool) string {
	if !live && (status == TrialPending || status == TrialRunning) {
		return TrialInterrupted
	}
	return status
}

// WorkerRunning is the status a run records for a worker while it runs
// (trainer.WorkerRunning); the run records how the worker ended, in
// place of it, when it does.
const WorkerRunning = "RUNNING"

// ShownWorkerStatus is a worker's recorded status as people should read
// it: a RUNNING worker of an experiment that no run holds (live is false,
// see RunLive) is INTERRUPTED, as its trial is (ShownTrialStatus): the
// run died before it could record how the worker ended.
func ShownWorkerStatus(status string, live bool) string {
	if !live && status == WorkerRunning {
		return TrialInterrupted
	}
	return status
}

// RecordedTrialStatuses turns statuses as shown (ShownTrialStatus, for an
// experiment whose run is live or not) into the recorded statuses that
// show as one of them. ok is false when no recorded status does.
func RecordedTrialStatuses(shown []string, live bool) (recorded []string, ok bool) {
	for _, s := range shown {
		switch {
		case s == TrialInterrupted && !live:
			recorded = append(recorded, TrialPending, TrialRunning)
		case s == TrialInterrupted, ShownTrialStatus(s, live) != s:
			// shows as something else
		default:
			recorded = append(recorded, s)
		}
	}
	return recorded, len(recorded) > 0
}

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
	// Objectives are the experiment's objectives when it has several (see
	// SetObjectives); nil otherwise.
	Objectives []Objective
}

// Trial is one configuration's run within an experiment.
type Trial struct {
	Experiment string
	// Number identifies the trial within its experiment, from 1.
	Number int
	Status string
	Params map[string]any
	// Iterations is the number of reports the trial has made (the highest
	// iteration reported).
	Iterations int
	// LastMetric and BestMetric are the latest and best values of the
	// experiment's metric; nil until a report carries it.
	LastMetric *float64
	BestMetric *float64
	// Restarts counts how often the trial was restarted (after a failure
	// or when its experiment was resumed).
	Restarts int
	Error    string
	// Feasible says whether the trial's last report met every constraint
	// of its experiment (see SetConstraints); nil when the experiment has
	// none or the trial has not reported.
	Feasible *bool

	id int64
}

// ID is the trial's key in the database, what the writes of a trial
// (AddReport, FinishTrial, RestartTrial, ...) take.
func (t *Trial) ID() int64 { return t.id }

// Report is one result of a trial.
type Report struct {
	// Iteration counts the trial's reports from 1.
	Iteration int
	Time      time.Time
	Metrics   map[string]float64
	// Seq is the report's place in the order the database committed the
	// experiment's reports, across trials; 0 in a report not yet recorded.
	Seq int64
}

const insertExperiment = `INSERT INTO experiments (name, status, metric, mode, config_json, created_at) VALUES (?, ?, ?, ?, ?, ?)`

// CreateExperiment records a new experiment in status RUNNING and returns it.
// It fails when an experiment of that name exists.
func (db *DB) CreateExperiment(ctx context.Context, name, metric, mode string, config any) (*Experiment, error) {
	cfg, err := json.Marshal(config)
	if err != nil {
		return nil, fmt.Errorf("encode experiment config: %w", err)
	}
	now := db.now()
	var id int64
	err = db.write(ctx, func(tx *wtx) error {
		res, err := tx.exec(insertExperiment, name, ExperimentRunning, metric, mode, string(cfg), unixSeconds(now))
		if err != nil {
			return err
		}
		id, err = res.LastInsertId()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create experiment %q: %w", name, err)
	}
	return &Experiment{ID: id, Name: name, Status: ExperimentRunning, Metric: metric, Mode: mode,
		Config: cfg, CreatedAt: now.UTC()}, nil
}

// Constraint bounds a metric of a trial's reports: a trial is feasible
// when its last report meets every constraint of its experiment.
type Constraint struct {
	Metric string
	// Op is "<=", "<", ">=" or ">": the report's value of Metric, Op,
	// Bound must hold. A report without the metric, or with NaN, fails.
	Op    string
	Bound float64
}

// SetConstraints records the constraints of experiment expID, replacing
// any it had; from then on every report decides its trial's feasibility
// (Trial.Feasible), BestTrial and experiments_v's best count feasible
// trials only. Set them before the first report; none leaves the
// experiment unconstrained.
func (db *DB) SetConstraints(ctx context.Context, expID int64, cs []Constraint) error {
	var data any
	if len(cs) > 0 {
		type stored struct {
			Path  string  `json:"path"`
			Op    string  `json:"op"`
			Bound float64 `json:"bound"`
		}
		list := make([]stored, len(cs))
		for i, c := range cs {
			switch {
			case c.Op != "<=" && c.Op != "<" && c.Op != ">=" && c.Op != ">":
				return fmt.Errorf("constraint %d: operator %q: want <=, <, >= or >", i+1, c.Op)
			case math.IsNaN(c.Bound) || math.IsInf(c.Bound, 0):
				return fmt.Errorf("constraint %d: the bound must be finite, got %g", i+1, c.Bound)
			}
			list[i] = stored{jsonPath(c.Metric), c.Op, c.Bound}
		}
		b, err := json.Marshal(list)
		if err != nil {
			return err
		}
		data = string(b)
	}
	err := db.write(ctx, func(tx *wtx) error {
		_, err := tx.exec(`UPDATE experiments SET constraints_json = ? WHERE id = ?`, data, expID)
		return err
	})
	if err != nil {
		return fmt.Errorf("set constraints: %w", err)
	}
	return nil
}

// Objective is one of several objectives of an experiment (see
// SetObjectives).
type Objective struct {
	Metric string `json:"metric"`
	// Mode is "min" or "max".
	Mode string `json:"mode"`
}

// SetObjectives records that experiment expID has several objectives, the
// metrics of each trial's last report, so that trial_standing_v and
// ParetoFront find the trials on their Pareto front. The experiment's own
// metric (CreateExperiment) stays what best_metric, BestTrial and
// experiments_v follow. Fewer than two objectives leave the experiment
// with its one.
func (db *DB) SetObjectives(ctx context.Context, expID int64, objs []Objective) error {
	var data any
	if len(objs) > 1 {
		type stored struct {
			Metric string `json:"metric"`
			Mode   string `json:"mode"`
			Path   string `json:"path"`
			Sign   int    `json:"sign"`
		}
		list := make([]stored, len(objs))
		for i, o := range objs {
			list[i] = stored{o.Metric, o.Mode, jsonPath(o.Metric), 1}
			switch o.Mode {
			case "max":
				list[i].Sign = -1
			case "min":
			default:
				return fmt.Errorf("objective %d: mode %q: want min or max", i+1, o.Mode)
			}
		}
		b, err := json.Marshal(list)
		if err != nil {
			return err
		}
		data = string(b)
	}
	err := db.write(ctx, func(tx *wtx) error {
		_, err := tx.exec(`UPDATE experiments SET objectives_json = ? WHERE id = ?`, data, expID)
		return err
	})
	if err != nil {
		return fmt.Errorf("set objectives: %w", err)
	}
	return nil
}

// FinishExperiment sets the final status of an experiment.
func (db *DB) FinishExperiment(ctx context.Context, id int64, status string) error {
	now := unixSeconds(db.now())
	return db.write(ctx, func(tx *wtx) error {
		_, err := tx.exec(`UPDATE experiments SET status = ?, ended_at = ? WHERE id = ?`, status, now, id)
		return err
	})
}

// ResumeExperiment sets an experiment back to RUNNING and records a
// "resume" event, when a run continues it.
func (db *DB) ResumeExperiment(ctx context.Context, id int64) error {
	now := unixSeconds(db.now())
	return db.write(ctx, func(tx *wtx) error {
		if _, err := tx.exec(`UPDATE experiments SET status = ?, ended_at = NULL WHERE id = ?`, ExperimentRunning, id); err != nil {
			return err
		}
		_, err := tx.exec(insertEvent, id, nil, now, EventResume, "experiment resumed", nil)
		return err
	})
}

// ExtendExperiment records config as an experiment's configuration from
// now on, when a run adds trials to it, with an "extend" event that says
// msg.
func (db *DB) ExtendExperiment(ctx context.Context, id int64, config json.RawMessage, msg string) error {
	now := unixSeconds(db.now())
	return db.write(ctx, func(tx *wtx) error {
		if err := mustChange(tx.exec(`UPDATE experiments SET config_json = ? WHERE id = ?`, string(config), id)); err != nil {
			return fmt.Errorf("extend experiment: %w", err)
		}
		_, err := tx.exec(insertEvent, id, nil, now, EventExtend, msg, nil)
		return err
	})
}

const (
	insertTrial = `INSERT INTO trials (experiment_id, number, status, params_json, created_at) VALUES (?, ?, ?, ?, ?)`
	insertParam = `INSERT INTO params (trial_id, name, value) VALUES (?, ?, ?)`
)

// CreateTrial records trial number of experiment expID with its params, in
// status RUNNING, with a "start" event. It fails when the experiment already
// has a trial of that number.
func (db *DB) CreateTrial(ctx context.Context, expID int64, number int, params map[string]any) (*Trial, error) {
	ts, err := db.CreateTrials(ctx, expID, []NewTrial{{Number: number, Params: params}})
	if err != nil {
		return nil, err
	}
	return ts[0], nil
}

// NewTrial is a trial for CreateTrials to record: its number and params.
// Pending records it PENDING rather than RUNNING: its group waits for its
// workers, and QueueTrialRunning records when it has them.
type NewTrial struct {
	Number  int
	Params  map[string]any
	Pending bool
}

// CreateTrials records trials as CreateTrial does, all in one transaction:
// either every one is recorded or none is. Trials that start together cost
// one commit.
func (db *DB) CreateTrials(ctx context.Context, expID int64, trials []NewTrial) ([]*Trial, error) {
	type encoded struct {
		json   string
		values map[string]any
	}
	enc := make([]encoded, len(trials))
	for i, nt := range trials {
		p, err := json.Marshal(nt.Params)
		if err != nil {
			return nil, fmt.Errorf("encode params of trial %d: %w", nt.Number, err)
		}
		values := make(map[string]any, len(nt.Params))
		for k, v := range nt.Params {
			if values[k], err = paramValue(v); err != nil {
				return nil, fmt.Errorf("encode param %s of trial %d: %w", k, nt.Number, err)
			}
		}
		enc[i] = encoded{string(p), values}
	}
	now := unixSeconds(db.now())
	ids := make([]int64, len(trials))
	err := db.write(ctx, func(tx *wtx) error {
		for i, nt := range trials {
			res, err := tx.exec(insertTrial, expID, nt.Number, nt.status(), enc[i].json, now)
			if err != nil {
				return err
			}
			if ids[i], err = res.LastInsertId(); err != nil {
				return err
			}
			if _, err := tx.exec(`INSERT INTO trial_progress (trial_id, maximize)
SELECT ?, mode = 'max' FROM experiments WHERE id = ?`, ids[i], expID); err != nil {
				return err
			}
			for k, v := range enc[i].values {
				if _, err := tx.exec(insertParam, ids[i], k, v); err != nil {
					return err
				}
			}
			if _, err := tx.exec(insertEvent, expID, ids[i], now, EventStart, fmt.Sprintf("trial %d started", nt.Number), nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		if len(trials) == 1 {
			return nil, fmt.Errorf("create trial %d: %w", trials[0].Number, err)
		}
		return nil, fmt.Errorf("create trials %d–%d: %w", trials[0].Number, trials[len(trials)-1].Number, err)
	}
	out := make([]*Trial, len(trials))
	for i, nt := range trials {
		out[i] = &Trial{Number: nt.Number, Status: nt.status(), Params: nt.Params, id: ids[i]}
	}
	return out, nil
}

func (nt NewTrial) status() string {
	if nt.Pending {
		return TrialPending
	}
	return TrialRunning
}

// SetTrialParams replaces the params of the trial with database id trialID,
// as when Population Based Training restarts it with a changed
// configuration, and records a "params" event with the new values.
func (db *DB) SetTrialParams(ctx context.Context, trialID int64, params map[string]any, reason string) error {
	p, err := json.Marshal(params)
	if err != nil {
		return fmt.Errorf("encode params: %w", err)
	}
	values := make(map[string]any, len(params))
	for k, v := range params {
		if values[k], err = paramValue(v); err != nil {
			return fmt.Errorf("encode param %s: %w", k, err)
		}
	}
	now := unixSeconds(db.now())
	return db.write(ctx, func(tx *wtx) error {
		res, err := tx.exec(`UPDATE trials SET params_json = ? WHERE id = ?`, string(p), trialID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(fmt.Errorf("trial: %w", ErrNotFound), err)
		}
		if _, err := tx.exec(`DELETE FROM params WHERE trial_id = ?`, trialID); err != nil {
			return err
		}
		for k, v := range values {
			if _, err := tx.exec(insertParam, trialID, k, v); err != nil {
				return err
			}
		}
		_, err = tx.exec(insertEvent, nil, trialID, now, EventParams, reason, string(p))
		return err
	})
}

// paramValue is how a parameter is stored in the params table: numbers,
// strings and booleans as themselves, anything else as JSON text.
func paramValue(v any) (any, error) {
	switch v.(type) {
	case nil, bool, string, float64, float32, int, int8, int16, int32, int64, uint8, uint16, uint32:
		return v, nil
	}
	b, err := json.Marshal(v)
	return string(b), err
}

// insertReport links the report to the trial's newest, as its prev_id; the
// schema's triggers check its order and update the trial's summary.
const insertReport = `INSERT INTO reports (trial_id, iteration, time, objective, metrics_json, prev_id)
VALUES (?1, ?2, ?3, ?4, ?5, (SELECT last_report_id FROM trial_progress WHERE trial_id = ?1))`

// AddReport durably records one report of a trial and updates the trial's
// iteration count and metric summary. objective is the value of the
// experiment's metric in r, or nil when r does not carry it; a NaN counts
// as not carried. Metrics may be NaN or infinite. It returns once
// the report is committed: a nil error means a crash can no longer lose it.
// Concurrent calls share commits. r.Iteration must be greater than the
// trial's last reported iteration (RestartTrial rewinds it).
func (db *DB) AddReport(ctx context.Context, trialID int64, r Report, objective *float64) error {
	m := encodeMetrics(r.Metrics)
	var obj any
	if objective != nil && !math.IsNaN(*objective) {
		obj = *objective
	}
	ts := unixSeconds(r.Time)
	err := db.write(ctx, func(tx *wtx) error {
		_, err := tx.exec(insertReport, trialID, r.Iteration, ts, obj, m)
		return err
	})
	if err != nil {
		return fmt.Errorf("record report %d: %w", r.Iteration, err)
	}
	return nil
}

// SetTrialStatus changes a trial's status without ending it, e.g. to PAUSED
// when the scheduler pauses it and back to RUNNING when it is promoted.
// Record why with AddEvent.
func (db *DB) SetTrialStatus(ctx context.Context, trialID int64, status string) error {
	return db.write(ctx, func(tx *wtx) error {
		return mustChange(tx.exec(`UPDATE trials SET status = ? WHERE id = ?`, status, trialID))
	})
}

// QueueTrialRunning sets the trial with database id trialID RUNNING, as its
// group has its workers, unless its status is final; like QueueEvent it
// returns without waiting for the commit, which comes after every write
// made or queued before it and before any made after it. It returns the
// failure of an earlier queued write, if one failed.
func (db *DB) QueueTrialRunning(trialID int64) error {
	if db.w == nil {
		return ErrReadOnly
	}
	return db.w.enqueue(func(tx *wtx) error {
		_, err := tx.exec(`UPDATE trials SET status = ? WHERE id = ? AND status IN (?, ?)`, TrialRunning, trialID, TrialPending, TrialPaused)
		return err
	})
}

// endEvents maps a final trial status to the kind of event that records it.
var endEvents = map[string]string{TrialTerminated: EventComplete, TrialStopped: EventStop, TrialError: EventError}

// FinishTrial sets a trial's final status and, for ERROR, its error message,
// and records the end as an event ("complete", "stop" or "error").
func (db *DB) FinishTrial(ctx context.Context, trialID int64, status, errMsg string) error {
	return db.write(ctx, db.finishWrite(trialID, status, errMsg))
}

// QueueFinishTrial is FinishTrial that returns without waiting for the
// commit, ordered like QueueEvent: the end commits after every write made
// or queued before it, and before any made after it. It returns the
// failure of an earlier queued write, if one failed.
func (db *DB) QueueFinishTrial(trialID int64, status, errMsg string) error {
	if db.w == nil {
		return ErrReadOnly
	}
	return db.w.enqueue(db.finishWrite(trialID, status, errMsg))
}

// finishWrite is the write of FinishTrial, stamped with the time now.
func (db *DB) finishWrite(trialID int64, status, errMsg string) func(tx *wtx) error {
	now := unixSeconds(db.now())
	kind, ok := endEvents[status]
	if !ok {
		kind = EventEnd
	}
	msg := "trial " + status
	if errMsg != "" {
		msg += ": " + errMsg
	}
	return func(tx *wtx) error {
		if err := mustChange(tx.exec(`UPDATE trials SET status = ?, error = nullif(?, ''), ended_at = ? WHERE id = ?`,
			status, errMsg, now, trialID)); err != nil {
			return fmt.Errorf("finish trial: %w", err)
		}
		_, err := tx.exec(insertEvent, nil, trialID, now, kind, msg, nil)
		return err
	}
}

// RestartTrial records that a trial starts again from the checkpoint taken
// at fromIteration (0: from scratch), after a failure or when its experiment
// is resumed: it discards the trial's reports after fromIteration (the
// restarted run reports those iterations again), recomputes the trial's
// summary, counts the restart, sets the trial RUNNING again and records a
// "restart" event with cause. Pass the trial's current Iterations as
// fromIteration to keep every report.
func (db *DB) RestartTrial(ctx context.Context, trialID int64, fromIteration int, cause string) error {
	now := unixSeconds(db.now())
	return db.write(ctx, func(tx *wtx) error {
		var maximize bool
		err := tx.queryRow(`SELECT maximize FROM trial_progress WHERE trial_id = ?`, trialID).Scan(&maximize)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("trial: %w", ErrNotFound)
		}
		if err != nil {
			return err
		}
		chain, err := reportChain(tx.tx, trialID)
		if err != nil {
			return err
		}
		var drop []int64
		for len(chain) > 0 && chain[0].iteration > fromIteration {
			drop = append(drop, chain[0].id)
			chain = chain[1:]
		}
		// chain now holds the kept reports, newest first.
		var lastID, last, best any
		iterations := 0
		if len(chain) > 0 {
			lastID, iterations = chain[0].id, chain[0].iteration
		}
		for _, l := range chain {
			if l.objective == nil {
				continue
			}
			if last == nil {
				last = *l.objective
			}
			if b, ok := best.(float64); !ok || maximize && *l.objective > b || !maximize && *l.objective < b {
				best = *l.objective
			}
		}
		ids, err := json.Marshal(drop)
		if err != nil {
			return err
		}
		if _, err := tx.exec(`DELETE FROM reports WHERE id IN (SELECT value FROM json_each(?))`, string(ids)); err != nil {
			return err
		}
		if _, err := tx.exec(`UPDATE trials SET status = ?, error = NULL, ended_at = NULL, restarts = restarts + 1 WHERE id = ?`,
			TrialRunning, trialID); err != nil {
			return err
		}
		if _, err := tx.exec(`UPDATE trial_progress SET last_report_id = ?, iterations = ?, last_metric = ?, best_metric = ? WHERE trial_id = ?`,
			lastID, iterations, last, best, trialID); err != nil {
			return err
		}
		data, err := json.Marshal(map[string]any{"cause": cause, "from_iteration": fromIteration, "discarded_reports": len(drop)})
		if err != nil {
			return err
		}
		_, err = tx.exec(insertEvent, nil, trialID, now, EventRestart, cause, string(data))
		return err
	})
}

// link is one report of a trial's chain.
type link struct {
	id        int64
	iteration int
	objective *float64
}

// reportChain returns the reports of trial trialID, newest first.
func reportChain(q queryer, trialID int64) ([]link, error) {
	rows, err := q.QueryContext(context.Background(), `
WITH RECURSIVE chain(id) AS (
	SELECT last_report_id FROM trial_progress WHERE trial_id = ?
	UNION ALL
	SELECT r.prev_id FROM chain c JOIN reports r ON r.id = c.id WHERE r.prev_id IS NOT NULL
)
SELECT r.id, r.iteration, r.objective FROM chain c JOIN reports r ON r.id = c.id ORDER BY r.iteration DESC`, trialID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []link
	for rows.Next() {
		var l link
		if err := rows.Scan(&l.id, &l.iteration, &l.objective); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// mustChange turns an UPDATE that matched no row into ErrNotFound.
func mustChange(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("trial: %w", ErrNotFound)
	}
	return nil
}
