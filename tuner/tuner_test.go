package tuner

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gotune/gotune/schedulers"
	"github.com/gotune/gotune/search"
	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
)

func testConfig(t *testing.T, samples int) Config {
	t.Helper()
	space, err := searchspace.New(
		searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: -2, High: 2}},
		searchspace.Param{Name: "steps", Domain: searchspace.Constant{Value: int64(5)}},
	)
	if err != nil {
		t.Fatal(err)
	}
	return Config{
		Name:      "test",
		Storage:   filepath.Join(t.TempDir(), "gotune.db"),
		Seed:      1,
		Objective: Objective{Metric: "loss", Mode: "min"},
		Search:    SearchConfig{NumSamples: samples, MaxConcurrent: 3, Space: space},
		Trainer:   trainer.Config{Scaling: trainer.ScalingConfig{NumWorkers: 2, CPUsPerWorker: 0.01}},
	}
}

// quadratic reports loss = x² / step for its steps.
func quadratic(ctx context.Context, w *trainer.Worker) error {
	x := w.Float("x", 0)
	for s := 1; s <= w.Int("steps", 1); s++ {
		if err := w.Report(ctx, map[string]float64{"loss": x * x / float64(s), "step": float64(s)}); err != nil {
			return err
		}
	}
	return nil
}

func TestFitRecordsEveryReport(t *testing.T) {
	cfg := testConfig(t, 7)
	tu, err := New(cfg, WithTrainFunc(quadratic))
	if err != nil {
		t.Fatal(err)
	}
	res, err := tu.Fit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Trials) != 7 {
		t.Fatalf("got %d trials, want 7", len(res.Trials))
	}
	db, err := storage.OpenReadOnly(cfg.Storage)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var best *storage.Trial
	for _, tr := range res.Trials {
		if tr.Status != storage.TrialTerminated || tr.Iterations != 5 {
			t.Errorf("trial %d: %s with %d iterations", tr.Number, tr.Status, tr.Iterations)
		}
		reps, err := db.Reports(context.Background(), "test", tr.Number)
		if err != nil || len(reps) != 5 {
			t.Errorf("trial %d: %d reports in the DB (%v), want 5", tr.Number, len(reps), err)
		}
		if best == nil || *tr.BestMetric < *best.BestMetric {
			best = tr
		}
	}
	if res.Best == nil || res.Best.Number != best.Number {
		t.Errorf("best trial: got %v, want %d", res.Best, best.Number)
	}
	exp, _ := db.Experiment(context.Background(), "test")
	if exp.Status != storage.ExperimentFinished {
		t.Errorf("experiment status %s, want FINISHED", exp.Status)
	}
}

func TestFitSameSeedSameConfigs(t *testing.T) {
	a, b := fitParams(t, testConfig(t, 5)), fitParams(t, testConfig(t, 5))
	for i := range a {
		if a[i]["x"] != b[i]["x"] {
			t.Errorf("trial %d: x %v vs %v with the same seed", i+1, a[i]["x"], b[i]["x"])
		}
	}
}

// stopAfter is a scheduler that stops every trial at its n-th result.
type stopAfter struct {
	schedulers.FIFO
	n     float64
	ended []int
}

func (s *stopAfter) OnResult(r schedulers.Result) schedulers.Decision {
	if r.Time >= s.n {
		return schedulers.Decision{Action: schedulers.Stop, Reason: "enough"}
	}
	return schedulers.Decision{Action: schedulers.Continue}
}

func (s *stopAfter) OnTrialEnd(trial int) { s.ended = append(s.ended, trial) }

// observing is a searcher that hands out fixed configs and records what it observes.
type observing struct {
	mu       sync.Mutex
	observed map[int]float64
	ends     map[int]search.EndStatus
	results  map[int]int
}

func newObserving() *observing {
	return &observing{observed: map[int]float64{}, ends: map[int]search.EndStatus{}, results: map[int]int{}}
}

func (s *observing) Suggest(trial int) (map[string]any, error) {
	return map[string]any{"x": float64(trial), "steps": int64(5)}, nil
}

func (s *observing) OnResult(trial int, obs search.Observation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.results[trial]++
}

func (s *observing) OnTrialEnd(trial int, end search.TrialEnd) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ends[trial] = end.Status
	if end.Last != nil {
		s.observed[trial] = end.Last.Score
	}
}

func TestFitWithCustomSchedulerAndSearcher(t *testing.T) {
	cfg := testConfig(t, 4)
	sched := &stopAfter{n: 2}
	searcher := newObserving()
	tu, err := New(cfg, WithTrainFunc(quadratic), WithScheduler(sched), WithSearcher(searcher))
	if err != nil {
		t.Fatal(err)
	}
	res, err := tu.Fit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range res.Trials {
		if tr.Status != storage.TrialStopped || tr.Iterations != 2 {
			t.Errorf("trial %d: %s after %d iterations, want STOPPED after 2", tr.Number, tr.Status, tr.Iterations)
		}
		// A stopped trial counts with its last value: x²/2.
		x := float64(tr.Number)
		if got := searcher.observed[tr.Number]; got != x*x/2 {
			t.Errorf("searcher observed %v for trial %d, want %v", got, tr.Number, x*x/2)
		}
		if searcher.ends[tr.Number] != search.TrialStopped || searcher.results[tr.Number] != 2 {
			t.Errorf("searcher told trial %d ended %v after %d results, want stopped after 2", tr.Number, searcher.ends[tr.Number], searcher.results[tr.Number])
		}
	}
	if len(sched.ended) != 4 {
		t.Errorf("scheduler told of %d ended trials, want 4", len(sched.ended))
	}
}

func TestFitMaxModeNegatesScore(t *testing.T) {
	cfg := testConfig(t, 3)
	cfg.Objective.Mode = "max"
	searcher := newObserving()
	tu, _ := New(cfg, WithTrainFunc(quadratic), WithSearcher(searcher))
	res, err := tu.Fit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Best.Number != 3 {
		t.Errorf("best of a max objective: trial %d, want 3", res.Best.Number)
	}
	if searcher.observed[3] != -9.0/5 {
		t.Errorf("score of trial 3: %v, want %v", searcher.observed[3], -9.0/5)
	}
}

func TestFitAllTrialsFail(t *testing.T) {
	cfg := testConfig(t, 3)
	fail := func(ctx context.Context, w *trainer.Worker) error { return errors.New("boom") }
	tu, _ := New(cfg, WithTrainFunc(fail))
	res, err := tu.Fit(context.Background())
	if !errors.Is(err, ErrAllTrialsFailed) {
		t.Fatalf("got %v, want ErrAllTrialsFailed", err)
	}
	for _, tr := range res.Trials {
		if tr.Status != storage.TrialError || !strings.Contains(tr.Error, "boom") {
			t.Errorf("trial %d: %s %q", tr.Number, tr.Status, tr.Error)
		}
	}
}

func TestFitSomeTrialsFail(t *testing.T) {
	cfg := testConfig(t, 4)
	train := func(ctx context.Context, w *trainer.Worker) error {
		if w.Trial()%2 == 0 {
			return errors.New("even trials crash")
		}
		return quadratic(ctx, w)
	}
	tu, _ := New(cfg, WithTrainFunc(train))
	res, err := tu.Fit(context.Background())
	if err != nil {
		t.Fatalf("a sweep with some successful trials failed: %v", err)
	}
	statuses := map[string]int{}
	for _, tr := range res.Trials {
		statuses[tr.Status]++
	}
	if statuses[storage.TrialError] != 2 || statuses[storage.TrialTerminated] != 2 {
		t.Errorf("statuses %v, want 2 ERROR and 2 TERMINATED", statuses)
	}
}

func TestFitInterruptedLeavesTrialsRunning(t *testing.T) {
	cfg := testConfig(t, 6)
	ctx, cancel := context.WithCancel(context.Background())
	train := func(c context.Context, w *trainer.Worker) error {
		if err := w.Report(c, map[string]float64{"loss": 1}); err != nil {
			return err
		}
		if w.Trial() == 2 {
			cancel()
		}
		<-c.Done()
		return c.Err()
	}
	tu, _ := New(cfg, WithTrainFunc(train))
	res, err := tu.Fit(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	for _, tr := range res.Trials {
		if tr.Status != storage.TrialRunning && tr.Status != storage.TrialPending {
			t.Errorf("interrupted trial %d is %s, want RUNNING or, when its group had no workers yet, PENDING (to be resumed)", tr.Number, tr.Status)
		}
	}
	// The experiment is INTERRUPTED until a run resumes it.
	db, err := storage.OpenReadOnly(cfg.Storage)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if exp, err := db.Experiment(context.Background(), cfg.Name); err != nil || exp.Status != storage.ExperimentInterrupted {
		t.Errorf("interrupted experiment: %+v, %v; want INTERRUPTED", exp, err)
	}
	tu, _ = New(cfg, WithTrainFunc(quadratic))
	if _, err := tu.Fit(context.Background()); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if exp, err := db.Experiment(context.Background(), cfg.Name); err != nil || exp.Status != storage.ExperimentFinished {
		t.Errorf("resumed experiment: %+v, %v; want FINISHED", exp, err)
	}
}

func TestNewValidates(t *testing.T) {
	cfg := testConfig(t, 1)
	cfg.Objective.Metric = ""
	var ce *ConfigError
	if _, err := New(cfg, WithTrainFunc(quadratic)); !errors.As(err, &ce) || ce.Key != "objective.metric" {
		t.Errorf("got %v, want a ConfigError on objective.metric", err)
	}
	cfg = testConfig(t, 1)
	if _, err := New(cfg); !errors.As(err, &ce) || ce.Key != "trainer.model" {
		t.Errorf("no model and no train func: got %v", err)
	}
	cfg.Trainer.Model, cfg.Trainer.Dataset = "mlp", filepath.Join(t.TempDir(), "missing.csv")
	if _, err := New(cfg); !errors.As(err, &ce) || ce.Key != "trainer.dataset" {
		t.Errorf("missing dataset: got %v", err)
	}
}

// TestNewRefusesNamesThatAreNotFolderNames: an experiment's name names its
// folders and lock files, so anything but a plain folder name is refused.
func TestNewRefusesNamesThatAreNotFolderNames(t *testing.T) {
	for _, tt := range []struct{ name, why string }{
		{"", "needs a name"},
		{".", "not a name"},
		{"..", "not a name"},
		{"a/b", `holds a '/'`},
		{"../other", `holds a '/'`},
		{"/etc", `holds a '/'`},
		{`a\b`, `holds a '\\'`},
		{"a\nb", "control character U+000A"},
		{"a\x1b[2Jb", "control character U+001B"},
		{"a\x00", "control character U+0000"},
		{"-rf", "read as a flag"},
		{"a\xffb", "not valid UTF-8"},
		{strings.Repeat("n", 201), "over the limit of 200"},
	} {
		cfg := testConfig(t, 1)
		cfg.Name = tt.name
		var ce *ConfigError
		_, err := New(cfg, WithTrainFunc(quadratic))
		if !errors.As(err, &ce) || ce.Key != "name" || !strings.Contains(err.Error(), tt.why) {
			t.Errorf("name %q: got %v, want a ConfigError on name saying %q", tt.name, err, tt.why)
		}
	}
	for _, name := range []string{"digits-mlp", "run 2", "résumé", ".hidden", "a.b_c", strings.Repeat("n", 200)} {
		cfg := testConfig(t, 1)
		cfg.Name = name
		if _, err := New(cfg, WithTrainFunc(quadratic)); err != nil {
			t.Errorf("name %q: %v", name, err)
		}
	}
}

func TestFitRefusesExistingExperiment(t *testing.T) {
	cfg := testConfig(t, 1)
	for i := range 2 {
		tu, _ := New(cfg, WithTrainFunc(quadratic))
		_, err := tu.Fit(context.Background())
		if i == 1 && !errors.Is(err, ErrExperimentExists) {
			t.Errorf("second run of the same experiment: got %v", err)
		}
	}
}

func TestFitFailsWhenNoTrialReportsTheObjective(t *testing.T) {
	cfg := testConfig(t, 2)
	cfg.Objective.Metric = "val_loss"
	tu, err := New(cfg, WithTrainFunc(quadratic))
	if err != nil {
		t.Fatal(err)
	}
	res, err := tu.Fit(context.Background())
	var me *ObjectiveMissingError
	if !errors.Is(err, ErrObjectiveNeverReported) || !errors.As(err, &me) || res == nil || len(res.Trials) != 2 {
		t.Fatalf("Fit: %v, %v", res, err)
	}
	if want := `no trial reported the objective "val_loss"; the reports carried loss, step: check [objective] metric, and for an unchanged script the [trainer.metrics] section that reads it`; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

// The objective's name differs from a reported metric's only in case or
// separators: the error names the metric to set.
func TestFitNamesTheObjectiveItNearlyMatches(t *testing.T) {
	for _, tc := range []struct{ metric, want string }{
		{"LOSS", `no trial reported the objective "LOSS"; the reports carried loss, step, of which "loss" differs from it only in case or separators: set [objective] metric = "loss"`},
		{"lo-ss", `of which "loss" differs`},
		{"val_loss", `the reports carried loss, step: check [objective] metric`},
	} {
		cfg := testConfig(t, 2)
		cfg.Objective.Metric = tc.metric
		tu, err := New(cfg, WithTrainFunc(quadratic))
		if err != nil {
			t.Fatal(err)
		}
		_, err = tu.Fit(context.Background())
		if !errors.Is(err, ErrObjectiveNeverReported) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one with %q", tc.metric, err, tc.want)
		}
	}
}

// A scheduler that needs a trial's time never hears of a report without
// it: a trial whose reports carry the objective and never the time says
// so, once, and how to give it; a report or two before the first step,
// or a scheduler that needs no time, says nothing.
// TestObjectiveOnlyAtTheEndIsTold: a trial that ran to its end with the
// objective only in its last report (a script that evaluates once, after
// training, as PyTorch's CIFAR-10 tutorial does) could not be judged on
// the way, and the sweep says so, once; a trial judged at several steps,
// or a sweep without an early-stopping scheduler, says nothing.
func TestObjectiveOnlyAtTheEndIsTold(t *testing.T) {
	asha := schedulers.Config{Kind: "asha", MaxT: 10, GracePeriod: 1}
	atTheEnd := `for e in 1 2 3 4; do echo "Epoch [$e/4], Loss: 0.$e"; done; echo "Accuracy of the network on the 10000 test images: 54 %"`
	for _, tc := range []struct {
		name   string
		script string
		sched  schedulers.Config
		want   string // "" for no notice
	}{
		{"evaluated once, at the end", atTheEnd, asha,
			"trial 1 carried Accuracy, the objective, in 1 of its 4 reports with Epoch: the asha scheduler judges only reports that carry the objective, so it could not stop the trial early; report Accuracy at each step"},
		{"evaluated every epoch", `for e in 1 2 3 4; do echo "Epoch [$e/4], Loss: 0.$e"; echo "Accuracy of the network on the 10000 test images: 5$e %"; done`, asha, ""},
		{"evaluated once, at max_t", atTheEnd, schedulers.Config{Kind: "asha", MaxT: 4, GracePeriod: 1},
			"trial 1 carried Accuracy, the objective, in 1 of its 4 reports with Epoch"},
		{"no early-stopping scheduler", atTheEnd, schedulers.Config{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, 1)
			cfg.Objective = Objective{Metric: "Accuracy", Mode: "max"}
			tc.sched.TimeAttr = "Epoch"
			cfg.Scheduler = tc.sched
			cfg.Trainer = trainer.Config{Command: []string{"sh", "-c", tc.script}, Metrics: trainer.MetricsConfig{Output: true, Step: "Epoch"}}
			notices := &noticeRecorder{}
			tu, err := New(cfg, WithObserver(notices))
			if err != nil {
				t.Fatal(err)
			}
			res, err := tu.Fit(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if tr := res.Trials[0]; tr.Status != storage.TrialTerminated || tr.BestMetric == nil {
				t.Fatalf("trial %s with best %v, want TERMINATED with its accuracy", tr.Status, tr.BestMetric)
			}
			var told []string
			for _, n := range notices.notices {
				if strings.Contains(n, "the objective") {
					told = append(told, n)
				}
			}
			if tc.want == "" && len(told) > 0 || tc.want != "" && (len(told) != 1 || !strings.Contains(told[0], tc.want)) {
				t.Errorf("told %q, want %q", told, tc.want)
			}
			if got, want := eventsOfKind(t, cfg, EventObjectiveLate), min(len(tc.want), 1); got != want {
				t.Errorf("%d %s events, want %d", got, EventObjectiveLate, want)
			}
		})
	}
}

// eventsOfKind counts the events of kind that cfg's experiment recorded.
func eventsOfKind(t *testing.T, cfg Config, kind string) int {
	t.Helper()
	events, err := openResults(t, cfg).Events(context.Background(), cfg.Name, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range events {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

func TestReportsWithoutTheSchedulersTimeAreTold(t *testing.T) {
	asha := schedulers.Config{Kind: "asha", MaxT: 10, GracePeriod: 1}
	for _, tc := range []struct {
		name    string
		script  string
		metrics trainer.MetricsConfig
		sched   schedulers.Config
		want    string // "" for no notice
	}{
		{"collected lines without a step", `for v in 0.5 0.4 0.3 0.2; do echo "loss: $v"; done`, trainer.MetricsConfig{Output: true}, asha,
			"trial 1 reported loss 3 times without step, the scheduler's time (scheduler.time_attr): the asha scheduler judges no such report, so it stops no trial early on them: [trainer.metrics] takes the step from a pattern's group named step"},
		{"a trial that ends first", `echo "loss: 0.5"`, trainer.MetricsConfig{Output: true}, asha,
			"trial 1 reported loss once without step"},
		{"collected lines whose step has another name", `for e in 1 2 3; do echo "Train Epoch: $e Loss: 0.$e"; echo "Test set: Average loss: 0.$e"; done`, trainer.MetricsConfig{Output: true}, asha,
			`trial 1 reported loss 3 times without step, the scheduler's time (scheduler.time_attr): the asha scheduler judges no such report, so it stops no trial early on them: its reports carry Epoch: step = "Epoch" in [trainer.metrics] takes the step from it`},
		{"report lines whose time has another name", `for i in 1 2 3; do echo "@gotune {\"loss\": 0.$i, \"iter\": $i}"; done`, trainer.MetricsConfig{}, schedulers.Config{Kind: "asha", MaxT: 10, GracePeriod: 1, TimeAttr: "epoch"},
			`without epoch, the scheduler's time (scheduler.time_attr): the asha scheduler judges no such report, so it stops no trial early on them: its reports carry iter: scheduler.time_attr = "iter" counts progress by it; or report epoch, or leave scheduler.time_attr out to count reports`},
		{"report lines without the time attribute", `for v in 0.5 0.4 0.3; do echo "@gotune {\"loss\": $v}"; done`, trainer.MetricsConfig{}, schedulers.Config{Kind: "asha", MaxT: 10, GracePeriod: 1, TimeAttr: "epoch"},
			"without epoch, the scheduler's time (scheduler.time_attr): the asha scheduler judges no such report, so it stops no trial early on them: report epoch with it, or leave scheduler.time_attr out to count reports"},
		{"collected lines with a step", `for s in 1 2 3 4; do echo "step=$s loss: 0.$s"; done`, trainer.MetricsConfig{Output: true}, asha, ""},
		{"a line before the first step", `echo "loss: 0.9"; for s in 1 2 3 4; do echo "step=$s loss: 0.$s"; done`, trainer.MetricsConfig{Output: true}, asha, ""},
		{"a scheduler that needs no time", `for v in 0.5 0.4 0.3 0.2; do echo "loss: $v"; done`, trainer.MetricsConfig{Output: true}, schedulers.Config{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, 1)
			cfg.Scheduler = tc.sched
			cfg.Trainer = trainer.Config{Command: []string{"sh", "-c", tc.script}, Metrics: tc.metrics}
			notices := &noticeRecorder{}
			tu, err := New(cfg, WithObserver(notices))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tu.Fit(context.Background()); err != nil {
				t.Fatal(err)
			}
			var told []string
			for _, n := range notices.notices {
				if strings.Contains(n, "scheduler.time_attr") {
					told = append(told, n)
				}
			}
			switch {
			case tc.want == "" && len(told) > 0:
				t.Errorf("told %q, want nothing", told)
			case tc.want != "" && (len(told) != 1 || !strings.Contains(told[0], tc.want)):
				t.Errorf("told %q, want once %q", told, tc.want)
			}
			if got, want := eventsOfKind(t, cfg, EventTimeAttrMissing), min(len(tc.want), 1); got != want {
				t.Errorf("%d %s events, want %d", got, EventTimeAttrMissing, want)
			}
		})
	}
}

// An unchanged script run without a [trainer.metrics] section: the
// sweep's error quotes a line of the first trial's output that the default
// pattern would read, the objective's own when one has it, and says how
// to read it; without such a line it says how a command reports.
func TestFitSaysWhichLinesAMetricsSectionWouldRead(t *testing.T) {
	for _, tc := range []struct {
		name, script, want string
	}{
		{"the objective's line", `echo 'gotune: not ours: 1'; echo 'Train Epoch: 1 [0/60000 (0%)]	Loss: 2.3'; echo 'Test set: Average loss: 0.41, Accuracy: 9/10 (90%)'`,
			`no trial reported the objective "loss": no trial reported anything, but trial 1 printed lines such as "Test set: Average loss: 0.41, Accuracy: 9/10 (90%)", which [trainer.metrics] output = true would read (as Accuracy, loss): add that section`},
		{"another metric's line", `echo 'epoch 1'; echo 'acc: 0.9'`,
			`no trial reported anything, but trial 1 printed lines such as "acc: 0.9", which [trainer.metrics] output = true would read (as acc)`},
		{"a heading's epoch alone", `echo 'Epoch 1'; echo 'done'`,
			`no trial reported anything, but trial 1 printed lines such as "Epoch 1", which [trainer.metrics] output = true would read (as Epoch)`},
		{"no metric at all", `echo 'done'`,
			`no trial reported anything (a command reports with "@gotune {...}" lines on stdout, or a [trainer.metrics] section reads an unchanged script's output or files)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, 1)
			cfg.Objective.Metric = "loss"
			cfg.Trainer = trainer.Config{Command: []string{"sh", "-c", tc.script}}
			tu, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, err = tu.Fit(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Fit: %v\nwant %q", err, tc.want)
			}
		})
	}
}

// An unchanged script whose lines the default pattern cannot read: the
// trial's event names the default pattern in words, not its regular
// expression, and the sweep's error says that [trainer.metrics] read
// nothing and where to look.
func TestFitSaysTheMetricsSectionReadNothing(t *testing.T) {
	cfg := testConfig(t, 1)
	cfg.Objective.Metric = "valid_loss"
	cfg.Trainer = trainer.Config{
		Command: []string{"sh", "-c", "echo 'validation loss after epoch 1 is 5.67'"},
		Metrics: trainer.MetricsConfig{Output: true},
	}
	obs := &events{}
	tu, err := New(cfg, WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	_, err = tu.Fit(context.Background())
	if want := `no trial reported the objective "valid_loss": no trial reported anything: [trainer.metrics] read nothing from the trials' output or files`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Fit: %v, want %q", err, want)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.got) != 1 || !strings.Contains(obs.got[0].Cause, "the default pattern (output = true: name=value and name: value pairs, columns of numbers under a header of names, and cells between bars) matched none of rank 0's 1 output lines") {
		t.Errorf("events %+v, want one metrics_unmatched that names the default pattern in words", obs.got)
	}
}

// A sweep whose first trials, as many as run at once, end without the
// objective stops there, FAILED, rather than running every trial.
func TestFitStopsOnceTheFirstTrialsLackTheObjective(t *testing.T) {
	cfg := testConfig(t, 12)
	cfg.Search.MaxConcurrent = 2
	cfg.Objective.Metric = "val_loss"
	tu, err := New(cfg, WithTrainFunc(quadratic))
	if err != nil {
		t.Fatal(err)
	}
	res, err := tu.Fit(context.Background())
	var me *ObjectiveMissingError
	if !errors.As(err, &me) || res == nil {
		t.Fatalf("Fit: %v, %v", res, err)
	}
	if want := `no trial reported the objective "val_loss"; the reports carried loss, step: check [objective] metric, and for an unchanged script the [trainer.metrics] section that reads it`; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	// Two trials ended; a third may have started meanwhile.
	if len(res.Trials) > 3 {
		t.Errorf("%d trials ran, want the sweep to stop after the first 2 ended", len(res.Trials))
	}
	db, err := storage.OpenReadOnly(cfg.Storage)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exp, err := db.Experiment(context.Background(), cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	if exp.Status != storage.ExperimentFailed {
		t.Errorf("experiment %s, want FAILED", exp.Status)
	}
}

// The trials still running when a sweep stops for want of the objective
// end STOPPED, saying why, rather than left RUNNING in a FAILED
// experiment, with an interrupt event that promises a resume.
func TestTrialsRunningWhenTheObjectiveIsMissingEndStopped(t *testing.T) {
	cfg := testConfig(t, 12)
	cfg.Search.MaxConcurrent = 2
	cfg.Objective.Metric = "val_loss"
	// Trials 1 and 2 end at once; trial 3 (started when the first ended)
	// runs until the sweep stops it.
	train := func(ctx context.Context, w *trainer.Worker) error {
		if w.Trial() <= 2 {
			return quadratic(ctx, w)
		}
		<-ctx.Done()
		return ctx.Err()
	}
	tu, err := New(cfg, WithTrainFunc(train))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tu.Fit(context.Background()); !errors.Is(err, ErrObjectiveNeverReported) {
		t.Fatalf("Fit: %v", err)
	}
	db := openResults(t, cfg)
	trials, err := db.Trials(context.Background(), cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(trials) != 3 {
		t.Fatalf("%d trials, want 3", len(trials))
	}
	for _, tr := range trials[:2] {
		if tr.Status != storage.TrialTerminated {
			t.Errorf("trial %d: %s, want TERMINATED", tr.Number, tr.Status)
		}
	}
	if tr := trials[2]; tr.Status != storage.TrialStopped || tr.Error != `the sweep ended: no trial reported the objective "val_loss"` {
		t.Errorf("trial 3: %s (%q), want STOPPED, saying the sweep ended for want of the objective", tr.Status, tr.Error)
	}
	events, err := db.Events(context.Background(), cfg.Name, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if e.Kind == storage.EventInterrupt {
			t.Errorf("trial 3 has an interrupt event (%q): nothing resumes a FAILED sweep's trial", e.Message)
		}
	}
}

func TestStepLikeName(t *testing.T) {
	for _, tc := range []struct {
		name     string
		metrics  map[string]float64
		timeAttr string
		want     string
	}{
		{"an epoch in any case", map[string]float64{"Epoch": 1, "Loss": 0.7}, "step", "Epoch"},
		{"a global step", map[string]float64{"global_step": 300, "loss": 0.7}, "epoch", "global_step"},
		{"the time attribute itself", map[string]float64{"epoch": 1, "loss": 0.7}, "epoch", ""},
		{"a fraction", map[string]float64{"epoch": 1.5, "loss": 0.7}, "step", ""},
		{"a negative value", map[string]float64{"iter": -1, "loss": 0.7}, "step", ""},
		{"two candidates", map[string]float64{"epoch": 1, "iter": 300}, "step", ""},
		{"none", map[string]float64{"loss": 0.7, "Accuracy": 245}, "step", ""},
	} {
		if got := stepLikeName(tc.metrics, tc.timeAttr); got != tc.want {
			t.Errorf("%s: stepLikeName(%v, %q) = %q, want %q", tc.name, tc.metrics, tc.timeAttr, got, tc.want)
		}
	}
}
