package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/gotune/gotune/storage"
)

func trialsCommand(dbFlag cli.Flag) *cli.Command {
	return &cli.Command{
		Name:      "trials",
		Usage:     "list an experiment's trials",
		ArgsUsage: "EXPERIMENT",
		Flags:     []cli.Flag{dbFlag, &cli.BoolFlag{Name: "json", Usage: "print one JSON array"}},
		Action: func(c *cli.Context) error {
			exp, err := oneArg(c, "the experiment name")
			if err != nil {
				return err
			}
			db, err := openResults(c.String("db"))
			if err != nil {
				return err
			}
			defer db.Close()
			trials, err := db.Trials(c.Context, exp)
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
		Usage:     "show an experiment's best trial",
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
			exp, err := db.Experiment(c.Context, name)
			if err != nil {
				return lookupError(err)
			}
			best, err := db.BestTrial(c.Context, name)
			if err != nil {
				return lookupError(err)
			}
			reports, err := db.Reports(c.Context, name, best.Number)
			if err != nil {
				return err
			}
			var last map[string]float64
			if len(reports) > 0 {
				last = reports[len(reports)-1].Metrics
			}
			if c.Bool("json") {
				return writeJSON(c.App.Writer, bestJSON{
					Experiment: name, Metric: exp.Metric, Mode: exp.Mode,
					trialJSON: toTrialJSON(best), Metrics: last,
				})
			}
			w := c.App.Writer
			fmt.Fprintf(w, "experiment  %s\ntrial       %d (%s, %d iterations)\n", name, best.Number, best.Status, best.Iterations)
			fmt.Fprintf(w, "best %s  %.6g (%s)\n", exp.Metric, *best.BestMetric, exp.Mode)
			fmt.Fprintf(w, "params      %s\n", formatParams(best.Params))
			fmt.Fprintf(w, "last report %s\n", formatMetrics(last))
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
	TrialID    int            `json:"trial_id"`
	Status     string         `json:"status"`
	Params     map[string]any `json:"params"`
	Iterations int            `json:"iterations"`
	LastMetric *float64       `json:"last_metric"`
	BestMetric *float64       `json:"best_metric"`
	Restarts   int            `json:"restarts"`
	Error      string         `json:"error,omitempty"`
}

func toTrialJSON(t *storage.Trial) trialJSON {
	return trialJSON{t.Number, t.Status, t.Params, t.Iterations, t.LastMetric, t.BestMetric, t.Restarts, t.Error}
}

// bestJSON is `gotune best --json`: the best trial and its last report.
type bestJSON struct {
	Experiment string `json:"experiment"`
	Metric     string `json:"metric"`
	Mode       string `json:"mode"`
	trialJSON
	Metrics map[string]float64 `json:"metrics"`
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
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\n", t.Number, t.Status, t.Iterations,
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
