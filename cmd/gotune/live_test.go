package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/workers"
)

func ptr(v float64) *float64 { return &v }

// liveFixture is a frame of a sweep halfway through.
func liveFixture() liveSnapshot {
	trial := func(n int, status string, iters int, best *float64, params map[string]any) *storage.Trial {
		return &storage.Trial{Number: n, Status: status, Iterations: iters, BestMetric: best, Params: params}
	}
	return liveSnapshot{
		Experiment: "digits-mlp", Metric: "val_acc", Mode: "max", Elapsed: 83*time.Second + 400*time.Millisecond,
		Usage: &workers.Usage{Capacity: workers.Resources{CPUs: 8, GPUs: 2, Memory: 16 * workers.GiB},
			InUse: workers.Resources{CPUs: 4, GPUs: 1.5, Memory: 6 * workers.GiB}, Waiting: 1},
		Counts:     map[string]int{storage.TrialRunning: 2, storage.TrialTerminated: 5, storage.TrialStopped: 2, storage.TrialError: 1},
		NumSamples: 20,
		Trials:     10,
		ETA:        12*time.Minute + 30*time.Second,
		HasETA:     true,
		Top: []*storage.Trial{
			trial(7, storage.TrialTerminated, 20, ptr(0.98607), map[string]any{"lr": 0.0366, "hidden": int64(64), "act": "relu"}),
			trial(3, storage.TrialRunning, 12, ptr(0.97215), map[string]any{"lr": 0.0059, "hidden": int64(128), "act": "tanh"}),
			trial(9, storage.TrialStopped, 3, ptr(0.8), map[string]any{"lr": 0.09, "hidden": int64(32), "act": "relu"}),
			trial(10, storage.TrialRunning, 0, nil, map[string]any{"lr": 0.001, "hidden": int64(32), "act": "relu"}),
		},
	}
}

// TestNarrowLiveTableKeepsVaryingParameters renders the quickstart's
// table on a terminal 80 wide: the constant epochs goes, and the
// parameters that differ between trials (lr, sorted last) stay in view;
// on a wide terminal epochs stays.
func TestNarrowLiveTableKeepsVaryingParameters(t *testing.T) {
	s := liveFixture()
	for i, tr := range s.Top {
		tr.Params = map[string]any{"epochs": int64(20), "hidden": int64(32 << i), "layers": int64(1 + i%3), "lr": 0.0123 * float64(i+1)}
	}
	header := func(width int) string {
		for _, l := range renderLive(s, width) {
			if strings.HasPrefix(l, "| trial") {
				return l
			}
		}
		t.Fatalf("no table header at width %d", width)
		return ""
	}
	if h := header(80); strings.Contains(h, "epochs") || !strings.Contains(h, "| lr") {
		t.Errorf("80 columns: %q, want lr without epochs", h)
	}
	if h := header(0); !strings.Contains(h, "epochs") || !strings.Contains(h, "| lr") {
		t.Errorf("no limit: %q, want every parameter", h)
	}
}

// TestRenderLive compares the status table of a fixed frame with
// testdata/golden/live.txt, and checks that a narrow terminal cuts lines
// rather than wrapping them.
func TestRenderLive(t *testing.T) {
	got := strings.Join(renderLive(liveFixture(), 0), "\n") + "\n"
	path := filepath.Join("testdata", "golden", "live.txt")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("live table differs from %s:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
	if strings.Contains(got, "\x1b") {
		t.Error("a frame holds escape codes")
	}
	for _, l := range renderLive(liveFixture(), 40) {
		if n := len([]rune(l)); n > 40 {
			t.Errorf("a line of %d characters on a terminal 40 wide: %q", n, l)
		}
	}
	empty := renderLive(liveSnapshot{Experiment: "new", Metric: "loss", Mode: "min", NumSamples: 4}, 80)
	if strings.Join(empty, "\n") != "== new · running for 0:00:00 ==\nTrials: 0 of 4\n[..............................] 0/4 finished" {
		t.Errorf("a frame before the first trial:\n%s", strings.Join(empty, "\n"))
	}
}

// syncBuffer is a bytes.Buffer safe for the live view's goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLiveViewRedraws draws frames into a buffer: each new frame first
// moves the cursor up over the previous one and clears it, and lines about
// trials are printed above the table, once.
func TestLiveViewRedraws(t *testing.T) {
	var out syncBuffer
	snap := liveFixture()
	v := newLiveView(&out, func() int { return 0 }, func(context.Context) liveSnapshot { return snap })
	v.draw(t.Context())
	v.OnTrialEnd(4, storage.TrialError, errors.New("worker 1 exited\nwith a traceback"))
	v.OnEvent(5, trainer.Event{Kind: trainer.EventRestart, Workers: 2, Checkpoint: "/c/3", Iteration: 3, Recorded: 4, Cause: "killed"})
	v.OnReport(5, trainer.Result{Iteration: 4})
	v.draw(t.Context())
	// Frames are compared below their first line, which holds the elapsed time.
	height := len(renderLive(snap, 0))
	frame := strings.Join(renderLive(snap, 0)[1:], "\n") + "\n"
	got := out.String()
	first, rest, ok := strings.Cut(got, fmt.Sprintf("\x1b[%dA\r\x1b[J", height))
	if !ok {
		t.Fatalf("the second frame does not begin by moving up %d lines and clearing:\n%q", height, got)
	}
	if !strings.HasSuffix(first, frame) || strings.Count(first, "\n") != height {
		t.Errorf("first frame:\n%q", first)
	}
	lines := strings.SplitN(rest, "\n", 4)
	if !strings.HasSuffix(lines[0], "trial 4 ERROR: worker 1 exited") ||
		!strings.HasSuffix(lines[1], "trial 5 restart with 2 workers from the checkpoint of iteration 3, 4 reports recorded: killed") ||
		!strings.HasPrefix(lines[2], "== digits-mlp · running for ") || lines[3] != frame {
		t.Errorf("second frame:\n%s", rest)
	}
	// Started and closed, the view leaves a last frame on screen.
	v.Start(time.Hour)
	v.Close()
	if got := out.String(); !strings.HasSuffix(got, frame) || strings.Count(got, "\x1b[J") < 3 {
		t.Errorf("no last frame after Close:\n%q", got)
	}
}

// TestRunPlainOutput checks that `gotune run` writing to a file or pipe
// prints plain lines, without escape codes, and writes each trial's CSV and
// TensorBoard file beside its checkpoints.
func TestRunPlainOutput(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gotune.db")
	code, stdout, stderr := runCLI("run", "--db", db, liveSweep(t, "plain", 2, 3))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if strings.Contains(stdout, "\x1b") {
		t.Errorf("plain output holds escape codes:\n%q", stdout)
	}
	if !strings.Contains(stdout, "trial 1   iter 3") || !strings.Contains(stdout, "best trial:") {
		t.Errorf("plain output lacks its report lines or summary:\n%s", stdout)
	}
	for n := 1; n <= 2; n++ {
		dir := filepath.Join(filepath.Dir(db), "checkpoints", "plain", fmt.Sprintf("trial_%d", n))
		csv, err := os.ReadFile(filepath.Join(dir, "reports.csv"))
		if err != nil {
			t.Fatal(err)
		}
		if lines := strings.Split(strings.TrimSpace(string(csv)), "\n"); len(lines) != 4 || !strings.HasPrefix(lines[0], "iteration,time,") {
			t.Errorf("trial %d CSV:\n%s", n, csv)
		}
		events, _ := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
		if len(events) != 1 {
			t.Errorf("trial %d: event files %v, want one", n, events)
		}
	}
}

// TestRunWithDashboard runs a sweep in a gotune process with --dashboard
// and reads the dashboard's API and metrics while it runs.
func TestRunWithDashboard(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gotune.db")
	cmd := gotune(t, "run", "--db", db, "--dashboard", "127.0.0.1:0", liveSweep(t, "served", 4, 30))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		t.Fatalf("no output: %s", stderr.String())
	}
	first := lines.Text()
	url, ok := strings.CutPrefix(first, "dashboard at ")
	url, _, _ = strings.Cut(url, " ")
	if !ok || !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("first line does not say where the dashboard is: %q", first)
	}
	rest := make(chan string)
	go func() {
		var b strings.Builder
		for lines.Scan() {
			b.WriteString(lines.Text() + "\n")
		}
		rest <- b.String()
	}()
	// Read until a report shows up; the sweep is far from done by then.
	var reports []struct {
		Iterations int `json:"iterations"`
	}
	for len(reports) == 0 || reports[0].Iterations == 0 {
		resp, err := http.Get(url + "api/experiments/served/trials")
		if err != nil {
			t.Fatalf("the dashboard does not answer while the sweep runs: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(body, &reports); err != nil {
				t.Fatalf("%v: %s", err, body)
			}
		}
	}
	resp, err := http.Get(url + "metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `gotune_resources_capacity{resource="cpus"}`) ||
		!strings.Contains(string(metrics), `gotune_trials{experiment="served",status="RUNNING"}`) {
		t.Errorf("/metrics of a running sweep:\n%s", metrics)
	}
	// A page of another site whose name resolves here is refused.
	req, _ := http.NewRequest("GET", url+"api/experiments", nil)
	req.Host = "attacker.example"
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("a request for another host: %v, %v; want 403", resp, err)
	} else {
		resp.Body.Close()
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("gotune run: %v\n%s", err, stderr.String())
	}
	if out := <-rest; !strings.Contains(out, "best trial:") {
		t.Errorf("output after the dashboard line:\n%s", out)
	}
	if _, err := http.Get(url); err == nil {
		t.Error("the dashboard still answers after the sweep ended")
	}
}

// TestLiveViewSaysTheDiskIsFull: on a terminal, that the sweep pauses for a
// full disk, and that it goes on, are printed above the table, once each.
func TestLiveViewSaysTheDiskIsFull(t *testing.T) {
	var out syncBuffer
	snap := liveFixture()
	v := newLiveView(&out, func() int { return 0 }, func(context.Context) liveSnapshot { return snap })
	v.draw(t.Context())
	v.OnDiskFull(fmt.Errorf("%w writing /data/gotune.db", storage.ErrDiskFull))
	v.draw(t.Context())
	v.OnDiskFull(nil)
	v.draw(t.Context())
	got := out.String()
	for _, want := range []string{"the disk is full: the sweep is paused", "disk full writing /data/gotune.db", "there is space again: the sweep goes on"} {
		if strings.Count(got, want) != 1 {
			t.Errorf("%q printed %d times, want once:\n%s", want, strings.Count(got, want), got)
		}
	}
}

func TestEstimateETA(t *testing.T) {
	m := time.Minute
	for _, tc := range []struct {
		name  string
		times trialTimes
		want  time.Duration
		known bool
	}{
		{"nothing finished yet", trialTimes{running: []time.Duration{m}, waiting: 3}, 0, false},
		// Mean 4m: the running ones have 3m and 0 left, four wait for 4m
		// each, two at once: the second slot runs from 0 to 8m, the first
		// from 3m to 11m.
		{"some running, some waiting", trialTimes{finished: 2, finishedTotal: 8 * m, running: []time.Duration{m, 5 * m}, waiting: 4}, 11 * m, true},
		// Three trials of 4s left, two at a time: 8s, not 6s.
		{"more waiting than slots", trialTimes{finished: 9, finishedTotal: 36 * time.Second, running: []time.Duration{4 * time.Second, 4 * time.Second}, waiting: 3}, 8 * time.Second, true},
		{"only waiting: one at a time", trialTimes{finished: 1, finishedTotal: m, waiting: 3}, 3 * m, true},
		{"done", trialTimes{finished: 2, finishedTotal: 2 * m}, 0, true},
	} {
		got, known := estimateETA(tc.times)
		if got != tc.want || known != tc.known {
			t.Errorf("%s: got %v, %v; want %v, %v", tc.name, got, known, tc.want, tc.known)
		}
	}
}

// The times come from the database: finished trials' durations, running
// ones' ages, and the samples not started yet.
func TestReadTrialTimes(t *testing.T) {
	ctx := context.Background()
	clock := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	path := filepath.Join(t.TempDir(), "gotune.db")
	db, err := storage.Open(path, storage.WithClock(func() time.Time { return clock }))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exp, _ := db.CreateExperiment(ctx, "eta", "loss", "min", map[string]any{})
	t1, _ := db.CreateTrial(ctx, exp.ID, 1, map[string]any{})
	clock = clock.Add(90 * time.Second)
	db.FinishTrial(ctx, t1.ID(), storage.TrialTerminated, "")
	db.CreateTrial(ctx, exp.ID, 2, map[string]any{})
	r, err := readLive(ctx, db, "eta", 5, clock.Add(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("%d %v %v %d", r.times.finished, r.times.finishedTotal, r.times.running, r.times.waiting)
	if got != "1 1m30s [30s] 3" {
		t.Errorf("times: got %s, want 1 1m30s [30s] 3", got)
	}
}

// TestReadLive reads a frame from a database: the counts by status and the
// best trials first, for a "max" objective.
func TestReadLive(t *testing.T) {
	ctx := context.Background()
	db, err := storage.Open(filepath.Join(t.TempDir(), "gotune.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exp, err := db.CreateExperiment(ctx, "live", "acc", "max", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, acc := range []float64{0.5, 0.9, 0.7} {
		tr, err := db.CreateTrial(ctx, exp.ID, i+1, map[string]any{"x": i})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.AddReport(ctx, tr.ID(), storage.Report{Iteration: 1, Metrics: map[string]float64{"acc": acc}}, &acc); err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			if err := db.FinishTrial(ctx, tr.ID(), storage.TrialTerminated, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	r, err := readLive(ctx, db, "live", 3, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var order []int
	for _, tr := range r.top {
		order = append(order, tr.Number)
	}
	if r.trials != 3 || r.counts[storage.TrialTerminated] != 2 || r.counts[storage.TrialRunning] != 1 || fmt.Sprint(order) != "[2 3 1]" {
		t.Errorf("frame: %d trials, counts %v, best first %v; want 3, 2 TERMINATED and 1 RUNNING, [2 3 1]", r.trials, r.counts, order)
	}
	if _, err := readLive(ctx, db, "nope", 3, time.Now()); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("missing experiment: %v, want ErrNotFound", err)
	}
}
