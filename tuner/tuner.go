package tuner

import (
	"context"
	"errors"
	"fmt"

	"github.com/gotune/gotune/schedulers"
	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/workers"
)

// Tuner runs one experiment: it asks the searcher for configurations, runs
// each as a trial's training group, records every report, and lets the
// scheduler stop weak trials early. Build it with New; run it with Fit.
type Tuner struct {
	cfg       Config
	train     trainer.TrainFunc
	searcher  Searcher
	scheduler schedulers.Scheduler
	db        *storage.DB
	ownDB     bool
	manager   *workers.Manager
	observer  Observer
	// process names the registered function trials run in worker
	// processes; checkpoints is the checkpoint root, "" for the default.
	process     string
	checkpoints string
	// cluster lends other nodes (WithCluster); builtin is then the
	// built-in model's trainer config as JSON, "" for other trainables.
	cluster *workers.Head
	builtin string
}

// Option customises a Tuner.
type Option func(*Tuner)

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

// WithSearcher replaces the searcher the config names.
func WithSearcher(s Searcher) Option { return func(t *Tuner) { t.searcher = s } }

// WithScheduler replaces the scheduler the config names.
func WithScheduler(s schedulers.Scheduler) Option { return func(t *Tuner) { t.scheduler = s } }

// WithDB records results in an already open database instead of the
// config's Storage file. The tuner does not close it.
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
	t := &Tuner{cfg: cfg.withDefaults()}
	for _, o := range opts {
		o(t)
	}
	if t.cfg.Search.Space == nil {
		t.cfg.Search.Space = &searchspace.Space{}
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
		f, err := trainer.Builtin(t.cfg.Trainer)
		if err != nil {
			return nil, &ConfigError{Key: "trainer.dataset", Err: err}
		}
		t.train = f
	}
	if err := t.useCluster(runners == 0); err != nil {
		return nil, err
	}
	if t.searcher == nil {
		t.searcher = NewRandomSearch(t.cfg.Search.Space, t.cfg.Seed)
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
	// Best is the trial with the best value of the objective, nil when no
	// trial reported it.
	Best *storage.Trial
}

// ErrAllTrialsFailed is returned by Fit, with the Result, when the
// experiment ran but no trial succeeded.
var ErrAllTrialsFailed = errors.New("every trial failed")

// Fit runs the experiment to the end and returns its trials. When ctx ends
// first, running trials are cancelled and Fit returns ctx's error; what was
// reported until then stays in the database.
func (t *Tuner) Fit(ctx context.Context) (*Result, error) {
	if t.db == nil {
		db, err := storage.Open(t.cfg.Storage)
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
	exp, err := t.db.CreateExperiment(ctx, t.cfg.Name, t.cfg.Objective.Metric, t.cfg.Objective.Mode, t.cfg.record())
	if err != nil {
		if _, lookErr := t.db.Experiment(ctx, t.cfg.Name); lookErr == nil {
			return nil, fmt.Errorf("experiment %q already exists in %s: choose another name", t.cfg.Name, t.db.Path())
		}
		return nil, err
	}
	l := &loop{t: t, exp: exp, events: make(chan event)}
	runErr := l.run(ctx)

	status := storage.ExperimentFinished
	if runErr != nil {
		// An interrupted experiment stays RUNNING, as it would after a crash.
		status = storage.ExperimentRunning
	} else if l.succeeded == 0 {
		status = storage.ExperimentFailed
	}
	if status != storage.ExperimentRunning {
		if err := t.db.FinishExperiment(context.WithoutCancel(ctx), exp.ID, status); err != nil {
			return nil, err
		}
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
	return res, nil
}

func (t *Tuner) result(ctx context.Context) (*Result, error) {
	trials, err := t.db.Trials(ctx, t.cfg.Name)
	if err != nil {
		return nil, err
	}
	res := &Result{Experiment: t.cfg.Name, Trials: trials}
	res.Best, err = t.db.BestTrial(ctx, t.cfg.Name)
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return nil, err
	}
	return res, nil
}

// record is the configuration stored with the experiment: the config plus
// the search space rendered in sweep-file syntax.
func (c Config) record() any {
	space := map[string]string{}
	for _, p := range c.Search.Space.Params() {
		space[p.Name] = p.Domain.String()
	}
	return struct {
		Config
		Space map[string]string `json:"space"`
	}{c, space}
}

// trialSeed derives a trial's seed from the experiment's with SplitMix64, so
// neighbouring trials get unrelated streams.
func trialSeed(seed int64, trial int) int64 {
	z := uint64(seed) + uint64(trial)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return int64(z ^ (z >> 31))
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
