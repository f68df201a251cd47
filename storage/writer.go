package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// maxBatch bounds how many writes share one transaction.
const maxBatch = 4096

// writer owns the database's only writing connection. One goroutine, started
// by startWriter and stopped by close, takes the writes queued on ops and
// commits every write that is waiting in one transaction (group commit), so
// throughput grows with the number of concurrent writers instead of being
// bounded by one commit per row, while each write still returns only once
// it is committed.
type writer struct {
	path string
	db   *sql.DB // one connection

	// mu guards closed and the sends on ops, so that close never closes
	// ops under a sender.
	mu     sync.RWMutex
	closed bool
	ops    chan *writeOp
	done   chan struct{} // closed when the goroutine has returned

	// prepared holds hotWrites by query text; read-only once started.
	prepared map[string]*sql.Stmt

	writes, commits atomic.Int64
	// queuedErr is the first failure of a write queued by enqueue.
	queuedErr atomic.Pointer[error]

	// space, when not nil, makes writes wait while the disk is full; full
	// is whether they are waiting now (touched by the goroutine only).
	space *spaceWait
	full  bool
}

// spaceWait is what WaitForSpace sets: how long writes may wait for space,
// and whom to tell.
type spaceWait struct {
	ctx    context.Context
	notify func(err error)
}

// Pauses between the tries of a write that waits for space.
const (
	firstSpacePause = 10 * time.Millisecond
	maxSpacePause   = time.Second
)

// WriteStats counts a database's writes since Open.
type WriteStats struct {
	// Writes counts the write calls answered, committed or failed.
	Writes int64
	// Commits counts the transactions committed; Writes/Commits is the
	// average number of writes that shared a commit.
	Commits int64
}

// WriteStats returns the writer's counts so far; zero for a read-only
// database.
func (db *DB) WriteStats() WriteStats {
	if db.w == nil {
		return WriteStats{}
	}
	return WriteStats{Writes: db.w.writes.Load(), Commits: db.w.commits.Load()}
}

// writeOp is one queued write. apply runs inside the batch's transaction and
// may run twice: when any write of a batch fails, the batch is rolled back
// and each of its writes is retried alone, so that one bad write does not
// fail the others. apply must therefore only write through tx and set its
// results afresh on each run.
type writeOp struct {
	ctx   context.Context // how long it may wait for space
	apply func(tx *wtx) error
	// result is buffered and receives exactly once; nil for a write queued
	// by enqueue, which nobody waits for.
	result chan error
}

// answer gives op its outcome; the first failure of a write nobody waits
// for is kept for enqueue to return.
func (w *writer) answer(op *writeOp, err error) {
	if op.result != nil {
		op.result <- err
		return
	}
	if err != nil {
		w.queuedErr.CompareAndSwap(nil, &err)
	}
}

var resultChans = sync.Pool{New: func() any { return make(chan error, 1) }}

// hotWrites are the statements a running sweep executes per report; the
// writer prepares them once, before its connection is ever busy in a
// transaction (with one connection, preparing later would wait on itself).
var hotWrites = []string{insertReport, insertEvent, upsertWorker, insertResourceSample, insertSchedulerInput}

// startWriter prepares the hot statements on db, a pool of one connection,
// and starts the goroutine.
func startWriter(path string, db *sql.DB, space *spaceWait) (*writer, error) {
	w := &writer{
		path:     path,
		space:    space,
		db:       db,
		ops:      make(chan *writeOp, maxBatch),
		done:     make(chan struct{}),
		prepared: map[string]*sql.Stmt{},
	}
	for _, q := range hotWrites {
		s, err := db.Prepare(q)
		if err != nil {
			for _, p := range w.prepared {
				p.Close()
			}
			return nil, fmt.Errorf("prepare %q: %w", q, err)
		}
		w.prepared[q] = s
	}
	go w.run()
	return w, nil
}

// do queues apply and waits until its transaction has committed or failed.
// When ctx ends before the write is queued, do returns ctx's error and
// nothing is written; once queued, the write is waited for even if ctx
// ends, so that a nil error always means committed and an error means not.
func (w *writer) do(ctx context.Context, apply func(tx *wtx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	op := &writeOp{ctx: ctx, apply: apply, result: resultChans.Get().(chan error)}
	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		return ErrClosed
	}
	select {
	case w.ops <- op:
	case <-ctx.Done():
		w.mu.RUnlock()
		return ctx.Err()
	}
	w.mu.RUnlock()
	err := <-op.result
	resultChans.Put(op.result)
	return err
}

// enqueue queues apply and returns at once: the write commits with the next
// batch, after every write queued before it and before every write queued
// after it, so a write that is seen committed implies the queued ones
// before it are too. It returns the failure of an earlier queued write, if
// one failed, and ErrClosed after close.
func (w *writer) enqueue(apply func(tx *wtx) error) error {
	if p := w.queuedErr.Load(); p != nil {
		return *p
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return ErrClosed
	}
	w.ops <- &writeOp{ctx: context.Background(), apply: apply}
	return nil
}

// close commits what is queued, stops the goroutine and closes the
// connection.
func (w *writer) close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	close(w.ops)
	w.mu.Unlock()
	<-w.done
	var err error
	for _, s := range w.prepared {
		err = errors.Join(err, s.Close())
	}
	// Everything committed moves into the database file itself, so that a
	// copy of that file alone has every result even while readers keep the
	// write-ahead log open. (A reader in the middle of a read may keep it
	// from finishing; the log then still holds the rest, safely.)
	_, cerr := w.db.Exec("PRAGMA wal_checkpoint(TRUNCATE)")
	err = errors.Join(err, cerr)
	return errors.Join(err, w.db.Close())
}

func (w *writer) run() {
	defer close(w.done)
	batch := make([]*writeOp, 0, maxBatch)
	for op := range w.ops {
		batch = append(batch[:0], op)
	fill:
		for len(batch) < maxBatch {
			select {
			case op, ok := <-w.ops:
				if !ok {
					break fill
				}
				batch = append(batch, op)
			default:
				break fill
			}
		}
		w.commit(batch)
		clear(batch)
	}
}

// commit runs batch in one transaction; when that fails, it runs each write
// in a transaction of its own so that each gets its own answer.
func (w *writer) commit(batch []*writeOp) {
	w.writes.Add(int64(len(batch)))
	err := w.runTxWaiting(batch)
	if err == nil || len(batch) == 1 {
		for _, op := range batch {
			w.answer(op, err)
		}
		return
	}
	for _, op := range batch {
		w.answer(op, w.runTxWaiting([]*writeOp{op}))
	}
}

// runTxWaiting is runTx, tried again while the disk is full for as long as
// WaitForSpace and the contexts of ops allow.
func (w *writer) runTxWaiting(ops []*writeOp) error {
	for pause := firstSpacePause; ; pause = min(2*pause, maxSpacePause) {
		err := w.runTx(ops)
		if err == nil {
			if w.full {
				w.full = false
				w.tell(nil)
			}
			return nil
		}
		if !errors.Is(err, ErrDiskFull) || !w.mayWait(ops) {
			return err
		}
		if !w.full {
			w.full = true
			w.tell(err)
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-w.space.ctx.Done():
			t.Stop()
			return err
		}
	}
}

// mayWait reports whether a write of ops that found the disk full may wait
// for space.
func (w *writer) mayWait(ops []*writeOp) bool {
	if w.space == nil || w.space.ctx.Err() != nil {
		return false
	}
	for _, op := range ops {
		if op.ctx.Err() != nil {
			return false
		}
	}
	return true
}

func (w *writer) tell(err error) {
	if w.space.notify != nil {
		w.space.notify(err)
	}
}

func (w *writer) runTx(ops []*writeOp) error {
	ctx := context.Background()
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		return classify(w.path, err)
	}
	t := &wtx{w: w, tx: tx, stmts: map[string]*sql.Stmt{}}
	for _, op := range ops {
		if err := op.apply(t); err != nil {
			tx.Rollback()
			return classify(w.path, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return classify(w.path, err)
	}
	w.commits.Add(1)
	return nil
}

// wtx is a batch's transaction as the writes see it.
type wtx struct {
	w     *writer
	tx    *sql.Tx
	stmts map[string]*sql.Stmt
}

// stmt returns the transaction's prepared statement for query, nil when
// query is not one of hotWrites.
func (t *wtx) stmt(query string) *sql.Stmt {
	if s, ok := t.stmts[query]; ok {
		return s
	}
	p, ok := t.w.prepared[query]
	if !ok {
		return nil
	}
	s := t.tx.Stmt(p)
	t.stmts[query] = s
	return s
}

func (t *wtx) exec(query string, args ...any) (sql.Result, error) {
	if s := t.stmt(query); s != nil {
		return s.Exec(args...)
	}
	return t.tx.Exec(query, args...)
}

func (t *wtx) queryRow(query string, args ...any) *sql.Row {
	if s := t.stmt(query); s != nil {
		return s.QueryRow(args...)
	}
	return t.tx.QueryRow(query, args...)
}

// Flush waits until every write queued so far (QueueEvent,
// QueueFinishTrial, LogSchedulerInput) has committed, and returns the
// failure of one that failed.
func (db *DB) Flush(ctx context.Context) error {
	if err := db.write(ctx, func(*wtx) error { return nil }); err != nil {
		return err
	}
	if p := db.w.queuedErr.Load(); p != nil {
		return *p
	}
	return nil
}

// write runs apply through the writer, or fails for a read-only database.
func (db *DB) write(ctx context.Context, apply func(tx *wtx) error) error {
	if db.w == nil {
		return ErrReadOnly
	}
	return db.w.do(ctx, apply)
}
