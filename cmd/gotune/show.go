package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/workers"
)

func showCommand(dbFlag cli.Flag) *cli.Command {
	return &cli.Command{
		Name:      "show",
		Usage:     "show one trial: params, every report, events, workers, checkpoints; or, without TRIAL, the experiment: its status, best trial and events",
		ArgsUsage: "EXPERIMENT [TRIAL]",
		Flags:     []cli.Flag{dbFlag, &cli.BoolFlag{Name: "json", Usage: "print one JSON object"}},
		Action: func(c *cli.Context) error {
			if c.NArg() == 1 {
				return showExperiment(c, c.Args().First())
			}
			name, number, err := trialArgs(c)
			if err != nil {
				return err
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
			live := db.RunLive(name)
			rec.trial.Status = storage.ShownTrialStatus(rec.trial.Status, live)
			for i := range rec.workers {
				rec.workers[i].Status = storage.ShownWorkerStatus(rec.workers[i].Status, live)
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
	// Usage is the worker's latest resource samples, omitted when none.
	Usage *usageJSON `json:"usage,omitempty"`
}

// usageJSON is a worker's latest resource samples: CPU in percent of one
// core and RSS in bytes (process workers), and its GPUs'.
type usageJSON struct {
	Time       time.Time      `json:"time"`
	CPUPercent *float64       `json:"cpu_percent,omitempty"`
	RSSBytes   *int64         `json:"rss_bytes,omitempty"`
	GPUs       []gpuUsageJSON `json:"gpus,omitempty"`
}

type gpuUsageJSON struct {
	Index       int     `json:"index"`
	Util        float64 `json:"util"`
	MemoryUsed  int64   `json:"memory_used"`
	MemoryTotal int64   `json:"memory_total"`
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
	// usage is each worker's latest samples, by worker id.
	usage map[int64]*usageJSON
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
		if r.checkpoints, err = s.CheckpointRecords(ctx, name, number); err != nil {
			return err
		}
		r.usage, err = latestUsage(ctx, s, name, r.workers)
		return err
	})
	return &r, err
}

// latestUsage reads the latest resource samples of each of workers.
func latestUsage(ctx context.Context, db *storage.DB, exp string, workers []storage.WorkerRecord) (map[int64]*usageJSON, error) {
	out := map[int64]*usageJSON{}
	if len(workers) == 0 {
		return out, nil
	}
	from := workers[0].StartedAt
	for _, w := range workers {
		out[w.ID] = nil
		if w.StartedAt.Before(from) {
			from = w.StartedAt
		}
	}
	samples, err := db.ResourceSamples(ctx, exp, from)
	if err != nil {
		return nil, err
	}
	gpus := map[int64]map[int]gpuUsageJSON{}
	for _, s := range samples { // oldest first: the latest wins
		if _, ok := out[s.WorkerID]; !ok || s.WorkerID == 0 {
			continue
		}
		u := out[s.WorkerID]
		if u == nil {
			u = &usageJSON{}
			out[s.WorkerID] = u
			gpus[s.WorkerID] = map[int]gpuUsageJSON{}
		}
		u.Time = s.Time
		if s.GPU == storage.NoGPU {
			cpu, rss := s.Util, s.MemoryUsed
			u.CPUPercent, u.RSSBytes = &cpu, &rss
		} else {
			gpus[s.WorkerID][s.GPU] = gpuUsageJSON{s.GPU, s.Util, s.MemoryUsed, s.MemoryTotal}
		}
	}
	for id, g := range gpus {
		for _, x := range g {
			out[id].GPUs = append(out[id].GPUs, x)
		}
		slices.SortFunc(out[id].GPUs, func(a, b gpuUsageJSON) int { return a.Index - b.Index })
	}
	return out, nil
}

func (r *trialRecord) json() showJSON {
	out := showJSON{Experiment: r.exp.Name, Metric: r.exp.Metric, Mode: r.exp.Mode, trialJSON: toTrialJSON(r.trial),
		Reports: []reportJSON{}, Events: eventsJSON(r.events), Workers: []workerJSON{}, Checkpoints: []checkpointJSON{}}
	for _, x := range r.reports {
		out.Reports = append(out.Reports, reportJSON{x.Iteration, x.Time, storage.Numbers(x.Metrics)})
	}
	for _, w := range r.workers {
		out.Workers = append(out.Workers, workerJSON{w.Attempt, w.Rank, w.Node, w.PID, w.Status, w.StepRate, w.LogPath, w.UpdatedAt, r.usage[w.ID]})
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
	printEvents(w, r.events)
	section(w, "workers", len(r.workers), func(tw io.Writer) {
		fmt.Fprintln(tw, "ATTEMPT\tRANK\tNODE\tPID\tSTATUS\tSTEPS/S\tCPU\tRSS\tGPU\tLOG")
		for _, x := range r.workers {
			cpu, rss, gpu := "-", "-", "-"
			if u := r.usage[x.ID]; u != nil {
				if u.CPUPercent != nil {
					cpu, rss = fmt.Sprintf("%.0f%%", *u.CPUPercent), workers.Bytes(*u.RSSBytes).String()
				}
				var gs []string
				for _, g := range u.GPUs {
					gs = append(gs, fmt.Sprintf("%d: %.0f%% %v/%v", g.Index, g.Util, workers.Bytes(g.MemoryUsed), workers.Bytes(g.MemoryTotal)))
				}
				gpu = orDash(len(gs) > 0, strings.Join(gs, ", "))
			}
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", x.Attempt, x.Rank, x.Node, orDash(x.PID != 0, strconv.Itoa(x.PID)),
				x.Status, orDash(x.StepRate != 0, fmt.Sprintf("%.4g", x.StepRate)), cpu, rss, gpu, orDash(x.LogPath != "", x.LogPath))
		}
	})
	section(w, "checkpoints", len(r.checkpoints), func(tw io.Writer) {
		fmt.Fprintln(tw, "ITER\tKEPT\tPATH\tMETRICS")
		for _, ck := range r.checkpoints {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", ck.Iteration, orDash(ck.Kept(), "yes"), ck.Path, formatMetrics(ck.Metrics))
		}
	})
}

// eventsJSON is events in --json output, an empty array when none.
func eventsJSON(events []storage.Event) []eventJSON {
	out := []eventJSON{}
	for _, e := range events {
		out = append(out, eventJSON{e.Time, e.Kind, e.Message, e.Data})
	}
	return out
}

// printEvents prints events as the section "events" of show's output.
func printEvents(w io.Writer, events []storage.Event) {
	section(w, "events", len(events), func(tw io.Writer) {
		fmt.Fprintln(tw, "TIME\tKIND\tMESSAGE\tDATA")
		for _, e := range events {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", formatTime(e.Time), e.Kind, e.Message, orDash(len(e.Data) > 0, eventData(e.Data)))
		}
	})
}

// eventData is an event's data for the terminal: a hung trial's stacks
// are long, so they are counted there and shown by --json and gotune
// query.
func eventData(data json.RawMessage) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil || m["stacks"] == nil {
		return string(data)
	}
	var stacks []json.RawMessage
	json.Unmarshal(m["stacks"], &stacks)
	m["stacks"], _ = json.Marshal(fmt.Sprintf("%d stacks: see gotune show --json", len(stacks)))
	b, _ := json.Marshal(m)
	return string(b)
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

// trialArgs reads a command's two arguments, an experiment's name and a
// trial's number.
func trialArgs(c *cli.Context) (string, int, error) {
	if c.NArg() == 1 {
		exp := c.Args().Get(0)
		return "", 0, badInput(fmt.Errorf("%s takes two arguments, the experiment name and the trial number (gotune %s %s 1); got 1: gotune trials %s lists its trials", c.Command.Name, c.Command.Name, shellQuote(exp), shellQuote(exp)))
	}
	if c.NArg() != 2 {
		return "", 0, badInput(fmt.Errorf("%s takes two arguments, the experiment name and the trial number; got %d", c.Command.Name, c.NArg()))
	}
	number, err := strconv.Atoi(c.Args().Get(1))
	if err != nil || number < 1 {
		return "", 0, badInput(fmt.Errorf("trial %q: want a trial number (1, 2, ...)", c.Args().Get(1)))
	}
	return c.Args().Get(0), number, nil
}
