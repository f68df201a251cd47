package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// stallWriter takes SQLite's write lock on db's file through a connection
// of its own, and has the writer start a transaction behind it, so that it
// waits in BEGIN (within the busy timeout) while the test queues writes.
// release gives the lock back and waits for that first write.
func stallWriter(t *testing.T, db *DB) (release func()) {
	t.Helper()
	c, err := sql.Open("sqlite3", "file:"+db.Path())
	if err != nil {
		t.Fatal(err)
	}
	c.SetMaxOpenConns(1)
	if _, err := c.Exec("BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	before := db.WriteStats().Writes
	first := make(chan error, 1)
	go func() {
		first <- db.write(context.Background(), func(tx *wtx) error { return nil })
	}()
	waitFor(func() bool { return db.WriteStats().Writes == before+1 })
	return func() {
		if _, err := c.Exec("ROLLBACK"); err != nil {
			t.Error(err)
		}
		c.Close()
		if err := <-first; err != nil {
			t.Error(err)
		}
	}
}

// waitFor yields until cond holds.
func waitFor(cond func() bool) {
	for !cond() {
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
}

// TestConcurrentWritesShareOneCommit queues many reports while the writer
// is stuck in its first transaction: they all commit together in the next.
func TestConcurrentWritesShareOneCommit(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	const n = 200
	f := newFixture(t, db, "min", n)
	release := stallWriter(t, db)
	before := db.WriteStats()

	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 1; i <= n; i++ {
		wg.Go(func() {
			loss := float64(i)
			errs <- db.AddReport(ctx, f.trials[i-1].ID(), Report{Iteration: 1, Time: time.Now(), Metrics: map[string]float64{"loss": loss}}, &loss)
		})
	}
	waitFor(func() bool { return len(db.w.ops) == n })
	release()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got := db.WriteStats()
	if w, c := got.Writes-before.Writes, got.Commits-before.Commits; w != n || c != 2 {
		t.Errorf("%d writes in %d commits, want %d in 2 (the stalled one and the rest)", w, c, n)
	}
	ts, err := db.Trials(ctx, "e")
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range ts {
		if tr.Iterations != 1 || *tr.BestMetric != float64(tr.Number) {
			t.Errorf("trial %d: iterations %d, best %v", tr.Number, tr.Iterations, *tr.BestMetric)
		}
	}
}

// TestFailingWriteLeavesItsBatchAlone puts a write that must fail (a
// duplicate trial number) in one batch with good ones: only it fails.
func TestFailingWriteLeavesItsBatchAlone(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	f := newFixture(t, db, "min", 1)
	release := stallWriter(t, db)

	var wg sync.WaitGroup
	good := make([]error, 20)
	for i := range good {
		wg.Go(func() {
			good[i] = db.AddEvent(ctx, f.exp.ID, 0, "note", fmt.Sprint(i), nil)
		})
	}
	var dupErr error
	wg.Go(func() { _, dupErr = db.CreateTrial(ctx, f.exp.ID, 1, nil) })
	waitFor(func() bool { return len(db.w.ops) == len(good)+1 })
	release()
	wg.Wait()
	if dupErr == nil || !strings.Contains(dupErr.Error(), "create trial 1") {
		t.Errorf("duplicate trial: got %v", dupErr)
	}
	for i, err := range good {
		if err != nil {
			t.Errorf("good write %d failed with its batch: %v", i, err)
		}
	}
	evs, err := db.Events(ctx, "e", 0)
	if err != nil {
		t.Fatal(err)
	}
	notes := 0
	for _, ev := range evs {
		if ev.Kind == "note" {
			notes++
		}
	}
	if notes != len(good) {
		t.Errorf("%d notes recorded, want %d", notes, len(good))
	}
}

// TestCloseCommitsQueuedWrites closes the database while writes wait in
// the queue: Close returns after they are committed, and later writes fail.
func TestCloseCommitsQueuedWrites(t *testing.T) {
	ctx := context.Background()
	path := t.TempDir() + "/gotune.db"
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, db, "min", 1)
	release := stallWriter(t, db)
	const n = 50
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = db.AddEvent(ctx, f.exp.ID, 0, "note", "", nil) })
	}
	waitFor(func() bool { return len(db.w.ops) == n })
	closed := make(chan error)
	go func() { closed <- db.Close() }()
	release()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("queued write %d: %v", i, err)
		}
	}
	if err := db.AddEvent(ctx, f.exp.ID, 0, "note", "", nil); !errors.Is(err, ErrClosed) {
		t.Errorf("write after Close: got %v, want ErrClosed", err)
	}
	ro, err := OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	var notes int
	if err := ro.r.QueryRow(`SELECT count(*) FROM events WHERE kind = 'note'`).Scan(&notes); err != nil || notes != n {
		t.Errorf("%d notes after Close (err %v), want %d", notes, err, n)
	}
}

func TestCanceledWriteWritesNothing(t *testing.T) {
	db := mustOpen(t)
	f := newFixture(t, db, "min", 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	loss := 1.0
	if err := db.AddReport(ctx, f.trials[0].ID(), Report{Iteration: 1, Metrics: map[string]float64{"loss": 1}}, &loss); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
	if reps, _ := db.Reports(context.Background(), "e", 1); len(reps) != 0 {
		t.Errorf("a cancelled report was written: %v", reps)
	}
}

// TestConcurrentTrialsUnderRace has many trials report at once, as a sweep
// does, while readers list them.
func TestConcurrentTrialsUnderRace(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	const trials, reports = 16, 40
	f := newFixture(t, db, "max", trials)
	var wg sync.WaitGroup
	for i := 1; i <= trials; i++ {
		wg.Go(func() {
			for it := 1; it <= reports; it++ {
				f.report(t, i, it, float64(it*i))
			}
		})
	}
	stop := make(chan struct{})
	readers := sync.WaitGroup{}
	readers.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := db.QueryTrials(ctx, "e", TrialQuery{Sort: "loss", Limit: 3}); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()
	close(stop)
	readers.Wait()
	best, err := db.BestTrial(ctx, "e")
	if err != nil {
		t.Fatal(err)
	}
	if best.Number != trials || *best.BestMetric != trials*reports {
		t.Errorf("best: trial %d with %v, want %d with %d", best.Number, *best.BestMetric, trials, trials*reports)
	}
}

// TestDiskFullThenSpaceAgain caps the database's size (SQLite's
// max_page_count) until a report does not fit: the error says the disk is
// full, what was committed is intact, and once the cap is lifted the same
// handle writes on.
func TestDiskFullThenSpaceAgain(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	f := newFixture(t, db, "min", 1)
	var pages int
	if err := db.w.db.QueryRow(`PRAGMA page_count`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if _, err := db.w.db.Exec(fmt.Sprintf(`PRAGMA max_page_count = %d`, pages+8)); err != nil {
		t.Fatal(err)
	}
	big := map[string]float64{}
	for k := range 50 {
		big[fmt.Sprintf("a_rather_long_metric_name_%02d", k)] = float64(k)
	}
	it := 0
	var err error
	for err == nil {
		it++
		loss := float64(it)
		err = db.AddReport(ctx, f.trials[0].ID(), Report{Iteration: it, Metrics: big}, &loss)
		if it > 10000 {
			t.Fatal("the database never filled")
		}
	}
	if !errors.Is(err, ErrDiskFull) || !strings.Contains(err.Error(), "free some space") {
		t.Fatalf("got %v, want a disk-full error that says what to do", err)
	}
	if reps, _ := db.Reports(ctx, "e", 1); len(reps) != it-1 {
		t.Fatalf("%d reports committed, want %d", len(reps), it-1)
	}
	if _, err := db.w.db.Exec(`PRAGMA max_page_count = 1000000`); err != nil {
		t.Fatal(err)
	}
	for ; it < 200; it++ {
		loss := float64(it)
		if err := db.AddReport(ctx, f.trials[0].ID(), Report{Iteration: it, Metrics: big}, &loss); err != nil {
			t.Fatalf("report %d after space came back: %v", it, err)
		}
	}
	tr, err := db.Trial(ctx, "e", 1)
	if err != nil || tr.Iterations != 199 || *tr.BestMetric != 1 {
		t.Errorf("trial after refilling: %+v %v", tr, err)
	}
}

// TestWaitForSpace fills the database to a cap (SQLite's max_page_count,
// which makes SQLite itself answer SQLITE_FULL) with WaitForSpace on: the
// write that does not fit waits instead of failing, the notice comes once
// with an error that names the file, and when the cap is lifted the write
// commits, the notice says so, and nothing is lost. A write whose context
// ends while it waits, and every write once WaitForSpace's context ends,
// fail with ErrDiskFull.
func TestWaitForSpace(t *testing.T) {
	ctx := context.Background()
	waitCtx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	notices := make(chan error, 10)
	db := mustOpen(t, WaitForSpace(waitCtx, func(err error) { notices <- err }))
	f := newFixture(t, db, "min", 1)
	var pages int
	if err := db.w.db.QueryRow(`PRAGMA page_count`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	setCap := func(n int) {
		t.Helper()
		// The writer's one connection is free while a write waits.
		if _, err := db.w.db.Exec(fmt.Sprintf(`PRAGMA max_page_count = %d`, n)); err != nil {
			t.Fatal(err)
		}
	}
	setCap(pages + 8)
	big := map[string]float64{}
	for k := range 50 {
		big[fmt.Sprintf("a_rather_long_metric_name_%02d", k)] = float64(k)
	}
	report := func(ctx context.Context, it int) error {
		loss := float64(it)
		return db.AddReport(ctx, f.trials[0].ID(), Report{Iteration: it, Metrics: big}, &loss)
	}

	// Fill until a write waits: the notice comes while it is in flight.
	done := make(chan error, 1)
	it := 0
	for waiting := false; !waiting; {
		it++
		if it > 10000 {
			t.Fatal("the database never filled")
		}
		go func(it int) { done <- report(ctx, it) }(it)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("report %d: %v", it, err)
			}
		case err := <-notices:
			if !errors.Is(err, ErrDiskFull) || !strings.Contains(err.Error(), db.Path()) {
				t.Fatalf("notice: got %v, want a disk-full error naming %s", err, db.Path())
			}
			waiting = true
		}
	}
	select {
	case err := <-done:
		t.Fatalf("report %d returned %v while the disk was full; want it to wait", it, err)
	case <-time.After(300 * time.Millisecond):
	}
	setCap(1000000)
	if err := <-done; err != nil {
		t.Fatalf("report %d after space came back: %v", it, err)
	}
	if err := <-notices; err != nil {
		t.Fatalf("notice after space came back: got %v, want nil", err)
	}
	if reps, _ := db.Reports(ctx, "e", 1); len(reps) != it {
		t.Fatalf("%d reports committed, want %d", len(reps), it)
	}

	// A write whose own context ends while it waits fails, and commits nothing.
	setCap(pages + 8)
	for err := error(nil); err == nil; {
		it++
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err = report(short, it)
		cancel()
		if err != nil && !errors.Is(err, ErrDiskFull) {
			t.Fatalf("report %d with a deadline: got %v, want ErrDiskFull", it, err)
		}
	}
	if err := <-notices; !errors.Is(err, ErrDiskFull) {
		t.Fatalf("second notice: got %v, want ErrDiskFull", err)
	}
	// Once WaitForSpace's context ends, a waiting write gives up.
	go func() { done <- report(ctx, it) }()
	time.Sleep(100 * time.Millisecond)
	stopWaiting()
	if err := <-done; !errors.Is(err, ErrDiskFull) {
		t.Fatalf("report after WaitForSpace's context ended: got %v, want ErrDiskFull", err)
	}
	if reps, _ := db.Reports(ctx, "e", 1); len(reps) != it-1 {
		t.Fatalf("%d reports committed, want %d", len(reps), it-1)
	}
}
