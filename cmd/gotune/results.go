package main

import (
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
			&cli.StringSliceFlag{Name: "status", Usage: "show trials in status `S` only (repeat or separate with commas)"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON array"},
		},
		Action: func(c *cli.Context) error {
			exp, err := oneArg(c, "the experiment name")
			if err != nil {
				return err
			}
			q := storage.TrialQuery{Sort: c.String("sort"), Limit: c.Int("limit")}
			if q.Limit < 0 {
				return badInput(fmt.Errorf("--limit must be at least 0, got %d", q.Limit))
			}
			for _, s := range c.StringSlice("status") {
				s = strings.ToUpper(strings.TrimSpace(s))
				if !slices.Contains(storage.TrialStatuses, s) {
					return badInput(fmt.Errorf("--status %q: want one of %s", s, strings.Join(storage.TrialStatuses, ", ")))
				}
				q.Status = append(q.Status, s)
			}
			db, err := openResults(c.String("db"))
			if err != nil {
				return err
			}
			defer db.Close()
			trials, err := db.QueryTrials(c.Context, exp, q)
			if err != nil {
				return lookupError(err)
			}
			if c.Bool("json") {
				out := make([]trialJSON, len(trials))
				for i, t := range trials {
					out[i] = toTrialJSON(t)
				}
				return writeJSON(c.App.Writer, out)
			}
			printTrialTable(c.App.Writer, trials)
			return nil
		},
	}
}

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
			err = db.Snapshot(c.Context, func(s *storage.DB) error {
				exp, err := s.Experiment(c.Context, name)
				if err != nil {
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
}

func toTrialJSON(t *storage.Trial) trialJSON {
	return trialJSON{t.Number, t.Status, t.Params, t.Iterations, storage.NumberPtr(t.LastMetric), storage.NumberPtr(t.BestMetric), t.Restarts, t.Error, t.Feasible}
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

func printTrialTable(w io.Writer, trials []*storage.Trial) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TRIAL\tSTATUS\tITER\tLAST\tBEST\tPARAMS")
	for _, t := range trials {
		status := t.Status
		if t.Feasible != nil && !*t.Feasible {
			status += " (infeasible)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\n", t.Number, status, t.Iterations,
			optFloat(t.LastMetric), optFloat(t.BestMetric), formatParams(t.Params))
	}
	tw.Flush()
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
