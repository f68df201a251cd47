package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/gotune/gotune/storage"
	"github.com/urfave/cli/v2"
)

func lsCommand(dbFlag cli.Flag) *cli.Command {
	return &cli.Command{
		Name:  "ls",
		Usage: "list the experiments with their status, trial counts and best value",
		Flags: []cli.Flag{dbFlag, &cli.BoolFlag{Name: "json", Usage: "print one JSON array"}},
		Action: func(c *cli.Context) error {
			if c.NArg() != 0 {
				return badInput(fmt.Errorf("ls takes no arguments; got %d", c.NArg()))
			}
			db, err := openResults(c.String("db"))
			if err != nil {
				return err
			}
			defer db.Close()
			exps, err := db.Experiments(c.Context)
			if err != nil {
				return err
			}
			db.ShowLiveStatus(exps...)
			if c.Bool("json") {
				out := make([]experimentJSON, len(exps))
				for i, e := range exps {
					out[i] = toExperimentJSON(e)
				}
				return writeJSON(c.App.Writer, out)
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSTATUS\tTRIALS\tMETRIC\tMODE\tBEST\tCREATED")
			for _, e := range exps {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", e.Name, e.Status, e.Trials, e.Metric, e.Mode,
					optFloat(e.Best), formatTime(e.CreatedAt))
			}
			return tw.Flush()
		},
	}
}

// toExperimentJSON is e in --json output.
func toExperimentJSON(e *storage.Experiment) experimentJSON {
	return experimentJSON{e.Name, e.Status, e.Metric, e.Mode, e.CreatedAt, e.Trials, storage.NumberPtr(e.Best)}
}

// experimentJSON is an experiment in `ls --json`, with experiments_v's columns.
type experimentJSON struct {
	Name      string          `json:"name"`
	Status    string          `json:"status"`
	Metric    string          `json:"metric"`
	Mode      string          `json:"mode"`
	CreatedAt time.Time       `json:"created_at"`
	Trials    int             `json:"trials"`
	Best      *storage.Number `json:"best"`
}
