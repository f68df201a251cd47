// Package trialfiles writes two files for every trial, beside its
// checkpoints, as the trial reports: a TensorBoard event file, so that
// `tensorboard --logdir <checkpoint root>/<experiment>` shows every
// trial's curves as a run named after its folder, and reports.csv, one row
// per report.
//
// It is a tuner.Observer and imports tfevents, trainer and tuner; nothing
// below cmd/gotune imports it.
package trialfiles

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/gotune/gotune/tfevents"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/tuner"
)

// CSVName is the name of a trial's CSV file in its folder. Its header is
// iteration, time (seconds since 1970) and one column per metric, in name
// order; a metric that first appears later adds a column, the earlier rows
// having an empty cell there. Numbers are written in Go's shortest form
// (NaN, +Inf and -Inf as such).
const CSVName = "reports.csv"

// Files is a tuner.Observer that writes each trial's files. Its methods
// must be called from one goroutine at a time, as the tuner's loop does;
// call Close once the sweep has ended.
//
// A trial's files are opened at its first report in this process and
// closed when it ends. When a trial that already has files reports an
// iteration again (its experiment was resumed, or a scheduler restarted it
// from an earlier checkpoint), the CSV rows from that iteration on are
// dropped, and a new event file starts with a session START at that step,
// which tells TensorBoard to drop those steps of the older files.
type Files struct {
	dir     func(trial int) string
	onError func(trial int, err error)
	open    map[int]*trialFiles
	failed  map[int]bool
}

var _ tuner.Observer = (*Files)(nil)

// New returns an observer that writes trial n's files in folder dir(n),
// creating it when needed (for a sweep, pass the Tuner's TrialDir).
// onError, which may be nil, hears of a trial's first failure to write;
// that trial's files are then left as they are for the rest of the run,
// and the sweep goes on.
func New(dir func(trial int) string, onError func(trial int, err error)) *Files {
	if onError == nil {
		onError = func(int, error) {}
	}
	return &Files{dir: dir, onError: onError, open: map[int]*trialFiles{}, failed: map[int]bool{}}
}

// OnReport appends the report to the trial's files.
func (f *Files) OnReport(trial int, r trainer.Result) {
	if f.failed[trial] {
		return
	}
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	tf, ok := f.open[trial]
	var err error
	if ok && r.Iteration <= tf.last {
		// The trial starts again from an earlier checkpoint (a scheduler's
		// restart): reopen its files as for a resumed trial.
		delete(f.open, trial)
		if err := tf.close(); err != nil {
			f.fail(trial, err)
			return
		}
		ok = false
	}
	if !ok {
		if tf, err = openTrial(f.dir(trial), r); err == nil {
			f.open[trial] = tf
		}
	}
	if err == nil {
		err = tf.write(r)
	}
	if err != nil {
		f.fail(trial, err)
	}
}

func (f *Files) fail(trial int, err error) {
	f.failed[trial] = true
	if tf, ok := f.open[trial]; ok {
		tf.close()
		delete(f.open, trial)
	}
	f.onError(trial, fmt.Errorf("trial %d: %w", trial, err))
}

// OnTrialEnd closes the trial's files.
func (f *Files) OnTrialEnd(trial int, _ string, _ error) {
	if tf, ok := f.open[trial]; ok {
		delete(f.open, trial)
		if err := tf.close(); err != nil && !f.failed[trial] {
			f.fail(trial, err)
		}
	}
}

// Close closes the files of the trials that have not ended (interrupted
// or paused ones) and returns the first error.
func (f *Files) Close() error {
	var err error
	for _, n := range slices.Sorted(maps.Keys(f.open)) {
		err = errors.Join(err, f.open[n].close())
	}
	clear(f.open)
	return err
}

// trialFiles are one trial's open files.
type trialFiles struct {
	dir  string
	tb   *tfevents.Writer
	csv  *os.File
	cols []string // the metric columns of the CSV, in header order
	row  []string
	last int // the last iteration written
}

// openTrial opens the files of a trial whose first report in this process
// is first, dropping what a resumed trial reports again.
func openTrial(dir string, first trainer.Result) (*trialFiles, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	tf := &trialFiles{dir: dir}
	path := filepath.Join(dir, CSVName)
	cols, rows, err := readCSV(path)
	switch {
	case errors.Is(err, os.ErrNotExist) || err == nil && cols == nil:
		tf.cols = slices.Sorted(maps.Keys(first.Metrics))
		err = writeCSV(path, tf.cols, nil)
	case err != nil:
		return nil, err
	default:
		kept := slices.DeleteFunc(rows, func(row map[string]string) bool {
			it, err := strconv.Atoi(row["iteration"])
			return err != nil || it >= first.Iteration
		})
		tf.cols = cols
		if len(kept) < len(rows) {
			err = writeCSV(path, cols, kept)
		}
	}
	if err != nil {
		return nil, err
	}
	if tf.csv, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		tf.close()
		return nil, err
	}
	resumed := slices.ContainsFunc(entries, func(e os.DirEntry) bool { return tfevents.IsEventFile(e.Name()) })
	if tf.tb, err = tfevents.Create(dir, time.Now()); err != nil {
		tf.close()
		return nil, err
	}
	if resumed {
		err = tf.tb.Write(tfevents.Event{WallTime: tfevents.Seconds(first.Time), Step: int64(first.Iteration), SessionStatus: tfevents.SessionStart})
		if err != nil {
			tf.close()
			return nil, err
		}
	}
	return tf, nil
}

// write appends r to both files.
func (tf *trialFiles) write(r trainer.Result) error {
	keys := slices.Sorted(maps.Keys(r.Metrics))
	if added := newColumns(tf.cols, keys); len(added) > 0 {
		if err := tf.widen(added); err != nil {
			return err
		}
	}
	tf.row = append(tf.row[:0], strconv.Itoa(r.Iteration), strconv.FormatFloat(tfevents.Seconds(r.Time), 'f', -1, 64))
	for _, c := range tf.cols {
		cell := ""
		if v, ok := r.Metrics[c]; ok {
			cell = strconv.FormatFloat(v, 'g', -1, 64)
		}
		tf.row = append(tf.row, cell)
	}
	w := csv.NewWriter(tf.csv)
	if err := w.Write(tf.row); err != nil {
		return err
	}
	if w.Flush(); w.Error() != nil {
		return w.Error()
	}
	scalars := make([]tfevents.Scalar, len(keys))
	for i, k := range keys {
		scalars[i] = tfevents.Scalar{Tag: k, Value: float32(r.Metrics[k])}
	}
	tf.last = r.Iteration
	return tf.tb.Write(tfevents.Event{WallTime: tfevents.Seconds(r.Time), Step: int64(r.Iteration), Scalars: scalars})
}

// newColumns returns the keys that are not columns yet.
func newColumns(cols, keys []string) []string {
	var out []string
	for _, k := range keys {
		if !slices.Contains(cols, k) {
			out = append(out, k)
		}
	}
	return out
}

// widen rewrites the CSV with columns added, keeping its rows.
func (tf *trialFiles) widen(added []string) error {
	path := filepath.Join(tf.dir, CSVName)
	if err := tf.csv.Close(); err != nil {
		return err
	}
	_, rows, err := readCSV(path)
	if err != nil {
		return err
	}
	cols := slices.Concat(tf.cols, added)
	slices.Sort(cols)
	if err := writeCSV(path, cols, rows); err != nil {
		return err
	}
	tf.cols = cols
	tf.csv, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	return err
}

func (tf *trialFiles) close() error {
	var err error
	if tf.csv != nil {
		err = tf.csv.Close()
	}
	if tf.tb != nil {
		err = errors.Join(err, tf.tb.Close())
	}
	return err
}

// readCSV reads a trial's CSV: its metric columns and its rows by column.
func readCSV(path string) ([]string, []map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	header, err := r.Read()
	if err == io.EOF {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(header) < 2 || header[0] != "iteration" || header[1] != "time" {
		return nil, nil, fmt.Errorf("%s: not a reports file of gotune (header %q): move it away", path, header)
	}
	var rows []map[string]string
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			// A row cut short by a crash ends the file: keep what came before.
			var pe *csv.ParseError
			if errors.As(err, &pe) && errors.Is(pe.Err, csv.ErrFieldCount) {
				break
			}
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		row := make(map[string]string, len(rec))
		for i, v := range rec {
			row[header[i]] = v
		}
		rows = append(rows, row)
	}
	return header[2:], rows, nil
}

// writeCSV replaces the file at path, atomically, with a header of cols
// and rows.
func writeCSV(path string, cols []string, rows []map[string]string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".reports-*.csv")
	if err != nil {
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	w := csv.NewWriter(tmp)
	header := slices.Concat([]string{"iteration", "time"}, cols)
	w.Write(header)
	rec := make([]string, len(header))
	for _, row := range rows {
		for i, c := range header {
			rec[i] = row[c]
		}
		w.Write(rec)
	}
	w.Flush()
	err = errors.Join(w.Error(), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
