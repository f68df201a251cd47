package tuner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/workers"
)

// DefaultUsageInterval is how often a sweep samples what its running
// process workers use (CPU, RSS) into the database.
const DefaultUsageInterval = 5 * time.Second

// WithUsageSampling samples what the process workers of running trials use
// every interval instead of every DefaultUsageInterval; a negative
// interval turns the sampling off.
func WithUsageSampling(interval time.Duration) Option {
	return func(t *Tuner) { t.usageEvery = interval }
}

// usageKey is one worker process of one trial.
type usageKey struct{ trial, rank, pid int }

// usageState is the sampler's memory: each worker's previous CPU time, and
// its latest CPU use and RSS, which a straggler event quotes.
type usageState struct {
	mu     sync.Mutex
	prev   map[usageKey]workers.ProcUsage
	at     map[usageKey]time.Time
	latest map[usageKey]storage.ResourceSample
}

// sampleUsage samples the running process workers until the returned
// function is called.
func (t *Tuner) sampleUsage(expID int64) (stop func()) {
	every := t.usageEvery
	if every == 0 {
		every = DefaultUsageInterval
	}
	if every < 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if rows := t.readUsage(ctx); len(rows) > 0 {
				// A sample that cannot be recorded is lost; the sweep goes on.
				_ = t.db.AddResourceSamples(context.WithoutCancel(ctx), expID, rows)
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// readUsage reads every running trial's process workers once and returns
// the samples of those read before: CPU use as the percentage of one core
// over the time since (summed over the worker's processes), and RSS.
func (t *Tuner) readUsage(ctx context.Context) []storage.ResourceSample {
	u := &t.usage
	u.mu.Lock()
	if u.prev == nil {
		u.prev, u.at, u.latest = map[usageKey]workers.ProcUsage{}, map[usageKey]time.Time{}, map[usageKey]storage.ResourceSample{}
	}
	u.mu.Unlock()
	var rows []storage.ResourceSample
	seen := map[usageKey]bool{}
	for trial, in := range t.inspectors.all() {
		ws, err := in.Usage(ctx)
		if err != nil {
			continue // not running
		}
		now := time.Now()
		for _, w := range ws {
			k := usageKey{trial, w.Rank, w.PID}
			seen[k] = true
			u.mu.Lock()
			prev, ok := u.prev[k]
			at := u.at[k]
			u.prev[k], u.at[k] = w.ProcUsage, now
			u.mu.Unlock()
			id := t.gpus.workerID(trial, w.Rank)
			if !ok || id == 0 || !now.After(at) {
				continue
			}
			cpu := max(w.CPUSeconds-prev.CPUSeconds, 0) / now.Sub(at).Seconds() * 100
			row := storage.ResourceSample{Time: now, Node: w.Node, WorkerID: id, GPU: storage.NoGPU,
				Util: cpu, MemoryUsed: int64(w.RSS)}
			u.mu.Lock()
			u.latest[k] = row
			u.mu.Unlock()
			rows = append(rows, row)
		}
	}
	u.mu.Lock()
	for k := range u.prev {
		if !seen[k] {
			delete(u.prev, k)
			delete(u.at, k)
			delete(u.latest, k)
		}
	}
	u.mu.Unlock()
	return rows
}

// latestUsage returns the latest CPU and RSS sample of each of a trial's
// workers, by rank.
func (u *usageState) latestOf(trial int) map[int]storage.ResourceSample {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := map[int]storage.ResourceSample{}
	for k, s := range u.latest {
		if k.trial == trial {
			out[k.rank] = s
		}
	}
	return out
}

// StragglerFraction and StragglerWindow define a straggler: a running
// worker whose step rate (its reports per second since it started) stays
// below StragglerFraction of the median step rate of its group's running
// workers that report, for StragglerWindow. The trial then gets a
// "straggler" event, once per worker and attempt, and the dashboard marks
// the worker (with the same fraction).
const (
	StragglerFraction = 0.75
	StragglerWindow   = 30 * time.Second
)

// stragglerWatch follows the step rates of running trials' workers.
type stragglerWatch struct {
	mu sync.Mutex
	// below is when each worker's rate went below the line, by trial,
	// rank and process id (a restarted process worker is watched afresh);
	// flagged says its event was recorded.
	below   map[[3]int]time.Time
	flagged map[[3]int]bool
}

// Straggler is a worker found to lag its group.
type Straggler struct {
	Rank     int     `json:"rank"`
	StepRate float64 `json:"step_rate"`
	Median   float64 `json:"median"`
	Fraction float64 `json:"fraction"`
	// Below is how long its rate has been below the line, in seconds.
	Below float64 `json:"below_seconds"`
}

// observe takes the status of a trial's workers at now and returns the
// workers that have just become stragglers. A group whose workers all
// start afresh as new processes (a restart) are watched afresh.
func (s *stragglerWatch) observe(trial int, ws []trainer.WorkerStatus, now time.Time, window time.Duration) []Straggler {
	var rates []float64
	for _, w := range ws {
		if w.State == trainer.WorkerRunning && w.StepRate > 0 {
			rates = append(rates, w.StepRate)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.below == nil {
		s.below, s.flagged = map[[3]int]time.Time{}, map[[3]int]bool{}
	}
	current := map[[3]int]bool{}
	for _, w := range ws {
		current[[3]int{trial, w.Rank, w.PID}] = true
	}
	for k := range s.flagged {
		if k[0] == trial && !current[k] {
			delete(s.flagged, k)
		}
	}
	for k := range s.below {
		if k[0] == trial && !current[k] {
			delete(s.below, k)
		}
	}
	if len(rates) < 2 {
		return nil
	}
	var out []Straggler
	median := medianOf(rates)
	for _, w := range ws {
		k := [3]int{trial, w.Rank, w.PID}
		if w.State != trainer.WorkerRunning || w.StepRate <= 0 || w.StepRate >= StragglerFraction*median {
			delete(s.below, k)
			continue
		}
		since, ok := s.below[k]
		if !ok {
			s.below[k] = now
			continue
		}
		if now.Sub(since) >= window && !s.flagged[k] {
			s.flagged[k] = true
			out = append(out, Straggler{Rank: w.Rank, StepRate: w.StepRate, Median: median,
				Fraction: StragglerFraction, Below: now.Sub(since).Seconds()})
		}
	}
	return out
}

func medianOf(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// recordStragglers records an event for each worker of the trial that has
// just become a straggler, with its latest CPU and memory use beside its
// group's median.
func (t *Tuner) recordStragglers(ctx context.Context, tr *trialRun, ws []trainer.WorkerStatus) error {
	window := t.stragglerWindow
	if window == 0 {
		window = StragglerWindow
	}
	found := t.stragglers.observe(tr.number, ws, time.Now(), window)
	if len(found) == 0 {
		return nil
	}
	usage := t.usage.latestOf(tr.number)
	var cpus, rss []float64
	for _, s := range usage {
		cpus, rss = append(cpus, s.Util), append(rss, float64(s.MemoryUsed))
	}
	var errs []error
	for _, s := range found {
		data := map[string]any{"straggler": s}
		msg := fmt.Sprintf("rank %d runs %.3g steps/s, below %.2g of its group's median %.3g steps/s for %.0fs",
			s.Rank, s.StepRate, s.Fraction, s.Median, s.Below)
		if u, ok := usage[s.Rank]; ok {
			data["cpu_percent"], data["rss_bytes"] = u.Util, u.MemoryUsed
			data["group_cpu_percent"], data["group_rss_bytes"] = medianOf(cpus), medianOf(rss)
			msg += fmt.Sprintf("; CPU %.0f%% (group median %.0f%%), RSS %v (group median %v)",
				u.Util, medianOf(cpus), workers.Bytes(u.MemoryUsed), workers.Bytes(medianOf(rss)))
		}
		errs = append(errs, t.db.AddEvent(ctx, 0, tr.record.ID(), storage.EventStraggler, msg, data))
	}
	return errors.Join(errs...)
}
