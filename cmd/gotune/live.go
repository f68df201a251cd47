package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/workers"
)

// The live status table `gotune run` keeps redrawn at the bottom of a
// terminal, in the manner of Ray Tune's: elapsed time, resources in use,
// trials by status, a progress bar and the best trials so far. Notable
// lines (a trial's end, a restart) scroll above it.

// liveSnapshot is what one frame of the table shows.
type liveSnapshot struct {
	Experiment string
	Metric     string
	Mode       string
	Elapsed    time.Duration
	// Usage is the resource manager's; nil when unknown.
	Usage *workers.Usage
	// Counts is the number of trials in each status.
	Counts map[string]int
	// NumSamples is the number of trials the sweep runs in all.
	NumSamples int
	// Top are the best trials so far, best first; Trials counts them all.
	Top    []*storage.Trial
	Trials int
	// ETA is the estimated time the sweep has left (see estimateETA),
	// valid when HasETA.
	ETA    time.Duration
	HasETA bool
	// Err is why the results could not be read for this frame, "" if they were.
	Err string
}

// renderLive renders a frame as lines of at most width characters (0: no
// limit).
func renderLive(s liveSnapshot, width int) []string {
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	add("== %s · running for %s ==", s.Experiment, formatElapsed(s.Elapsed))
	if u := s.Usage; u != nil {
		line := fmt.Sprintf("Resources in use: %s/%s CPUs, %s/%s GPUs", fmtAmount(u.InUse.CPUs), fmtAmount(u.Capacity.CPUs),
			fmtAmount(u.InUse.GPUs), fmtAmount(u.Capacity.GPUs))
		if u.Capacity.Memory > 0 {
			line += fmt.Sprintf(", %s/%s memory", u.InUse.Memory.Human(), u.Capacity.Memory.Human())
		}
		if u.Waiting > 0 {
			line += "; " + plural(u.Waiting, "group") + " waiting"
		}
		add("%s", line)
	}
	total := max(s.NumSamples, s.Trials)
	var parts []string
	for _, st := range storage.TrialStatuses {
		if n := s.Counts[st]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
		}
	}
	counts := ""
	if len(parts) > 0 {
		counts = " (" + strings.Join(parts, ", ") + ")"
	}
	add("Trials: %d of %d%s", s.Trials, total, counts)
	finished := s.Counts[storage.TrialTerminated] + s.Counts[storage.TrialStopped] + s.Counts[storage.TrialError]
	eta := ""
	if s.HasETA {
		eta = ", ETA " + formatElapsed(s.ETA)
	}
	add("%s %d/%d finished%s", progressBar(finished, total, 30), finished, total, eta)
	if s.Err != "" {
		add("cannot read the results: %s", s.Err)
	}
	if len(s.Top) > 0 {
		lines = append(lines, topTable(s, width)...)
		if more := s.Trials - len(s.Top); more > 0 {
			add("... and %d more trials", more)
		}
	}
	if width > 0 {
		for i, l := range lines {
			lines[i] = truncate(l, width)
		}
	}
	return lines
}

// topTable renders the best trials as a bordered table: trial, status,
// iterations, best metric and every parameter. When that is wider than
// width (0: no limit), the parameters that have one value in every row
// are left out, so that the cut at the right edge takes the varying ones
// last.
func topTable(s liveSnapshot, width int) []string {
	params := map[string]bool{}
	for _, t := range s.Top {
		for k := range t.Params {
			params[k] = true
		}
	}
	names := slices.Sorted(maps.Keys(params))
	table := paramTable(s, names)
	if width <= 0 || utf8.RuneCountInString(table[0]) <= width || len(s.Top) < 2 {
		return table
	}
	varying := slices.DeleteFunc(slices.Clone(names), func(n string) bool {
		first, ok := s.Top[0].Params[n]
		for _, t := range s.Top[1:] {
			if v, has := t.Params[n]; has != ok || formatValue(v) != formatValue(first) {
				return false
			}
		}
		return true
	})
	return paramTable(s, varying)
}

// paramTable renders the best trials with the parameters names.
func paramTable(s liveSnapshot, names []string) []string {
	header := append([]string{"trial", "status", "iter", s.Metric + " (" + s.Mode + ")"}, names...)
	rows := [][]string{header}
	for _, t := range s.Top {
		row := []string{fmt.Sprint(t.Number), t.Status, fmt.Sprint(t.Iterations), optFloat(t.BestMetric)}
		for _, n := range names {
			v, ok := t.Params[n]
			cell := ""
			if ok {
				cell = formatValue(v)
			}
			row = append(row, cell)
		}
		rows = append(rows, row)
	}
	widths := make([]int, len(header))
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	rule := "+"
	for _, w := range widths {
		rule += strings.Repeat("-", w+2) + "+"
	}
	out := []string{rule}
	for i, r := range rows {
		line := "|"
		for j, c := range r {
			pad := strings.Repeat(" ", widths[j]-utf8.RuneCountInString(c))
			if j == 1 || j > 3 && !isNumber(c) {
				line += " " + c + pad + " |"
			} else {
				line += " " + pad + c + " |"
			}
		}
		out = append(out, line)
		if i == 0 {
			out = append(out, rule)
		}
	}
	return append(out, rule)
}

func isNumber(s string) bool {
	var f float64
	_, err := fmt.Sscan(s, &f)
	return err == nil
}

// formatValue renders a parameter's value.
func formatValue(v any) string {
	if f, ok := v.(float64); ok {
		return fmt.Sprintf("%.4g", f)
	}
	return fmt.Sprint(v)
}

// plural writes n things, as in "1 group" or "2 groups".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

func fmtAmount(v float64) string { return fmt.Sprintf("%.4g", v) }

// progressBar draws done out of total in width cells.
func progressBar(done, total, width int) string {
	full := 0
	if total > 0 {
		full = min(width, done*width/total)
	}
	return "[" + strings.Repeat("#", full) + strings.Repeat(".", width-full) + "]"
}

func formatElapsed(d time.Duration) string {
	s := int(d.Round(time.Second).Seconds())
	return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
}

// truncate shortens s to width characters, marking the cut with "…".
func truncate(s string, width int) string {
	if utf8.RuneCountInString(s) <= width {
		return s
	}
	r := []rune(s)
	return string(r[:width-1]) + "…"
}

// liveView keeps the status table drawn at the bottom of a terminal. It is
// a tuner observer: the end of a trial and a restart are printed above the
// table. One goroutine, started by newLiveView and stopped by Close, redraws
// the table every interval; the observer methods only queue lines.
type liveView struct {
	w        io.Writer
	width    func() int
	snapshot func(context.Context) liveSnapshot
	start    time.Time
	events   eventLines

	mu      sync.Mutex
	pending []string // lines to print above the next frame
	drawn   int      // lines of the frame on screen

	cancel context.CancelFunc
	done   chan struct{}
}

// liveInterval is how often the table is redrawn.
const liveInterval = time.Second

// newLiveView returns a view that draws frames of snapshot on w once
// started; width gives the terminal's width (0: no limit).
func newLiveView(w io.Writer, width func() int, snapshot func(context.Context) liveSnapshot) *liveView {
	return &liveView{w: w, width: width, snapshot: snapshot, start: time.Now()}
}

// Start draws a frame every interval until Close.
func (v *liveView) Start(interval time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	v.cancel, v.done = cancel, make(chan struct{})
	v.start = time.Now()
	go v.loop(ctx, interval)
}

func (v *liveView) loop(ctx context.Context, interval time.Duration) {
	defer close(v.done)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		v.draw(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// draw replaces the frame on screen with the queued lines and a new frame.
func (v *liveView) draw(ctx context.Context) {
	s := v.snapshot(ctx)
	s.Elapsed = time.Since(v.start)
	lines := renderLive(s, v.width())
	v.mu.Lock()
	defer v.mu.Unlock()
	var b strings.Builder
	if v.drawn > 0 {
		// Up to the frame's first line, then clear to the end of the screen.
		fmt.Fprintf(&b, "\x1b[%dA\r\x1b[J", v.drawn)
	}
	for _, l := range v.pending {
		b.WriteString(l + "\n")
	}
	v.pending = v.pending[:0]
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	v.drawn = len(lines)
	io.WriteString(v.w, b.String())
}

func (v *liveView) queue(line string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if w := v.width(); w > 0 {
		line = truncate(line, w)
	}
	v.pending = append(v.pending, line)
}

// OnReport does nothing: the table shows the reports.
func (v *liveView) OnReport(int, trainer.Result) {}

// OnTrialEnd prints the trial's end above the table.
func (v *liveView) OnTrialEnd(trial int, status string, err error) {
	line := fmt.Sprintf("%s  trial %d %s", formatElapsed(time.Since(v.start)), trial, status)
	if err != nil {
		line += ": " + oneLine(err.Error())
	}
	v.queue(line)
}

// OnNotice prints a notice of the run above the table.
func (v *liveView) OnNotice(msg string) {
	v.queue(fmt.Sprintf("%s  %s", formatElapsed(time.Since(v.start)), msg))
}

// OnEvent prints a restart or a resize above the table.
func (v *liveView) OnEvent(trial int, e trainer.Event) {
	v.queue(fmt.Sprintf("%s  trial %d %s", formatElapsed(time.Since(v.start)), trial, v.events.describe(trial, e)))
}

// OnDiskFull prints above the table that the sweep waits for space, or
// goes on.
func (v *liveView) OnDiskFull(err error) {
	for _, line := range diskFullLines(err) {
		v.queue(line)
	}
}

// Close stops the redraws and leaves a last frame on screen. It must
// follow Start.
func (v *liveView) Close() {
	v.cancel()
	<-v.done
	v.draw(context.Background())
}

// terminalWidth returns f's width when it is a terminal, else 0.
func terminalWidth(f *os.File) func() int {
	return func() int {
		w, _, err := term.GetSize(int(f.Fd()))
		if err != nil {
			return 0
		}
		return w
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) (*os.File, bool) {
	f, ok := w.(*os.File)
	return f, ok && term.IsTerminal(int(f.Fd()))
}

// liveTop is how many of the best trials the table lists.
const liveTop = 10

// trialTimes is what the ETA is estimated from: how many trials have
// finished and how long they took in all, how long each running trial has
// run, and how many trials have not started yet (or wait, paused or
// pending).
type trialTimes struct {
	finished      int
	finishedTotal time.Duration
	running       []time.Duration
	waiting       int
}

// estimateETA estimates the time a sweep has left: each trial is taken to
// last as long as the finished ones did on average, so a running trial
// has that mean less what it has run (at least nothing) left, and a
// waiting one the whole mean. The trials that run at once now (at least
// one) are that many slots: each waiting trial starts in the slot that
// frees first, and the sweep ends when the last slot does. Sharing the
// work out evenly instead forgets that a trial runs in one slot only:
// three trials of 4 s left for two slots take 8 s, not 6. Unknown (false)
// before a trial has finished.
func estimateETA(t trialTimes) (time.Duration, bool) {
	if t.finished == 0 {
		return 0, false
	}
	mean := t.finishedTotal / time.Duration(t.finished)
	slots := make([]time.Duration, max(len(t.running), 1))
	for i, d := range t.running {
		slots[i] = max(mean-d, 0)
	}
	for range t.waiting {
		first := slices.Index(slots, slices.Min(slots))
		slots[first] += mean
	}
	return slices.Max(slots), true
}

// readTrialTimes reads the times of experiment exp's trials at now, for a
// sweep of numSamples trials of which the database has counts by status:
// a sum over the finished trials and a row for each running one, so that
// it stays cheap for an experiment of many trials.
func readTrialTimes(ctx context.Context, view *storage.DB, exp string, counts map[string]int, numSamples int, now time.Time) (trialTimes, error) {
	var t trialTimes
	sum, err := view.Query(ctx, `SELECT count(*), coalesce(sum(t.ended_at - t.created_at), 0) FROM trials t
JOIN experiments e ON e.id = t.experiment_id
WHERE e.name = ? AND t.ended_at IS NOT NULL AND t.status IN (?, ?, ?)`,
		exp, storage.TrialTerminated, storage.TrialStopped, storage.TrialError)
	if err != nil {
		return t, err
	}
	var total float64
	for sum.Next() {
		err = sum.Scan(&t.finished, &total)
	}
	if err = errors.Join(err, sum.Close(), sum.Err()); err != nil {
		return t, err
	}
	t.finishedTotal = time.Duration(total * float64(time.Second))
	rows, err := view.Query(ctx, `SELECT t.created_at FROM trials t
JOIN experiments e ON e.id = t.experiment_id WHERE e.name = ? AND t.status = ?`, exp, storage.TrialRunning)
	if err != nil {
		return t, err
	}
	defer rows.Close()
	for rows.Next() {
		var created float64
		if err := rows.Scan(&created); err != nil {
			return t, err
		}
		t.running = append(t.running, now.Sub(time.Unix(0, int64(created*1e9))))
	}
	n := 0
	for _, c := range counts {
		n += c
	}
	t.waiting = counts[storage.TrialPending] + counts[storage.TrialPaused] + max(numSamples-n, 0)
	return t, rows.Err()
}

// liveResults is what a frame reads from the database.
type liveResults struct {
	counts map[string]int
	top    []*storage.Trial
	trials int
	times  trialTimes
}

// readLive reads a frame's results from db in one snapshot, at now, for a
// sweep of numSamples trials: counts by status, the best trials and the
// trials' times, never the whole list.
func readLive(ctx context.Context, db *storage.DB, exp string, numSamples int, now time.Time) (r liveResults, err error) {
	err = db.Snapshot(ctx, func(view *storage.DB) error {
		if r.counts, err = view.StatusCounts(ctx, exp); err != nil {
			return err
		}
		for _, n := range r.counts {
			r.trials += n
		}
		if r.top, err = view.QueryTrials(ctx, exp, storage.TrialQuery{Column: "best", Limit: liveTop}); err != nil {
			return err
		}
		r.times, err = readTrialTimes(ctx, view, exp, r.counts, numSamples, now)
		return err
	})
	return r, err
}
