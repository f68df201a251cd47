package dashboard

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/tuner"
)

// liveDebugSweep starts a sweep of one trial of two Python workers that
// log, report, keep a core busy and then wait until release is called; it returns the
// database's path.
func liveDebugSweep(t *testing.T) (path string, release func()) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	dir := t.TempDir()
	helper, _ := filepath.Abs("../python")
	script := filepath.Join(dir, "train.py")
	os.WriteFile(script, []byte(`import os, time
import gotune
rank = gotune.world_rank()
for step in range(1, 31):
    print(f"rank {rank}: working on step {step}", flush=True)
    gotune.report(step=step, loss=1.0 / step)
    busy_until = time.time() + (0.05 if rank == 0 else 0.1)
    while time.time() < busy_until:
        pass
def wait_for_release():
    while not os.path.exists(os.environ["RELEASE"]):
        time.sleep(0.05)
wait_for_release()
`), 0o644)
	marker := filepath.Join(dir, "release")
	space, err := searchspace.New(searchspace.Param{Name: "x", Domain: searchspace.Constant{Value: int64(1)}})
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, "gotune.db")
	cfg := tuner.Config{
		Name: "live", Storage: path,
		Objective: tuner.Objective{Metric: "loss", Mode: "min"},
		Search:    tuner.SearchConfig{NumSamples: 1, Space: space},
		Trainer: trainer.Config{
			Command: []string{"python3", script},
			Env:     map[string]string{"PYTHONPATH": helper, "RELEASE": marker},
			Scaling: trainer.ScalingConfig{NumWorkers: 2, CPUsPerWorker: 0.01},
		},
	}
	tu, err := tuner.New(cfg, tuner.WithUsageSampling(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := tu.Fit(context.Background())
		done <- err
	}()
	released := false
	release = func() {
		if !released {
			released = true
			os.WriteFile(marker, nil, 0o644)
			if err := <-done; err != nil {
				t.Errorf("sweep: %v", err)
			}
		}
	}
	t.Cleanup(release)
	return path, release
}

// TestBrowserTrialDebug opens a running trial's page in headless Chromium
// and checks its live debugging panel: each worker's CPU and memory drawn
// over time, the log paged and searched, and the stacks of both workers
// taken with the button. The screenshot of the trial's panels goes to
// $GOTUNE_SCREENSHOTS/trial-page.png (default: the test's temporary
// folder).
func TestBrowserTrialDebug(t *testing.T) {
	exe := chromium(t)
	path, release := liveDebugSweep(t)
	// Wait until the sweep has recorded its workers.
	for deadline := time.Now().Add(30 * time.Second); ; {
		db, err := storage.OpenReadOnly(path)
		if err == nil {
			ws, _ := db.Workers(context.Background(), "live", 1)
			db.Close()
			if len(ws) == 2 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the sweep recorded no workers")
		}
		time.Sleep(100 * time.Millisecond)
	}
	db, err := storage.OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	srv := httptest.NewServer(New(db))
	defer srv.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	ctx, cancelAlloc := chromedp.NewExecAllocator(ctx, chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1000))
	defer cancelAlloc()
	ctx, cancelBrowser := chromedp.NewContext(ctx)
	defer cancelBrowser()

	// The page polls every 2 seconds: the workers' usage series grow and
	// the log follows until every step has been logged.
	err = chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/#/e/live/t/1"),
		chromedp.WaitVisible(chromedp.CSS(`#trial-debug`)),
		chromedp.Poll[chromedp.Void](`document.querySelectorAll('#usage .spark[data-kind="cpu"] path.curve').length === 2 &&
			document.querySelectorAll('#usage .spark[data-kind="rss"] path.curve').length === 2 &&
			document.querySelector('#usage .spark[data-kind="cpu"] path.curve').getAttribute('d').split('L').length > 4 &&
			document.querySelector('#log-view').textContent.includes('rank 0: working on step 30')`,
			chromedp.WithPollingTimeout(40*time.Second)),
		// Take stacks until both workers wait for the release.
		chromedp.Poll[chromedp.Void](`(() => {
			if (document.querySelector('#stack-view').textContent.split('in wait_for_release').length === 3) return true;
			if (!document.querySelector('#stack-info').textContent.startsWith('taking')) document.querySelector('#stack-btn').click();
			return false;
		})()`,
			chromedp.WithPollingTimeout(30*time.Second)),
	)
	if err != nil {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#trial-debug').innerText`))
		t.Fatalf("browser: %v\npanel:\n%s", err, text)
	}
	type view struct {
		Log        string `json:"log"`
		LogInfo    string `json:"logInfo"`
		Stacks     string `json:"stacks"`
		StackInfo  string `json:"stackInfo"`
		UsageTitle string `json:"usageTitle"`
	}
	v, err := chromedp.Run(ctx, chromedp.Evaluate[view](`({
		log: document.querySelector('#log-view').textContent,
		logInfo: document.querySelector('#log-info').textContent,
		stacks: document.querySelector('#stack-view').textContent,
		stackInfo: document.querySelector('#stack-info').textContent,
		usageTitle: document.querySelector('#usage .spark[data-kind="rss"] path.curve title').textContent,
	})`))
	if err != nil {
		t.Fatal(err)
	}
	for rank := range 2 {
		if !strings.Contains(v.Stacks, fmt.Sprintf("=== rank %d (", rank)) || !strings.Contains(v.Log, "rank 0: working on step 1\n") {
			t.Errorf("rank %d missing:\nstacks:\n%s\nlog:\n%s", rank, v.Stacks, v.Log)
		}
	}
	if !strings.Contains(v.Stacks, ", by dump") || !strings.HasPrefix(v.StackInfo, "taken ") {
		t.Errorf("stacks not dumped by gotune.py: %s\n%s", v.StackInfo, v.Stacks)
	}
	// gotune's own line about the start, then the worker's 30.
	if !strings.HasPrefix(v.LogInfo, "31 lines shown, from byte 0 to ") || !strings.HasPrefix(v.UsageTitle, "rank 0: ") {
		t.Errorf("log info %q, usage title %q", v.LogInfo, v.UsageTitle)
	}
	// A search lists the matching lines with their offsets.
	err = chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS(`#log-search`), "STEP 2"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#log-search').dispatchEvent(new Event('change'))`),
		chromedp.Poll[chromedp.Void](`document.querySelectorAll('#log-view .match').length > 0`, chromedp.WithPollingTimeout(10*time.Second)))
	matches, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#log-view .match').length`))
	if err != nil || matches != 11 { // step 2 and steps 20 to 29
		t.Errorf("search: %d matches (%v), want 11", matches, err)
	}
	err = chromedp.Do(ctx,
		chromedp.Evaluate[chromedp.Void](`(() => { const s = document.querySelector('#log-search'); s.value = ''; s.dispatchEvent(new Event('change')); })()`),
		chromedp.Poll[chromedp.Void](`document.querySelector('#log-info').textContent.includes('lines shown')`, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Evaluate[chromedp.Void](`for (const e of document.querySelectorAll('#summary, .grid2, main > section.panel:not(#trial-panel):not(#trial-debug)')) e.style.display = 'none'; window.scrollTo(0, 0)`))
	if err != nil {
		t.Fatalf("clearing the search: %v", err)
	}
	// The screenshot shows the trial's panels only.
	shot, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(`main`), chromedp.NodeVisible))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	release()
	dir := os.Getenv("GOTUNE_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "trial-page.png")
	if err := os.WriteFile(file, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", file, len(shot))
}
