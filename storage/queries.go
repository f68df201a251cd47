package storage

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// queryer is what reads need of a *sql.DB or a transaction.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
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
	rows, err := db.rq.QueryContext(ctx, `
SELECT e.id, v.name, v.status, v.metric, v.mode, e.config_json, v.created_at, v.trials, v.best, e.objectives_json
FROM experiments_v v JOIN experiments e ON e.name = v.name `+where+` ORDER BY e.id`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Experiment
	for rows.Next() {
		var e Experiment
		var cfg string
		var created float64
		var objectives *string
		if err := rows.Scan(&e.ID, &e.Name, &e.Status, &e.Metric, &e.Mode, &cfg, &created, &e.Trials, &e.Best, &objectives); err != nil {
			return nil, err
		}
		if objectives != nil {
			if err := json.Unmarshal([]byte(*objectives), &e.Objectives); err != nil {
				return nil, fmt.Errorf("experiment %s: decode objectives: %w", e.Name, err)
			}
		}
		e.Config = json.RawMessage(cfg)
		e.CreatedAt = fromUnixSeconds(created)
		out = append(out, &e)
	}
	return out, rows.Err()
}

// TrialQuery selects and orders an experiment's trials. Its zero value
// selects every trial in number order.
type TrialQuery struct {
	// Status keeps only the trials in one of these statuses; empty keeps all.
	Status []string
	// Sort orders the trials by a metric, best first: by the trial's best
	// value when it is the experiment's metric (in the experiment's
	// direction), else by its value in the trial's last report, ascending.
	// A leading "-" reverses the order. Trials without the metric come last;
	// ties go by trial number. Empty: by trial number.
	Sort string
	// Limit keeps the first Limit trials; 0 keeps all.
	Limit int
	// Feasible keeps only the trials not known to be infeasible (see
	// SetConstraints).
	Feasible bool
}

// Trials returns every trial of experiment exp in trial-number order.
func (db *DB) Trials(ctx context.Context, exp string) ([]*Trial, error) {
	return db.QueryTrials(ctx, exp, TrialQuery{})
}

// QueryTrials returns the trials of experiment exp that q selects, in q's
// order. It fails with ErrNotFound when there is no such experiment, and
// when q names an unknown status.
func (db *DB) QueryTrials(ctx context.Context, exp string, q TrialQuery) ([]*Trial, error) {
	e, err := db.Experiment(ctx, exp)
	if err != nil {
		return nil, err
	}
	where := `WHERE e.name = ?`
	args := []any{exp}
	if len(q.Status) > 0 {
		for _, s := range q.Status {
			if !slices.Contains(TrialStatuses, s) {
				return nil, fmt.Errorf("trial status %q: %w (want one of %s)", s, ErrNotFound, strings.Join(TrialStatuses, ", "))
			}
			args = append(args, s)
		}
		where += ` AND t.status IN (?` + strings.Repeat(`, ?`, len(q.Status)-1) + `)`
	}
	if q.Feasible {
		where += ` AND coalesce(p.feasible, 1) = 1`
	}
	order := `t.number`
	if q.Sort != "" {
		metric, desc := strings.CutPrefix(q.Sort, "-")
		key := `(SELECT json_extract(r.metrics_json, ?) FROM reports r WHERE r.id = p.last_report_id)`
		if metric == e.Metric {
			key = `p.best_metric`
			desc = desc != (e.Mode == "max")
		} else {
			args = append(args, jsonPath(metric))
		}
		dir := "ASC"
		if desc {
			dir = "DESC"
		}
		// The key's placeholder comes after the WHERE's in the text.
		order = key + ` ` + dir + ` NULLS LAST, t.number`
	}
	tail := where + ` ORDER BY ` + order
	if q.Limit > 0 {
		tail += fmt.Sprintf(` LIMIT %d`, q.Limit)
	}
	return db.trials(ctx, tail, args...)
}

// jsonPath is the SQLite JSON path of a top-level key.
func jsonPath(key string) string {
	return `$."` + strings.ReplaceAll(key, `"`, `\"`) + `"`
}

// Trial returns trial number n of experiment exp, or ErrNotFound.
func (db *DB) Trial(ctx context.Context, exp string, n int) (*Trial, error) {
	if _, err := db.Experiment(ctx, exp); err != nil {
		return nil, err
	}
	ts, err := db.trials(ctx, `WHERE e.name = ? AND t.number = ?`, exp, n)
	if err != nil {
		return nil, err
	}
	if len(ts) == 0 {
		return nil, fmt.Errorf("trial %d of %q: %w", n, exp, ErrNotFound)
	}
	return ts[0], nil
}

// ParetoFront returns the trials of exp on the Pareto front of its
// objectives (see SetObjectives and trial_standing_v), in number order;
// none when no trial has reported them all yet. It fails with ErrNotFound
// when there is no such experiment.
func (db *DB) ParetoFront(ctx context.Context, exp string) ([]*Trial, error) {
	if _, err := db.Experiment(ctx, exp); err != nil {
		return nil, err
	}
	return db.trials(ctx, `WHERE e.name = ?1 AND t.number IN
	(SELECT trial_id FROM trial_standing_v WHERE experiment = ?1 AND on_front = 1) ORDER BY t.number`, exp)
}

// BestTrial returns the trial of exp with the best value of the experiment's
// metric among its feasible trials (see SetConstraints), or ErrNotFound
// when no such trial has reported it yet.
func (db *DB) BestTrial(ctx context.Context, exp string) (*Trial, error) {
	e, err := db.Experiment(ctx, exp)
	if err != nil {
		return nil, err
	}
	ts, err := db.QueryTrials(ctx, exp, TrialQuery{Sort: e.Metric, Limit: 1, Feasible: true})
	if err != nil {
		return nil, err
	}
	if len(ts) == 0 || ts[0].BestMetric == nil {
		return nil, fmt.Errorf("best trial of %q: no trial has reported %s yet, or none that did is feasible: %w", exp, e.Metric, ErrNotFound)
	}
	return ts[0], nil
}

func (db *DB) trials(ctx context.Context, tail string, args ...any) ([]*Trial, error) {
	rows, err := db.rq.QueryContext(ctx, `
SELECT t.id, e.name, t.number, t.status, t.params_json, p.iterations, p.last_metric,
	p.best_metric, t.restarts, coalesce(t.error, ''), p.feasible
FROM trials t JOIN experiments e ON e.id = t.experiment_id JOIN trial_progress p ON p.trial_id = t.id `+tail, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Trial
	for rows.Next() {
		var t Trial
		var params string
		if err := rows.Scan(&t.id, &t.Experiment, &t.Number, &t.Status, &params, &t.Iterations,
			&t.LastMetric, &t.BestMetric, &t.Restarts, &t.Error, &t.Feasible); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(params), &t.Params); err != nil {
			return nil, fmt.Errorf("trial %d: decode params: %w", t.Number, err)
		}
		out = append(out, &t)
	}
	return out, rows.Err()
}

// Reports returns every report of trial number n of experiment exp, in
// order. It fails with ErrNotFound when there is no such trial.
func (db *DB) Reports(ctx context.Context, exp string, n int) ([]Report, error) {
	if _, err := db.Trial(ctx, exp, n); err != nil {
		return nil, err
	}
	var out []Report
	err := db.eachReport(ctx, `AND t.number = ?`, []any{exp, n}, func(_ int, r Report) error {
		out = append(out, r)
		return nil
	})
	return out, err
}

// EachReport calls fn with every report of every trial of experiment exp,
// by trial number and iteration, streaming them from the database; it stops
// at fn's first error and returns it.
func (db *DB) EachReport(ctx context.Context, exp string, fn func(trial int, r Report) error) error {
	if _, err := db.Experiment(ctx, exp); err != nil {
		return err
	}
	return db.eachReport(ctx, ``, []any{exp}, fn)
}

// eachReport walks the report chains of experiment args[0]'s trials that
// the condition and holds (more args are and's).
func (db *DB) eachReport(ctx context.Context, and string, args []any, fn func(trial int, r Report) error) error {
	rows, err := db.rq.QueryContext(ctx, `
WITH RECURSIVE chain(trial, id) AS (
	SELECT t.number, p.last_report_id
	FROM trials t JOIN experiments e ON e.id = t.experiment_id JOIN trial_progress p ON p.trial_id = t.id
	WHERE e.name = ? AND p.last_report_id IS NOT NULL `+and+`
	UNION ALL
	SELECT c.trial, r.prev_id FROM chain c JOIN reports r ON r.id = c.id WHERE r.prev_id IS NOT NULL
)
SELECT c.trial, r.id, r.iteration, r.time, r.metrics_json FROM chain c JOIN reports r ON r.id = c.id
ORDER BY c.trial, r.iteration`, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var n int
		var r Report
		var ts float64
		var m string
		if err := rows.Scan(&n, &r.Seq, &r.Iteration, &ts, &m); err != nil {
			return err
		}
		r.Time = fromUnixSeconds(ts)
		if r.Metrics, err = decodeMetrics(m); err != nil {
			return fmt.Errorf("trial %d: decode report %d: %w", n, r.Iteration, err)
		}
		if err := fn(n, r); err != nil {
			return err
		}
	}
	return rows.Err()
}

// MetricNames returns the names of every metric any report of experiment
// exp carries, sorted.
func (db *DB) MetricNames(ctx context.Context, exp string) ([]string, error) {
	if _, err := db.Experiment(ctx, exp); err != nil {
		return nil, err
	}
	rows, err := db.rq.QueryContext(ctx, `
SELECT DISTINCT j.key FROM reports r JOIN trials t ON t.id = r.trial_id
JOIN experiments e ON e.id = t.experiment_id, json_each(r.metrics_json) j
WHERE e.name = ? ORDER BY j.key`, exp)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// Query runs any SQL query over the results through a read-only
// connection: SQLite itself refuses a statement that would write (see
// ExplainRefusal). Close the rows when done.
func (db *DB) Query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return db.rq.QueryContext(ctx, query, args...)
}

// ExplainRefusal adds the reason to an error of Query (or of its rows)
// that is SQLite refusing a statement that would write, since SQLite's
// own message does not always say so: a PRAGMA that changes the journal
// mode fails as a disk I/O error, and VACUUM or ATTACH as too many
// attached databases. Other errors come back as they are.
func ExplainRefusal(err error) error {
	var se sqlite3.Error
	if !errors.As(err, &se) {
		return err
	}
	switch {
	case se.Code == sqlite3.ErrReadonly,
		se.Code == sqlite3.ErrIoErr && se.SystemErrno == syscall.EBADF,
		se.Code == sqlite3.ErrError && strings.Contains(se.Error(), "too many attached databases"):
		return fmt.Errorf("%w: queries are read-only, so a statement that writes or opens another file (INSERT, UPDATE, DELETE, CREATE, DROP, VACUUM, ATTACH, a PRAGMA that sets a value) is refused", err)
	}
	return err
}

// Snapshot calls fn with a view of the database whose reads all see one
// committed state, however much is written meanwhile: they run in one read
// transaction, which ends when fn returns. Writes through the view fail
// with ErrReadOnly.
func (db *DB) Snapshot(ctx context.Context, fn func(view *DB) error) error {
	tx, err := db.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer tx.Rollback()
	return fn(&DB{path: db.path, now: db.now, r: db.r, rq: tx})
}
