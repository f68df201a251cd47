package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// readOnlyDriver opens the connections that serve reads. Besides opening
// the file read-only (mode=ro in the DSN), it allows no attached database,
// since ATTACH (and VACUUM INTO, which attaches) would open another file
// for writing and creating.
const readOnlyDriver = "sqlite3-gotune-ro"

func init() {
	sql.Register(readOnlyDriver, &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		c.SetLimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
		return nil
	}})
}

// ErrNotFound is returned by lookups of an experiment, trial or checkpoint
// that does not exist.
var ErrNotFound = errors.New("not found")

// ErrClosed is returned by writes to a DB after Close.
var ErrClosed = errors.New("results database is closed")

// ErrReadOnly is returned by writes to a DB opened with OpenReadOnly.
var ErrReadOnly = errors.New("results database is open read-only")

// ErrDiskFull is wrapped by the error of a write that failed because the
// disk (or the file-size limit) is full. Nothing of that write was
// committed; everything committed before is intact, and writes succeed again
// once there is space.
var ErrDiskFull = errors.New("disk full")

// DB is an open gotune results database. It is safe for concurrent use.
//
// Every write goes through one writer goroutine that Open starts and Close
// stops: concurrent writes are committed together in one transaction, and
// each write method returns only once its transaction is committed.
type DB struct {
	path string
	now  func() time.Time
	// w is nil for a database opened read-only.
	w *writer
	// r is the pool of read-only connections: SQLite itself refuses any
	// statement on them that would write.
	r *sql.DB
	// rq runs the reads: r, or a read transaction on it in a Snapshot view.
	rq queryer
	// version is the connection DataVersion asks, made on first use.
	version *versionConn
}

// versionConn is one connection of the read pool kept for DataVersion:
// SQLite's data version is per connection.
type versionConn struct {
	mu   sync.Mutex
	conn *sql.Conn
	// raw is conn's last data_version; count, what DataVersion returns,
	// grows by one each time raw changes or conn is made anew.
	raw, count int64
}

// Option changes how Open opens a database.
type Option func(*options)

type options struct {
	fullSync bool
	now      func() time.Time
	space    *spaceWait
}

// FullSync makes every commit wait until the operating system has written
// it to the disk (SQLite's synchronous=FULL), so that committed results
// survive a power loss too. Without it (synchronous=NORMAL in WAL mode), a
// committed result survives the crash of any process, gotune's included,
// but a power loss may take back the last commits.
func FullSync() Option { return func(o *options) { o.fullSync = true } }

// WithClock makes the database stamp the rows it creates (experiments,
// trials, events, workers, checkpoints) with now() instead of the wall
// clock, for reproducible output. Report and sample times are the caller's.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WaitForSpace makes a write that fails because the disk is full (or the
// file-size limit is reached) wait for space instead of failing: the
// writer tries its transaction again after pauses that grow from 10 ms to
// 1 s, until it commits, the write's own context ends, or ctx ends; only
// then does the write fail with ErrDiskFull. Other writes queue behind it
// meanwhile, and readers go on reading. notify, when not nil, is called
// from the writer's goroutine with the disk-full error (which names the
// file) when writes start waiting, and with nil when they commit again; it
// must not block. Close waits for a write that waits.
func WaitForSpace(ctx context.Context, notify func(err error)) Option {
	return func(o *options) { o.space = &spaceWait{ctx: ctx, notify: notify} }
}

// Open opens the database at path for reading and writing, creating it when
// absent, migrating it to the current schema and starting its writer. Close
// it when done. It fails when the file is not a SQLite database or was
// written by a newer gotune.
func Open(path string, opts ...Option) (*DB, error) {
	// The database's path names the folders beside it (locks, trials'
	// folders), which processes running elsewhere are told of.
	path, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	sync := "NORMAL"
	if o.fullSync {
		sync = "FULL"
	}
	// The writer keeps up to 16 MiB of pages (SQLite's default is 2 MiB):
	// the tails of the indexes a sweep appends to stay in memory as the
	// database grows past a few thousand trials.
	w, err := sql.Open("sqlite3", dsn(path, "rwc", "_txlock=immediate&_cache_size=-16384&_synchronous="+sync))
	if err != nil {
		return nil, err
	}
	w.SetMaxOpenConns(1)
	w.SetConnMaxLifetime(0)
	db := &DB{path: path, now: o.now, version: &versionConn{}}
	if db.now == nil {
		db.now = time.Now
	}
	if err := db.migrateWhenFree(context.Background(), w); err != nil {
		w.Close()
		return nil, err
	}
	if db.r, err = sql.Open(readOnlyDriver, dsn(path, "ro", "")); err != nil {
		w.Close()
		return nil, err
	}
	if db.w, err = startWriter(path, w, o.space); err != nil {
		w.Close()
		db.r.Close()
		return nil, err
	}
	db.rq = db.r
	return db, nil
}

// OpenReadOnly opens an existing database for queries only, through
// connections that SQLite opens read-only, so any statement that would write
// fails. It works while another process writes the database. It fails when
// the file does not exist, is not a gotune database, or has another schema
// version than this gotune's.
func OpenReadOnly(path string) (*DB, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("open results database: %w", err)
	}
	r, err := sql.Open(readOnlyDriver, dsn(path, "ro", ""))
	if err != nil {
		return nil, err
	}
	db := &DB{path: path, now: time.Now, r: r, rq: r, version: &versionConn{}}
	v, err := userVersion(context.Background(), r)
	if err != nil {
		r.Close()
		return nil, db.wrapOpenErr(err)
	}
	switch {
	case v == 0:
		if err = db.checkEmpty(context.Background(), r); err == nil {
			err = fmt.Errorf("%s holds no gotune results (an empty database): check the path", path)
		}
	case v > SchemaVersion:
		err = db.newerError(v)
	case v < SchemaVersion:
		err = fmt.Errorf("%s has schema version %d, older than this gotune's %d: open it for writing once (gotune run) to migrate it", path, v, SchemaVersion)
	}
	if err != nil {
		r.Close()
		return nil, err
	}
	return db, nil
}

func dsn(path, mode, extra string) string {
	q := url.Values{}
	q.Set("mode", mode)
	q.Set("_busy_timeout", strconv.FormatInt(busyTimeout.Milliseconds(), 10))
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

// Close waits for the writes in flight to commit, stops the writer and
// closes the database. Writes after Close fail with ErrClosed.
func (db *DB) Close() error {
	// Readers close first: the last connection to close removes the
	// write-ahead log's files, which a read-only one cannot do.
	db.version.mu.Lock()
	if db.version.conn != nil {
		db.version.conn.Close()
		db.version.conn = nil
	}
	db.version.mu.Unlock()
	err := db.r.Close()
	if db.w != nil {
		err = errors.Join(err, db.w.close())
	}
	return err
}

// DataVersion returns a number that grows whenever a commit to the
// database is made by any connection, of this process or another (SQLite's
// data_version, kept on one read connection): equal numbers from two calls
// mean nothing was committed between them, so a reader that polls can
// skip reading again.
func (db *DB) DataVersion(ctx context.Context) (int64, error) {
	v := db.version
	v.mu.Lock()
	defer v.mu.Unlock()
	fresh := v.conn == nil
	if fresh {
		c, err := db.r.Conn(ctx)
		if err != nil {
			return 0, err
		}
		v.conn = c
	}
	var raw int64
	if err := v.conn.QueryRowContext(ctx, "PRAGMA data_version").Scan(&raw); err != nil {
		v.conn.Close()
		v.conn = nil
		return 0, err
	}
	if fresh || raw != v.raw {
		v.raw = raw
		v.count++
	}
	return v.count, nil
}

func userVersion(ctx context.Context, q *sql.DB) (int, error) {
	var v int
	err := q.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v)
	return v, err
}

// querier is what checkEmpty needs of a *sql.DB or a *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// checkEmpty fails unless a database of schema version 0 has no tables: a
// SQLite file that some other program made is not gotune's to migrate.
func (db *DB) checkEmpty(ctx context.Context, q querier) error {
	var n int
	if err := q.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema`).Scan(&n); err != nil {
		return db.wrapOpenErr(err)
	}
	if n > 0 {
		return fmt.Errorf("%s is a SQLite database of another program, not a gotune results database: choose another file", db.path)
	}
	return nil
}

func (db *DB) newerError(v int) error {
	return fmt.Errorf("%s has schema version %d, newer than this gotune's %d: upgrade gotune", db.path, v, SchemaVersion)
}

// busyTimeout is how long a connection waits for another's lock before a
// statement fails with SQLITE_BUSY (SQLite's busy timeout).
const busyTimeout = 10 * time.Second

// migrateWhenFree migrates, trying again while the database is busy. A
// connection's first use switches a new database to WAL, which needs an
// exclusive lock; where two connections would deadlock waiting for each
// other's locks, SQLite fails one at once with SQLITE_BUSY instead of
// waiting out the busy timeout. So concurrent Opens of a new database
// retry here, for as long as the busy timeout.
func (db *DB) migrateWhenFree(ctx context.Context, w *sql.DB) error {
	deadline := time.Now().Add(busyTimeout)
	for pause := time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		err := db.migrate(ctx, w)
		var se sqlite3.Error
		if !errors.As(err, &se) || se.Code != sqlite3.ErrBusy && se.Code != sqlite3.ErrLocked || time.Now().Add(pause).After(deadline) {
			return err
		}
		time.Sleep(pause)
	}
}

func (db *DB) migrate(ctx context.Context, w *sql.DB) error {
	v, err := userVersion(ctx, w)
	if err != nil {
		return db.wrapOpenErr(err)
	}
	if v > SchemaVersion {
		return db.newerError(v)
	}
	for ; v < SchemaVersion; v++ {
		if err := db.migrateStep(ctx, w, v); err != nil {
			return err
		}
	}
	return nil
}

// migrateStep runs migrations[v] and sets the version in one transaction.
func (db *DB) migrateStep(ctx context.Context, w *sql.DB, v int) error {
	tx, err := w.BeginTx(ctx, nil)
	if err != nil {
		return db.wrapOpenErr(err)
	}
	defer tx.Rollback()
	// Another process may have migrated since we read the version.
	var now int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&now); err != nil {
		return err
	}
	if now > v {
		return tx.Commit()
	}
	if v == 0 {
		if err := db.checkEmpty(ctx, tx); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
		return fmt.Errorf("migrate %s to schema version %d: %w", db.path, v+1, classify(db.path, err))
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", v+1)); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate %s to schema version %d: %w", db.path, v+1, classify(db.path, err))
	}
	return nil
}

func (db *DB) wrapOpenErr(err error) error {
	var se sqlite3.Error
	if errors.As(err, &se) && se.Code == sqlite3.ErrNotADB {
		return fmt.Errorf("%s is not a gotune results database (not SQLite): choose another file", db.path)
	}
	if errors.As(err, &se) && (se.Code == sqlite3.ErrCantOpen || se.Code == sqlite3.ErrReadonly) {
		// SQLite's own message says "no such file" when it cannot create
		// a file it needs: leave it out where the folder is why.
		if fe := folderError(filepath.Dir(db.path), nil); fe != nil {
			return fmt.Errorf("open %s: %w: SQLite writes files beside a database (its -wal and -shm), even to read it, so choose a folder you can write (or copy the database there)", db.path, fe)
		}
		if _, serr := os.Stat(filepath.Dir(db.path)); errors.Is(serr, fs.ErrNotExist) {
			return fmt.Errorf("open %s: the folder %s does not exist (%w): create it, or choose another path", db.path, filepath.Dir(db.path), serr)
		}
	}
	return fmt.Errorf("open %s: %w", db.path, classify(db.path, err))
}

// classify turns SQLite's "disk full" (and a write refused by a file-size
// limit) into an error that wraps ErrDiskFull and says what to do.
func classify(path string, err error) error {
	var se sqlite3.Error
	if !errors.As(err, &se) {
		return err
	}
	full := se.Code == sqlite3.ErrFull
	if se.Code == sqlite3.ErrIoErr {
		switch se.SystemErrno {
		case syscall.ENOSPC, syscall.EFBIG, syscall.EDQUOT:
			full = true
		}
	}
	if !full {
		return err
	}
	return fmt.Errorf("%w writing %s (%w): what was committed before is intact; free some space, then run the same command again to continue", ErrDiskFull, path, err)
}

// unixSeconds converts t to the REAL seconds since 1970 the schema stores.
func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func fromUnixSeconds(s float64) time.Time {
	return time.Unix(0, int64(s*1e9)).UTC()
}
