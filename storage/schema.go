package storage

// migrations[i] moves a database from schema version i to i+1. The version is
// kept in SQLite's user_version pragma. Append only: never edit a released step.
var migrations = []string{
	// 1: experiments, trials and reports, with the public views.
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
	iterations    INTEGER NOT NULL DEFAULT 0,
	last_metric   REAL,
	best_metric   REAL,
	restarts      INTEGER NOT NULL DEFAULT 0,
	error         TEXT,
	created_at    REAL NOT NULL,
	ended_at      REAL,
	UNIQUE (experiment_id, number)
);
CREATE TABLE reports (
	id           INTEGER PRIMARY KEY,
	trial_id     INTEGER NOT NULL REFERENCES trials(id),
	iteration    INTEGER NOT NULL,
	time         REAL NOT NULL,
	metrics_json TEXT NOT NULL,
	UNIQUE (trial_id, iteration)
);
CREATE VIEW trials_v AS
SELECT e.name AS experiment, t.number AS trial_id, t.status, t.params_json,
       t.iterations, t.last_metric, t.best_metric, t.restarts, t.error
FROM trials t JOIN experiments e ON e.id = t.experiment_id;
CREATE VIEW reports_v AS
SELECT e.name AS experiment, t.number AS trial_id, r.iteration, r.time, r.metrics_json
FROM reports r JOIN trials t ON t.id = r.trial_id JOIN experiments e ON e.id = t.experiment_id;
`,
}

// SchemaVersion is the schema version this build of gotune writes.
var SchemaVersion = len(migrations)
