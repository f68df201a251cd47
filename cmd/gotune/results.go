package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gotune/gotune/storage"
)

func trialsCommand(dbFlag cli.Flag) *cli.Command {
	return &cli.Command{
		Name:      "trials",
		Usage:     "list an experiment's trials",
		ArgsUsage: "EXPERIMENT",
		Flags: []cli.Flag{
			dbFlag,
			&cli.StringFlag{Name: "sort", Usage: "order by `METRIC`, best first (the objective by its best value, others by their last; a leading - reverses)"},
			&cli.IntFlag{Name: "limit", Usage: "show the first `N` trials only"},
			&cli.IntFlag{Name: "offset", Usage: "skip the first `N` trials of the order (with --limit, pages through a long list)"},
			&cli.StringSliceFlag{Name: "status", Usage: "show trials in status `S` only (repeat or separate with commas; INTERRUPTED: left running by a run that died)"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON array"},
		},
		Action: func(c *cli.Context) error {
			exp, err := oneArg(c, "the experiment name")
			if err != nil {
				return err
			}
			q := storage.TrialQuery{Sort: c.String("sort"), Limit: c.Int("limit"), Offset: c.Int("offset")}
			if q.Limit < 0 {
				return badInput(fmt.Errorf("--limit must be at least 0, got %d", q.Limit))
			}
			if q.Offset < 0 {
				return badInput(fmt.Errorf("--offset must be at least 0, got %d", q.Offset))
			}
			shownStatuses := append(slices.Clone(storage.TrialStatuses), storage.TrialInterrupted)
			var statuses []string
			for _, s := range c.StringSlice("status") {
				s = strings.ToUpper(strings.TrimSpace(s))
				if !slices.Contains(shownStatuses, s) {
					return badInput(fmt.Errorf("--status %q: want one of %s", s, strings.Join(shownStatuses, ", ")))
				}
				statuses = append(statuses, s)
			}
			db, err := openResults(c.String("db"))
			if err != nil {
				return err
			}
			defer db.Close()
			// A run that died left its running trials RUNNING: they are
			// shown, and selected, as INTERRUPTED.
			live := db.RunLive(exp)
			matchesSome := true
			if len(statuses) > 0 {
				q.Status, matchesSome = storage.RecordedTrialStatuses(statuses, live)
			}
			// The trials stream from the database to the output, so that
			// a long experiment is listed in little memory; with several
			// objectives, members of the Pareto front are marked.
			err = db.Snapshot(c.Context, func(s *storage.DB) error {
				onFront, err := frontMembers(c.Context, s, exp)
				if err != nil {
					return err
				}
				var out trialWriter = newTrialTable(c.App.Writer, onFront)
				if c.Bool("json") {
					out = &trialArray{w: c.App.Writer, onFront: onFront}
				}
				shown := func(tr *storage.Trial) error {
					tr.Status = storage.ShownTrialStatus(tr.Status, live)
					return out.write(tr)
				}
				if matchesSome {
					if err := s.EachTrial(c.Context, exp, q, shown); err != nil {
						return err
					}
				}
				return out.close()
			})
			return lookupError(err)
		},
	}
}

// trialWriter prints trials one at a time.
type trialWriter interface {
	write(*storage.Trial) error
	close() error
}

// trialArray writes trials as one JSON array, indented as writeJSON does.
type trialArray struct {
	w       io.Writer
	onFront map[int]bool // see frontMembers
	n       int
}

func (a *trialArray) write(t *storage.Trial) error {
	j := toTrialJSON(t)
	if a.onFront != nil {
		member := a.onFront[t.Number]
		j.OnFront = &member
	}
	b, err := json.MarshalIndent(j, "  ", "  ")
	if err != nil {
		return err
	}
	sep := ",\n  "
	if a.n == 0 {
		sep = "[\n  "
	}
	a.n++
	_, err = io.WriteString(a.w, sep+string(b))
	return err
}

func (a *trialArray) close() error {
	end := "\n]\n"
	if a.n == 0 {
		end = "[]\n"
	}
	_, err := io.WriteString(a.w, end)
	return err
}

// trialTable writes trials as a table; its columns are aligned over
// blocks of tableBlock rows, so that it never holds more.
type trialTable struct {
	w       io.Writer
	tw      *tabwriter.Writer
	onFront map[int]bool // see frontMembers
	n       int
}

const tableBlock = 1000

func newTrialTable(w io.Writer, onFront map[int]bool) *trialTable {
	t := &trialTable{w: w, tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0), onFront: onFront}
	fmt.Fprintln(t.tw, "TRIAL\tSTATUS\tITER\tLAST\tBEST\tPARAMS")
	return t
}

func (t *trialTable) write(tr *storage.Trial) error {
	status := tr.Status
	if tr.Feasible != nil && !*tr.Feasible {
		status += " (infeasible)"
	}
	if t.onFront[tr.Number] {
		status += " (front)"
	}
	fmt.Fprintf(t.tw, "%d\t%s\t%d\t%s\t%s\t%s\n", tr.Number, status, tr.Iterations,
		optFloat(tr.LastMetric), optFloat(tr.BestMetric), formatParams(tr.Params))
	if t.n++; t.n%tableBlock == 0 {
		return t.tw.Flush()
	}
	return nil
}

func (t *trialTable) close() error { return t.tw.Flush() }

func bestCommand(dbFlag cli.Flag) *cli.Command {
	return &cli.Command{
		Name:      "best",
		Usage:     "show an experiment's best trial, its last report and its checkpoint",
		ArgsUsage: "EXPERIMENT",
		Flags:     []cli.Flag{dbFlag, &cli.BoolFlag{Name: "json", Usage: "print one JSON object"}},
		Action: func(c *cli.Context) error {
			name, err := oneArg(c, "the experiment name")
			if err != nil {
				return err
			}
			db, err := openResults(c.String("db"))
			if err != nil {
				return err
			}
			defer db.Close()
			var out bestJSON
			var last map[string]float64
			var front []frontJSON
			var objectives []storage.Objective
			err = db.Snapshot(c.Context, func(s *storage.DB) error {
				exp, err := s.Experiment(c.Context, name)
				if err != nil {
					return err
				}
				if objectives = exp.Objectives; objectives != nil {
					front, err = readFront(c.Context, s, exp)
					return err
				}
				best, err := s.BestTrial(c.Context, name)
				if err != nil {
					return err
				}
				reports, err := s.Reports(c.Context, name, best.Number)
				if err != nil {
					return err
				}
				best.Status = storage.ShownTrialStatus(best.Status, db.RunLive(name))
				out = bestJSON{Experiment: name, Metric: exp.Metric, Mode: exp.Mode, trialJSON: toTrialJSON(best)}
				if len(reports) > 0 {
					last = reports[len(reports)-1].Metrics
					out.Metrics = storage.Numbers(last)
				}
				ck, err := s.BestCheckpoint(c.Context, name, best.Number)
				switch {
				case err == nil:
					out.Checkpoint = &ck.Path
				case !errors.Is(err, storage.ErrNotFound):
					return err
				}
				return nil
			})
			if err != nil {
				return lookupError(err)
			}
			if objectives != nil {
				if c.Bool("json") {
					return writeJSON(c.App.Writer, front)
				}
				printFront(c.App.Writer, objectives, front)
				return nil
			}
			if c.Bool("json") {
				return writeJSON(c.App.Writer, out)
			}
			w := c.App.Writer
			fmt.Fprintf(w, "experiment  %s\ntrial       %d (%s, %d iterations)\n", name, out.TrialID, out.Status, out.Iterations)
			fmt.Fprintf(w, "best %s  %.6g (%s)\n", out.Metric, float64(*out.BestMetric), out.Mode)
			fmt.Fprintf(w, "params      %s\n", formatParams(out.Params))
			fmt.Fprintf(w, "last report %s\n", formatMetrics(last))
			if out.Checkpoint != nil {
				fmt.Fprintf(w, "checkpoint  %s\n", *out.Checkpoint)
			}
			return nil
		},
	}
}

// frontJSON is a trial of the Pareto front in `gotune best --json` of an
// experiment with several objectives: the trial, its objectives' values
// and its last report.
type frontJSON struct {
	trialJSON
	Objectives map[string]storage.Number `json:"objectives"`
	Metrics    map[string]storage.Number `json:"metrics"`
}

// readFront reads the Pareto front of exp, which has several objectives;
// ErrNotFound when it is empty.
func readFront(ctx context.Context, s *storage.DB, exp *storage.Experiment) ([]frontJSON, error) {
	trials, err := s.ParetoFront(ctx, exp.Name)
	if err != nil {
		return nil, err
	}
	if len(trials) == 0 {
		return nil, fmt.Errorf("pareto front of %q: no feasible trial has reported every objective yet: %w", exp.Name, storage.ErrNotFound)
	}
	out := make([]frontJSON, len(trials))
	for i, t := range trials {
		reports, err := s.Reports(ctx, exp.Name, t.Number)
		if err != nil {
			return nil, err
		}
		out[i] = frontJSON{trialJSON: toTrialJSON(t), Objectives: map[string]storage.Number{}}
		if len(reports) > 0 {
			last := reports[len(reports)-1].Metrics
			out[i].Metrics = storage.Numbers(last)
			for _, o := range exp.Objectives {
				out[i].Objectives[o.Metric] = storage.Number(last[o.Metric])
			}
		}
	}
	return out, nil
}

// printFront prints the Pareto front as a table: a trial per row, with its
// objectives' values.
func printFront(w io.Writer, objectives []storage.Objective, front []frontJSON) {
	names := make([]string, len(objectives))
	for i, o := range objectives {
		names[i] = fmt.Sprintf("%s (%s)", o.Metric, o.Mode)
	}
	fmt.Fprintf(w, "pareto front of %s over %s\n", plural(len(front), "trial"), strings.Join(names, ", "))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "TRIAL\tSTATUS\t%s\tPARAMS\n", strings.ToUpper(strings.Join(metricNames(objectives), "\t")))
	for _, f := range front {
		vals := make([]string, len(objectives))
		for i, o := range objectives {
			vals[i] = fmt.Sprintf("%.6g", float64(f.Objectives[o.Metric]))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", f.TrialID, f.Status, strings.Join(vals, "\t"), formatParams(f.Params))
	}
	tw.Flush()
}

func metricNames(objectives []storage.Objective) []string {
	out := make([]string, len(objectives))
	for i, o := range objectives {
		out[i] = o.Metric
	}
	return out
}

// openResults opens a results database read-only; a missing or foreign file
// is bad input.
func openResults(path string) (*storage.DB, error) {
	db, err := storage.OpenReadOnly(path)
	if err != nil {
		return nil, badInput(err)
	}
	return db, nil
}

// lookupError makes "no such experiment" bad input and anything else a failure.
func lookupError(err error) error {
	if errors.Is(err, storage.ErrNotFound) {
		return badInput(err)
	}
	return err
}

// trialJSON is a trial in --json output.
type trialJSON struct {
	TrialID    int             `json:"trial_id"`
	Status     string          `json:"status"`
	Params     map[string]any  `json:"params"`
	Iterations int             `json:"iterations"`
	LastMetric *storage.Number `json:"last_metric"`
	BestMetric *storage.Number `json:"best_metric"`
	Restarts   int             `json:"restarts"`
	Error      string          `json:"error,omitempty"`
	// Feasible is whether the trial's last report met the objective's
	// constraints; absent when the experiment has none.
	Feasible *bool `json:"feasible,omitempty"`
	// OnFront is, in `gotune trials --json` of an experiment with several
	// objectives, whether the trial is on the Pareto front.
	OnFront *bool `json:"on_front,omitempty"`
}

// frontMembers returns the trials of exp on its Pareto front by number, or
// nil when exp has one objective.
func frontMembers(ctx context.Context, s *storage.DB, exp string) (map[int]bool, error) {
	e, err := s.Experiment(ctx, exp)
	if err != nil || e.Objectives == nil {
		return nil, err
	}
	front, err := s.ParetoFront(ctx, exp)
	if err != nil {
		return nil, err
	}
	out := map[int]bool{}
	for _, t := range front {
		out[t.Number] = true
	}
	return out, nil
}

func toTrialJSON(t *storage.Trial) trialJSON {
	return trialJSON{TrialID: t.Number, Status: t.Status, Params: t.Params, Iterations: t.Iterations,
		LastMetric: storage.NumberPtr(t.LastMetric), BestMetric: storage.NumberPtr(t.BestMetric),
		Restarts: t.Restarts, Error: t.Error, Feasible: t.Feasible}
}

// bestJSON is `gotune best --json`: the best trial, its last report and the
// path of its best kept checkpoint (null when it has none).
type bestJSON struct {
	Experiment string `json:"experiment"`
	Metric     string `json:"metric"`
	Mode       string `json:"mode"`
	trialJSON
	Metrics    map[string]storage.Number `json:"metrics"`
	Checkpoint *string                   `json:"checkpoint"`
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func optFloat(f *float64) string {
	if f == nil {
		return "-"
	}
	return fmt.Sprintf("%.6g", *f)
}

// formatTime renders a time of the results in the local time zone.
func formatTime(t time.Time) string { return t.Local().Format("2006-01-02 15:04:05") }

// metricKeys returns every key of the metrics maps, sorted.
func metricKeys(ms []map[string]float64) []string {
	keys := map[string]bool{}
	for _, m := range ms {
		for k := range m {
			keys[k] = true
		}
	}
	return slices.Sorted(maps.Keys(keys))
}

// printTrialTable writes trials as a table; with onFront (several
// objectives), members of the Pareto front are marked.
func printTrialTable(w io.Writer, trials []*storage.Trial, onFront map[int]bool) {
	t := newTrialTable(w, onFront)
	for _, tr := range trials {
		t.write(tr)
	}
	t.close()
}
