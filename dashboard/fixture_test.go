package dashboard

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/gotune/gotune/storage"
)

// base is when the fixture's experiment was created; now is the time the
// server is told it is, with the running trial's last reports in the
// minute before and its samples in the two minutes before.
var (
	base = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now  = base.Add(500 * time.Second)
)

// fixtureConfig is what the tuner records of a sweep, in its shape.
var fixtureConfig = map[string]any{
	"name":   "digits",
	"search": map[string]any{"num_samples": 6, "max_concurrent": 2},
	"space":  map[string]string{"lr": "{ loguniform = [0.001, 0.1] }", "hidden": "choice[32 64]"},
}

// holdRun takes experiment name's lock in the database at path, as a
// live run holds it, and returns what gives it up; the test's end gives
// it up if nothing did before.
func holdRun(t *testing.T, path, name string) (release func()) {
	t.Helper()
	db, err := storage.OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	lock, err := db.LockExperiment(name)
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	release = func() {
		lock.Release()
		db.Close()
	}
	t.Cleanup(release)
	return release
}

// writeFixture records two experiments by the storage API into a new
// database and returns its path: "digits" (val_loss, min) with a finished,
// a stopped, a failed and a running trial (three workers, one of them a
// straggler, with GPU samples), and "other" (acc, max) with one pending
// trial.
func writeFixture(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gotune.db")
	clock := base
	db, err := storage.Open(path, storage.WithClock(func() time.Time { return clock }))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	exp, err := db.CreateExperiment(ctx, "digits", "val_loss", "min", fixtureConfig)
	must(err)
	report := func(tr *storage.Trial, it int, at time.Time, m map[string]float64) {
		t.Helper()
		obj, ok := m["val_loss"]
		var p *float64
		if ok {
			p = &obj
		}
		must(db.AddReport(ctx, tr.ID(), storage.Report{Iteration: it, Time: at, Metrics: m}, p))
	}
	trial := func(n int, lr float64, hidden int) *storage.Trial {
		t.Helper()
		clock = base.Add(time.Duration(n) * 100 * time.Second)
		tr, err := db.CreateTrial(ctx, exp.ID, n, map[string]any{"lr": lr, "hidden": hidden})
		must(err)
		return tr
	}
	t1 := trial(1, 0.01, 32)
	for i := 1; i <= 5; i++ {
		report(t1, i, base.Add(time.Duration(100+i)*time.Second), map[string]float64{"val_loss": 1 / float64(i), "acc": 0.5 + float64(i)/20, "epoch": float64(i)})
	}
	_, err = db.RecordCheckpoint(ctx, t1.ID(), 5, "/ckpt/digits/trial_1/checkpoint_000005", map[string]float64{"val_loss": 0.2})
	must(err)
	must(db.FinishTrial(ctx, t1.ID(), storage.TrialTerminated, ""))
	t2 := trial(2, 0.05, 64)
	for i := 1; i <= 3; i++ {
		report(t2, i, base.Add(time.Duration(200+i)*time.Second), map[string]float64{"val_loss": 2 / float64(i), "acc": 0.4, "epoch": float64(i)})
	}
	must(db.AddEvent(ctx, 0, t2.ID(), storage.EventDecision, "below the rung's cutoff", map[string]any{"action": "STOP", "rung": 3}))
	must(db.FinishTrial(ctx, t2.ID(), storage.TrialStopped, ""))
	t3 := trial(3, 0.002, 32)
	report(t3, 1, base.Add(301*time.Second), map[string]float64{"val_loss": 3, "epoch": 1})
	report(t3, 2, base.Add(302*time.Second), map[string]float64{"val_loss": math.NaN(), "epoch": 2})
	must(db.FinishTrial(ctx, t3.ID(), storage.TrialError, "worker 1 exited with status 1"))
	t4 := trial(4, 0.02, 64)
	report(t4, 1, now.Add(-30*time.Second), map[string]float64{"val_loss": 0.9, "acc": 0.6, "epoch": 1})
	report(t4, 2, now.Add(-20*time.Second), map[string]float64{"val_loss": 0.7, "acc": 0.7, "epoch": 2})
	clock = now.Add(-10 * time.Second)
	var ids []int64
	for rank, rate := range []float64{10, 9.5, 4} {
		id, err := db.SetWorker(ctx, t4.ID(), storage.WorkerRecord{Rank: rank, Node: "node0", PID: 100 + rank,
			Status: "RUNNING", StepRate: rate, LogPath: "/logs/worker.log"})
		must(err)
		ids = append(ids, id)
	}
	must(db.AddResourceSamples(ctx, exp.ID, []storage.ResourceSample{
		{Time: now.Add(-100 * time.Second), Node: "node0", WorkerID: ids[0], GPU: 0, Util: 50, MemoryUsed: 1 << 30, MemoryTotal: 16 << 30},
		{Time: now.Add(-5 * time.Second), Node: "node0", WorkerID: ids[0], GPU: 0, Util: 87, MemoryUsed: 2 << 30, MemoryTotal: 16 << 30},
		{Time: now.Add(-5 * time.Second), Node: "node0", WorkerID: ids[1], GPU: 1, Util: 80, MemoryUsed: 3 << 30, MemoryTotal: 16 << 30},
		{Time: now.Add(-5 * time.Second), Node: "node0", GPU: storage.NoGPU, Util: 35.5, MemoryUsed: 8 << 30, MemoryTotal: 32 << 30},
		{Time: now.Add(-time.Hour), Node: "node1", GPU: 0, Util: 99}, // too old to count
	}))
	clock = now
	other, err := db.CreateExperiment(ctx, "other", "acc", "max", map[string]any{"name": "other"})
	must(err)
	o1, err := db.CreateTrial(ctx, other.ID, 1, map[string]any{"x": "a \"quoted\"\nvalue"})
	must(err)
	must(db.SetTrialStatus(ctx, o1.ID(), storage.TrialPending))
	return path
}

// fixtureServer serves the fixture read-only with the clock at now.
func fixtureServer(t testing.TB, opts ...Option) (*httptest.Server, string) {
	t.Helper()
	path := writeFixture(t)
	db, err := storage.OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	srv := httptest.NewServer(New(db, append([]Option{WithClock(func() time.Time { return now })}, opts...)...))
	t.Cleanup(srv.Close)
	return srv, path
}

// get fetches url and returns its status and body.
func get(t testing.TB, url string) (int, string, http.Header) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body), resp.Header
}

// getJSON fetches url, expects 200, and decodes the body into v.
func getJSON(t testing.TB, url string, v any) {
	t.Helper()
	code, body, h := get(t, url)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	if ct := h.Get("Content-Type"); ct != "application/json" {
		t.Errorf("GET %s: Content-Type %q", url, ct)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v\n%s", url, err, body)
	}
}

func nan() float64         { return math.NaN() }
func inf(sign int) float64 { return math.Inf(sign) }
