package storage

// migrations[i] moves a database from schema version i to i+1. The version is
// kept in SQLite's user_version pragma and every step runs in one transaction
// when the database is opened for writing. Append only: never edit a step
// once a gotune that runs it has been released.
//
// Times are REAL seconds since 1970 (UTC); metrics, params and free-form data
// are JSON objects in *_json TEXT columns. The *_v views are the public
// surface that `gotune query` and other SQL tools rely on; the tables may
// change between versions, the views' columns may not.
var migrations = []string{
	// 1: the whole results schema and its public views.
	`
CREATE TABLE experiments (
	id          INTEGER PRIMARY KEY,
	name        TEXT NOT NULL UNIQUE,
	status      TEXT NOT NULL,
	metric      TEXT NOT NULL,
	mode        TEXT NOT NULL CHECK (mode IN ('min', 'max')),
	config_json TEXT NOT NULL,
	created_at  REAL NOT NULL,
	ended_at    REAL
);

CREATE TABLE trials (
	id            INTEGER PRIMARY KEY,
	experiment_id INTEGER NOT NULL REFERENCES experiments(id),
	number        INTEGER NOT NULL,
	status        TEXT NOT NULL,
	params_json   TEXT NOT NULL,
	restarts      INTEGER NOT NULL DEFAULT 0,
	error         TEXT,
	created_at    REAL NOT NULL,
	ended_at      REAL,
	UNIQUE (experiment_id, number)
);

-- The summary of each trial's reports, kept up to date by every report so
-- that listing trials reads no reports: the last iteration, the objective's
-- latest and best values, and the newest report, where the trial's chain of
-- reports starts (see reports). It is a table of its own, narrow, so that
-- a commit of reports from many trials dirties few pages; maximize copies
-- the experiment's mode ('max').
CREATE TABLE trial_progress (
	trial_id       INTEGER PRIMARY KEY REFERENCES trials(id),
	maximize       INTEGER NOT NULL,
	iterations     INTEGER NOT NULL DEFAULT 0,
	last_metric    REAL,
	best_metric    REAL,
	last_report_id INTEGER
) WITHOUT ROWID;

-- One row per hyperparameter of a trial, for SQL that filters or groups by a
-- parameter. value has no declared type, so it keeps the JSON value's own:
-- REAL or INTEGER for numbers, INTEGER 0/1 for booleans, TEXT for strings.
CREATE TABLE params (
	trial_id INTEGER NOT NULL REFERENCES trials(id),
	name     TEXT NOT NULL,
	value,
	PRIMARY KEY (trial_id, name)
) WITHOUT ROWID;
CREATE INDEX params_name ON params (name, value);

-- Reports are kept in commit order with no index by trial: a commit that
-- holds reports of many trials then appends a few pages at the table's end
-- instead of touching one index page per trial. Each trial's reports form a
-- chain, newest first, from trial_progress.last_report_id through prev_id; the
-- iterations along a chain strictly decrease. objective is the experiment's
-- metric in this report, NULL when absent.
CREATE TABLE reports (
	id           INTEGER PRIMARY KEY,
	trial_id     INTEGER NOT NULL REFERENCES trials(id),
	iteration    INTEGER NOT NULL,
	time         REAL NOT NULL,
	objective    REAL,
	metrics_json TEXT NOT NULL,
	prev_id      INTEGER
);

-- Every report appended to a trial makes it the trial's newest and updates
-- the trial's summary, so the summary always agrees with the reports. A
-- report must come after the trial's last one.
CREATE TRIGGER reports_in_order BEFORE INSERT ON reports
WHEN NEW.iteration <= (SELECT iterations FROM trial_progress WHERE trial_id = NEW.trial_id)
BEGIN
	SELECT RAISE(ABORT, 'the trial already reported this iteration or a later one');
END;
CREATE TRIGGER reports_summarise AFTER INSERT ON reports
BEGIN
	UPDATE trial_progress SET
		last_report_id = NEW.id,
		iterations = NEW.iteration,
		last_metric = coalesce(NEW.objective, last_metric),
		best_metric = CASE
			WHEN NEW.objective IS NULL THEN best_metric
			WHEN best_metric IS NULL THEN NEW.objective
			WHEN maximize THEN max(best_metric, NEW.objective)
			ELSE min(best_metric, NEW.objective) END
	WHERE trial_id = NEW.trial_id;
END;

-- A committed checkpoint; deleted_at is set when retention removes its files.
CREATE TABLE checkpoints (
	id           INTEGER PRIMARY KEY,
	trial_id     INTEGER NOT NULL REFERENCES trials(id),
	iteration    INTEGER NOT NULL,
	path         TEXT NOT NULL,
	metrics_json TEXT NOT NULL,
	created_at   REAL NOT NULL,
	deleted_at   REAL
);
CREATE INDEX checkpoints_trial ON checkpoints (trial_id, iteration);

-- What happened to an experiment or one of its trials (start, stop, restart,
-- promotion, scheduler decisions), in order.
CREATE TABLE events (
	id            INTEGER PRIMARY KEY,
	experiment_id INTEGER NOT NULL REFERENCES experiments(id),
	trial_id      INTEGER REFERENCES trials(id),
	time          REAL NOT NULL,
	kind          TEXT NOT NULL,
	message       TEXT NOT NULL,
	data_json     TEXT
);
CREATE INDEX events_experiment ON events (experiment_id, trial_id);

-- The workers of each attempt of a trial (attempt = the trial's restarts
-- when the worker was recorded); step_rate is in steps per second.
CREATE TABLE workers (
	id         INTEGER PRIMARY KEY,
	trial_id   INTEGER NOT NULL REFERENCES trials(id),
	attempt    INTEGER NOT NULL,
	rank       INTEGER NOT NULL,
	node       TEXT NOT NULL,
	pid        INTEGER,
	status     TEXT NOT NULL,
	log_path   TEXT,
	step_rate  REAL,
	started_at REAL NOT NULL,
	updated_at REAL NOT NULL,
	UNIQUE (trial_id, attempt, rank)
);

-- Utilisation samples of a node's GPUs (gpu_index) or of its host CPUs and
-- memory (gpu_index NULL), optionally attributed to a worker. util is in
-- percent, memory in bytes.
CREATE TABLE resource_samples (
	id            INTEGER PRIMARY KEY,
	experiment_id INTEGER NOT NULL REFERENCES experiments(id),
	time          REAL NOT NULL,
	node          TEXT NOT NULL,
	worker_id     INTEGER REFERENCES workers(id),
	gpu_index     INTEGER,
	util          REAL,
	memory_used   INTEGER,
	memory_total  INTEGER
);
CREATE INDEX resource_samples_experiment ON resource_samples (experiment_id, time);

CREATE VIEW experiments_v AS
SELECT e.name, e.status, e.metric, e.mode, e.created_at,
       (SELECT count(*) FROM trials t WHERE t.experiment_id = e.id) AS trials,
       (SELECT CASE e.mode WHEN 'max' THEN max(p.best_metric) ELSE min(p.best_metric) END
        FROM trials t JOIN trial_progress p ON p.trial_id = t.id WHERE t.experiment_id = e.id) AS best
FROM experiments e;

CREATE VIEW trials_v AS
SELECT e.name AS experiment, t.number AS trial_id, t.status, t.params_json,
       p.iterations, p.last_metric, p.best_metric, t.restarts, t.error
FROM trials t JOIN experiments e ON e.id = t.experiment_id JOIN trial_progress p ON p.trial_id = t.id;

CREATE VIEW reports_v AS
SELECT e.name AS experiment, t.number AS trial_id, r.iteration, r.time, r.metrics_json
FROM reports r JOIN trials t ON t.id = r.trial_id JOIN experiments e ON e.id = t.experiment_id;
`,
	// 2: the scheduler's inputs in the order the tuner gave them, so that a
	// resumed run replays them into a new scheduler and it decides exactly
	// as the interrupted one would have.
	`
CREATE TABLE scheduler_inputs (
	id            INTEGER PRIMARY KEY,
	experiment_id INTEGER NOT NULL REFERENCES experiments(id),
	trial         INTEGER NOT NULL,
	kind          TEXT NOT NULL,
	data_json     TEXT
);
CREATE INDEX scheduler_inputs_experiment ON scheduler_inputs (experiment_id, id);
`,
	// 3: what was delivered to MLflow tracking servers, so that a resumed
	// sweep or a second sync sends nothing twice. One row per experiment,
	// target (a server and an MLflow experiment name) and trial (0: the
	// sweep's parent run). sent_time and sent_iteration are those of the
	// trial's newest delivered report: the reports after it in the trial's
	// chain are the undelivered ones. tags_json holds the tags delivered
	// last; status the final run status delivered, NULL while running.
	`
CREATE TABLE mlflow_runs (
	experiment_id  INTEGER NOT NULL REFERENCES experiments(id),
	target         TEXT NOT NULL,
	trial          INTEGER NOT NULL,
	run_id         TEXT NOT NULL,
	params_sent    INTEGER NOT NULL DEFAULT 0,
	sent_time      REAL,
	sent_iteration INTEGER,
	tags_json      TEXT NOT NULL DEFAULT '{}',
	status         TEXT,
	PRIMARY KEY (experiment_id, target, trial)
) WITHOUT ROWID;
`,
	// 4: constraints on an experiment's trials (SetConstraints) and each
	// trial's feasibility, kept by every report; experiments_v's best
	// counts feasible trials only; several objectives (SetObjectives) and
	// the Pareto front of their trials; trial_standing_v is public.
	`
ALTER TABLE experiments ADD COLUMN constraints_json TEXT;
ALTER TABLE experiments ADD COLUMN objectives_json TEXT;
ALTER TABLE trial_progress ADD COLUMN feasible INTEGER;

-- A report of a trial of a constrained experiment decides the trial's
-- feasibility: 1 when the report meets every constraint, 0 otherwise (a
-- metric it lacks, or that is NaN, fails its constraint). Metrics_json
-- holds infinities as the strings 'Infinity' and '-Infinity'.
CREATE TRIGGER reports_feasible AFTER INSERT ON reports
WHEN (SELECT e.constraints_json FROM trials t JOIN experiments e ON e.id = t.experiment_id WHERE t.id = NEW.trial_id) IS NOT NULL
BEGIN
	UPDATE trial_progress SET feasible = (
		SELECT coalesce(min(coalesce(CASE op
			WHEN '<=' THEN x <= bound WHEN '<' THEN x < bound
			WHEN '>=' THEN x >= bound WHEN '>' THEN x > bound END, 0)), 1)
		FROM (SELECT op, bound, CASE
				WHEN typeof(raw) IN ('integer', 'real') THEN raw
				WHEN raw = 'Infinity' THEN 9e999
				WHEN raw = '-Infinity' THEN -9e999 END AS x
			FROM (SELECT json_extract(c.value, '$.op') AS op, json_extract(c.value, '$.bound') AS bound,
					json_extract(NEW.metrics_json, json_extract(c.value, '$.path')) AS raw
				FROM json_each((SELECT e.constraints_json FROM trials t JOIN experiments e ON e.id = t.experiment_id
					WHERE t.id = NEW.trial_id)) c)))
	WHERE trial_id = NEW.trial_id;
END;

DROP VIEW experiments_v;
CREATE VIEW experiments_v AS
SELECT e.name, e.status, e.metric, e.mode, e.created_at,
       (SELECT count(*) FROM trials t WHERE t.experiment_id = e.id) AS trials,
       (SELECT CASE e.mode WHEN 'max' THEN max(p.best_metric) ELSE min(p.best_metric) END
        FROM trials t JOIN trial_progress p ON p.trial_id = t.id
        WHERE t.experiment_id = e.id AND coalesce(p.feasible, 1) = 1) AS best
FROM experiments e;

-- feasible: 1 or 0 for a trial of a constrained experiment that has
-- reported, NULL otherwise. on_front: 1 or 0 for a trial of an experiment
-- with several objectives (objectives_json: [{"path": JSON path, "sign":
-- 1 to minimise, -1 to maximise}]), NULL otherwise. A trial's objectives
-- are the values of its last report, signed so that lower is better; one
-- that is not a finite number counts as missing. A trial is on the Pareto
-- front when it is feasible, has every objective, and no other such trial
-- of its experiment dominates it (is no worse in every objective and
-- better in one).
CREATE VIEW trial_standing_v AS
WITH obj AS MATERIALIZED (
	SELECT t.id AS trial_id, t.experiment_id AS exp, coalesce(p.feasible, 1) AS feasible, o.key AS k,
	       CASE WHEN typeof(json_extract(r.metrics_json, json_extract(o.value, '$.path'))) IN ('integer', 'real')
	            THEN json_extract(o.value, '$.sign') * json_extract(r.metrics_json, json_extract(o.value, '$.path')) END AS v
	FROM trials t JOIN experiments e ON e.id = t.experiment_id JOIN trial_progress p ON p.trial_id = t.id
	LEFT JOIN reports r ON r.id = p.last_report_id, json_each(e.objectives_json) o
	WHERE e.objectives_json IS NOT NULL),
complete AS MATERIALIZED (
	SELECT trial_id, exp FROM obj GROUP BY trial_id HAVING count(v) = count(*) AND min(feasible) = 1),
dominated AS (
	SELECT DISTINCT a.trial_id
	FROM complete ca JOIN complete cb ON cb.exp = ca.exp AND cb.trial_id != ca.trial_id
	JOIN obj a ON a.trial_id = ca.trial_id JOIN obj b ON b.trial_id = cb.trial_id AND b.k = a.k
	GROUP BY a.trial_id, b.trial_id
	HAVING sum(b.v <= a.v) = count(*) AND sum(b.v < a.v) > 0)
SELECT e.name AS experiment, t.number AS trial_id, p.feasible,
       CASE WHEN e.objectives_json IS NULL THEN NULL
            ELSE t.id IN (SELECT trial_id FROM complete) AND t.id NOT IN (SELECT trial_id FROM dominated) END AS on_front
FROM trials t JOIN experiments e ON e.id = t.experiment_id JOIN trial_progress p ON p.trial_id = t.id;
`,
	// 5: trial_standing_v finds the Pareto front without comparing every
	// pair of trials, which took hours for 100,000 trials; its columns
	// and their meaning are those of version 4.
	`
DROP VIEW trial_standing_v;

-- The same standing as version 4's, found faster. With two objectives, a
-- trial is on the front when no trial of a lower first objective has a
-- second as low, and no trial of an equal first has a lower second: a
-- sort, O(n log n) for n trials. With more, the trials are swept in order
-- of the sum of their objectives, which a trial that dominates another
-- never exceeds, and each is kept unless a trial kept before it dominates
-- it: O(n·f) for f kept, about the size of the front. Every trial on the
-- front is kept; a kept trial that another kept trial dominates (their
-- sums rounded to the same float) is not on the front.
CREATE VIEW trial_standing_v AS
WITH RECURSIVE obj AS MATERIALIZED (
	SELECT t.id AS trial_id, t.experiment_id AS exp, coalesce(p.feasible, 1) AS feasible, o.key AS k,
	       json_array_length(e.objectives_json) AS m,
	       CASE WHEN typeof(json_extract(r.metrics_json, json_extract(o.value, '$.path'))) IN ('integer', 'real')
	            THEN json_extract(o.value, '$.sign') * json_extract(r.metrics_json, json_extract(o.value, '$.path')) END AS v
	FROM trials t JOIN experiments e ON e.id = t.experiment_id JOIN trial_progress p ON p.trial_id = t.id
	LEFT JOIN reports r ON r.id = p.last_report_id, json_each(e.objectives_json) o
	WHERE e.objectives_json IS NOT NULL),
complete AS MATERIALIZED (
	SELECT trial_id, exp, min(m) AS m, total(v) AS s,
	       min(CASE k WHEN 0 THEN v END) AS x, min(CASE k WHEN 1 THEN v END) AS y
	FROM obj GROUP BY trial_id HAVING count(v) = count(*) AND min(feasible) = 1),
levels AS MATERIALIZED (
	SELECT exp, x, min(y) AS y,
	       min(min(y)) OVER (PARTITION BY exp ORDER BY x ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS below
	FROM complete WHERE m = 2 GROUP BY exp, x),
front2 AS (
	SELECT c.trial_id FROM complete c JOIN levels l ON l.exp = c.exp AND l.x = c.x
	WHERE c.m = 2 AND c.y = l.y AND (l.below IS NULL OR l.below > c.y)),
ranked AS MATERIALIZED (
	SELECT trial_id, exp, row_number() OVER (PARTITION BY exp ORDER BY s, trial_id) AS i FROM complete WHERE m > 2),
sweep(exp, i, kept) AS (
	SELECT DISTINCT exp, 0, '[]' FROM ranked
	UNION ALL
	SELECT w.exp, c.i, CASE WHEN EXISTS (
			SELECT 1 FROM json_each(w.kept) f
			WHERE (SELECT max(a.v > b.v) = 0 AND max(a.v < b.v) = 1
				FROM obj a JOIN obj b ON b.trial_id = c.trial_id AND b.k = a.k WHERE a.trial_id = f.value))
		THEN w.kept ELSE json_insert(w.kept, '$[#]', c.trial_id) END
	FROM sweep w JOIN ranked c ON c.exp = w.exp AND c.i = w.i + 1),
lasts AS MATERIALIZED (SELECT exp, max(i) AS i FROM ranked GROUP BY exp),
kept AS MATERIALIZED (
	SELECT f.value AS trial_id, w.exp FROM sweep w JOIN lasts l ON l.exp = w.exp AND l.i = w.i, json_each(w.kept) f),
frontN AS (
	SELECT trial_id FROM kept ka WHERE NOT EXISTS (
		SELECT 1 FROM kept kb WHERE kb.exp = ka.exp AND kb.trial_id != ka.trial_id
		AND (SELECT max(a.v > b.v) = 0 AND max(a.v < b.v) = 1
			FROM obj a JOIN obj b ON b.trial_id = ka.trial_id AND b.k = a.k WHERE a.trial_id = kb.trial_id)))
SELECT e.name AS experiment, t.number AS trial_id, p.feasible,
       CASE WHEN e.objectives_json IS NULL THEN NULL
            ELSE t.id IN (SELECT trial_id FROM front2 UNION ALL SELECT trial_id FROM frontN) END AS on_front
FROM trials t JOIN experiments e ON e.id = t.experiment_id JOIN trial_progress p ON p.trial_id = t.id;
`,
	// 6: leaderboard_v, each experiment's trials best first, as the
	// natural top-10 should list them: a trial without a value of the
	// metric (interrupted or failed before it reported one) comes after
	// every trial with one, where ORDER BY best_metric over trials_v puts
	// it first. trials_v itself stays unordered, since a view's ORDER BY
	// costs every query over it a sort (an aggregate over 100,000 trials
	// took four times as long).
	`
CREATE VIEW leaderboard_v AS
SELECT e.name AS experiment,
       row_number() OVER (PARTITION BY e.id ORDER BY p.best_metric IS NULL,
           CASE e.mode WHEN 'max' THEN -p.best_metric ELSE p.best_metric END, t.number) AS place,
       t.number AS trial_id, t.status, p.best_metric, p.last_metric, p.iterations, t.params_json
FROM trials t JOIN experiments e ON e.id = t.experiment_id JOIN trial_progress p ON p.trial_id = t.id
ORDER BY e.id, place;
`,
}

// SchemaVersion is the schema version this build of gotune reads and writes.
var SchemaVersion = len(migrations)
