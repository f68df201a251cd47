package storage

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestMain lets the test binary stand in for a second process that writes
// a database (see child_test.go): with STORAGE_TEST_CHILD set it runs that
// child's role instead of the tests.
func TestMain(m *testing.M) {
	if role := os.Getenv("STORAGE_TEST_CHILD"); role != "" {
		if err := runChild(role, os.Getenv("STORAGE_TEST_DB")); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// child starts this test binary as a child process in role on database db.
func child(tb testing.TB, role, db string) *exec.Cmd {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "STORAGE_TEST_CHILD="+role, "STORAGE_TEST_DB="+db)
	cmd.Stderr = os.Stderr
	return cmd
}

// mustOpen opens a fresh database in a temporary folder.
func mustOpen(tb testing.TB, opts ...Option) *DB {
	tb.Helper()
	db, err := Open(filepath.Join(tb.TempDir(), "gotune.db"), opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// rawExec runs statements on path through a plain connection of its own,
// outside the package's API.
func rawExec(tb testing.TB, path, statements string) {
	tb.Helper()
	c, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Exec(statements); err != nil {
		tb.Fatal(err)
	}
}

func ptr(f float64) *float64 { return &f }

// fixture is an experiment with trials, made through the API.
type fixture struct {
	db     *DB
	exp    *Experiment
	trials []*Trial
}

// newFixture creates experiment "e" (metric "loss", mode) with n trials
// whose params are {"lr": 0.1*i, "act": "relu"|"tanh"}.
func newFixture(tb testing.TB, db *DB, mode string, n int) *fixture {
	tb.Helper()
	ctx := context.Background()
	exp, err := db.CreateExperiment(ctx, "e", "loss", mode, map[string]any{"seed": 1})
	if err != nil {
		tb.Fatal(err)
	}
	f := &fixture{db: db, exp: exp}
	for i := 1; i <= n; i++ {
		act := "relu"
		if i%2 == 0 {
			act = "tanh"
		}
		tr, err := db.CreateTrial(ctx, exp.ID, i, map[string]any{"lr": 0.1 * float64(i), "act": act})
		if err != nil {
			tb.Fatal(err)
		}
		f.trials = append(f.trials, tr)
	}
	return f
}

// report adds the next report of trial i (from 1) with loss and acc.
func (f *fixture) report(tb testing.TB, i, iteration int, loss float64) {
	tb.Helper()
	m := map[string]float64{"loss": loss, "acc": 1 - loss, "epoch": float64(iteration)}
	r := Report{Iteration: iteration, Time: time.Unix(int64(1000+iteration), 0), Metrics: m}
	if err := f.db.AddReport(context.Background(), f.trials[i-1].ID(), r, &loss); err != nil {
		tb.Fatal(err)
	}
}
