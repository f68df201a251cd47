package mlflow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gotune/gotune/storage"
)

// Options tune a Tracker; the zero value is the defaults.
type Options struct {
	// Interval is the least time between two rounds of sending while the
	// sweep runs: what is reported meanwhile goes in the same requests.
	// Default 250ms.
	Interval time.Duration
	// Poll is how often the tracker looks for news in the database when
	// nothing Wakes it. Default 2s.
	Poll time.Duration
	// MinBackoff and MaxBackoff bound the wait before trying again a server
	// that failed: it starts at MinBackoff and doubles up to MaxBackoff.
	// Defaults 500ms and 30s.
	MinBackoff, MaxBackoff time.Duration
	// Timeout bounds each request. Default 30s.
	Timeout time.Duration
	// Limits bound each runs/log-batch request; zero: DefaultLimits.
	Limits Limits
	// Log receives the tracker's warnings, one line each; nil: discarded.
	Log io.Writer
}

// Tracker sends one gotune experiment of a results database to an MLflow
// tracking server: Start sends in the background while a sweep runs,
// Sync sends at once. The parent run is named after the gotune experiment
// and each trial's run "trial-N".
//
// What the server acknowledged is recorded in the database after each
// request. The one thing that can arrive twice is a batch of metrics whose
// acknowledgement was lost with the process (killed between the server's
// answer and the commit); params and tags are idempotent.
type Tracker struct {
	c      *Client
	db     *storage.DB
	lock   *storage.ExperimentLock
	exp    string // the gotune experiment
	name   string // the MLflow experiment
	target string
	o      Options

	// Owned by the goroutine that sends: the background loop until Close
	// stops it, then Close or Sync.
	mlExp string
	expID int64
	runs  map[int]*storage.MLflowRun
	seen  map[int]trialState
	stats Stats

	wake   chan struct{}
	stop   chan struct{}
	done   chan struct{}
	cancel context.CancelFunc
	once   sync.Once
}

// trialState is what of a trial, when it changes, has something to send.
type trialState struct {
	status               string
	restarts, iterations int
}

// Stats count what a Tracker delivered.
type Stats struct {
	// Runs counts the runs created, the parent included.
	Runs int
	// Reports counts the reports delivered; Requests the requests that
	// carried them and the params and tags.
	Reports, Requests int
	// Rejected counts the metrics, params and tags the server refused
	// (e.g. an invalid metric name); they are not sent again.
	Rejected int
}

// Backlog is what a Tracker has not delivered when it is closed.
type Backlog struct {
	// Reports counts the undelivered reports; Runs the runs with anything
	// undelivered (creation, params, tags, final status, reports).
	Reports, Runs int
	// Err is why: the server's last failure.
	Err error
}

// New returns a tracker of experiment exp of the results database at
// dbPath (created when absent, as a sweep would) for the server s names.
// It holds a lock (storage.LockMLflow) so that no other tracker sends the
// same experiment to the same server and MLflow experiment meanwhile.
// Close it when done.
func New(dbPath, exp string, s Settings, o Options) (*Tracker, error) {
	if o.Interval == 0 {
		o.Interval = 250 * time.Millisecond
	}
	if o.Poll == 0 {
		o.Poll = 2 * time.Second
	}
	if o.MinBackoff == 0 {
		o.MinBackoff = 500 * time.Millisecond
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = 30 * time.Second
	}
	if o.Limits == (Limits{}) {
		o.Limits = DefaultLimits
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	c, err := NewClient(s, o.Timeout)
	if err != nil {
		return nil, err
	}
	db, err := storage.Open(dbPath)
	if err != nil {
		return nil, err
	}
	name := s.Experiment
	if name == "" {
		name = exp
	}
	target := c.URI() + "#" + name
	lock, err := db.LockMLflow(exp, target)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &Tracker{c: c, db: db, lock: lock, exp: exp, name: name, target: target, o: o,
		seen: map[int]trialState{}, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}, nil
}

// URI is the tracking server's address, without credentials.
func (t *Tracker) URI() string { return t.c.URI() }

// Experiment is the MLflow experiment's name.
func (t *Tracker) Experiment() string { return t.name }

// Start starts sending in the background what the experiment records,
// until Close. A server that fails is retried with backoff; the first
// failure of a streak is logged, and so is the recovery.
func (t *Tracker) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	go t.loop(ctx)
}

// Wake tells a started tracker that the experiment has news, so it sends
// them after Interval rather than the next Poll. It never blocks.
func (t *Tracker) Wake() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

func (t *Tracker) loop(ctx context.Context) {
	defer close(t.done)
	backoff := time.Duration(0)
	for {
		if backoff > 0 {
			if !t.sleep(backoff) {
				return
			}
		} else {
			select {
			case <-t.stop:
				return
			case <-t.wake:
			case <-time.After(t.o.Poll):
			}
			if !t.sleep(t.o.Interval) {
				return
			}
		}
		err := t.round(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			if backoff == 0 {
				fmt.Fprintf(t.o.Log, "warning: mlflow: %s: %v; the sweep goes on, and gotune keeps trying with backoff and delivers everything once the server answers\n", t.c.URI(), err)
			}
			backoff = min(max(2*backoff, t.o.MinBackoff), t.o.MaxBackoff)
		case backoff > 0:
			fmt.Fprintf(t.o.Log, "mlflow: %s answers again; delivered what was reported meanwhile\n", t.c.URI())
			backoff = 0
		}
	}
}

// sleep waits d or until Close; it reports whether to go on.
func (t *Tracker) sleep(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-t.stop:
		return false
	case <-timer.C:
		return true
	}
}

// Close stops the background sending, tries once more to deliver what is
// left (until ctx ends or the server fails), closes the database and
// returns what was not delivered. Close without Start just closes.
func (t *Tracker) Close(ctx context.Context) (Backlog, error) {
	var b Backlog
	var err error
	t.once.Do(func() {
		defer func() { err = errors.Join(err, t.db.Close(), t.lock.Release()) }()
		if t.cancel == nil {
			return
		}
		close(t.stop)
		stopped := make(chan struct{})
		go func() {
			select {
			case <-ctx.Done():
				t.cancel()
			case <-stopped:
			}
		}()
		<-t.done
		close(stopped)
		defer t.cancel()
		b.Err = t.round(ctx)
		b, err = t.backlog(context.WithoutCancel(ctx), b)
	})
	return b, err
}

// Stats returns what the tracker delivered so far; call it from the
// goroutine that called Sync or Close.
func (t *Tracker) Stats() Stats { return t.stats }

// Sync sends what the server lacks of the experiment, at once, and
// returns what is still undelivered (nothing unless it failed). It fails
// when the experiment is not in the database. Do not use it on a started
// tracker.
func (t *Tracker) Sync(ctx context.Context) (Backlog, error) {
	if _, err := t.db.Experiment(ctx, t.exp); err != nil {
		return Backlog{}, err
	}
	b := Backlog{Err: t.round(ctx)}
	return t.backlog(ctx, b)
}

// round sends everything the server lacks, as the database holds it now.
func (t *Tracker) round(ctx context.Context) error {
	exp, err := t.db.Experiment(ctx, t.exp)
	if errors.Is(err, storage.ErrNotFound) {
		return nil // the sweep has not created it yet
	}
	if err != nil {
		return err
	}
	if t.runs == nil {
		if t.runs, err = t.db.MLflowRuns(ctx, exp.ID, t.target); err != nil {
			return err
		}
		t.expID = exp.ID
	}
	if t.mlExp == "" {
		if t.mlExp, err = t.c.ExperimentID(ctx, t.name); err != nil {
			return err
		}
	}
	parent := t.runs[0]
	if parent == nil {
		tags := []Tag{{"gotune.experiment", exp.Name}, {"gotune.metric", exp.Metric}, {"gotune.mode", exp.Mode}}
		if parent, err = t.createRun(ctx, 0, exp.Name, exp.CreatedAt, tags); err != nil {
			return err
		}
	}
	trials, err := t.db.Trials(ctx, t.exp)
	if err != nil {
		return err
	}
	ended := storage.ExperimentEnded(exp.Status)
	for _, tr := range trials {
		st := trialState{tr.Status, tr.Restarts, tr.Iterations}
		if r := t.runs[tr.Number]; r != nil && t.seen[tr.Number] == st && (!ended || r.Status != "") {
			continue
		}
		if err := t.sendTrial(ctx, exp, parent, tr); err != nil {
			return fmt.Errorf("trial %d: %w", tr.Number, err)
		}
		t.seen[tr.Number] = st
	}
	if status := experimentStatus[exp.Status]; status != "" && parent.Status == "" {
		if err := t.end(ctx, parent, status, 0); err != nil {
			return err
		}
	}
	return nil
}

// MLflow's final run status of gotune's final experiment and trial
// statuses; a status missing here leaves the run RUNNING.
var (
	experimentStatus = map[string]string{storage.ExperimentFinished: "FINISHED", storage.ExperimentFailed: "FAILED"}
	trialStatus      = map[string]string{storage.TrialTerminated: "FINISHED", storage.TrialStopped: "KILLED", storage.TrialError: "FAILED"}
)

func (t *Tracker) createRun(ctx context.Context, trial int, name string, start time.Time, tags []Tag) (*storage.MLflowRun, error) {
	id, err := t.c.CreateRun(ctx, t.mlExp, name, start, tags)
	if err != nil {
		return nil, err
	}
	t.stats.Runs++
	r := &storage.MLflowRun{Trial: trial, RunID: id, Tags: map[string]string{}}
	for _, tag := range tags {
		r.Tags[tag.Key] = tag.Value
	}
	t.runs[trial] = r
	return r, t.save(ctx, r)
}

func (t *Tracker) save(ctx context.Context, r *storage.MLflowRun) error {
	if err := t.db.SaveMLflowRun(context.WithoutCancel(ctx), t.expID, t.target, r); err != nil {
		// Not the server's fault: stop here rather than send what could not
		// be recorded as sent.
		return fmt.Errorf("record what was delivered: %w", err)
	}
	return nil
}

// end sets run r's final status, with the end time the database has of
// the trial with database id trialID, or of the experiment when 0.
func (t *Tracker) end(ctx context.Context, r *storage.MLflowRun, status string, trialID int64) error {
	_, at, err := t.db.Times(ctx, t.expID, trialID)
	if err != nil {
		return err
	}
	if at.IsZero() {
		at = time.Now() // a trial the finished sweep left unfinished
	}
	if err := t.c.EndRun(ctx, r.RunID, status, at); err != nil {
		return err
	}
	t.stats.Requests++
	r.Status = status
	return t.save(ctx, r)
}

// sendTrial sends what the server lacks of trial tr: its run, params,
// reports, tags and final status.
func (t *Tracker) sendTrial(ctx context.Context, exp *storage.Experiment, parent *storage.MLflowRun, tr *storage.Trial) error {
	r := t.runs[tr.Number]
	if r == nil {
		start, _, err := t.db.Times(ctx, t.expID, tr.ID())
		if err != nil {
			return err
		}
		tags := []Tag{{"mlflow.parentRunId", parent.RunID}, {"gotune.experiment", exp.Name}, {"gotune.trial", strconv.Itoa(tr.Number)}}
		if r, err = t.createRun(ctx, tr.Number, "trial-"+strconv.Itoa(tr.Number), start, tags); err != nil {
			return err
		}
	}
	var params []Param
	if !r.ParamsSent {
		for _, k := range slices.Sorted(maps.Keys(tr.Params)) {
			params = append(params, Param{k, clip(fmt.Sprint(tr.Params[k]), maxParamValue)})
		}
	}
	want, err := t.trialTags(ctx, tr)
	if err != nil {
		return err
	}
	var tags []Tag
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if v, ok := r.Tags[k]; !ok || v != want[k] {
			tags = append(tags, Tag{k, want[k]})
		}
	}
	pending, err := t.db.MLflowPending(ctx, tr.ID(), r)
	if err != nil {
		return err
	}
	reports := make([][]Metric, len(pending))
	for i, p := range pending {
		ts := p.Time.UnixMilli()
		for _, k := range slices.Sorted(maps.Keys(p.Metrics)) {
			reports[i] = append(reports[i], Metric{Key: k, Value: Value(p.Metrics[k]), Timestamp: ts, Step: int64(p.Iteration)})
		}
	}
	if !r.ParamsSent && len(params) == 0 {
		r.ParamsSent = true
		if err := t.save(ctx, r); err != nil {
			return err
		}
	}
	paramsLeft, done := len(params), 0
	for _, b := range Pack(t.o.Limits, params, tags, reports) {
		if !b.empty() {
			err := t.c.LogBatch(ctx, r.RunID, b)
			switch {
			case rejected(err):
				t.stats.Rejected += len(b.Metrics) + len(b.Params) + len(b.Tags)
				fmt.Fprintf(t.o.Log, "warning: mlflow: %s refused part of trial %d (not sent again): %v\n", t.c.URI(), tr.Number, err)
			case err != nil:
				return err
			}
			t.stats.Requests++
		}
		paramsLeft -= len(b.Params)
		r.ParamsSent = paramsLeft == 0
		for _, tag := range b.Tags {
			r.Tags[tag.Key] = tag.Value
		}
		if b.Done > done {
			r.Delivered(pending[b.Done-1])
			t.stats.Reports += b.Done - done
			done = b.Done
		}
		if err := t.save(ctx, r); err != nil {
			return err
		}
	}
	status := trialStatus[tr.Status]
	if status == "" && storage.ExperimentEnded(exp.Status) {
		status = "KILLED" // the sweep ended and left the trial unfinished
	}
	if status != "" && r.Status == "" {
		return t.end(ctx, r, status, tr.ID())
	}
	return nil
}

// trialTags are the tags trial tr's run should have now.
func (t *Tracker) trialTags(ctx context.Context, tr *storage.Trial) (map[string]string, error) {
	tags := map[string]string{
		"gotune.status":   tr.Status,
		"gotune.restarts": strconv.Itoa(tr.Restarts),
	}
	if tr.Error != "" {
		tags["gotune.error"] = clip(tr.Error, maxTagValue)
	}
	c, err := t.db.LatestCheckpoint(ctx, t.exp, tr.Number)
	switch {
	case err == nil:
		tags["gotune.checkpoint"] = clip(c.Path, maxTagValue)
	case !errors.Is(err, storage.ErrNotFound):
		return nil, err
	}
	return tags, nil
}

// backlog counts into b what is not delivered.
func (t *Tracker) backlog(ctx context.Context, b Backlog) (Backlog, error) {
	exp, err := t.db.Experiment(ctx, t.exp)
	if errors.Is(err, storage.ErrNotFound) {
		return b, nil
	}
	if err != nil {
		return b, err
	}
	runs, err := t.db.MLflowRuns(ctx, exp.ID, t.target)
	if err != nil {
		return b, err
	}
	trials, err := t.db.Trials(ctx, t.exp)
	if err != nil {
		return b, err
	}
	ended := storage.ExperimentEnded(exp.Status)
	if p := runs[0]; p == nil || (ended && p.Status == "") {
		b.Runs++
	}
	for _, tr := range trials {
		r := runs[tr.Number]
		pending, err := t.db.MLflowPending(ctx, tr.ID(), r)
		if err != nil {
			return b, err
		}
		b.Reports += len(pending)
		final := trialStatus[tr.Status] != "" || ended
		if r == nil || len(pending) > 0 || !r.ParamsSent || (final && r.Status == "") || r.Tags["gotune.status"] != tr.Status {
			b.Runs++
		}
	}
	return b, nil
}
