package mlflow_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotune/gotune/mlflow"
	"github.com/gotune/gotune/mlflow/mlflowtest"
	"github.com/gotune/gotune/storage"
)

// results is a results database that a test writes as a sweep would.
type results struct {
	t    *testing.T
	path string
	db   *storage.DB
	exp  *storage.Experiment
	at   time.Time // the next report's time
}

func newResults(t *testing.T) *results {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gotune.db")
	db, err := storage.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	exp, err := db.CreateExperiment(context.Background(), "sweep", "loss", "min", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	return &results{t: t, path: path, db: db, exp: exp, at: time.Now().Truncate(time.Millisecond)}
}

func (r *results) trial(n int, params map[string]any) *storage.Trial {
	tr, err := r.db.CreateTrial(context.Background(), r.exp.ID, n, params)
	if err != nil {
		r.t.Fatal(err)
	}
	return tr
}

func (r *results) report(tr *storage.Trial, iteration int, loss float64) {
	r.at = r.at.Add(time.Millisecond)
	if err := r.db.AddReport(context.Background(), tr.ID(), storage.Report{Iteration: iteration, Time: r.at, Metrics: map[string]float64{"loss": loss}}, &loss); err != nil {
		r.t.Fatal(err)
	}
}

func (r *results) must(err error) {
	r.t.Helper()
	if err != nil {
		r.t.Fatal(err)
	}
}

// sync sends the experiment with a tracker of its own, as a new process
// would, and returns what it delivered.
func syncAll(t *testing.T, path string, s mlflow.Settings) mlflow.Stats {
	t.Helper()
	tr, err := mlflow.New(path, "sweep", s, mlflow.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := tr.Sync(context.Background())
	if err != nil || b.Err != nil || b.Reports != 0 || b.Runs != 0 {
		t.Fatalf("Sync: %v, backlog %+v", err, b)
	}
	st := tr.Stats()
	if _, err := tr.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st
}

// steps lists a metric's history as steps and values.
func steps(h []mlflowtest.Point) (out []float64) {
	for _, p := range h {
		v, _ := p.Value.(float64)
		if s, ok := p.Value.(string); ok && s == "NaN" {
			v = -1
		}
		out = append(out, float64(p.Step), v)
	}
	return out
}

func equal(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestSyncSendsEachThingOnce sends an experiment as it grows, with a
// restart on the way, and checks that the server holds every run, param,
// tag, report and status once, whatever was sent before.
func TestSyncSendsEachThingOnce(t *testing.T) {
	srv := mlflowtest.Start(t, "gotune", "secret")
	s := mlflow.Settings{TrackingURI: srv.URI, Experiment: "mlflow-sweep", Username: "gotune", Password: "secret"}
	r := newResults(t)
	ctx := context.Background()
	t1 := r.trial(1, map[string]any{"lr": 0.01, "act": "relu"})
	t2 := r.trial(2, map[string]any{"lr": 0.1, "act": "tanh"})
	for i := 1; i <= 3; i++ {
		r.report(t1, i, 1/float64(i))
	}
	r.report(t2, 1, math.NaN())

	if st := syncAll(t, r.path, s); st.Runs != 3 || st.Reports != 4 {
		t.Errorf("first sync: %+v, want 3 runs and 4 reports", st)
	}
	// Trial 1 restarts from iteration 1 and reports 2 and 3 again, then 4.
	r.must(r.db.RestartTrial(ctx, t1.ID(), 1, "worker died"))
	for i := 2; i <= 4; i++ {
		r.report(t1, i, 2/float64(i))
	}
	r.report(t2, 2, 0.5)
	r.must(r.db.FinishTrial(ctx, t1.ID(), storage.TrialTerminated, ""))
	r.must(r.db.FinishTrial(ctx, t2.ID(), storage.TrialStopped, ""))
	r.must(r.db.FinishExperiment(ctx, r.exp.ID, storage.ExperimentFinished))
	if st := syncAll(t, r.path, s); st.Runs != 0 || st.Reports != 4 {
		t.Errorf("second sync: %+v, want no run and the 4 new reports", st)
	}
	if st := syncAll(t, r.path, s); st != (mlflow.Stats{}) {
		t.Errorf("third sync sent %+v, want nothing", st)
	}

	runs := srv.Runs(t, "mlflow-sweep")
	if len(runs) != 3 {
		t.Fatalf("server has %d runs, want 3: %v", len(runs), runs)
	}
	parent, one, two := runs["sweep"], runs["trial-1"], runs["trial-2"]
	if parent == nil || one == nil || two == nil {
		t.Fatalf("runs: %v", runs)
	}
	for _, c := range []struct {
		run          *mlflowtest.Run
		status       string
		params, tags map[string]string
		loss         []float64
	}{
		{parent, "FINISHED", map[string]string{}, map[string]string{"gotune.experiment": "sweep", "gotune.metric": "loss", "gotune.mode": "min"}, nil},
		{one, "FINISHED", map[string]string{"lr": "0.01", "act": "relu"},
			map[string]string{"mlflow.parentRunId": parent.ID, "gotune.trial": "1", "gotune.experiment": "sweep", "gotune.status": "TERMINATED", "gotune.restarts": "1"},
			[]float64{1, 1, 2, 0.5, 3, 1.0 / 3, 2, 1, 3, 2.0 / 3, 4, 0.5}},
		{two, "KILLED", map[string]string{"lr": "0.1", "act": "tanh"},
			map[string]string{"mlflow.parentRunId": parent.ID, "gotune.trial": "2", "gotune.status": "STOPPED", "gotune.restarts": "0"},
			[]float64{1, -1, 2, 0.5}},
	} {
		if c.run.Status != c.status {
			t.Errorf("%v: status %s, want %s", c.run, c.run.Status, c.status)
		}
		for k, v := range c.params {
			if c.run.Params[k] != v {
				t.Errorf("%v: param %s = %q, want %q", c.run, k, c.run.Params[k], v)
			}
		}
		if len(c.run.Params) != len(c.params) {
			t.Errorf("%v: params %v, want %v", c.run, c.run.Params, c.params)
		}
		for k, v := range c.tags {
			if c.run.Tags[k] != v {
				t.Errorf("%v: tag %s = %q, want %q", c.run, k, c.run.Tags[k], v)
			}
		}
		if got := steps(c.run.Metrics["loss"]); !equal(got, c.loss) {
			t.Errorf("%v: loss (step, value) %v, want %v", c.run, got, c.loss)
		}
	}
	// The runs' times are the database's.
	for _, c := range []struct {
		run   *mlflowtest.Run
		trial int64
	}{{parent, 0}, {one, t1.ID()}, {two, t2.ID()}} {
		start, end, err := r.db.Times(ctx, r.exp.ID, c.trial)
		r.must(err)
		if c.run.Start != start.UnixMilli() || c.run.End != end.UnixMilli() {
			t.Errorf("%v: start %d, end %d; want %d, %d", c.run, c.run.Start, c.run.End, start.UnixMilli(), end.UnixMilli())
		}
	}
	// The timestamps are the reports' times.
	reports, err := r.db.Reports(ctx, "sweep", 2)
	r.must(err)
	if got, want := two.Metrics["loss"][1].Timestamp, reports[1].Time.UnixMilli(); got != want {
		t.Errorf("trial 2's second report has timestamp %d, want %d", got, want)
	}
}

// TestSyncBatchesReports checks that thousands of reports travel in a few
// requests, within MLflow's limits.
func TestSyncBatchesReports(t *testing.T) {
	srv := mlflowtest.Start(t, "", "")
	r := newResults(t)
	t1 := r.trial(1, map[string]any{"lr": 0.01})
	for i := 1; i <= 2500; i++ {
		r.report(t1, i, float64(i))
	}
	st := syncAll(t, r.path, mlflow.Settings{TrackingURI: srv.URI})
	// 2,500 metrics need 3 log-batch requests; params and tags share them.
	if st.Reports != 2500 || st.Requests != 3 {
		t.Errorf("sync: %+v, want 2500 reports in 3 requests", st)
	}
	if h := srv.Runs(t, "sweep")["trial-1"].Metrics["loss"]; len(h) != 2500 {
		t.Errorf("the server has %d values of loss, want 2500", len(h))
	}
}

// lockedBuffer is a bytes.Buffer that a tracker writes while the test
// reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *lockedBuffer) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Reset()
}

// TestTrackerWaitsForServer starts a tracker while its server is down,
// then the server, and checks that what was reported meanwhile arrives,
// with one warning; a tracker closed while the server is down says what
// it did not deliver.
func TestTrackerWaitsForServer(t *testing.T) {
	addr := mlflowtest.FreeAddr(t)
	s := mlflow.Settings{TrackingURI: "http://" + addr}
	r := newResults(t)
	ctx := context.Background()
	t1 := r.trial(1, map[string]any{"lr": 0.01})

	var log lockedBuffer
	o := mlflow.Options{Interval: time.Millisecond, Poll: 10 * time.Millisecond, MinBackoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond, Log: &log}
	down, err := mlflow.New(r.path, "sweep", s, o)
	r.must(err)
	down.Start()
	for i := 1; i <= 5; i++ {
		r.report(t1, i, float64(i))
		down.Wake()
		time.Sleep(20 * time.Millisecond)
	}
	b, err := down.Close(ctx)
	r.must(err)
	if b.Reports != 5 || b.Runs != 2 || b.Err == nil {
		t.Errorf("closed while the server is down: backlog %+v, want 5 reports of 2 runs and the failure", b)
	}
	if n := strings.Count(log.String(), "warning"); n != 1 {
		t.Errorf("%d warnings while the server was down, want 1:\n%s", n, log.String())
	}

	log.Reset()
	up, err := mlflow.New(r.path, "sweep", s, o)
	r.must(err)
	up.Start()
	time.Sleep(50 * time.Millisecond) // a few failed attempts
	srv := mlflowtest.StartAt(t, addr, "", "")
	for i := 6; i <= 8; i++ {
		r.report(t1, i, float64(i))
		up.Wake()
	}
	r.must(r.db.FinishTrial(ctx, t1.ID(), storage.TrialTerminated, ""))
	r.must(r.db.FinishExperiment(ctx, r.exp.ID, storage.ExperimentFinished))
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(log.String(), "answers again") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	b, err = up.Close(ctx)
	r.must(err)
	if b.Reports != 0 || b.Runs != 0 {
		t.Errorf("closed once the server is up: backlog %+v, want none", b)
	}
	if !strings.Contains(log.String(), "answers again") || strings.Count(log.String(), "warning") != 1 {
		t.Errorf("log, want one warning and the recovery:\n%s", log.String())
	}
	run := srv.Runs(t, "sweep")["trial-1"]
	if run == nil || run.Status != "FINISHED" || len(run.Metrics["loss"]) != 8 {
		t.Errorf("the server has %v, want a FINISHED run with 8 values of loss", run)
	}
}

// TestOneTrackerAtATime checks that a second tracker of the same experiment
// and server is refused while the first is open, and allowed after.
func TestOneTrackerAtATime(t *testing.T) {
	r := newResults(t)
	s := mlflow.Settings{TrackingURI: "http://" + mlflowtest.FreeAddr(t)}
	first, err := mlflow.New(r.path, "sweep", s, mlflow.Options{})
	r.must(err)
	if _, err := mlflow.New(r.path, "sweep", s, mlflow.Options{}); !errors.Is(err, storage.ErrExperimentRunning) {
		t.Errorf("second tracker: %v, want ErrExperimentRunning", err)
	}
	other := s
	other.Experiment = "elsewhere"
	second, err := mlflow.New(r.path, "sweep", other, mlflow.Options{})
	r.must(err)
	second.Close(context.Background())
	first.Close(context.Background())
	third, err := mlflow.New(r.path, "sweep", s, mlflow.Options{})
	r.must(err)
	third.Close(context.Background())
}
