package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// ErrNotFound is returned by lookups of an experiment or trial that does not exist.
var ErrNotFound = errors.New("not found")

// DB is an open gotune results database. It is safe for concurrent use.
type DB struct {
	path string
	// w holds the single connection every write goes through, so writers
	// queue in Go rather than fighting over SQLite's lock.
	w *sql.DB
	// r serves reads; in read-only mode it is the only pool.
	r *sql.DB
}

// Open opens the database at path for reading and writing, creating it when
// absent and migrating it to the current schema.
func Open(path string) (*DB, error) {
	w, err := sql.Open("sqlite3", dsn(path, "rwc", "_txlock=immediate&_synchronous=NORMAL"))
	if err != nil {
		return nil, err
	}
	w.SetMaxOpenConns(1)
	db := &DB{path: path, w: w}
	if err := db.migrate(context.Background()); err != nil {
		w.Close()
		return nil, err
	}
	db.r, err = sql.Open("sqlite3", dsn(path, "ro", ""))
	if err != nil {
		w.Close()
		return nil, err
	}
	return db, nil
}

// OpenReadOnly opens an existing database for queries only: SQLite itself
// refuses any statement that would write. It fails when the file does not
// exist or was written by a newer gotune.
func OpenReadOnly(path string) (*DB, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("open results database: %w", err)
	}
	r, err := sql.Open("sqlite3", dsn(path, "ro", ""))
	if err != nil {
		return nil, err
	}
	db := &DB{path: path, r: r}
	v, err := userVersion(context.Background(), r)
	if err != nil {
		r.Close()
		return nil, db.wrapOpenErr(err)
	}
	if v > SchemaVersion {
		r.Close()
		return nil, fmt.Errorf("%s has schema version %d, newer than this gotune's %d: upgrade gotune", path, v, SchemaVersion)
	}
	return db, nil
}

func dsn(path, mode, extra string) string {
	q := url.Values{}
	q.Set("mode", mode)
	q.Set("_busy_timeout", "10000")
	q.Set("_foreign_keys", "on")
	if mode != "ro" {
		q.Set("_journal_mode", "WAL")
	}
	s := "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
	if extra != "" {
		s += "&" + extra
	}
	return s
}

// Path is the file the database lives in.
func (db *DB) Path() string { return db.path }

// Close closes the database.
func (db *DB) Close() error {
	var err error
	if db.w != nil {
		err = db.w.Close()
	}
	if db.r != nil {
		err = errors.Join(err, db.r.Close())
	}
	return err
}

func userVersion(ctx context.Context, q *sql.DB) (int, error) {
	var v int
	err := q.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v)
	return v, err
}

func (db *DB) migrate(ctx context.Context) error {
	v, err := userVersion(ctx, db.w)
	if err != nil {
		return db.wrapOpenErr(err)
	}
	if v > SchemaVersion {
		return fmt.Errorf("%s has schema version %d, newer than this gotune's %d: upgrade gotune", db.path, v, SchemaVersion)
	}
	for ; v < SchemaVersion; v++ {
		tx, err := db.w.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
			tx.Rollback()
			return fmt.Errorf("migrate %s to schema version %d: %w", db.path, v+1, err)
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", v+1)); err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}

func (db *DB) wrapOpenErr(err error) error {
	var se sqlite3.Error
	if errors.As(err, &se) && se.Code == sqlite3.ErrNotADB {
		return fmt.Errorf("%s is not a gotune results database (not SQLite)", db.path)
	}
	return fmt.Errorf("open %s: %w", db.path, err)
}

// unixSeconds converts t to the REAL seconds since 1970 the schema stores.
func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func fromUnixSeconds(s float64) time.Time {
	return time.Unix(0, int64(s*1e9)).UTC()
}
