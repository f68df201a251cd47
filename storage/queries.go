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

// experimentRecord returns experiment name's own row, or ErrNotFound. Unlike
// Experiment it leaves Trials and Best zero: it costs one index lookup
// however many trials the experiment has, where they cost a pass over its
// trials. Queries that only need the experiment to exist, or its metric,
// use it.
func (db *DB) experimentRecord(ctx context.Context, name string) (*Experiment, error) {
	rows, err := db.rq.QueryContext(ctx, `SELECT id, name, status, metric, mode, config_json, created_at FROM experiments WHERE name = ?`, name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("experiment %q: %w", name, ErrNotFound)
	}
	var e Experiment
	var cfg string
	var created float64
	if err := rows.Scan(&e.ID, &e.Name, &e.Status, &e.Metric, &e.Mode, &cfg, &created); err != nil {
		return nil, err
	}
	e.Config = json.RawMessage(cfg)
	e.CreatedAt = fromUnixSeconds(created)
	return &e, nil
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

// TrialQuery selects and orders an experiment's trials, and pages through
// them. Its zero value selects every trial in number order.
type TrialQuery struct {
	// Status keeps only the trials in one of these statuses; empty keeps all.
	Status []string
	// Params keeps only the trials whose hyperparameters pass every filter.
	Params []ParamFilter
	// Columns keeps only the trials whose columns pass every filter.
	Columns []ColumnFilter
	// Text keeps only the trials whose number, status, error or params (as
	// JSON) contain every one of these, case-insensitively for ASCII
	// letters.
	Text []string
	// Sort orders the trials by a metric, best first: by the trial's best
	// value when it is the experiment's metric (in the experiment's
	// direction), else by its value in the trial's last report, ascending.
	// A leading "-" reverses the order. Trials without the metric come last;
	// ties go by trial number. Empty: by trial number (or by Column).
	Sort string
	// Column orders the trials by a column of the trial list instead:
	// "trial", "status", "iterations", "restarts", "best" (the best value
	// of the experiment's metric, best first), "last" (its latest value,
	// best first) or "param:NAME" (a hyperparameter), ascending; a leading
	// "-" reverses it. Trials without a value come last; ties go by trial
	// number. Set Sort or Column, not both.
	Column string
	// Offset skips the first Offset trials of the order, Limit keeps the
	// next Limit (0: all); together they page through a long list.
	Offset, Limit int
	// Feasible keeps only the trials not known to be infeasible (see
	// SetConstraints).
	Feasible bool
}

// ParamFilter compares a hyperparameter with a value: Op is one of "=",
// "!=", "<", "<=", ">" and ">="; Value is a number, a string or a bool.
// Numbers compare as numbers, strings as text; a trial without the
// parameter never passes.
type ParamFilter struct {
	Name  string
	Op    string
	Value any
}

// ColumnFilter compares a numeric column of the trial list, "trial",
// "iterations", "restarts", "best" or "last" (the best and latest values
// of the experiment's metric), with Value; Op is as in ParamFilter. A trial
// without a value never passes.
type ColumnFilter struct {
	Column string
	Op     string
	Value  float64
}

// paramOps are the comparisons a ParamFilter or a ColumnFilter may make.
var paramOps = []string{"=", "!=", "<", "<=", ">", ">="}

// numericColumns are the SQL of the columns a ColumnFilter may name.
var numericColumns = map[string]string{
	"trial": "t.number", "iterations": "p.iterations", "restarts": "t.restarts",
	"best": "p.best_metric", "last": "p.last_metric",
}

// Trials returns every trial of experiment exp in trial-number order.
func (db *DB) Trials(ctx context.Context, exp string) ([]*Trial, error) {
	return db.QueryTrials(ctx, exp, TrialQuery{})
}

// QueryTrials returns the trials of experiment exp that q selects, in q's
// order, from q.Offset on. It fails with ErrNotFound when there is no such
// experiment, and when q names an unknown status; an unknown column or
// comparison is an error too.
func (db *DB) QueryTrials(ctx context.Context, exp string, q TrialQuery) ([]*Trial, error) {
	e, err := db.experimentRecord(ctx, exp)
	if err != nil {
		return nil, err
	}
	tail, args, err := trialQueryTail(e, q)
	if err != nil {
		return nil, err
	}
	return db.trials(ctx, tail, args...)
}

// trialQueryTail is the SQL after trials' FROM that runs q over
// experiment e's trials, with its arguments.
func trialQueryTail(e *Experiment, q TrialQuery) (string, []any, error) {
	where, args, err := trialFilter(e, q)
	if err != nil {
		return "", nil, err
	}
	order, orderArgs, err := trialOrder(e, q)
	if err != nil {
		return "", nil, err
	}
	tail := where + ` ORDER BY ` + order
	args = append(args, orderArgs...)
	switch {
	case q.Limit > 0:
		tail += fmt.Sprintf(` LIMIT %d OFFSET %d`, q.Limit, max(q.Offset, 0))
	case q.Offset > 0:
		tail += fmt.Sprintf(` LIMIT -1 OFFSET %d`, q.Offset)
	}
	return tail, args, nil
}

// EachTrial calls fn with each trial QueryTrials would return, in order,
// streaming them from the database, so that listing a long experiment
// holds one trial at a time; it stops at fn's first error and returns it.
func (db *DB) EachTrial(ctx context.Context, exp string, q TrialQuery, fn func(*Trial) error) error {
	e, err := db.experimentRecord(ctx, exp)
	if err != nil {
		return err
	}
	tail, args, err := trialQueryTail(e, q)
	if err != nil {
		return err
	}
	return db.eachTrial(ctx, tail, args, fn)
}

// CountTrials returns how many trials of experiment exp q selects,
// regardless of its order, Offset and Limit.
func (db *DB) CountTrials(ctx context.Context, exp string, q TrialQuery) (int, error) {
	e, err := db.experimentRecord(ctx, exp)
	if err != nil {
		return 0, err
	}
	where, args, err := trialFilter(e, q)
	if err != nil {
		return 0, err
	}
	rows, err := db.rq.QueryContext(ctx, `SELECT count(*) FROM trials t JOIN trial_progress p ON p.trial_id = t.id `+where, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	if rows.Next() {
		err = rows.Scan(&n)
	}
	return n, errors.Join(err, rows.Err())
}

// StatusCounts returns how many trials of experiment exp are in each
// status; statuses without trials are left out.
func (db *DB) StatusCounts(ctx context.Context, exp string) (map[string]int, error) {
	e, err := db.experimentRecord(ctx, exp)
	if err != nil {
		return nil, err
	}
	rows, err := db.rq.QueryContext(ctx, `SELECT status, count(*) FROM trials WHERE experiment_id = ? GROUP BY status`, e.ID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, err
		}
		out[st] = n
	}
	return out, rows.Err()
}

// trialFilter is the WHERE clause over trials t (and, in trials' reads,
// trial_progress p) that selects q's trials of experiment e, with its
// arguments.
func trialFilter(e *Experiment, q TrialQuery) (string, []any, error) {
	where := `WHERE t.experiment_id = ?`
	args := []any{e.ID}
	if len(q.Status) > 0 {
		for _, s := range q.Status {
			if !slices.Contains(TrialStatuses, s) {
				return "", nil, fmt.Errorf("trial status %q: %w (want one of %s)", s, ErrNotFound, strings.Join(TrialStatuses, ", "))
			}
			args = append(args, s)
		}
		where += ` AND t.status IN (?` + strings.Repeat(`, ?`, len(q.Status)-1) + `)`
	}
	for _, f := range q.Params {
		if !slices.Contains(paramOps, f.Op) {
			return "", nil, fmt.Errorf("filter on param %q: unknown comparison %q (want one of %s)", f.Name, f.Op, strings.Join(paramOps, " "))
		}
		v, err := paramValue(f.Value)
		if err != nil {
			return "", nil, fmt.Errorf("filter on param %q: %w", f.Name, err)
		}
		// Through the index on (name, value); SQLite orders numbers before
		// text, so a number never equals a string.
		where += ` AND t.id IN (SELECT trial_id FROM params WHERE name = ? AND value ` + f.Op + ` ?)`
		args = append(args, f.Name, v)
	}
	for _, f := range q.Columns {
		col, ok := numericColumns[f.Column]
		if !ok {
			return "", nil, fmt.Errorf("filter on column %q: unknown column (want trial, iterations, restarts, best or last)", f.Column)
		}
		if !slices.Contains(paramOps, f.Op) {
			return "", nil, fmt.Errorf("filter on column %q: unknown comparison %q (want one of %s)", f.Column, f.Op, strings.Join(paramOps, " "))
		}
		where += ` AND ` + col + ` ` + f.Op + ` ?`
		args = append(args, f.Value)
	}
	for _, text := range q.Text {
		where += ` AND instr(lower(t.number || ' ' || t.status || ' ' || coalesce(t.error, '') || ' ' || t.params_json), lower(?)) > 0`
		args = append(args, text)
	}
	if q.Feasible {
		where += ` AND coalesce(p.feasible, 1) = 1`
	}
	return where, args, nil
}

// trialOrder is the ORDER BY of q over trials t and trial_progress p,
// with its arguments.
func trialOrder(e *Experiment, q TrialQuery) (string, []any, error) {
	if q.Sort != "" && q.Column != "" {
		return "", nil, errors.New("trial query: set Sort or Column, not both")
	}
	var args []any
	key, desc := "", false
	switch {
	case q.Sort != "":
		metric, d := strings.CutPrefix(q.Sort, "-")
		key, desc = `(SELECT json_extract(r.metrics_json, ?) FROM reports r WHERE r.id = p.last_report_id)`, d
		if metric == e.Metric {
			key = `p.best_metric`
			desc = desc != (e.Mode == "max")
		} else {
			args = append(args, jsonPath(metric))
		}
	case q.Column != "":
		col, d := strings.CutPrefix(q.Column, "-")
		desc = d
		switch col {
		case "trial":
			key = `t.number`
		case "status":
			key = `t.status`
		case "iterations":
			key = `p.iterations`
		case "restarts":
			key = `t.restarts`
		case "best", "last":
			key = `p.` + col + `_metric`
			desc = desc != (e.Mode == "max")
		default:
			name, ok := strings.CutPrefix(col, "param:")
			if !ok {
				return "", nil, fmt.Errorf("trial query: unknown column %q (want trial, status, iterations, restarts, best, last or param:NAME)", col)
			}
			key = `(SELECT value FROM params WHERE trial_id = t.id AND name = ?)`
			args = append(args, name)
		}
	default:
		return `t.number`, nil, nil
	}
	dir := "ASC"
	if desc {
		dir = "DESC"
	}
	return key + ` ` + dir + ` NULLS LAST, t.number`, args, nil
}

// jsonPath is the SQLite JSON path of a top-level key.
func jsonPath(key string) string {
	return `$."` + strings.ReplaceAll(key, `"`, `\"`) + `"`
}

// Trial returns trial number n of experiment exp, or ErrNotFound.
func (db *DB) Trial(ctx context.Context, exp string, n int) (*Trial, error) {
	if _, err := db.experimentRecord(ctx, exp); err != nil {
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
	e, err := db.experimentRecord(ctx, exp)
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
	var out []*Trial
	err := db.eachTrial(ctx, tail, args, func(t *Trial) error {
		out = append(out, t)
		return nil
	})
	return out, err
}

// eachTrial calls fn with each trial the query's tail selects.
func (db *DB) eachTrial(ctx context.Context, tail string, args []any, fn func(*Trial) error) error {
	rows, err := db.rq.QueryContext(ctx, `
SELECT t.id, e.name, t.number, t.status, t.params_json, p.iterations, p.last_metric,
	p.best_metric, t.restarts, coalesce(t.error, ''), p.feasible
FROM trials t JOIN experiments e ON e.id = t.experiment_id JOIN trial_progress p ON p.trial_id = t.id `+tail, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var t Trial
		var params string
		if err := rows.Scan(&t.id, &t.Experiment, &t.Number, &t.Status, &params, &t.Iterations,
			&t.LastMetric, &t.BestMetric, &t.Restarts, &t.Error, &t.Feasible); err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(params), &t.Params); err != nil {
			return fmt.Errorf("trial %d: decode params: %w", t.Number, err)
		}
		if err := fn(&t); err != nil {
			return err
		}
	}
	return rows.Err()
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

// EachTrialReport calls fn with every report of trial number n of
// experiment exp, in order, streaming them from the database; it fails with
// ErrNotFound when there is no such trial and stops at fn's first error.
func (db *DB) EachTrialReport(ctx context.Context, exp string, n int, fn func(r Report) error) error {
	if _, err := db.Trial(ctx, exp, n); err != nil {
		return err
	}
	return db.eachReport(ctx, `AND t.number = ?`, []any{exp, n}, func(_ int, r Report) error { return fn(r) })
}

// EachReport calls fn with every report of every trial of experiment exp,
// by trial number and iteration, streaming them from the database; it stops
// at fn's first error and returns it.
func (db *DB) EachReport(ctx context.Context, exp string, fn func(trial int, r Report) error) error {
	if _, err := db.experimentRecord(ctx, exp); err != nil {
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
	if _, err := db.experimentRecord(ctx, exp); err != nil {
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
	return fn(&DB{path: db.path, now: db.now, r: db.r, rq: tx, version: db.version})
}
