package tuner

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/gotune/gotune/cluster"
	"github.com/gotune/gotune/schedulers"
	"github.com/gotune/gotune/search"
	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/workers"
)

// Tuner runs one experiment: it asks the searcher for configurations, runs
// each as a trial's training group, records every report, and lets the
// scheduler stop weak trials early. Build it with New; run it with Fit.
type Tuner struct {
	cfg Config
	// notices are the config's, as given (Config.Notices).
	notices   []string
	train     trainer.TrainFunc
	searcher  search.Searcher
	scheduler schedulers.Scheduler
	db        *storage.DB
	ownDB     bool
	manager   *workers.Manager
	observer  Observer
	// process names the registered function trials run in worker
	// processes; checkpoints is the checkpoint root, "" for the default.
	process     string
	checkpoints string
	// env holds extra variables for process workers (a built-in model's
	// configuration when they run it).
	env []string
	// cmdEnv holds a command trial's extra variables (see commandEnv),
	// set when Fit starts.
	cmdEnv []string
	// resumeOnly makes Fit refuse to start a new experiment.
	resumeOnly bool
	// rerunFailed makes Fit run the experiment's failed trials again.
	rerunFailed bool
	// restart makes Fit remove the experiment before it runs it.
	restart bool
	// gpuReader samples the GPUs of running trials every gpuEvery; nil
	// samples through NVML when this node has GPUs.
	gpuReader workers.GPUReader
	gpuEvery  time.Duration
	// gpus ties GPU samples to workers while Fit runs.
	gpus *gpuWatch
	// cluster lends other nodes (WithCluster).
	cluster *cluster.Head
	// space makes Fit's writes wait while the disk is full.
	space *diskWait
	// inspectors reach the running trials' workers for the control socket
	// and the usage sampler.
	inspectors inspectors
	// usageEvery is how often the process workers' usage is sampled (0:
	// DefaultUsageInterval, negative: never); usage is the sampler's state.
	usageEvery time.Duration
	usage      usageState
	// stragglers follows the workers' step rates; stragglerWindow is how
	// long one must lag (0: StragglerWindow).
	stragglers      stragglerWatch
	stragglerWindow time.Duration
}

// Option customises a Tuner.
type Option func(*Tuner)

// WithResumeOnly makes Fit continue the config's experiment, which must be
// in the database and unfinished, and never start a new one
// (ErrNothingToResume).
func WithResumeOnly() Option { return func(t *Tuner) { t.resumeOnly = true } }

// WithGPUSampling samples the GPUs of running trials through r every
// interval, instead of through NVML every workers.DefaultSampleInterval
// (which happens when this node has GPUs and Resources is not declared).
func WithGPUSampling(r workers.GPUReader, interval time.Duration) Option {
	return func(t *Tuner) { t.gpuReader, t.gpuEvery = r, interval }
}

// WithTrainFunc makes every trial run f instead of a built-in model.
func WithTrainFunc(f trainer.TrainFunc) Option { return func(t *Tuner) { t.train = f } }

// WithWorkerProcess makes every trial run the function registered with
// trainer.Register as name, each worker in a child process of this binary,
// so that a crashing worker cannot take the tuner down. The binary's main
// must call trainer.WorkerMain first.
func WithWorkerProcess(name string) Option { return func(t *Tuner) { t.process = name } }

// WithCheckpointRoot puts trials' checkpoints in dir/<experiment>/trial_<n>
// instead of in a "checkpoints" folder beside the database.
func WithCheckpointRoot(dir string) Option { return func(t *Tuner) { t.checkpoints = dir } }

// WithSearcher replaces the searcher the config's [search] algorithm names
// with s, a built-in searcher or one of your own (see search.Searcher). The
// config still bounds the experiment: at most NumSamples × grid cells
// trials, at most MaxConcurrent groups running at once (paused trials do
// not count).
func WithSearcher(s search.Searcher) Option { return func(t *Tuner) { t.searcher = s } }

// WithScheduler replaces the scheduler the config names.
func WithScheduler(s schedulers.Scheduler) Option { return func(t *Tuner) { t.scheduler = s } }

// WithDB records results in an already open database instead of the
// config's Storage file. The tuner does not close it. Open it with
// storage.WaitForSpace for results to wait while the disk is full, as the
// tuner's own database does (checkpoints wait either way).
func WithDB(db *storage.DB) Option { return func(t *Tuner) { t.db = db } }

// WithManager places trial groups through m, which other tuners may share,
// instead of a manager of the nodes the config's Resources describe.
func WithManager(m *workers.Manager) Option { return func(t *Tuner) { t.manager = m } }

// WithObserver has o told about every report and every finished trial, for
// progress output.
func WithObserver(o Observer) Option { return func(t *Tuner) { t.observer = o } }

// Observer follows an experiment's progress. Its methods are called from
// the tuner's loop goroutine and must not block for long.
type Observer interface {
	OnReport(trial int, r trainer.Result)
	OnTrialEnd(trial int, status string, err error)
}

// New validates cfg and builds a tuner. A built-in model's data set is
// loaded here, so a missing or malformed file fails before anything runs.
func New(cfg Config, opts ...Option) (*Tuner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &Tuner{cfg: cfg.withDefaults(), notices: cfg.Notices()}
	for _, o := range opts {
		o(t)
	}
	// Every folder derived from these (the lock, trial, scratch and log
	// folders, torch's error files) is handed to workers that run in
	// other folders: they are made absolute once, here.
	for _, path := range []*string{&t.cfg.Storage, &t.checkpoints} {
		if *path == "" {
			continue
		}
		abs, err := filepath.Abs(*path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", *path, err)
		}
		*path = abs
	}
	runners := 0
	for _, set := range []bool{t.train != nil, t.process != "", t.cfg.Trainer.Command != nil} {
		if set {
			runners++
		}
	}
	switch {
	case runners > 1:
		return nil, &ConfigError{Key: "trainer.command", Err: errors.New("give the tuner one of a command, a training function and a worker process")}
	case runners == 0 && t.cfg.Trainer.Model == "":
		return nil, &ConfigError{Key: "trainer.model", Err: errors.New("name a built-in model or a command, or give the tuner a training function")}
	case runners == 0:
		// Loading the data set here fails a bad one before anything runs,
		// also when each process worker loads it again.
		f, err := trainer.Builtin(t.cfg.Trainer)
		if err != nil {
			return nil, &ConfigError{Key: "trainer.dataset", Err: err}
		}
		t.train = f
		// Workers on other nodes are processes too.
		if t.cfg.Trainer.Isolation == trainer.IsolationProcess || t.cluster != nil {
			env, err := builtinEnv(t.cfg.Trainer)
			if err != nil {
				return nil, err
			}
			t.train, t.process, t.env = nil, trainer.BuiltinProcess, []string{env}
		}
	}
	// A missing program fails here, before any trial starts, not in
	// every trial.
	if len(t.cfg.Trainer.Command) > 0 {
		if err := t.cfg.checkProgram(); err != nil {
			return nil, err
		}
		// A cluster's nodes may hold a script this one lacks.
		if t.cluster == nil {
			if err := t.cfg.checkScript(); err != nil {
				return nil, err
			}
		}
	}
	if t.cluster != nil && t.train != nil {
		return nil, &ConfigError{Key: "trainer", Err: errors.New("a Go training function runs in this process and cannot use the cluster's nodes: register it with trainer.Register and use WithWorkerProcess")}
	}
	if t.searcher == nil {
		s, err := newSearcher(t.cfg.Search, t.cfg.searchSeed(), t.cfg.Objective, t.cfg.Scheduler)
		if err != nil {
			return nil, err
		}
		t.searcher = s
	}
	if t.scheduler == nil {
		s, err := schedulers.New(t.cfg.Scheduler, t.cfg.schedulerEnv())
		if err != nil {
			return nil, schedulerError(err)
		}
		t.scheduler = s
	}
	if t.manager == nil {
		t.manager = workers.NewManager(t.cfg.Resources.Inventory(), workers.ManagerConfig{})
	}
	if err := t.manager.Check(t.groupRequest(0)); err != nil {
		return nil, &ConfigError{Key: "trainer.scaling", Err: err}
	}
	if t.observer == nil {
		t.observer = nopObserver{}
	}
	return t, nil
}

type nopObserver struct{}

func (nopObserver) OnReport(int, trainer.Result)  {}
func (nopObserver) OnTrialEnd(int, string, error) {}

// Config is the tuner's configuration with defaults applied.
func (t *Tuner) Config() Config { return t.cfg }

// Result is a finished experiment's trials as recorded.
type Result struct {
	Experiment string
	Trials     []*storage.Trial
	// Best is the feasible trial (see Objective.Constraints) with the best
	// value of the objective, nil when no such trial reported it; nil too
	// with several objectives, which have Front instead.
	Best *storage.Trial
	// Front is, with several objectives, the feasible trials on the
	// Pareto front of their last reports (see storage.ParetoFront).
	Front []*storage.Trial
}

// ErrAllTrialsFailed is returned by Fit, with the Result, when the
// experiment ran but no trial succeeded.
var ErrAllTrialsFailed = errors.New("every trial failed")

// Fit runs the experiment to the end and returns its trials. When the
// database already has the experiment unfinished (a run was interrupted or
// crashed), Fit continues it: finished trials are kept, interrupted ones
// restart from their latest checkpoints, and the searcher and the scheduler
// learn the recorded history first. When ctx ends first, running trials are
// cancelled and Fit returns ctx's error; what was reported until then stays
// in the database, and a later Fit continues from there. While the disk is
// full, Fit pauses: reports, events and checkpoints wait for space (workers
// wait for their reports' answers), a DiskObserver hears of it, and the
// sweep goes on once there is space.
func (t *Tuner) Fit(ctx context.Context) (*Result, error) {
	t.space = newDiskWait(ctx, t.observer)
	if t.db == nil {
		db, err := storage.Open(t.cfg.Storage, storage.WaitForSpace(ctx, t.space.notify))
		if err != nil {
			return nil, err
		}
		t.db, t.ownDB = db, true
		defer func() { db.Close(); t.db = nil }()
	}
	// Only one run at a time may drive an experiment; the operating system
	// releases the lock however this process ends.
	lock, err := t.db.LockExperiment(t.cfg.Name)
	if err != nil {
		return nil, err
	}
	defer lock.Release()
	// Runs with other databases may share the experiment's folders.
	for _, dir := range t.experimentFolders() {
		lock, err := storage.LockFolder(dir)
		if err != nil {
			return nil, err
		}
		defer lock.Release()
	}
	if t.restart {
		if err := t.removeExperiment(ctx); err != nil {
			return nil, err
		}
	}
	if err := t.checkWarmStart(ctx); err != nil {
		return nil, err
	}
	if t.cfg.Trainer.Command != nil {
		if t.cmdEnv, err = t.commandEnv(); err != nil {
			return nil, err
		}
	}
	t.gpus = newGPUWatch(t.db, 0, t.manager.Nodes())
	l, err := t.prepare(ctx)
	if err != nil {
		return nil, err
	}
	if cs := t.cfg.Objective.constraints(); len(cs) > 0 {
		if err := t.db.SetConstraints(ctx, l.exp.ID, cs); err != nil {
			return nil, err
		}
	}
	if t.cfg.Objective.multi() {
		if err := t.db.SetObjectives(ctx, l.exp.ID, t.cfg.Objective.objectives()); err != nil {
			return nil, err
		}
	}
	t.gpus.expID = l.exp.ID
	if err := t.tellNotices(ctx, l.exp.ID); err != nil {
		return nil, err
	}
	ctl, err := serveControl(t.db.Path(), t.cfg.Name, &t.inspectors)
	if err != nil {
		// The sweep runs on; only stacks on demand are lost.
		t.db.AddEvent(ctx, l.exp.ID, 0, "control_socket", err.Error(), nil)
	}
	defer ctl.Close()
	stopSampling := t.sampleGPUs()
	stopUsage := t.sampleUsage(l.exp.ID)
	runErr := l.run(ctx)
	stopUsage()
	stopSampling()
	l.removeEmptyFolders()
	// Trials' ends and the scheduler's inputs are queued; what follows
	// reads them back.
	if err := t.db.Flush(context.WithoutCancel(ctx)); err != nil && runErr == nil {
		runErr = err
	}

	status := storage.ExperimentFinished
	if errors.Is(runErr, ErrObjectiveNeverReported) {
		// The sweep stopped early: its trials report no objective.
		status = storage.ExperimentFailed
	} else if runErr != nil {
		// Running it again resumes it (a crash leaves RUNNING, which
		// readers show as INTERRUPTED once no run holds its lock).
		status = storage.ExperimentInterrupted
	} else if l.succeeded == 0 {
		status = storage.ExperimentFailed
	}
	if err := t.db.FinishExperiment(context.WithoutCancel(ctx), l.exp.ID, status); err != nil {
		return nil, errors.Join(runErr, err)
	}
	res, err := t.result(context.WithoutCancel(ctx))
	if err != nil {
		return nil, errors.Join(runErr, err)
	}
	if runErr != nil {
		return res, runErr
	}
	if l.succeeded == 0 {
		return res, ErrAllTrialsFailed
	}
	if t.cfg.Objective.multi() && len(res.Front) > 0 {
		return res, nil
	}
	if res.Best == nil && len(t.cfg.Objective.Constraints) > 0 {
		for _, tr := range res.Trials {
			if tr.BestMetric != nil {
				return res, fmt.Errorf("%w: %s", ErrNoFeasibleTrial, strings.Join(t.cfg.Objective.Constraints, ", "))
			}
		}
	}
	if res.Best == nil {
		return res, t.objectiveMissing(ctx)
	}
	return res, nil
}

// objectiveMissing is the *ObjectiveMissingError of a run whose reports
// never carried the objective, with the metrics they did carry, or the
// error that kept the database from telling those.
func (t *Tuner) objectiveMissing(ctx context.Context) error {
	seen, err := t.db.MetricNames(context.WithoutCancel(ctx), t.cfg.Name)
	if err != nil {
		return err
	}
	e := &ObjectiveMissingError{Metric: t.cfg.Objective.Metric, Seen: seen, Collected: t.cfg.Trainer.Metrics.Collects()}
	if len(seen) == 0 && !e.Collected && t.cfg.Trainer.Command != nil {
		// The first trials ran: one of them may print its metrics.
		for n := 1; n <= unreadTrials; n++ {
			if line, names := trainer.UnreadMetrics(t.logDir(n), e.Metric); line != "" {
				e.Unread, e.UnreadNames, e.UnreadTrial = line, names, n
				break
			}
		}
	}
	return e
}

// unreadTrials is how many trials' logs objectiveMissing reads for
// metrics that no [trainer.metrics] section read.
const unreadTrials = 8

// FailFastError is returned by Fit, with the Result, when a trial failed
// and [trainer.failure] fail_fast ended the sweep there. The experiment is
// INTERRUPTED: the trials still running continue when it is run again,
// and WithRerunFailed runs the failed one again too.
type FailFastError struct {
	// Trial is the failed trial's number; Err its failure.
	Trial int
	Err   error
}

func (e *FailFastError) Error() string {
	return fmt.Sprintf("trial %d failed, and [trainer.failure] fail_fast ends the sweep at the first failure: %v", e.Trial, e.Err)
}

func (e *FailFastError) Unwrap() error { return e.Err }

// SameFailureError is returned by Fit, with the Result, when the sweep
// ended because the first trials it launched (Trials of them, as many as
// run at once and at least 5) all failed the same way with none completed,
// [trainer.failure] fail_fast being unset: the failure does not depend on
// the configuration. Err is the last one's failure. The experiment is
// INTERRUPTED: the trials still running continue when it is run again,
// and WithRerunFailed runs the failed ones again too.
type SameFailureError struct {
	Trials int
	Err    error
}

func (e *SameFailureError) Error() string {
	return fmt.Sprintf("the first %d trials all failed the same way and none completed, so the sweep stops here: the command or its environment looks broken, not a configuration (fail_fast = false in [trainer.failure] runs every trial whatever fails). The last failure: %v", e.Trials, e.Err)
}

func (e *SameFailureError) Unwrap() error { return e.Err }

// ErrNoFeasibleTrial is returned by Fit, with the Result, when trials
// reported the objective but none met the objective's constraints.
var ErrNoFeasibleTrial = errors.New("no trial met the constraints")

// ErrObjectiveNeverReported is returned by Fit, with the Result, when
// trials ran but none of their reports carried the objective's metric;
// the error is an *ObjectiveMissingError.
var ErrObjectiveNeverReported = errors.New("no trial reported the objective")

// ObjectiveMissingError says which metric the objective names and which
// metrics the experiment's reports carried instead.
type ObjectiveMissingError struct {
	Metric string
	// Seen lists the metrics of every report, sorted; empty when no trial
	// reported at all.
	Seen []string
	// Collected says that a [trainer.metrics] section read the trials'
	// metrics from their output or files.
	Collected bool
	// Unread is a line of trial UnreadTrial's output, when no trial
	// reported and none was collected, that [trainer.metrics] output =
	// true reads, as the metrics UnreadNames; "" when none was found.
	Unread      string
	UnreadNames []string
	UnreadTrial int
}

func (e *ObjectiveMissingError) Error() string {
	if len(e.Seen) == 0 && e.Unread != "" {
		return fmt.Sprintf("%v %q: no trial reported anything, but trial %d printed lines such as %q, which [trainer.metrics] output = true would read (as %s): add that section, or patterns for the lines (see \"Metrics from unchanged scripts\" in the README)",
			ErrObjectiveNeverReported, e.Metric, e.UnreadTrial, e.Unread, strings.Join(e.UnreadNames, ", "))
	}
	if len(e.Seen) == 0 && e.Collected {
		return fmt.Sprintf("%v %q: no trial reported anything: [trainer.metrics] read nothing from the trials' output or files (their metrics_unmatched events, in gotune show, name what matched nothing and show the script's last lines): write patterns for its lines", ErrObjectiveNeverReported, e.Metric)
	}
	if len(e.Seen) == 0 {
		return fmt.Sprintf("%v %q: no trial reported anything (a command reports with \"@gotune {...}\" lines on stdout, or a [trainer.metrics] section reads an unchanged script's output or files)", ErrObjectiveNeverReported, e.Metric)
	}
	if near := nearName(e.Metric, e.Seen); near != "" {
		return fmt.Sprintf("%v %q; the reports carried %s, of which %q differs from it only in case or separators: set [objective] metric = %q", ErrObjectiveNeverReported, e.Metric, strings.Join(e.Seen, ", "), near, near)
	}
	return fmt.Sprintf("%v %q; the reports carried %s: check [objective] metric, and for an unchanged script the [trainer.metrics] section that reads it", ErrObjectiveNeverReported, e.Metric, strings.Join(e.Seen, ", "))
}

// nearName returns the one name of names that is metric but for case and
// the separators _, -, / and . ("Accuracy" for "accuracy", "val/loss" for
// "val_loss"), or "" when none or several are.
func nearName(metric string, names []string) string {
	fold := func(s string) string {
		return strings.ToLower(strings.NewReplacer("_", "", "-", "", "/", "", ".", "").Replace(s))
	}
	near := ""
	for _, name := range names {
		if fold(name) != fold(metric) {
			continue
		}
		if near != "" {
			return ""
		}
		near = name
	}
	return near
}

func (e *ObjectiveMissingError) Unwrap() error { return ErrObjectiveNeverReported }

// sampleGPUs samples the GPUs of running trials into the database, through
// the configured reader or, when this node has GPUs, NVML, and returns the
// function that stops it.
func (t *Tuner) sampleGPUs() (stop func()) {
	reader, every, closeReader := t.gpuReader, t.gpuEvery, func() {}
	if reader == nil {
		hasGPUs := false
		for _, n := range t.manager.Nodes() {
			hasGPUs = hasGPUs || len(n.GPUs) > 0
		}
		if !hasGPUs || !t.cfg.Resources.IsZero() {
			return func() {}
		}
		nv, err := workers.OpenNVML()
		if err != nil {
			return func() {}
		}
		reader, every, closeReader = nv, workers.DefaultSampleInterval, func() { nv.Close() }
	}
	s := &workers.Sampler{Reader: reader, Interval: every, OnSample: t.gpus.record}
	if err := s.Open(); err != nil {
		closeReader()
		return func() {}
	}
	return func() {
		s.Close(context.Background())
		closeReader()
	}
}

func (t *Tuner) result(ctx context.Context) (*Result, error) {
	trials, err := t.db.Trials(ctx, t.cfg.Name)
	if err != nil {
		return nil, err
	}
	res := &Result{Experiment: t.cfg.Name, Trials: trials}
	if t.cfg.Objective.multi() {
		res.Front, err = t.db.ParetoFront(ctx, t.cfg.Name)
		return res, err
	}
	res.Best, err = t.db.BestTrial(ctx, t.cfg.Name)
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return nil, err
	}
	return res, nil
}

// record is the configuration stored with the experiment: the config plus
// the search space rendered in sweep-file syntax.
func (c Config) record() any {
	return recordedConfig{c, c.spaceRecord()}
}

// trialSeed derives a trial's seed from the experiment's with SplitMix64, so
// neighbouring trials get unrelated streams. It is in [0, 2^32), the range
// numpy's np.random.seed accepts, since GOTUNE_SEED hands it to scripts.
func trialSeed(seed int64, trial int) int64 {
	z := uint64(seed) + uint64(trial)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return int64((z ^ (z >> 31)) >> 32)
}

// score extracts the objective from metrics, negated for "max" so that lower
// is always better.
func (t *Tuner) score(metrics map[string]float64) (value, score float64, ok bool) {
	v, ok := metrics[t.cfg.Objective.Metric]
	if !ok {
		return 0, 0, false
	}
	if t.cfg.Objective.Mode == "max" {
		return v, -v, true
	}
	return v, v, true
}

// progress returns the scheduler's time for a result: the time attribute's
// value, or the iteration when the attribute is training_iteration.
func (t *Tuner) progress(r trainer.Result) (float64, bool) {
	if v, ok := r.Metrics[t.cfg.Scheduler.TimeAttr]; ok {
		return v, true
	}
	if t.cfg.Scheduler.TimeAttr == TrainingIteration {
		return float64(r.Iteration), true
	}
	return 0, false
}
