package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"

	"github.com/urfave/cli/v2"

	"github.com/gotune/gotune/cmd/gotune/sweepfile"
	"github.com/gotune/gotune/dashboard"
	"github.com/gotune/gotune/dashboard/trialfiles"
	"github.com/gotune/gotune/mlflow"
	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/tuner"
	"github.com/gotune/gotune/workers"
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run the sweep a TOML file describes",
		ArgsUsage: "FILE",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "db", Usage: "the results database `FILE` (default: the sweep file's storage, else gotune.db)"},
			&cli.StringFlag{Name: "resources", Usage: "declare the nodes to run on instead of this machine, as in `cpus=8,gpus=2,memory=32GiB` (keys nodes, cpus, gpus, memory); replaces the sweep file's [resources]"},
			&cli.BoolFlag{Name: "resume", Usage: "continue the experiment an interrupted run left unfinished, and fail when there is none (without it, a run of an unfinished experiment continues it too)"},
			&cli.BoolFlag{Name: "restart", Usage: "start the experiment over: remove its results and files first, if the database has it"},
			&cli.BoolFlag{Name: "rerun-failed", Usage: "run the experiment's failed trials again, each from its latest checkpoint, even when the experiment has ended"},
			&cli.StringFlag{Name: "dashboard", Usage: "serve the web dashboard while the sweep runs, at `HOST:PORT` (without a host, on 127.0.0.1 only; e.g. " + dashboard.DefaultAddr + ")"},
		}, listenFlags()...),
		Action: func(c *cli.Context) error {
			path, err := oneArg(c, "the sweep file")
			if err != nil {
				return err
			}
			sweep, err := sweepfile.LoadSweep(path)
			if err != nil {
				return badInput(err)
			}
			cfg := sweep.Config
			if cfg.Trainer.Command != nil && !sweep.WorkdirSet && !sweep.Cluster.Slurm() && c.String("listen") == "" {
				// Each trial runs in its own folder unless told otherwise,
				// so that no trial reads a file another wrote (a snapshot
				// to resume from). Agents' nodes may not see that folder.
				cfg.Trainer.Workdir = "{" + trainer.TrialDirPlaceholder + "}"
			}
			if db := c.String("db"); db != "" {
				cfg.Storage = db
			}
			if c.IsSet("resources") {
				if cfg.Resources, err = workers.ParseDeclared(c.String("resources")); err != nil {
					return badInput(fmt.Errorf("--resources: %w", err))
				}
			}
			out := c.App.Writer
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			ctx, opts, closeHead, err := startCluster(ctx, c, sweep, cfg)
			if err != nil {
				return err
			}
			defer closeHead()
			var t *tuner.Tuner
			progress := observers{&linePrinter{w: out, start: time.Now()}, diskNotice{c.App.ErrWriter}}
			var live *liveView
			var ro *storage.DB // read by the live view once started
			if f, ok := isTerminal(out); ok {
				live = newLiveView(out, terminalWidth(f), func(ctx context.Context) liveSnapshot { return sweepSnapshot(ctx, ro, t) })
				progress = observers{live}
			}
			var tracker *mlflow.Tracker // set once the tuner knows its database
			obs := progress
			if sweep.ReportFiles == nil || *sweep.ReportFiles {
				files := trialfiles.New(func(n int) string { return t.TrialDir(n) }, func(_ int, err error) {
					fmt.Fprintf(c.App.ErrWriter, "warning: the TensorBoard and CSV files of %v; the sweep goes on\n", err)
				})
				defer files.Close()
				obs = append(obs, files)
			}
			obs = append(obs, trackerWake{&tracker})
			if w := newSharedDirWatch(cfg, c.App.ErrWriter); w != nil {
				obs = append(obs, w)
			}
			opts = append(opts, tuner.WithObserver(obs))
			if c.Bool("resume") {
				opts = append(opts, tuner.WithResumeOnly())
			}
			if c.Bool("restart") && (c.Bool("resume") || c.Bool("rerun-failed")) {
				return badInput(errors.New("--restart starts the experiment over: it goes with neither --resume nor --rerun-failed"))
			}
			if c.Bool("restart") {
				opts = append(opts, tuner.WithRestart())
			}
			if c.Bool("rerun-failed") {
				opts = append(opts, tuner.WithRerunFailed())
			}
			t, err = tuner.New(cfg, opts...)
			if err != nil {
				return badInput(sweep.Locate(err))
			}
			if msg := reportFilesNotice(t.Config().Search.Trials(), sweep.ReportFiles); msg != "" {
				fmt.Fprintln(c.App.ErrWriter, msg)
			}
			if tracker, err = startTracking(c, sweep.MLflow, t.Config().Storage, t.Config().Name); err != nil {
				return err
			}
			if tracker != nil {
				defer finishTracking(ctx, c, tracker, t.Config().Storage, t.Config().Name)
			}
			if live != nil || c.String("dashboard") != "" {
				if ro, err = openReader(t.Config().Storage); err != nil {
					return err
				}
				defer ro.Close()
			}
			stopDashboard, err := startDashboard(ctx, c, ro, t)
			if err != nil {
				return err
			}
			if live != nil {
				live.Start(liveInterval)
			}
			res, err := t.Fit(ctx)
			if live != nil {
				live.Close()
			}
			stopDashboard()
			if res != nil {
				listAll := "gotune trials " + res.Experiment
				if c.IsSet("db") {
					listAll = fmt.Sprintf("gotune trials --db %s %s", c.String("db"), res.Experiment)
				}
				printSummary(out, t.Config(), res, listAll)
			}
			var exists *tuner.ExistsError
			var failFast *tuner.FailFastError
			var sameFailure *tuner.SameFailureError
			switch {
			case errors.As(err, &failFast):
				return &exitError{exitFailed, fmt.Errorf("%w\nFix its cause, then `gotune run --rerun-failed %s` runs it again and continues the sweep", err, path)}
			case errors.As(err, &sameFailure):
				return &exitError{exitFailed, fmt.Errorf("%w\nFix its cause, then `gotune run --rerun-failed %s` runs them again and continues the sweep", err, path)}
			case errors.As(err, &exists):
				return badInput(fmt.Errorf("%w\nTry: %s", err, existsHint(exists, path)))
			case errors.Is(err, storage.ErrExperimentRunning), errors.Is(err, tuner.ErrExperimentExists), errors.Is(err, tuner.ErrNothingToResume):
				return badInput(err)
			case errors.Is(err, tuner.ErrAllTrialsFailed), errors.Is(err, tuner.ErrObjectiveNeverReported), errors.Is(err, tuner.ErrNoFeasibleTrial):
				return &exitError{exitFailed, err}
			case errors.Is(err, context.Canceled) && context.Cause(ctx) != nil && !errors.Is(context.Cause(ctx), context.Canceled):
				// The cluster's jobs stopped the sweep (see startSlurm).
				return &exitError{exitFailed, fmt.Errorf("%w; completed reports are in %s", context.Cause(ctx), t.Config().Storage)}
			case errors.Is(err, context.Canceled):
				return &exitError{exitFailed, fmt.Errorf("interrupted: completed reports are in %s; run the same command again to continue", t.Config().Storage)}
			}
			return err
		},
	}
}

// existsHint says which commands take up an experiment that the sweep
// file at path cannot continue.
func existsHint(e *tuner.ExistsError, path string) string {
	var ways []string
	if len(e.Changes) == 0 {
		ways = append(ways, "raise num_samples in [search] to add trials")
		if e.Failed > 0 {
			ways = append(ways, fmt.Sprintf("`gotune run --rerun-failed %s` to rerun its %s", path, plural(e.Failed, "failed trial")))
		}
	}
	ways = append(ways,
		fmt.Sprintf("`gotune run --restart %s` to start it over (its results are removed)", path),
		fmt.Sprintf("`gotune rm --db %s %s` to remove it", e.DB, e.Name),
		"another name in the sweep file")
	return strings.Join(ways, "; ")
}

// reportFilesNotice is what gotune run says at the start of a sweep of
// trials trials about the disk its TensorBoard and CSV mirror takes, when
// the sweep is large and the sweep file leaves report_files out; "" when
// there is nothing to say.
func reportFilesNotice(trials int, reportFiles *bool) string {
	if trials <= largeSweep || reportFiles != nil {
		return ""
	}
	return fmt.Sprintf("gotune: %d trials: the TensorBoard and CSV files of each trial take about %d KiB of disk (%.1f GB in all); "+
		"report_files = false in [trainer] turns them off (the reports stay in the database)",
		trials, mirrorBytes/1024, float64(trials)*mirrorBytes/1e9)
}

// largeSweep is the number of trials above which gotune run notes the
// disk its per-trial files take.
const largeSweep = 10_000

// mirrorBytes is the disk a trial's folder, event file and reports.csv
// take on a file system of 4 KiB blocks: a block each.
const mirrorBytes = 3 * 4096

// linePrinter writes one plain line per report and per finished trial.
type linePrinter struct {
	w        io.Writer
	start    time.Time
	events   eventLines
	failures failureLines
}

func (p *linePrinter) OnReport(trial int, r trainer.Result) {
	fmt.Fprintf(p.w, "%7.1fs  trial %-3d iter %-4d %s\n", time.Since(p.start).Seconds(), trial, r.Iteration, formatMetrics(r.Metrics))
}

func (p *linePrinter) OnTrialEnd(trial int, status string, err error) {
	line := fmt.Sprintf("%7.1fs  trial %-3d %s", time.Since(p.start).Seconds(), trial, status)
	if err != nil {
		line += ": " + p.failures.describe(trial, err)
	}
	fmt.Fprintln(p.w, line)
}

// firstTrials remembers, for each gist of a line (a failure's or an
// event's, its numbers blanked), the trial that printed it first, so that
// the trials that only repeat it say so instead of printing it again.
type firstTrials struct {
	mu    sync.Mutex
	first map[string]int
}

// note returns the trial that noted gist first, and whether one had;
// when none had, trial is noted as the first.
func (f *firstTrials) note(gist string, trial int) (first int, seen bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if first, seen = f.first[gist]; !seen {
		if f.first == nil {
			f.first = map[string]int{}
		}
		f.first[gist] = trial
	}
	return first, seen
}

// failureLines describes trials' failures in full, but for one of several
// lines that only repeats an earlier trial's (the same
// tuner.FailureSignature: the same message but for its numbers, a pid, a
// trial's folder), which gets its first line (its log's path) and the
// trial it repeats: a broken script's traceback is printed once, not once
// per trial. The database keeps every failure whole.
type failureLines struct{ firstTrials }

func (f *failureLines) describe(trial int, err error) string {
	msg := err.Error()
	if first, seen := f.note(tuner.FailureSignature(err), trial); seen && strings.Contains(msg, "\n") {
		return fmt.Sprintf("%s (the same failure as trial %d)", oneLine(msg), first)
	}
	return msg
}

func (p *linePrinter) OnNotice(msg string) {
	fmt.Fprintf(p.w, "%7.1fs  %s\n", time.Since(p.start).Seconds(), msg)
}

func (p *linePrinter) OnEvent(trial int, e trainer.Event) {
	fmt.Fprintf(p.w, "%7.1fs  trial %-3d %s\n", time.Since(p.start).Seconds(), trial, p.events.describe(trial, e))
}

// eventLines describes a sweep's events as describeEvent does, but one
// that only repeats what an earlier trial's said (a metrics pattern that
// matched nothing in trial 1 matches nothing in the next ones either, a
// metric name read from two kinds of line is read so again) as
// "as in trial N", so that the first says it and the rest do not bury the
// sweep's output; a refused checkpoint, which a script that hands its
// checkpoints over wrongly repeats at every report, the same within a
// trial too. The database keeps every event whole.
type eventLines struct{ firstTrials }

// digits matches numbers in an event's cause, which differ between trials
// that say the same thing (a line count, a trial's folder).
var digits = regexp.MustCompile(`[0-9]+`)

func (d *eventLines) describe(trial int, e trainer.Event) string {
	if e.Kind != trainer.EventMetricsUnmatched && e.Kind != trainer.EventMetricsAmbiguous && e.Kind != trainer.EventCheckpointRefused { // the ones told in full once per sweep
		return describeEvent(e)
	}
	gist := string(e.Kind) + " " + digits.ReplaceAllString(firstLine(e.Cause), "N")
	if first, seen := d.note(gist, trial); seen && (first != trial || e.Kind == trainer.EventCheckpointRefused) {
		return fmt.Sprintf("%s: as in trial %d", e.Kind, first)
	}
	return describeEvent(e)
}

// describeEvent describes a group's event in one line, after the trial
// number: for a restart or a resize, what it starts from, and why.
func describeEvent(e trainer.Event) string {
	switch e.Kind {
	case trainer.EventRestart, trainer.EventResize:
		from := "no committed checkpoint"
		if e.Checkpoint != "" {
			from = fmt.Sprintf("the checkpoint of iteration %d", e.Iteration)
		}
		return fmt.Sprintf("%s with %d workers from %s, %d reports recorded: %s", e.Kind, e.Workers, from, e.Recorded, oneLine(e.Cause))
	case trainer.EventHung:
		return fmt.Sprintf("%s; the stacks of its %d workers are in its hung event (gotune show --json)", firstLine(e.Cause), len(e.Stacks))
	case trainer.EventMetricsUnmatched:
		if head, tail, ok := strings.Cut(e.Cause, "; its last lines:\n"); ok {
			lines := strings.Split(tail, "\n")
			last := lines[len(lines)-1]
			// A rule of "=" or "-" says nothing of the output a pattern must read.
			for i := len(lines) - 1; i >= 0; i-- {
				if strings.IndexFunc(lines[i], func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) >= 0 {
					last = lines[i]
					break
				}
			}
			return fmt.Sprintf("%s: %s; its last line: %q (gotune show has more)", e.Kind, head, last)
		}
	}
	return fmt.Sprintf("%s: %s", e.Kind, oneLine(e.Cause))
}

// oneLine sums up a failure in one line: its first line and, where that
// line introduces the lines quoted below it (a worker's last Python
// traceback, the end of its log, each indented by four spaces), the last
// of them: the exception, or the log's last line. A restart's line then
// says why, not only where to look.
func oneLine(msg string) string {
	head, quoted, _ := strings.Cut(msg, "\n")
	if !strings.HasSuffix(head, ":") {
		return head
	}
	last := ""
	for _, line := range strings.Split(quoted, "\n") {
		if !strings.HasPrefix(line, "    ") {
			break // the quote ended ("  followed by:")
		}
		if q := strings.TrimSpace(line); q != "" && !strings.HasPrefix(q, "… ") {
			last = q
		}
	}
	if last == "" {
		return head
	}
	return head + " " + last
}

// firstLine is s up to its first line break.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// formatMetrics renders metrics as key=value pairs in key order.
func formatMetrics(m map[string]float64) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%.4g", k, m[k])
	}
	return strings.Join(parts, " ")
}

// formatParams renders a configuration as key=value pairs in key order.
func formatParams(p map[string]any) string {
	keys := slices.Sorted(maps.Keys(p))
	parts := make([]string, len(keys))
	for i, k := range keys {
		v := p[k]
		if f, ok := v.(float64); ok {
			parts[i] = fmt.Sprintf("%s=%.4g", k, f)
		} else {
			parts[i] = fmt.Sprintf("%s=%v", k, v)
		}
	}
	return strings.Join(parts, " ")
}

// summaryTrials is how many of the best trials printSummary lists.
const summaryTrials = 5

// printSummary prints the best trials of a finished sweep; listAll is
// the command that lists every trial, for a sweep with more than
// summaryTrials.
func printSummary(w io.Writer, cfg tuner.Config, res *tuner.Result, listAll string) {
	metric := cfg.Objective.Metric
	trials, front := shownAfterRun(res.Trials), shownAfterRun(res.Front)
	ranked := rankTrials(trials, cfg.Objective.Mode)
	fmt.Fprintf(w, "\n%s: %s", res.Experiment, plural(len(trials), "trial"))
	counts := map[string]int{}
	for _, t := range trials {
		counts[t.Status]++
	}
	for _, s := range slices.Sorted(maps.Keys(counts)) {
		fmt.Fprintf(w, ", %d %s", counts[s], s)
	}
	if o := cfg.Objective; len(o.Metrics) > 1 {
		onFront := map[int]bool{}
		for _, t := range front {
			onFront[t.Number] = true
		}
		names := make([]string, len(o.Metrics))
		for i, m := range o.Metrics {
			names[i] = fmt.Sprintf("%s (%s)", m, o.Modes[i])
		}
		fmt.Fprintf(w, "; the Pareto front over %s has %s:\n", strings.Join(names, ", "), plural(len(front), "trial"))
		printTrialTable(w, front, onFront)
		fmt.Fprintf(w, "their objectives: gotune best %s\n", res.Experiment)
		return
	}
	if len(ranked) > summaryTrials {
		fmt.Fprintf(w, "; the %d best by %s (%s), of %d (all: %s):\n", summaryTrials, metric, cfg.Objective.Mode, len(ranked), listAll)
		ranked = ranked[:summaryTrials]
	} else {
		fmt.Fprintf(w, "; best %s (%s) per trial:\n", metric, cfg.Objective.Mode)
	}
	printTrialTable(w, ranked, nil)
	if res.Best != nil {
		fmt.Fprintf(w, "best trial: %d, %s = %.6g\n", res.Best.Number, metric, *res.Best.BestMetric)
	}
}

// shownAfterRun returns copies of trials as the summary after a run shows
// them: the run is over, so they read as they do once no run is live
// (storage.ShownTrialStatus): a trial it left PENDING or RUNNING, to
// continue in the next run, was interrupted.
func shownAfterRun(trials []*storage.Trial) []*storage.Trial {
	out := make([]*storage.Trial, len(trials))
	for i, t := range trials {
		c := *t
		c.Status = storage.ShownTrialStatus(c.Status, false)
		out[i] = &c
	}
	return out
}

// rankTrials orders trials best first by their best metric; trials without
// one come last, in number order.
func rankTrials(trials []*storage.Trial, mode string) []*storage.Trial {
	out := slices.Clone(trials)
	slices.SortStableFunc(out, func(a, b *storage.Trial) int {
		switch {
		case a.BestMetric == nil && b.BestMetric == nil:
			return a.Number - b.Number
		case a.BestMetric == nil:
			return 1
		case b.BestMetric == nil:
			return -1
		}
		x, y := *a.BestMetric, *b.BestMetric
		if mode == "max" {
			x, y = -x, -y
		}
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return a.Number - b.Number
	})
	return out
}
