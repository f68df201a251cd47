package dashboard

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/performance"
	"github.com/chromedp/chromedp"

	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/tuner"
)

// chromium finds Debian's chromium, or skips the test without it (fails
// in CI, where .ci/run installs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "/usr/bin/chromium", "chromium-browser"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if os.Getenv("GOTUNE_CI") == "1" {
		t.Fatal("chromium is not installed (apt-get install chromium); CI needs it")
	}
	t.Skip("chromium is not installed (apt-get install chromium)")
	return ""
}

// finishedSweep runs a small real sweep and returns its database's path.
func finishedSweep(t *testing.T) string {
	t.Helper()
	space, err := searchspace.New(
		searchspace.Param{Name: "lr", Domain: searchspace.LogUniform{Low: 1e-3, High: 1e-1}},
		searchspace.Param{Name: "width", Domain: searchspace.Choice{Values: []any{int64(16), int64(32), int64(64)}}},
	)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "gotune.db")
	cfg := tuner.Config{
		Name:      "browser",
		Storage:   path,
		Seed:      5,
		Objective: tuner.Objective{Metric: "val_loss", Mode: "min"},
		Search:    tuner.SearchConfig{NumSamples: 6, MaxConcurrent: 3, Space: space},
		Trainer:   trainer.Config{Scaling: trainer.ScalingConfig{NumWorkers: 1, CPUsPerWorker: 0.01}},
	}
	// A decaying loss whose floor depends on the parameters.
	train := func(ctx context.Context, w *trainer.Worker) error {
		lr, width := w.Float("lr", 0), float64(w.Int("width", 0))
		floor := 0.1 + 10*(lr-0.03)*(lr-0.03) + 1/width
		for step := 1; step <= 15; step++ {
			loss := floor + 2/float64(step)
			if err := w.Report(ctx, map[string]float64{"val_loss": loss, "train_loss": loss * 0.9, "epoch": float64(step)}); err != nil {
				return err
			}
		}
		return nil
	}
	tu, err := tuner.New(cfg, tuner.WithTrainFunc(train))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tu.Fit(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The workers of trial 1 as the trainer records them, one a straggler.
	db, err := storage.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tr, err := db.Trial(t.Context(), "browser", 1)
	if err != nil {
		t.Fatal(err)
	}
	for rank, rate := range []float64{12, 11.5, 5} {
		if _, err := db.SetWorker(t.Context(), tr.ID(), storage.WorkerRecord{Rank: rank, Node: "node0", PID: 4000 + rank, Status: "EXITED", StepRate: rate}); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// TestBrowser opens the dashboard of a finished sweep in headless Chromium,
// checks that the trials table, the learning curves, the parallel
// coordinates and a trial's workers are drawn, and saves a screenshot in
// $GOTUNE_SCREENSHOTS (default: the test's temporary folder).
func TestBrowser(t *testing.T) {
	exe := chromium(t)
	path := finishedSweep(t)
	db, err := storage.OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	srv := httptest.NewServer(New(db))
	defer srv.Close()
	ctx := browser(t, exe)

	err = chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/#/e/browser/t/1"),
		chromedp.WaitVisible(chromedp.CSS(`body[data-ready="true"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#trial-panel table`)),
	)
	if err != nil {
		t.Fatalf("browser: %v", err)
	}
	type drawn struct {
		Title      string `json:"title"`
		Rows       int    `json:"rows"`
		Curves     int    `json:"curves"`
		FirstCurve string `json:"firstCurve"`
		PCLines    int    `json:"pcLines"`
		PanelRows  int    `json:"panelRows"`
		Stragglers int    `json:"stragglers"`
	}
	page, err := chromedp.Run(ctx, chromedp.Evaluate[drawn](`({
		title: document.title,
		rows: document.querySelectorAll('#trials tbody tr').length,
		curves: document.querySelectorAll('#curves path.curve').length,
		firstCurve: (document.querySelector('#curves path.curve') || {getAttribute: () => ''}).getAttribute('d'),
		pcLines: document.querySelectorAll('#parallel path.pc-line').length,
		panelRows: document.querySelectorAll('#trial-panel tbody tr').length,
		stragglers: document.querySelectorAll('#trial-panel .badge').length,
	})`))
	if err != nil {
		t.Fatalf("browser: %v", err)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	title, rows, curves, firstCurve, pcLines, workers, stragglers := page.Title, page.Rows, page.Curves, page.FirstCurve, page.PCLines, page.PanelRows, page.Stragglers
	curvePoints := strings.Count(firstCurve, "L") + strings.Count(firstCurve, "M")
	if title != "browser · gotune" {
		t.Errorf("page title %q", title)
	}
	if rows != 6 {
		t.Errorf("the trials table has %d rows, want 6", rows)
	}
	if curves != 6 || curvePoints != 15 {
		t.Errorf("%d curves drawn, the first with %d points (d=%q); want 6 of 15", curves, curvePoints, firstCurve)
	}
	if pcLines != 6 {
		t.Errorf("%d lines in the parallel coordinates, want 6", pcLines)
	}
	// Trial 1's panel: 3 workers and 2 events (start, complete), no checkpoint.
	if workers < 3+2 || stragglers != 1 {
		t.Errorf("trial panel: %d table rows, %d stragglers; want 3 workers and 2 events, 1 straggler", workers, stragglers)
	}
	dir := os.Getenv("GOTUNE_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "dashboard.png")
	if err := os.WriteFile(file, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", file, len(shot))
}

// browser starts headless Chromium (exe) for the test and returns its
// context, bounded so that a broken page fails the test instead of
// hanging it.
func browser(t *testing.T, exe string) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	t.Cleanup(cancel)
	ctx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelBrowser := chromedp.NewContext(ctx)
	t.Cleanup(cancelBrowser)
	return ctx
}

// largeExperiment records an experiment of n finished trials straight
// into a database, trial i with val_loss i (so the best-first order is the
// trial order), lr = i and act alternating relu, tanh; it returns the
// database.
func largeExperiment(t *testing.T, n int) *storage.DB {
	return largeExperimentWithCurve(t, n, 1)
}

// largeExperimentWithCurve is largeExperiment whose trial 1 reports long
// times, its val_loss falling as 1/iteration.
func largeExperimentWithCurve(t *testing.T, n, long int) *storage.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gotune.db")
	db, err := storage.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	exp, err := db.CreateExperiment(t.Context(), "large", "val_loss", "min", map[string]any{
		"search": map[string]any{"num_samples": n}, "space": map[string]string{"lr": "uniform(0, 1)", "act": "choice[relu tanh]"}})
	if err != nil {
		t.Fatal(err)
	}
	// Concurrent writers share commits, so many writers build it fast; each
	// records its trials a batch at a time and queues their ends.
	const writers, batch = 64, 100
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			var mine []storage.NewTrial
			for i := w + 1; i <= n; i += writers {
				mine = append(mine, storage.NewTrial{Number: i, Params: map[string]any{"lr": float64(i), "act": []string{"tanh", "relu"}[i%2]}})
			}
			for len(mine) > 0 {
				part := mine[:min(batch, len(mine))]
				mine = mine[len(part):]
				trs, err := db.CreateTrials(t.Context(), exp.ID, part)
				for k, tr := range trs {
					i := part[k].Number
					reports := 1
					if i == 1 {
						reports = long
					}
					for it := 1; it <= reports && err == nil; it++ {
						loss := float64(i) / float64(it)
						err = db.AddReport(t.Context(), tr.ID(), storage.Report{Iteration: it, Time: time.Now(), Metrics: map[string]float64{"val_loss": loss}}, &loss)
					}
					if err == nil {
						err = db.QueueFinishTrial(tr.ID(), storage.TrialTerminated, "")
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := storage.OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ro.Close() })
	return ro
}

// TestBrowserPagesALargeExperiment: the dashboard of an experiment of
// thousands of trials shows one page of the trial list, pages through it
// and filters it on the server, and draws the charts from the best trials
// only.
func TestBrowserPagesALargeExperiment(t *testing.T) {
	exe := chromium(t)
	const n = 3000
	srv := httptest.NewServer(New(largeExperiment(t, n)))
	defer srv.Close()
	ctx := browser(t, exe)
	type shown struct {
		Rows    int    `json:"rows"`
		First   string `json:"first"`
		Count   string `json:"count"`
		PCLines int    `json:"pcLines"`
	}
	look := func(what string, ready string) shown {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](ready, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		s, err := chromedp.Run(ctx, chromedp.Evaluate[shown](`({
				rows: document.querySelectorAll('#trials tbody tr').length,
				first: (document.querySelector('#trials tbody tr') || {dataset: {}}).dataset.trial || '',
				count: document.querySelector('#trial-count').textContent,
				pcLines: document.querySelectorAll('#parallel path.pc-line').length,
			})`))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return s
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/#/e/large"), chromedp.WaitVisible(chromedp.CSS(`body[data-ready="true"]`))); err != nil {
		t.Fatalf("browser: %v", err)
	}
	first := look("first page", `document.querySelectorAll('#trials tbody tr').length > 0`)
	if first.Rows != 100 || first.First != "1" || first.Count != "1–100 of 3000 trials" || first.PCLines != 500 {
		t.Fatalf("first page: %+v; want 100 rows from trial 1 of 3000, 500 lines in the parallel coordinates", first)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#page-next`))); err != nil {
		t.Fatal(err)
	}
	second := look("next page", `document.querySelector('#trials tbody tr').dataset.trial === '101'`)
	if second.Rows != 100 || second.Count != "101–200 of 3000 trials" {
		t.Errorf("second page: %+v", second)
	}
	err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS(`#filter`), `act=tanh trial>2000`))
	if err == nil {
		_, err = chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('#filter').dispatchEvent(new Event('input'))`))
	}
	if err != nil {
		t.Fatal(err)
	}
	filtered := look("filter", `document.querySelector('#trial-count').textContent.includes('matching')`)
	if filtered.Rows != 100 || filtered.First != "2002" || filtered.Count != "1–100 of 500 matching of 3000 trials" {
		t.Errorf("filtered: %+v; want the first 100 of the 500 even trials above 2000", filtered)
	}
}

// TestBrowserDrawsAHugeExperiment: with 100,000 trials, one of them with
// 2,000 reports, the experiment page shows the first page of the trial list
// with the right total, the parallel coordinates of the best 500 trials,
// and the learning curves, the long one cut to 500 points. It prints how
// long the build, each request the page makes and the page itself take.
func TestBrowserDrawsAHugeExperiment(t *testing.T) {
	const n, long = 100000, 2000
	start := time.Now()
	db := largeExperimentWithCurve(t, n, long)
	t.Logf("built %d trials and a %d-report curve in %v", n, long, time.Since(start).Round(time.Millisecond))
	// Every request the page makes is counted by path, to tell what an
	// idle tab asks for.
	var mu sync.Mutex
	requests := map[string]int{}
	var served []string // each request with when it began and ended
	handler := New(db)
	var pageStart time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		began := time.Now()
		handler.ServeHTTP(w, r)
		mu.Lock()
		requests[r.URL.Path]++
		if !pageStart.IsZero() {
			served = append(served, fmt.Sprintf("%s %v–%v", r.URL.RequestURI(), began.Sub(pageStart).Round(time.Millisecond), time.Since(pageStart).Round(time.Millisecond)))
		}
		mu.Unlock()
	}))
	defer srv.Close()
	for _, q := range []string{
		"version",
		"experiments",
		"experiments/large",
		"experiments/large/trials",
		"experiments/large/trials?order=best&limit=500",
		"experiments/large/trials?order=trial&offset=0&limit=100",
		"experiments/large/trials?order=-best&offset=50000&limit=100",
		"experiments/large/trials?order=trial&offset=0&limit=100&param=" + url.QueryEscape("act=tanh") + "&where=" + url.QueryEscape("trial>90000"),
		"experiments/large/events?limit=200",
		"experiments/large/resources",
		"experiments/large/curves?metric=val_loss&trials=1,2,3,4,5,6,7,8",
		"experiments/large/trials/1",
	} {
		start := time.Now()
		resp, err := http.Get(srv.URL + "/api/" + q)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %v %.200s", q, resp.StatusCode, err, body)
		}
		total := ""
		if c := resp.Header.Get("X-Total-Count"); c != "" {
			total = ", X-Total-Count " + c
		}
		t.Logf("GET /api/%s: %d bytes%s in %v", q, len(body), total, time.Since(start).Round(time.Millisecond))
	}

	exe := chromium(t)
	ctx := browser(t, exe)
	type shown struct {
		Rows        int      `json:"rows"`
		First       string   `json:"first"`
		Count       string   `json:"count"`
		PCLines     int      `json:"pcLines"`
		Curves      int      `json:"curves"`
		CurvePoints int      `json:"curvePoints"`
		Legend      []string `json:"legend"`
	}
	// Chromium starts before the clock does: the figure is the page's.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("browser: %v", err)
	}
	// What the page costs the server (this process) and the page's
	// renderer in CPU time: on a busy machine, a truer figure than the
	// wall-clock one.
	if _, err := chromedp.Call(ctx, performance.Enable, performance.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	taskTime := func() float64 {
		t.Helper()
		res, err := chromedp.Call(ctx, performance.GetMetrics, cdp.Empty{})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range res.Metrics {
			if m.Name == "TaskDuration" {
				return m.Value
			}
		}
		t.Fatal("the renderer reports no TaskDuration")
		return 0
	}
	loadPage0, loadServer0 := taskTime(), processCPU(t)
	start = time.Now()
	mu.Lock()
	pageStart = start
	mu.Unlock()
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/#/e/large"), chromedp.WaitVisible(chromedp.CSS(`body[data-ready="true"]`))); err != nil {
		t.Fatalf("browser: %v", err)
	}
	ready := `document.querySelectorAll('#trials tbody tr').length > 0 && document.querySelectorAll('#curves path.curve').length > 0`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](ready, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("experiment page: %v", err)
	}
	t.Logf("experiment page of %d trials drawn in %v", n, time.Since(start).Round(time.Millisecond))
	t.Logf("drawing it took the renderer %.0f ms and the server %v of CPU time", 1000*(taskTime()-loadPage0), (processCPU(t) - loadServer0).Round(time.Millisecond))
	mu.Lock()
	t.Logf("its requests:\n%s", strings.Join(served, "\n"))
	pageStart = time.Time{}
	mu.Unlock()

	// An idle open tab: what it asks the server for and what it costs over
	// a while.
	const idle = 10 * time.Second
	time.Sleep(3 * time.Second) // let the page's first polls settle
	mu.Lock()
	clear(requests)
	mu.Unlock()
	page0, server0 := taskTime(), processCPU(t)
	time.Sleep(idle)
	page1, server1 := taskTime(), processCPU(t)
	mu.Lock()
	asked := maps.Clone(requests)
	mu.Unlock()
	t.Logf("idle tab over %v: renderer busy %.2f%% of a core, server %.2f%% of a core, requests %v",
		idle, 100*(page1-page0)/idle.Seconds(), 100*(server1-server0).Seconds()/idle.Seconds(), asked)
	for p := range asked {
		if p != "/api/version" {
			t.Errorf("the idle tab asked for %s (%v); with nothing changed it should ask only /api/version", p, asked)
		}
	}
	if asked["/api/version"] == 0 {
		t.Errorf("the idle tab did not poll: %v", asked)
	}

	// A tab while the experiment changes (an event a second): it reads
	// the page again after each change, but never the Pareto front of its
	// single objective.
	w, err := storage.Open(db.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	e, err := w.Experiment(t.Context(), "large")
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	clear(requests)
	mu.Unlock()
	page0, server0 = taskTime(), processCPU(t)
	for range int(idle / time.Second) {
		if err := w.AddEvent(t.Context(), e.ID, 0, "note", "a change", nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
	}
	page1, server1 = taskTime(), processCPU(t)
	mu.Lock()
	asked = maps.Clone(requests)
	mu.Unlock()
	t.Logf("tab over %v of a change a second: renderer busy %.1f%% of a core, server %.1f%% of a core, requests %v",
		idle, 100*(page1-page0)/idle.Seconds(), 100*(server1-server0).Seconds()/idle.Seconds(), asked)
	if asked["/api/experiments/large/trials"] == 0 || asked["/api/experiments/large/front"] != 0 {
		t.Errorf("while it changed the tab asked %v; want the trials again and no front", asked)
	}
	s, err := chromedp.Run(ctx, chromedp.Evaluate[shown](`({
		rows: document.querySelectorAll('#trials tbody tr').length,
		first: document.querySelector('#trials tbody tr').dataset.trial,
		count: document.querySelector('#trial-count').textContent,
		pcLines: document.querySelectorAll('#parallel path.pc-line').length,
		curves: document.querySelectorAll('#curves path.curve').length,
		curvePoints: (document.querySelector('#curves path.curve[data-trial="1"]').getAttribute('d').match(/[ML]/g) || []).length,
		legend: [...document.querySelectorAll('#curves-legend span')].map((e) => e.textContent),
	})`))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("1–100 of %d trials", n)
	if s.Rows != 100 || s.First != "1" || s.Count != want || s.PCLines != 500 {
		t.Errorf("trials: %+v; want 100 rows from trial 1, %q, 500 lines in the parallel coordinates", s, want)
	}
	if s.Curves != 8 || s.CurvePoints != DefaultCurvePoints || len(s.Legend) == 0 || s.Legend[0] != "trial 1 (500 of 2000 points)" {
		t.Errorf("curves: %+v; want 8 curves, trial 1's of %d of its %d points", s, DefaultCurvePoints, long)
	}
}

// TestBrowserParetoFront opens a two-objective experiment and checks that
// the front plot marks its three front trials and its infeasible one,
// that the importance chart has a bar per parameter, and that a
// single-objective experiment shows no front; it saves a screenshot as
// TestBrowser does.
func TestBrowserParetoFront(t *testing.T) {
	exe := chromium(t)
	db, err := storage.OpenReadOnly(twoObjectiveExperiment(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	srv := httptest.NewServer(New(db))
	defer srv.Close()
	ctx := browser(t, exe)
	type drawn struct {
		FrontHidden bool     `json:"frontHidden"`
		Points      int      `json:"points"`
		OnFront     []string `json:"onFront"`
		Infeasible  []string `json:"infeasible"`
		Line        bool     `json:"line"`
		Bars        []string `json:"bars"`
		Axes        []string `json:"axes"`
		Best        string   `json:"best"`
	}
	const read = `({
		best: ([...document.querySelectorAll('#summary .muted')].map((e) => e.textContent).find((t) => t.startsWith('trial ')) || ''),
		frontHidden: document.getElementById('front-panel').hidden,
		points: document.querySelectorAll('#front circle.front-point').length,
		onFront: [...document.querySelectorAll('#front circle.on-front')].map((e) => e.dataset.trial).sort(),
		infeasible: [...document.querySelectorAll('#front path.infeasible')].map((e) => e.dataset.trial),
		line: !!document.querySelector('#front path.front-line'),
		bars: [...document.querySelectorAll('#importance rect.imp-bar')].map((e) => e.dataset.param),
		axes: [document.getElementById('front-x').value, document.getElementById('front-y').value],
	})`
	err = chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/#/e/multi"),
		chromedp.WaitVisible(chromedp.CSS(`body[data-ready="true"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#front circle.on-front`)),
		chromedp.WaitVisible(chromedp.CSS(`#importance rect.imp-bar`)),
	)
	if err != nil {
		t.Fatalf("browser: %v", err)
	}
	page, err := chromedp.Run(ctx, chromedp.Evaluate[drawn](read))
	if err != nil {
		t.Fatalf("browser: %v", err)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	// Trials 1 to 7 reported; 5 is infeasible, 8 has not reported. The
	// summary's best trial is the best feasible one, not 5.
	want := drawn{Points: 6, OnFront: []string{"1", "2", "3"}, Infeasible: []string{"5"}, Line: true,
		Bars: []string{"lr", "width"}, Axes: []string{"loss", "latency"}, Best: "trial 1"}
	if !reflect.DeepEqual(page, want) {
		t.Errorf("multi: drew %+v, want %+v", page, want)
	}
	dir := os.Getenv("GOTUNE_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "dashboard-front.png")
	if err := os.WriteFile(file, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", file, len(shot))
	// "young" has one objective: no front, and too few trials to rank.
	err = chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/#/e/young"),
		chromedp.WaitVisible(chromedp.CSS(`#importance text.nodata`)),
	)
	if err != nil {
		t.Fatalf("browser: %v", err)
	}
	young, err := chromedp.Run(ctx, chromedp.Evaluate[drawn](read))
	if err != nil {
		t.Fatalf("browser: %v", err)
	}
	if !young.FrontHidden || len(young.Bars) != 0 {
		t.Errorf("young: drew %+v, want no front and no bars", young)
	}
}

// TestBrowserTrialPanelEdges opens a trial of an experiment to maximise
// whose workers printed nothing but reports and which has an event with a
// very long message: the header shows no error, the trial panel keeps the
// workers' columns inside the page, the best-first sort of a metric to
// maximise shows a downward arrow, and the curves' iteration axis has
// whole-number ticks only.
func TestBrowserTrialPanelEdges(t *testing.T) {
	exe := chromium(t)
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "gotune.db")
	db, err := storage.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	exp, err := db.CreateExperiment(ctx, "edges", "acc", "max", map[string]any{})
	must(err)
	for n := 1; n <= 2; n++ {
		tr, err := db.CreateTrial(ctx, exp.ID, n, map[string]any{"lr": 0.1 * float64(n)})
		must(err)
		for it := 1; it <= 5; it++ {
			acc := float64(it*n) / 10
			must(db.AddReport(ctx, tr.ID(), storage.Report{Iteration: it, Time: time.Now(), Metrics: map[string]float64{"acc": acc}}, &acc))
		}
		if n == 1 {
			for rank := range 2 {
				_, err := db.SetWorker(ctx, tr.ID(), storage.WorkerRecord{Rank: rank, Node: "node0", PID: 100 + rank, Status: "RUNNING",
					StepRate: 10, LogPath: filepath.Join(dir, fmt.Sprintf("worker_%d.log", rank))})
				must(err)
			}
			must(db.AddEvent(ctx, 0, tr.ID(), storage.EventDecision, strings.Repeat("x", 3000), nil))
		}
	}
	must(db.Close())
	ro, err := storage.OpenReadOnly(path)
	must(err)
	defer ro.Close()
	srv := httptest.NewServer(New(ro))
	defer srv.Close()
	bctx := browser(t, exe)
	err = chromedp.Do(bctx,
		chromedp.Navigate(srv.URL+"/#/e/edges/t/1"),
		chromedp.WaitVisible(chromedp.CSS(`body[data-ready="true"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#trial-panel table`)),
	)
	if err != nil {
		t.Fatalf("browser: %v", err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](`document.querySelectorAll('#curves path.curve').length === 2 && document.querySelector('#log-info') !== null`,
		chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("page: %v", err)
	}
	type seen struct {
		Live       string   `json:"live"`
		LiveError  bool     `json:"liveError"`
		LogInfo    string   `json:"logInfo"`
		Workers    float64  `json:"workersRight"`
		Panel      float64  `json:"panelRight"`
		Window     float64  `json:"window"`
		BestClass  string   `json:"bestClass"`
		XTicks     []string `json:"xTicks"`
		FirstTrial string   `json:"firstTrial"`
	}
	s, err := chromedp.Run(bctx, chromedp.Evaluate[seen](`({
		live: document.querySelector('#live').textContent,
		liveError: document.querySelector('#live').classList.contains('error'),
		logInfo: document.querySelector('#log-info').textContent,
		workersRight: document.querySelector('#trial-panel table').getBoundingClientRect().right,
		panelRight: document.querySelector('#trial-panel').getBoundingClientRect().right,
		window: document.documentElement.clientWidth,
		bestClass: document.querySelector('#trials th[data-key="best"]').className,
		xTicks: [...document.querySelectorAll('#curves g.axis text[text-anchor="middle"]')].map((e) => e.textContent).slice(0, -2), // less the axes' labels
		firstTrial: document.querySelector('#trials tbody tr').dataset.trial,
	})`))
	if err != nil {
		t.Fatal(err)
	}
	if s.LiveError || strings.Contains(s.Live, "cannot read") {
		t.Errorf("header: %q (error %v), want no error for a log not written yet", s.Live, s.LiveError)
	}
	if !strings.Contains(s.LogInfo, "nothing but its reports") {
		t.Errorf("log panel says %q, want that rank 0 printed nothing but reports", s.LogInfo)
	}
	if s.Workers > s.Panel+1 || s.Panel > s.Window+1 {
		t.Errorf("the workers' table ends at %.0f px, the trial panel at %.0f, the page is %.0f wide", s.Workers, s.Panel, s.Window)
	}
	if s.FirstTrial != "2" || !strings.Contains(s.BestClass, "sorted") || strings.Contains(s.BestClass, "asc") {
		t.Errorf("best first (trial %s first) is a descending sort of acc, but the header's class is %q", s.FirstTrial, s.BestClass)
	}
	if len(s.XTicks) < 2 {
		t.Errorf("x ticks %q", s.XTicks)
	}
	for _, tick := range s.XTicks {
		if _, err := strconv.Atoi(tick); err != nil {
			t.Errorf("x ticks %q: iterations are whole numbers", s.XTicks)
			break
		}
	}
}

// processCPU is the CPU time this process (the test's server) has used.
func processCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
