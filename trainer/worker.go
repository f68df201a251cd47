package trainer

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"github.com/gotune/gotune/allreduce"
)

// TrainFunc is a training function. Every worker of a trial's group runs it
// with its own Worker; it returns nil when training is complete. When the
// tuner stops or pauses the trial, ctx is cancelled: the function should
// return promptly (Report then returns ctx's error, which it may return as is).
type TrainFunc func(ctx context.Context, w *Worker) error

// Worker is one worker's view of its trial: the trial's configuration, the
// worker's place in the group, the group's collectives, and the channel to
// report results through.
type Worker struct {
	experiment string
	trial      int
	rank       int
	localRank  int
	seed       int64
	config     map[string]any
	comm       allreduce.Comm
	// scratchDir holds the folders CheckpointDir creates; resumeDir is the
	// committed checkpoint to start from, "" on a fresh start.
	scratchDir  string
	checkpoints int
	resumeDir   string
	report      func(ctx context.Context, rank int, metrics map[string]float64, checkpoint string) error
	// diskFull tells the launching side that the worker waits for space
	// (err) or writes again (nil); nil for nobody to tell.
	diskFull func(err error)
}

// Experiment is the name of the experiment the trial belongs to.
func (w *Worker) Experiment() string { return w.experiment }

// Trial is the trial's number within its experiment.
func (w *Worker) Trial() int { return w.trial }

// Rank is this worker's index in the group, from 0.
func (w *Worker) Rank() int { return w.rank }

// LocalRank is this worker's index among the group's workers on its node.
func (w *Worker) LocalRank() int { return w.localRank }

// WorldSize is the number of workers in the group.
func (w *Worker) WorldSize() int { return w.comm.Size() }

// Comm is the group's collectives, for averaging gradients and the like.
func (w *Worker) Comm() allreduce.Comm { return w.comm }

// Seed is the trial's seed: the same on every rank, derived from the
// experiment's seed and the trial number, so a trial is reproducible.
func (w *Worker) Seed() int64 { return w.seed }

// Config returns a copy of the trial's hyperparameters.
func (w *Worker) Config() map[string]any {
	out := make(map[string]any, len(w.config))
	for k, v := range w.config {
		out[k] = v
	}
	return out
}

// Float returns hyperparameter name as a float64, or def when the trial has
// no such parameter. It panics when the value is not a number; the group
// turns the panic into the trial's error.
func (w *Worker) Float(name string, def float64) float64 {
	switch v := w.lookup(name, def).(type) {
	case float64:
		return v
	case int64:
		return float64(v)
	default:
		panic(&ConfigError{name, v, "a number"})
	}
}

// Int returns hyperparameter name as an int, or def when absent. A float
// with no fractional part is accepted; anything else panics as Float does.
func (w *Worker) Int(name string, def int) int {
	switch v := w.lookup(name, int64(def)).(type) {
	case int64:
		return int(v)
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
			return int(v)
		}
	}
	panic(&ConfigError{name, w.config[name], "an integer"})
}

// String returns hyperparameter name as text: strings as they are, numbers
// and booleans formatted. def is returned when absent.
func (w *Worker) String(name, def string) string {
	switch v := w.lookup(name, def).(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case int64:
		return strconv.FormatInt(v, 10)
	case bool:
		return strconv.FormatBool(v)
	default:
		panic(&ConfigError{name, v, "a string"})
	}
}

// Bool returns hyperparameter name as a bool, or def when absent.
func (w *Worker) Bool(name string, def bool) bool {
	v, ok := w.lookup(name, def).(bool)
	if !ok {
		panic(&ConfigError{name, w.config[name], "a boolean"})
	}
	return v
}

func (w *Worker) lookup(name string, def any) any {
	if v, ok := w.config[name]; ok {
		return v
	}
	return def
}

// ConfigError is the panic value of a typed getter whose hyperparameter has
// the wrong type.
type ConfigError struct {
	Name  string
	Value any
	Want  string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("hyperparameter %q is %v (%T), want %s", e.Name, e.Value, e.Value, e.Want)
}

// CheckpointDir creates and returns a new, empty folder of this worker's own
// to write a checkpoint in before handing it over with WithCheckpoint.
// Folders never handed over are deleted when the group ends or restarts.
func (w *Worker) CheckpointDir() (string, error) {
	w.checkpoints++
	dir := filepath.Join(w.scratchDir, fmt.Sprintf("rank%d-%d", w.rank, w.checkpoints))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("checkpoint folder: %w", err)
	}
	return dir, nil
}

// ResumeDir is the committed checkpoint this run starts from (after a
// restart, a resize, a pause or a resumed experiment), or "" on a fresh
// start. It holds the merged files of every rank that contributed to it;
// after a resize, the group may have more or fewer ranks than wrote it.
func (w *Worker) ResumeDir() string { return w.resumeDir }

// ReportOption adds something to a report besides its metrics.
type ReportOption func(*reportOptions)

type reportOptions struct{ checkpoint string }

// WithCheckpoint hands dir over with the report: a directory the worker has
// finished writing and will not touch again. gotune takes it over and merges
// it with the other ranks' directories of the same report into one committed
// checkpoint.
func WithCheckpoint(dir string) ReportOption {
	return func(o *reportOptions) { o.checkpoint = dir }
}

// Report sends one result of the trial. Every rank calls Report the same
// number of times, as with Ray Train: the k-th calls of all ranks make the
// trial's k-th report. Rank 0's metrics are the trial's; the other ranks'
// metrics are ignored, but every rank's checkpoint folder is merged into the
// report's checkpoint. Report returns on every rank once the report is
// durably recorded and the scheduler has decided; when the decision stops
// or pauses the trial, ctx is cancelled and Report returns ctx's error.
// This holds for process workers too: their reports travel to the launching
// process and the verdict back.
func (w *Worker) Report(ctx context.Context, metrics map[string]float64, opts ...ReportOption) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for k, v := range metrics {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("report: metric %q is %v, not a finite number", k, v)
		}
	}
	var o reportOptions
	for _, opt := range opts {
		opt(&o)
	}
	return w.report(ctx, w.rank, metrics, o.checkpoint)
}
