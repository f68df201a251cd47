package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gotune/gotune/storage"
)

func showCommand(dbFlag cli.Flag) *cli.Command {
	return &cli.Command{
		Name:      "show",
		Usage:     "show one trial: params, every report, events, workers, checkpoints",
		ArgsUsage: "EXPERIMENT TRIAL",
		Flags:     []cli.Flag{dbFlag, &cli.BoolFlag{Name: "json", Usage: "print one JSON object"}},
		Action: func(c *cli.Context) error {
			if c.NArg() != 2 {
				return badInput(fmt.Errorf("show takes two arguments, the experiment name and the trial number; got %d", c.NArg()))
			}
			name := c.Args().Get(0)
			number, err := strconv.Atoi(c.Args().Get(1))
			if err != nil || number < 1 {
				return badInput(fmt.Errorf("trial %q: want a trial number (1, 2, ...)", c.Args().Get(1)))
			}
			db, err := openResults(c.String("db"))
			if err != nil {
				return err
			}
			defer db.Close()
			rec, err := loadTrial(c, db, name, number)
			if err != nil {
				return lookupError(err)
			}
			if c.Bool("json") {
				return writeJSON(c.App.Writer, rec.json())
			}
			rec.print(c.App.Writer)
			return nil
		},
	}
}

// showJSON is `gotune show --json`: a trial and everything recorded about it.
type showJSON struct {
	Experiment string `json:"experiment"`
	Metric     string `json:"metric"`
	Mode       string `json:"mode"`
	trialJSON
	Reports     []reportJSON     `json:"reports"`
	Events      []eventJSON      `json:"events"`
	Workers     []workerJSON     `json:"workers"`
	Checkpoints []checkpointJSON `json:"checkpoints"`
}

type reportJSON struct {
	Iteration int                       `json:"iteration"`
	Time      time.Time                 `json:"time"`
	Metrics   map[string]storage.Number `json:"metrics"`
}

type eventJSON struct {
	Time    time.Time       `json:"time"`
	Kind    string          `json:"kind"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

type workerJSON struct {
	Attempt  int       `json:"attempt"`
	Rank     int       `json:"rank"`
	Node     string    `json:"node"`
	PID      int       `json:"pid,omitempty"`
	Status   string    `json:"status"`
	StepRate float64   `json:"step_rate,omitempty"`
	LogPath  string    `json:"log_path,omitempty"`
	Updated  time.Time `json:"updated_at"`
}

type checkpointJSON struct {
	Iteration int                       `json:"iteration"`
	Path      string                    `json:"path"`
	Kept      bool                      `json:"kept"`
	Metrics   map[string]storage.Number `json:"metrics"`
	CreatedAt time.Time                 `json:"created_at"`
}

// trialRecord is everything recorded about one trial.
type trialRecord struct {
	exp         *storage.Experiment
	trial       *storage.Trial
	reports     []storage.Report
	events      []storage.Event
	workers     []storage.WorkerRecord
	checkpoints []storage.CheckpointRecord
}

// loadTrial reads everything about trial number of experiment name from
// one snapshot.
func loadTrial(c *cli.Context, db *storage.DB, name string, number int) (*trialRecord, error) {
	ctx := c.Context
	var r trialRecord
	err := db.Snapshot(ctx, func(s *storage.DB) error {
		var err error
		if r.exp, err = s.Experiment(ctx, name); err != nil {
			return err
		}
		if r.trial, err = s.Trial(ctx, name, number); err != nil {
			return err
		}
		if r.reports, err = s.Reports(ctx, name, number); err != nil {
			return err
		}
		if r.events, err = s.Events(ctx, name, number); err != nil {
			return err
		}
		if r.workers, err = s.Workers(ctx, name, number); err != nil {
			return err
		}
		r.checkpoints, err = s.CheckpointRecords(ctx, name, number)
		return err
	})
	return &r, err
}

func (r *trialRecord) json() showJSON {
	out := showJSON{Experiment: r.exp.Name, Metric: r.exp.Metric, Mode: r.exp.Mode, trialJSON: toTrialJSON(r.trial),
		Reports: []reportJSON{}, Events: []eventJSON{}, Workers: []workerJSON{}, Checkpoints: []checkpointJSON{}}
	for _, x := range r.reports {
		out.Reports = append(out.Reports, reportJSON{x.Iteration, x.Time, storage.Numbers(x.Metrics)})
	}
	for _, e := range r.events {
		out.Events = append(out.Events, eventJSON{e.Time, e.Kind, e.Message, e.Data})
	}
	for _, w := range r.workers {
		out.Workers = append(out.Workers, workerJSON{w.Attempt, w.Rank, w.Node, w.PID, w.Status, w.StepRate, w.LogPath, w.UpdatedAt})
	}
	for _, ck := range r.checkpoints {
		out.Checkpoints = append(out.Checkpoints, checkpointJSON{ck.Iteration, ck.Path, ck.Kept(), storage.Numbers(ck.Metrics), ck.CreatedAt})
	}
	return out
}

func (r *trialRecord) print(w io.Writer) {
	t := r.trial
	fmt.Fprintf(w, "experiment  %s (%s, %s)\n", r.exp.Name, r.exp.Metric, r.exp.Mode)
	restarts := "restarts"
	if t.Restarts == 1 {
		restarts = "restart"
	}
	fmt.Fprintf(w, "trial       %d: %s, %d iterations, %d %s\n", t.Number, t.Status, t.Iterations, t.Restarts, restarts)
	fmt.Fprintf(w, "params      %s\n", formatParams(t.Params))
	fmt.Fprintf(w, "%-11s %s (last %s)\n", "best "+r.exp.Metric, optFloat(t.BestMetric), optFloat(t.LastMetric))
	if t.Error != "" {
		fmt.Fprintf(w, "error       %s\n", t.Error)
	}

	section(w, "reports", len(r.reports), func(tw io.Writer) {
		ms := make([]map[string]float64, len(r.reports))
		for i, x := range r.reports {
			ms[i] = x.Metrics
		}
		keys := metricKeys(ms)
		fmt.Fprint(tw, "ITER\tTIME")
		for _, k := range keys {
			fmt.Fprint(tw, "\t"+k)
		}
		fmt.Fprintln(tw)
		for _, x := range r.reports {
			fmt.Fprintf(tw, "%d\t%s", x.Iteration, formatTime(x.Time))
			for _, k := range keys {
				v, ok := x.Metrics[k]
				fmt.Fprint(tw, "\t"+orDash(ok, fmt.Sprintf("%.6g", v)))
			}
			fmt.Fprintln(tw)
		}
	})
	section(w, "events", len(r.events), func(tw io.Writer) {
		fmt.Fprintln(tw, "TIME\tKIND\tMESSAGE\tDATA")
		for _, e := range r.events {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", formatTime(e.Time), e.Kind, e.Message, orDash(len(e.Data) > 0, string(e.Data)))
		}
	})
	section(w, "workers", len(r.workers), func(tw io.Writer) {
		fmt.Fprintln(tw, "ATTEMPT\tRANK\tNODE\tPID\tSTATUS\tSTEPS/S\tLOG")
		for _, x := range r.workers {
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\n", x.Attempt, x.Rank, x.Node, orDash(x.PID != 0, strconv.Itoa(x.PID)),
				x.Status, orDash(x.StepRate != 0, fmt.Sprintf("%.4g", x.StepRate)), orDash(x.LogPath != "", x.LogPath))
		}
	})
	section(w, "checkpoints", len(r.checkpoints), func(tw io.Writer) {
		fmt.Fprintln(tw, "ITER\tKEPT\tPATH\tMETRICS")
		for _, ck := range r.checkpoints {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", ck.Iteration, orDash(ck.Kept(), "yes"), ck.Path, formatMetrics(ck.Metrics))
		}
	})
}

// section prints a titled table, or "(none)" when it has no rows.
func section(w io.Writer, title string, rows int, table func(tw io.Writer)) {
	fmt.Fprintf(w, "\n%s\n", title)
	if rows == 0 {
		fmt.Fprintln(w, "(none)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	table(tw)
	tw.Flush()
}

func orDash(ok bool, s string) string {
	if !ok {
		return "-"
	}
	return s
}
