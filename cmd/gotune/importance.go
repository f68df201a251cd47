package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/gotune/gotune/search"
	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/tuner"
)

func importanceCommand(dbFlag cli.Flag) *cli.Command {
	return &cli.Command{
		Name:      "importance",
		Usage:     "rank an experiment's hyperparameters by their effect on the objective (PED-ANOVA)",
		ArgsUsage: "EXPERIMENT",
		Flags: []cli.Flag{
			dbFlag,
			&cli.StringFlag{Name: "metric", Usage: "judge by `METRIC`, one of the objectives (default: the first)"},
			&cli.Float64Flag{Name: "quantile", Value: 0.1, Usage: "the best `Q` of the trials are compared with all of them"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON array"},
		},
		Action: func(c *cli.Context) error {
			name, err := oneArg(c, "the experiment name")
			if err != nil {
				return err
			}
			if q := c.Float64("quantile"); !(q > 0 && q < 1) {
				return badInput(fmt.Errorf("--quantile must be between 0 and 1, got %g", q))
			}
			db, err := openResults(c.String("db"))
			if err != nil {
				return err
			}
			defer db.Close()
			var space *searchspace.Space
			var scored []search.ScoredConfig
			var metric, mode string
			err = db.Snapshot(c.Context, func(s *storage.DB) error {
				exp, err := s.Experiment(c.Context, name)
				if err != nil {
					return err
				}
				if space, err = tuner.RecordedSpace(exp.Config); err != nil {
					return fmt.Errorf("experiment %q: %w", name, err)
				}
				metric, mode = exp.Metric, exp.Mode
				if m := c.String("metric"); m != "" && m != metric {
					i := slices.IndexFunc(exp.Objectives, func(o storage.Objective) bool { return o.Metric == m })
					if i < 0 {
						return badInput(fmt.Errorf("--metric %q is not an objective of %q (it has %s)", m, name, metric))
					}
					metric, mode = m, exp.Objectives[i].Mode
				}
				scored, err = tuner.ScoredTrials(c.Context, s, name, metric, mode)
				return err
			})
			if err != nil {
				var ex *exitError
				if errors.As(err, &ex) {
					return err
				}
				return lookupError(err)
			}
			ranks, err := search.Importance(space, scored, c.Float64("quantile"))
			if err != nil {
				return &exitError{exitFailed, err}
			}
			if c.Bool("json") {
				return writeJSON(c.App.Writer, ranks)
			}
			w := c.App.Writer
			q := c.Float64("quantile")
			fmt.Fprintf(w, "importance for %s (%s): the best %d of %d trials (quantile %g) against all (PED-ANOVA)\n", metric, mode, search.ImportanceTop(len(scored), q), len(scored), q)
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "PARAM\tIMPORTANCE\tTRIALS\t")
			for _, r := range ranks {
				fmt.Fprintf(tw, "%s\t%.3f\t%d\t%s\n", r.Name, r.Importance, r.Trials, strings.Repeat("#", int(r.Importance*40+0.5)))
			}
			return tw.Flush()
		},
	}
}
