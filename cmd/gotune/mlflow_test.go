package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotune/gotune/mlflow"
	"github.com/gotune/gotune/mlflow/mlflowtest"
	"github.com/gotune/gotune/storage"
)

// mlflowSweep writes a sweep of 4 command trials, 2 at a time, each making
// reports reports sleep seconds apart, with extra appended to the file.
func mlflowSweep(t *testing.T, reports int, sleep, extra string) (sweep, db string) {
	t.Helper()
	dir := t.TempDir()
	sweep = filepath.Join(dir, "sweep.toml")
	os.WriteFile(sweep, []byte(fmt.Sprintf(`name = "tracked"
seed = 5

[objective]
metric = "loss"

[search]
num_samples = 4
max_concurrent = 2

[search.space]
x = { uniform = [0, 1] }

[trainer]
command = ["sh", "-c", "i=1; while [ $i -le %d ]; do echo \"@gotune {\\\"loss\\\": {x}, \\\"step\\\": $i}\"; sleep %s; i=$((i+1)); done"]

[trainer.scaling]
num_workers = 1
cpus_per_worker = 0.1
%s`, reports, sleep, extra)), 0o644)
	return sweep, filepath.Join(dir, "sweep.db")
}

// checkTracked checks that the server holds the sweep's parent run and its
// 4 finished trials, each with its param and, unless reports is -1,
// reports values of loss.
func checkTracked(t *testing.T, srv *mlflowtest.Server, experiment string, reports int) {
	t.Helper()
	runs := srv.Runs(t, experiment)
	parent := runs["tracked"]
	if parent == nil || parent.Status != "FINISHED" || len(runs) != 5 {
		t.Fatalf("the server has %d runs, parent %v; want the FINISHED parent and 4 trials: %v", len(runs), parent, runs)
	}
	for n := 1; n <= 4; n++ {
		r := runs[fmt.Sprintf("trial-%d", n)]
		switch {
		case r == nil:
			t.Errorf("no run of trial %d", n)
		case r.Status != "FINISHED" || r.Tags["mlflow.parentRunId"] != parent.ID || r.Tags["gotune.trial"] != fmt.Sprint(n) ||
			r.Tags["gotune.status"] != "TERMINATED" || r.Tags["gotune.experiment"] != "tracked" || r.Params["x"] == "":
			t.Errorf("%v: tags %v, params %v", r, r.Tags, r.Params)
		case reports >= 0 && (len(r.Metrics["loss"]) != reports || len(r.Metrics["step"]) != reports):
			t.Errorf("%v: %d values of loss and %d of step, want %d", r, len(r.Metrics["loss"]), len(r.Metrics["step"]), reports)
		case reports >= 0:
			for i, p := range r.Metrics["step"] {
				if p.Step != int64(i+1) || p.Value != float64(i+1) {
					t.Errorf("%v: step value %d is %+v, want step %d", r, i, p, i+1)
				}
			}
		}
	}
}

// TestRunLogsToMLflow runs a sweep whose file names an MLflow server and
// checks what arrived; gotune mlflow sync then sends nothing more.
func TestRunLogsToMLflow(t *testing.T) {
	srv := mlflowtest.Start(t, "", "")
	sweep, db := mlflowSweep(t, 3, "0", fmt.Sprintf("\n[mlflow]\ntracking_uri = %q\nexperiment = \"gotune tests\"\n", srv.URI))
	cmd := gotune(t, "run", "--db", db, sweep)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("gotune run: %v\n%s\n%s", err, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "logging to MLflow at "+srv.URI) || strings.Contains(errOut.String(), "mlflow") {
		t.Errorf("stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	}
	checkTracked(t, srv, "gotune tests", 3)

	code, stdout, stderr := runCLI("mlflow", "sync", "tracked", "--db", db, "--tracking-uri", srv.URI, "--experiment", "gotune tests")
	if code != 0 || !strings.Contains(stdout, "0 runs created, 0 reports sent in 0 requests") {
		t.Errorf("gotune mlflow sync after the sweep: exit %d\n%s%s", code, stdout, stderr)
	}
	checkTracked(t, srv, "gotune tests", 3)
}

// TestRunWhileMLflowIsDown runs a sweep while its MLflow server is down:
// the sweep succeeds, warns once, and says what was not delivered and how
// to send it; that command sends it all once the server is up, and again
// sends nothing.
func TestRunWhileMLflowIsDown(t *testing.T) {
	mlflowtest.Binary(t) // skip early where there is no server
	addr := mlflowtest.FreeAddr(t)
	sweep, db := mlflowSweep(t, 3, "0.2", "")
	cmd := gotune(t, "run", "--db", db, sweep)
	cmd.Env = append(cmd.Env, "MLFLOW_TRACKING_URI=http://"+addr, "MLFLOW_EXPERIMENT_NAME=late")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("gotune run: %v\n%s\n%s", err, out.String(), errOut.String())
	}
	stderr := errOut.String()
	if n := strings.Count(stderr, "warning: mlflow: http://"+addr+": "); n != 1 {
		t.Errorf("%d warnings that the server is down, want 1:\n%s", n, stderr)
	}
	if !strings.Contains(stderr, "12 reports of 5 runs were not delivered") {
		t.Errorf("stderr does not count the 12 undelivered reports of 5 runs:\n%s", stderr)
	}
	m := regexp.MustCompile(`\n  gotune (mlflow sync .*)\n`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("stderr does not say how to send them later:\n%s", stderr)
	}
	args := strings.Fields(m[1])

	srv := mlflowtest.StartAt(t, addr, "", "")
	code, stdout, errs := runCLI(args...)
	if code != 0 || !strings.Contains(stdout, "5 runs created, 12 reports sent") {
		t.Fatalf("gotune %s: exit %d\n%s%s", m[1], code, stdout, errs)
	}
	checkTracked(t, srv, "late", 3)
	code, stdout, errs = runCLI(args...)
	if code != 0 || !strings.Contains(stdout, "0 runs created, 0 reports sent in 0 requests") {
		t.Errorf("gotune %s again: exit %d\n%s%s", m[1], code, stdout, errs)
	}
	checkTracked(t, srv, "late", 3)
}

// TestRunMLflowComesUpLater starts the MLflow server only after the sweep
// started: what was reported meanwhile reaches it during the sweep.
func TestRunMLflowComesUpLater(t *testing.T) {
	mlflowtest.Binary(t)
	old := trackerOptions
	trackerOptions = mlflow.Options{MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}
	t.Cleanup(func() { trackerOptions = old })
	addr := mlflowtest.FreeAddr(t)
	sweep, db := mlflowSweep(t, 6, "0.2", fmt.Sprintf("\n[mlflow]\ntracking_uri = \"http://%s\"\n", addr))

	type result struct {
		code        int
		out, errOut string
	}
	done := make(chan result)
	go func() {
		code, out, errOut := runCLI("run", "--db", db, sweep)
		done <- result{code, out, errOut}
	}()
	time.Sleep(700 * time.Millisecond)
	srv := mlflowtest.StartAt(t, addr, "", "")
	res := <-done
	if res.code != 0 {
		t.Fatalf("gotune run: exit %d\n%s\n%s", res.code, res.out, res.errOut)
	}
	if strings.Count(res.errOut, "warning: mlflow") != 1 || !strings.Contains(res.errOut, "answers again") || strings.Contains(res.errOut, "not delivered") {
		t.Errorf("stderr, want one warning and the recovery during the sweep:\n%s", res.errOut)
	}
	checkTracked(t, srv, "tracked", 6)
}

// TestMLflowSyncBadInput checks that gotune mlflow sync refuses what it
// cannot use before it calls any server, with exit code 2.
func TestMLflowSyncBadInput(t *testing.T) {
	dir := t.TempDir()
	missing, db := filepath.Join(dir, "missing.db"), filepath.Join(dir, "results.db")
	d, err := storage.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	t.Setenv("MLFLOW_TRACKING_URI", "")
	for _, tt := range []struct {
		name string
		args []string
		msg  string
	}{
		{"no server", []string{"mlflow", "sync", "x", "--db", db}, "--tracking-uri or MLFLOW_TRACKING_URI"},
		{"not http", []string{"mlflow", "sync", "x", "--db", db, "--tracking-uri", "file:///tmp/mlruns"}, "http:// or https://"},
		{"no database", []string{"mlflow", "sync", "x", "--db", missing, "--tracking-uri", "http://127.0.0.1:1"}, "no such file"},
		{"no experiment", []string{"mlflow", "sync", "x", "--db", db, "--tracking-uri", "http://127.0.0.1:1"}, `experiment "x": not found`},
		{"two experiments", []string{"mlflow", "sync", "x", "y", "--tracking-uri", "http://127.0.0.1:1"}, "takes one argument"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := runCLI(tt.args...)
			if code != 2 || !strings.Contains(errOut, tt.msg) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, errOut, tt.msg)
			}
		})
	}
}

// TestResumedSweepSendsNothingTwice kills a sweep that logs to MLflow with
// SIGKILL, runs it again, and checks that every report in the database is
// on the server exactly once.
func TestResumedSweepSendsNothingTwice(t *testing.T) {
	srv := mlflowtest.Start(t, "", "")
	sweep, db := mlflowSweep(t, 8, "0.1", "")
	env := "MLFLOW_TRACKING_URI=" + srv.URI
	cmd := gotune(t, "run", "--db", db, sweep)
	cmd.Env = append(cmd.Env, env)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Kill it once the server has some of the second trial's reports.
	deadline := time.Now().Add(time.Minute)
	for {
		if sent := sentReports(t, db); sent >= 12 {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("the sweep ended before it could be killed: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("nothing reached the server")
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-exited

	again := gotune(t, "run", "--db", db, sweep)
	again.Env = append(again.Env, env)
	if out, err := again.CombinedOutput(); err != nil {
		t.Fatalf("the run after the kill: %v\n%s", err, out)
	}
	checkTracked(t, srv, "tracked", -1)
	runs := srv.Runs(t, "tracked")
	ro, err := storage.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	restarts := 0
	for n := 1; n <= 4; n++ {
		reports, err := ro.Reports(context.Background(), "tracked", n)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := ro.Trial(context.Background(), "tracked", n)
		if err != nil {
			t.Fatal(err)
		}
		restarts += tr.Restarts
		h := runs[fmt.Sprintf("trial-%d", n)].Metrics["step"]
		for _, r := range reports {
			copies := 0
			for _, p := range h {
				if p.Step == int64(r.Iteration) && p.Timestamp == r.Time.UnixMilli() {
					copies++
				}
			}
			if copies != 1 {
				t.Errorf("trial %d: report %d is on the server %d times, want once", n, r.Iteration, copies)
			}
		}
	}
	if restarts == 0 {
		t.Error("no trial was restarted: the kill interrupted nothing")
	}
}

// sentReports is, over the runs the results database at path records as
// sent to MLflow, the sum of the iterations of their last delivered
// reports: the reports delivered while no trial restarted.
func sentReports(t *testing.T, path string) int {
	t.Helper()
	ro, err := storage.OpenReadOnly(path)
	if err != nil {
		return 0
	}
	defer ro.Close()
	rows, err := ro.Query(context.Background(), `SELECT coalesce(sum(sent_iteration), 0) FROM mlflow_runs`)
	if err != nil {
		return 0
	}
	defer rows.Close()
	n := 0
	if rows.Next() {
		rows.Scan(&n)
	}
	return n
}
