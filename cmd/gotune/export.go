package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/gotune/gotune/storage"
)

func exportCommand(dbFlag cli.Flag) *cli.Command {
	return &cli.Command{
		Name:      "export",
		Usage:     "print every report of every trial of an experiment, with the trial's params",
		ArgsUsage: "EXPERIMENT",
		Flags: []cli.Flag{
			dbFlag,
			&cli.StringFlag{Name: "format", Usage: "`csv` (a column per metric and per param, config/NAME) or json (an array of reports)"},
		},
		Action: func(c *cli.Context) error {
			exp, err := oneArg(c, "the experiment name")
			if err != nil {
				return err
			}
			format := c.String("format")
			if format != "csv" && format != "json" {
				return badInput(fmt.Errorf("export needs --format csv or --format json; got %q", format))
			}
			db, err := openResults(c.String("db"))
			if err != nil {
				return err
			}
			defer db.Close()
			err = db.Snapshot(c.Context, func(s *storage.DB) error {
				if format == "csv" {
					return exportCSV(c, s, exp)
				}
				return exportJSON(c, s, exp)
			})
			return lookupError(err)
		},
	}
}

// trialParams returns each trial's params by number and every param name,
// sorted.
func trialParams(c *cli.Context, db *storage.DB, exp string) (map[int]map[string]any, []string, error) {
	trials, err := db.Trials(c.Context, exp)
	if err != nil {
		return nil, nil, err
	}
	params := make(map[int]map[string]any, len(trials))
	names := map[string]bool{}
	for _, t := range trials {
		params[t.Number] = t.Params
		for k := range t.Params {
			names[k] = true
		}
	}
	return params, slices.Sorted(maps.Keys(names)), nil
}

// exportCSV writes trial_id, iteration, time (seconds since 1970, as in
// reports_v), a column per metric and a config/NAME column per param; a
// report without a metric leaves its cell empty.
func exportCSV(c *cli.Context, db *storage.DB, exp string) error {
	params, names, err := trialParams(c, db, exp)
	if err != nil {
		return err
	}
	metrics, err := db.MetricNames(c.Context, exp)
	if err != nil {
		return err
	}
	w := csv.NewWriter(c.App.Writer)
	header := []string{"trial_id", "iteration", "time"}
	header = append(header, metrics...)
	for _, n := range names {
		header = append(header, "config/"+n)
	}
	if err := w.Write(header); err != nil {
		return err
	}
	row := make([]string, len(header))
	err = db.EachReport(c.Context, exp, func(trial int, r storage.Report) error {
		row = append(row[:0], strconv.Itoa(trial), strconv.Itoa(r.Iteration), strconv.FormatFloat(unixSeconds(r), 'f', -1, 64))
		for _, m := range metrics {
			cell := ""
			if v, ok := r.Metrics[m]; ok {
				cell = strconv.FormatFloat(v, 'g', -1, 64)
			}
			row = append(row, cell)
		}
		for _, n := range names {
			row = append(row, paramText(params[trial][n]))
		}
		return w.Write(row)
	})
	if err != nil {
		return err
	}
	w.Flush()
	return w.Error()
}

// exportRow is one report in `export --format json`.
type exportRow struct {
	TrialID   int                       `json:"trial_id"`
	Iteration int                       `json:"iteration"`
	Time      float64                   `json:"time"`
	Metrics   map[string]storage.Number `json:"metrics"`
	Config    map[string]any            `json:"config"`
}

// exportJSON writes one JSON array of reports, streaming it.
func exportJSON(c *cli.Context, db *storage.DB, exp string) error {
	params, _, err := trialParams(c, db, exp)
	if err != nil {
		return err
	}
	out := c.App.Writer
	sep := "\n  "
	io.WriteString(out, "[")
	err = db.EachReport(c.Context, exp, func(trial int, r storage.Report) error {
		b, err := json.Marshal(exportRow{trial, r.Iteration, unixSeconds(r), storage.Numbers(r.Metrics), params[trial]})
		if err != nil {
			return err
		}
		io.WriteString(out, sep)
		sep = ",\n  "
		_, err = out.Write(b)
		return err
	})
	if err != nil {
		return err
	}
	if sep != "\n  " {
		io.WriteString(out, "\n")
	}
	_, err = io.WriteString(out, "]\n")
	return err
}

// unixSeconds is a report's time as reports_v has it.
func unixSeconds(r storage.Report) float64 { return float64(r.Time.UnixNano()) / 1e9 }

// paramText renders a param's value in a CSV cell: a list or an object as
// JSON, anything else as query prints it.
func paramText(v any) string {
	switch v.(type) {
	case []any, map[string]any:
		b, _ := json.Marshal(v) // decoded from JSON, so it encodes again
		return string(b)
	}
	return sqlText(v)
}
