package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gotune/gotune/storage"
)

// The JSON API. Every response is one JSON document read from one
// consistent snapshot of the database; times are RFC 3339, NaN and
// infinite metrics are the strings "NaN", "Infinity" and "-Infinity" (as
// in the CLI's --json output), and an error is {"error": "..."} with a
// 4xx or 5xx status.

// apiError is an error with the HTTP status it answers with.
type apiError struct {
	code int
	err  error
}

func (e *apiError) Error() string { return e.err.Error() }
func (e *apiError) Unwrap() error { return e.err }

func badRequest(format string, args ...any) error {
	return &apiError{http.StatusBadRequest, fmt.Errorf(format, args...)}
}

// api serves handler h's result as JSON, read in one snapshot.
func (s *Server) api(h func(r *http.Request, db *storage.DB) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var out any
		err := s.db.Snapshot(r.Context(), func(db *storage.DB) error {
			var err error
			out, err = h(r, db)
			return err
		})
		if err != nil {
			writeError(w, err)
			return
		}
		body, err := json.Marshal(out)
		if err != nil {
			writeError(w, err)
			return
		}
		if hd, ok := out.(interface{ setHeaders(http.Header) }); ok {
			hd.setHeaders(w.Header())
		}
		writeJSON(w, body)
	}
}

// writeJSON sends body, a JSON value, for no cache to keep.
func writeJSON(w http.ResponseWriter, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(append(body, '\n'))
}

func writeError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		code = ae.code
	case errors.Is(err, storage.ErrNotFound):
		code = http.StatusNotFound
	}
	body, _ := json.Marshal(map[string]string{"error": err.Error()})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	w.Write(append(body, '\n'))
}

// Experiment is an experiment as the API shows it.
type Experiment struct {
	Name      string          `json:"name"`
	Status    string          `json:"status"`
	Metric    string          `json:"metric"`
	Mode      string          `json:"mode"`
	CreatedAt time.Time       `json:"created_at"`
	Trials    int             `json:"trials"`
	Best      *storage.Number `json:"best"`
	// Counts is the number of trials in each status as shown (see
	// shownCounts), every status present, INTERRUPTED included.
	Counts map[string]int `json:"counts"`
	// NumSamples is the number of trials the sweep runs in all, 0 when its
	// configuration does not say.
	NumSamples int `json:"num_samples"`
}

// ExperimentDetail adds what the page needs to draw an experiment.
type ExperimentDetail struct {
	Experiment
	// Metrics names every metric any report carries, sorted.
	Metrics []string `json:"metrics"`
	// Params are the search space's parameters, by name.
	Params []Param `json:"params"`
	// Config is the sweep's configuration as recorded.
	Config json.RawMessage `json:"config"`
	// Objectives are the experiment's objectives when it has several,
	// empty when its one objective is Metric.
	Objectives []storage.Objective `json:"objectives"`
}

// Param is one hyperparameter of the search space.
type Param struct {
	Name string `json:"name"`
	// Domain is the parameter's domain in sweep-file syntax, as in
	// "{ loguniform = [0.001, 0.1] }"; a constant's value for a constant.
	Domain string `json:"domain"`
	// Log says the domain is logarithmic (loguniform), for plotting.
	Log bool `json:"log"`
}

// recordedConfig is what the API reads of an experiment's recorded
// configuration (tuner.Config plus the space in sweep-file syntax).
type recordedConfig struct {
	Search struct {
		NumSamples int `json:"num_samples"`
	} `json:"search"`
	Space map[string]string `json:"space"`
}

func parseConfig(raw json.RawMessage) recordedConfig {
	var c recordedConfig
	json.Unmarshal(raw, &c) // a config of another shape just says less
	return c
}

// experimentOf is experiment e as the API shows it, with counts its
// trials' recorded statuses and live whether a run holds it (RunLive).
func experimentOf(e *storage.Experiment, counts map[string]int, live bool) Experiment {
	return Experiment{
		Name: e.Name, Status: storage.ShownExperimentStatus(e.Status, live), Metric: e.Metric, Mode: e.Mode, CreatedAt: e.CreatedAt,
		Trials: e.Trials, Best: storage.NumberPtr(e.Best), Counts: shownCounts(counts, live),
		NumSamples: parseConfig(e.Config).Search.NumSamples,
	}
}

// shownCounts turns counts of trials by recorded status into counts by
// status as shown (storage.ShownTrialStatus): a dead run's PENDING and
// RUNNING trials count as INTERRUPTED. Every status is present.
func shownCounts(recorded map[string]int, live bool) map[string]int {
	shown := map[string]int{storage.TrialInterrupted: 0}
	for _, st := range storage.TrialStatuses {
		shown[st] = 0
	}
	for _, st := range storage.TrialStatuses {
		shown[storage.ShownTrialStatus(st, live)] += recorded[st]
	}
	return shown
}

// statusCounts counts every experiment's trials by status. It reads the
// trials table alone: the trials_v view would join every trial's progress
// for nothing.
func statusCounts(r *http.Request, db *storage.DB) (map[string]map[string]int, error) {
	return countByExperiment(r.Context(), db, `SELECT e.name, t.status, count(*) FROM trials t JOIN experiments e ON e.id = t.experiment_id GROUP BY t.experiment_id, t.status`)
}

// countByExperiment runs a query whose rows are (experiment, key, count)
// and returns the counts by experiment and key.
func countByExperiment(ctx context.Context, db *storage.DB, query string, args ...any) (map[string]map[string]int, error) {
	rows, err := db.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]map[string]int{}
	for rows.Next() {
		var exp, key string
		var n int
		if err := rows.Scan(&exp, &key, &n); err != nil {
			return nil, err
		}
		if out[exp] == nil {
			out[exp] = map[string]int{}
		}
		out[exp][key] = n
	}
	return out, rows.Err()
}

// Version is what GET /api/version answers.
type Version struct {
	// Version grows whenever anything is committed to the database: a page
	// that polls reads the rest again only when it changed.
	Version int64 `json:"version"`
}

// GET /api/version: the database's change counter (see Version). It
// reads no table, so that polling it costs next to nothing.
func (s *Server) version(w http.ResponseWriter, r *http.Request) {
	v, err := s.db.DataVersion(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	body, _ := json.Marshal(Version{v})
	writeJSON(w, body)
}

// GET /api/experiments: every experiment, oldest first.
func (s *Server) experiments(r *http.Request, db *storage.DB) (any, error) {
	exps, err := db.Experiments(r.Context())
	if err != nil {
		return nil, err
	}
	counts, err := statusCounts(r, db)
	if err != nil {
		return nil, err
	}
	out := make([]Experiment, len(exps))
	for i, e := range exps {
		out[i] = experimentOf(e, counts[e.Name], db.RunLive(e.Name))
	}
	return out, nil
}

// GET /api/experiments/{exp}: one experiment, its metric names and its
// search space.
func (s *Server) experiment(r *http.Request, db *storage.DB) (any, error) {
	name := r.PathValue("exp")
	e, err := db.Experiment(r.Context(), name)
	if err != nil {
		return nil, err
	}
	counts, err := db.StatusCounts(r.Context(), name)
	if err != nil {
		return nil, err
	}
	metrics, err := db.MetricNames(r.Context(), name)
	if err != nil {
		return nil, err
	}
	d := ExperimentDetail{Experiment: experimentOf(e, counts, db.RunLive(name)), Metrics: metrics, Params: []Param{}, Config: e.Config, Objectives: []storage.Objective{}}
	if len(e.Objectives) > 1 {
		d.Objectives = e.Objectives
	}
	if d.Metrics == nil {
		d.Metrics = []string{}
	}
	space := parseConfig(e.Config).Space
	for _, p := range slices.Sorted(maps.Keys(space)) {
		d.Params = append(d.Params, Param{Name: p, Domain: space[p], Log: strings.HasPrefix(space[p], "{ loguniform = ")})
	}
	return d, nil
}

// Trial is a trial as the API shows it.
type Trial struct {
	Number     int             `json:"trial_id"`
	Status     string          `json:"status"`
	Params     map[string]any  `json:"params"`
	Iterations int             `json:"iterations"`
	LastMetric *storage.Number `json:"last_metric"`
	BestMetric *storage.Number `json:"best_metric"`
	Restarts   int             `json:"restarts"`
	Error      string          `json:"error,omitempty"`
	// Feasible says whether the trial meets the experiment's constraints;
	// absent without constraints or before its first report.
	Feasible *bool `json:"feasible,omitempty"`
}

// trialOf is trial t as the API shows it; live is whether a run holds its
// experiment (RunLive), which a dead run's PENDING and RUNNING trials show
// as INTERRUPTED without (storage.ShownTrialStatus).
func trialOf(t *storage.Trial, live bool) Trial {
	return Trial{Number: t.Number, Status: storage.ShownTrialStatus(t.Status, live), Params: t.Params, Iterations: t.Iterations,
		LastMetric: storage.NumberPtr(t.LastMetric), BestMetric: storage.NumberPtr(t.BestMetric), Restarts: t.Restarts, Error: t.Error,
		Feasible: t.Feasible}
}

// GET /api/experiments/{exp}/trials[?status=S,S&sort=METRIC|order=COLUMN
// &param=NAME<OP>VALUE&where=COLUMN<OP>NUMBER&text=T&offset=N&limit=N]: the
// experiment's trials, as storage.TrialQuery selects, orders and pages them
// (param, where and text may repeat; OP is =, !=, <, <=, > or >=). A dead
// run's PENDING and RUNNING trials show, and are selected by status, as
// INTERRUPTED (storage.ShownTrialStatus). The body
// is the page, of DefaultTrialPage trials unless limit says otherwise
// (limit=0: every trial); the header X-Total-Count says how many trials
// the query selects in all, and while more follow the page, a Link header
// (rel="next") gives the next page's address, so that a client pages
// through a long list without ever loading it whole.
func (s *Server) trials(r *http.Request, db *storage.DB) (any, error) {
	q := storage.TrialQuery{Sort: r.FormValue("sort"), Column: r.FormValue("order"), Text: r.Form["text"]}
	if q.Sort != "" && q.Column != "" {
		return nil, badRequest("give sort (a metric) or order (a column), not both")
	}
	exp := r.PathValue("exp")
	// One look at the lock serves every trial of the page.
	live := db.RunLive(exp)
	matchesSome := true
	if st := r.FormValue("status"); st != "" {
		q.Status, matchesSome = storage.RecordedTrialStatuses(strings.Split(st, ","), live)
	}
	for _, f := range r.Form["param"] {
		pf, ok := parseParamFilter(f)
		if !ok {
			return nil, badRequest("param must be NAME<OP>VALUE with OP one of = != < <= > >=, got %q", f)
		}
		q.Params = append(q.Params, pf)
	}
	for _, f := range r.Form["where"] {
		cf, ok := parseParamFilter(f)
		x, isNum := cf.Value.(float64)
		if !ok || !isNum {
			return nil, badRequest("where must be COLUMN<OP>NUMBER with OP one of = != < <= > >=, got %q", f)
		}
		q.Columns = append(q.Columns, storage.ColumnFilter{Column: cf.Name, Op: cf.Op, Value: x})
	}
	q.Limit = DefaultTrialPage
	for key, dst := range map[string]*int{"limit": &q.Limit, "offset": &q.Offset} {
		if v := r.FormValue(key); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return nil, badRequest("%s must be a non-negative whole number, got %q", key, v)
			}
			*dst = n
		}
	}
	if !matchesSome {
		// Statuses no trial shows now, as INTERRUPTED of a live run: an
		// empty page, of an experiment that exists.
		if _, err := db.Experiment(r.Context(), exp); err != nil {
			return nil, err
		}
		return trialPage{trials: []Trial{}}, nil
	}
	ts, err := db.QueryTrials(r.Context(), exp, q)
	if err != nil {
		if _, lookErr := db.Experiment(r.Context(), exp); lookErr == nil {
			return nil, &apiError{http.StatusBadRequest, err}
		}
		return nil, err
	}
	total, err := db.CountTrials(r.Context(), exp, q)
	if err != nil {
		return nil, err
	}
	page := trialPage{trials: make([]Trial, len(ts)), total: total}
	for i, t := range ts {
		page.trials[i] = trialOf(t, live)
	}
	if q.Limit > 0 && q.Offset+len(ts) < total {
		next := r.URL.Query()
		next.Set("offset", strconv.Itoa(q.Offset+len(ts)))
		next.Set("limit", strconv.Itoa(q.Limit))
		page.next = r.URL.Path + "?" + next.Encode()
	}
	return page, nil
}

// DefaultTrialPage is how many trials a trial list request answers when
// it names no limit.
const DefaultTrialPage = 100

// paramFilter reads NAME<OP>VALUE; VALUE is a number, true or false, or
// else a string.
var paramFilter = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_./-]*)(<=|>=|!=|=|<|>)(.*)$`)

func parseParamFilter(f string) (storage.ParamFilter, bool) {
	m := paramFilter.FindStringSubmatch(f)
	if m == nil {
		return storage.ParamFilter{}, false
	}
	pf := storage.ParamFilter{Name: m[1], Op: m[2], Value: m[3]}
	if x, err := strconv.ParseFloat(m[3], 64); err == nil {
		pf.Value = x
	} else if b, err := strconv.ParseBool(m[3]); err == nil && (m[3] == "true" || m[3] == "false") {
		pf.Value = b
	}
	return pf, true
}

// trialPage is a page of trials, sent as a JSON array with the total and
// the next page's address in headers.
type trialPage struct {
	trials []Trial
	total  int
	next   string // the next page's path and query, "" on the last page
}

func (p trialPage) MarshalJSON() ([]byte, error) { return json.Marshal(p.trials) }

func (p trialPage) setHeaders(h http.Header) {
	h.Set("X-Total-Count", strconv.Itoa(p.total))
	if p.next != "" {
		h.Set("Link", "<"+p.next+`>; rel="next"`)
	}
}

// maxCurves bounds the trials one curves request may ask for.
const maxCurves = 100

// DefaultCurvePoints is the most points a curve has when a curves request
// does not name its own bound with points=.
const DefaultCurvePoints = 500

// Curve is one trial's values of a metric against x.
type Curve struct {
	Number int `json:"trial_id"`
	// Points are [x, y] pairs in report order, from the reports that carry
	// both as finite numbers, downsampled to the request's bound.
	Points [][2]float64 `json:"points"`
	// Dropped counts the points left out by downsampling.
	Dropped int `json:"dropped"`
}

// Curves answers a curves request.
type Curves struct {
	Metric string  `json:"metric"`
	X      string  `json:"x"`
	Curves []Curve `json:"curves"`
}

// GET /api/experiments/{exp}/curves?metric=M&trials=1,2[&x=X][&points=N]:
// each trial's values of metric M against X: "iteration" (the default),
// "time" (seconds since the experiment was created) or another metric, with
// at most N points a curve (DefaultCurvePoints unless given; see downsample).
func (s *Server) curves(r *http.Request, db *storage.DB) (any, error) {
	name := r.PathValue("exp")
	metric, x := r.FormValue("metric"), r.FormValue("x")
	if metric == "" {
		return nil, badRequest("name the metric to draw: ?metric=NAME")
	}
	if x == "" {
		x = "iteration"
	}
	limit := DefaultCurvePoints
	if p := r.FormValue("points"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 4 {
			return nil, badRequest("points must be a whole number of at least 4, got %q", p)
		}
		limit = n
	}
	var numbers []int
	for f := range strings.SplitSeq(r.FormValue("trials"), ",") {
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, badRequest("trials must be trial numbers separated by commas, got %q", r.FormValue("trials"))
		}
		numbers = append(numbers, n)
	}
	if len(numbers) > maxCurves {
		return nil, badRequest("at most %d trials per request, got %d", maxCurves, len(numbers))
	}
	e, err := db.Experiment(r.Context(), name)
	if err != nil {
		return nil, err
	}
	out := Curves{Metric: metric, X: x, Curves: []Curve{}}
	for _, n := range numbers {
		// Reports stream from the database; only the points are held.
		points := [][2]float64{}
		err := db.EachTrialReport(r.Context(), name, n, func(rep storage.Report) error {
			y, ok := rep.Metrics[metric]
			var xv float64
			switch x {
			case "iteration":
				xv = float64(rep.Iteration)
			case "time":
				xv = rep.Time.Sub(e.CreatedAt).Seconds()
			default:
				v, has := rep.Metrics[x]
				xv, ok = v, ok && has
			}
			if ok && finite(xv) && finite(y) {
				points = append(points, [2]float64{xv, y})
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		kept := downsample(points, limit)
		out.Curves = append(out.Curves, Curve{Number: n, Points: kept, Dropped: len(points) - len(kept)})
	}
	return out, nil
}

// downsample keeps at most limit (at least 4) of points, in order, by the
// min/max-per-bucket rule: the first and last points always stay; the
// points between are cut into (limit-2)/2 buckets of consecutive points,
// and each bucket keeps its lowest and its highest point. The curve's
// lowest and highest points, so its best point whichever the mode, always
// stay, and so does every spike.
func downsample(points [][2]float64, limit int) [][2]float64 {
	if len(points) <= limit {
		return points
	}
	inner := points[1 : len(points)-1]
	buckets := (limit - 2) / 2
	out := make([][2]float64, 0, limit)
	out = append(out, points[0])
	for b := range buckets {
		part := inner[b*len(inner)/buckets : (b+1)*len(inner)/buckets]
		lo, hi := 0, 0
		for i, p := range part {
			if p[1] < part[lo][1] {
				lo = i
			}
			if p[1] > part[hi][1] {
				hi = i
			}
		}
		out = append(out, part[min(lo, hi)])
		if lo != hi {
			out = append(out, part[max(lo, hi)])
		}
	}
	return append(out, points[len(points)-1])
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// StragglerFraction marks a straggler: a worker whose step rate is below
// this fraction of the median step rate of its attempt's workers.
const StragglerFraction = 0.75

// Worker is one worker of a trial's group as the API shows it.
type Worker struct {
	Attempt int    `json:"attempt"`
	Rank    int    `json:"rank"`
	Node    string `json:"node"`
	PID     int    `json:"pid,omitempty"`
	// Status is as recorded, but INTERRUPTED for a worker a dead run
	// left RUNNING (storage.ShownWorkerStatus).
	Status string `json:"status"`
	// StepRate is in steps per second, null when unknown.
	StepRate *storage.Number `json:"step_rate"`
	// Straggler marks a worker much slower than its attempt's others (see
	// StragglerFraction).
	Straggler bool      `json:"straggler"`
	LogPath   string    `json:"log_path,omitempty"`
	StartedAt time.Time `json:"started_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// GPUs is the worker's devices as last sampled, empty when none were.
	GPUs []GPUSample `json:"gpus"`
}

// GPUSample is one device's latest utilisation sample.
type GPUSample struct {
	Node  string    `json:"node"`
	Index int       `json:"index"`
	Time  time.Time `json:"time"`
	// Util is in percent; memory in bytes.
	Util        storage.Number `json:"util"`
	MemoryUsed  int64          `json:"memory_used"`
	MemoryTotal int64          `json:"memory_total"`
}

// TrialDetail is one trial with its workers, checkpoints and events.
type TrialDetail struct {
	Trial
	Workers     []Worker     `json:"workers"`
	Checkpoints []Checkpoint `json:"checkpoints"`
	Events      []Event      `json:"events"`
}

// Checkpoint is a committed checkpoint of a trial.
type Checkpoint struct {
	Iteration int                       `json:"iteration"`
	Path      string                    `json:"path"`
	Metrics   map[string]storage.Number `json:"metrics"`
	CreatedAt time.Time                 `json:"created_at"`
	// Kept says its files are still on disk.
	Kept bool `json:"kept"`
}

// Event is something that happened to an experiment or a trial.
type Event struct {
	// Number is the trial's, 0 for the whole experiment's.
	Number  int             `json:"trial_id"`
	Time    time.Time       `json:"time"`
	Kind    string          `json:"kind"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func eventsOf(evs []storage.Event) []Event {
	out := make([]Event, len(evs))
	for i, e := range evs {
		out[i] = Event{Number: e.Trial, Time: e.Time, Kind: e.Kind, Message: e.Message, Data: e.Data}
	}
	return out
}

// sampleWindow is how far back before its workers' last update a trial's
// GPU samples are looked for.
const sampleWindow = 2 * time.Minute

// GET /api/experiments/{exp}/trials/{trial}: the trial, its workers (with
// their GPUs' latest samples and stragglers marked), checkpoints and events.
func (s *Server) trial(r *http.Request, db *storage.DB) (any, error) {
	ctx := r.Context()
	name := r.PathValue("exp")
	n, err := strconv.Atoi(r.PathValue("trial"))
	if err != nil {
		return nil, badRequest("trial must be a trial number, got %q", r.PathValue("trial"))
	}
	t, err := db.Trial(ctx, name, n)
	if err != nil {
		return nil, err
	}
	ws, err := db.Workers(ctx, name, n)
	if err != nil {
		return nil, err
	}
	cps, err := db.CheckpointRecords(ctx, name, n)
	if err != nil {
		return nil, err
	}
	evs, err := db.Events(ctx, name, n)
	if err != nil {
		return nil, err
	}
	live := db.RunLive(name)
	d := TrialDetail{Trial: trialOf(t, live), Workers: make([]Worker, len(ws)), Checkpoints: make([]Checkpoint, len(cps)), Events: eventsOf(evs)}
	for i, c := range cps {
		d.Checkpoints[i] = Checkpoint{Iteration: c.Iteration, Path: c.Path, Metrics: storage.Numbers(c.Metrics), CreatedAt: c.CreatedAt, Kept: c.Kept()}
	}
	var last time.Time
	for i, w := range ws {
		d.Workers[i] = Worker{Attempt: w.Attempt, Rank: w.Rank, Node: w.Node, PID: w.PID, Status: storage.ShownWorkerStatus(w.Status, live),
			LogPath: w.LogPath, StartedAt: w.StartedAt, UpdatedAt: w.UpdatedAt, GPUs: []GPUSample{}}
		if w.StepRate > 0 {
			rate := storage.Number(w.StepRate)
			d.Workers[i].StepRate = &rate
		}
		if w.UpdatedAt.After(last) {
			last = w.UpdatedAt
		}
	}
	markStragglers(d.Workers)
	if len(ws) > 0 {
		samples, err := db.ResourceSamples(ctx, name, last.Add(-sampleWindow))
		if err != nil {
			return nil, err
		}
		latest := map[[2]int64]storage.ResourceSample{} // by worker id and GPU
		for _, sm := range samples {
			if sm.WorkerID != 0 && sm.GPU != storage.NoGPU {
				latest[[2]int64{sm.WorkerID, int64(sm.GPU)}] = sm // samples come oldest first
			}
		}
		for i, w := range ws {
			for key, sm := range latest {
				if key[0] == w.ID {
					d.Workers[i].GPUs = append(d.Workers[i].GPUs, GPUSample{Node: sm.Node, Index: sm.GPU, Time: sm.Time,
						Util: storage.Number(sm.Util), MemoryUsed: sm.MemoryUsed, MemoryTotal: sm.MemoryTotal})
				}
			}
			sort.Slice(d.Workers[i].GPUs, func(a, b int) bool { return d.Workers[i].GPUs[a].Index < d.Workers[i].GPUs[b].Index })
		}
	}
	return d, nil
}

// markStragglers marks, within each attempt, the workers whose step rate
// is below StragglerFraction of the attempt's median; an attempt needs two
// workers with known rates to have stragglers.
func markStragglers(ws []Worker) {
	rates := map[int][]float64{}
	for _, w := range ws {
		if w.StepRate != nil {
			rates[w.Attempt] = append(rates[w.Attempt], float64(*w.StepRate))
		}
	}
	for i, w := range ws {
		rs := rates[w.Attempt]
		if w.StepRate == nil || len(rs) < 2 {
			continue
		}
		ws[i].Straggler = float64(*w.StepRate) < StragglerFraction*median(rs)
	}
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// maxEvents is the default and the most events one request returns.
const maxEvents = 1000

// GET /api/experiments/{exp}/events[?trial=N&limit=K]: the latest K
// events (default and at most 1000) of the experiment, or of trial N,
// oldest first.
func (s *Server) events(r *http.Request, db *storage.DB) (any, error) {
	trial, limit := 0, maxEvents
	if v := r.FormValue("trial"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, badRequest("trial must be a trial number, got %q", v)
		}
		trial = n
	}
	if v := r.FormValue("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, badRequest("limit must be a positive whole number, got %q", v)
		}
		limit = min(n, maxEvents)
	}
	evs, err := db.RecentEvents(r.Context(), r.PathValue("exp"), trial, limit)
	if err != nil {
		return nil, err
	}
	return eventsOf(evs), nil
}

// Resources is what a sweep uses: the resource manager's view when the
// dashboard runs inside the sweep, and the latest utilisation samples.
type Resources struct {
	// Manager is nil unless the dashboard runs inside `gotune run`.
	Manager *Usage `json:"manager"`
	// Samples are the latest sample of each GPU (index >= 0) and host
	// (index -1) taken in the last two minutes.
	Samples []GPUSample `json:"samples"`
}

// Usage is workers.Usage in the API's words; memory in bytes.
type Usage struct {
	CPUs          float64 `json:"cpus"`
	CPUsInUse     float64 `json:"cpus_in_use"`
	GPUs          float64 `json:"gpus"`
	GPUsInUse     float64 `json:"gpus_in_use"`
	Memory        int64   `json:"memory"`
	MemoryInUse   int64   `json:"memory_in_use"`
	WaitingGroups int     `json:"waiting_groups"`
}

func (s *Server) managerUsage() *Usage {
	if s.usage == nil {
		return nil
	}
	u := s.usage()
	return &Usage{CPUs: u.Capacity.CPUs, CPUsInUse: u.InUse.CPUs, GPUs: u.Capacity.GPUs, GPUsInUse: u.InUse.GPUs,
		Memory: int64(u.Capacity.Memory), MemoryInUse: int64(u.InUse.Memory), WaitingGroups: u.Waiting}
}

// latestSamples returns each device's latest sample of experiment exp
// taken since, by node and index.
func latestSamples(r *http.Request, db *storage.DB, exp string, since time.Time) ([]GPUSample, error) {
	samples, err := db.ResourceSamples(r.Context(), exp, since)
	if err != nil {
		return nil, err
	}
	type key struct {
		node string
		gpu  int
	}
	latest := map[key]storage.ResourceSample{}
	for _, sm := range samples {
		if sm.GPU == storage.NoGPU && sm.WorkerID != 0 {
			continue // a worker's processes, not the host
		}
		latest[key{sm.Node, sm.GPU}] = sm
	}
	out := make([]GPUSample, 0, len(latest))
	for _, sm := range latest {
		out = append(out, GPUSample{Node: sm.Node, Index: sm.GPU, Time: sm.Time, Util: storage.Number(sm.Util),
			MemoryUsed: sm.MemoryUsed, MemoryTotal: sm.MemoryTotal})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Node != out[j].Node {
			return out[i].Node < out[j].Node
		}
		return out[i].Index < out[j].Index
	})
	return out, nil
}

// GET /api/experiments/{exp}/resources: what the sweep uses now.
func (s *Server) resources(r *http.Request, db *storage.DB) (any, error) {
	samples, err := latestSamples(r, db, r.PathValue("exp"), s.now().Add(-sampleWindow))
	if err != nil {
		return nil, err
	}
	return Resources{Manager: s.managerUsage(), Samples: samples}, nil
}
