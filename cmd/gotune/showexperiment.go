package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gotune/gotune/storage"
)

// experimentRecord is what `gotune show EXP` tells of an experiment: its
// status, its trials by status, its best trial and the events of no trial
// (notices, resumes, an exhausted search), which no trial's page shows.
type experimentRecord struct {
	exp      *storage.Experiment
	byStatus map[string]int
	// best is the trial with the best objective, nil when none reported
	// it or the experiment has several objectives.
	best   *storage.Trial
	events []storage.Event
}

// experimentShowJSON is `gotune show EXP --json`.
type experimentShowJSON struct {
	experimentJSON
	ByStatus  map[string]int `json:"by_status"`
	BestTrial *int           `json:"best_trial"`
	Events    []eventJSON    `json:"events"`
}

// showExperiment prints experiment name's record, as `gotune show EXP`.
func showExperiment(c *cli.Context, name string) error {
	db, err := openResults(c.String("db"))
	if err != nil {
		return err
	}
	defer db.Close()
	r, err := loadExperiment(c, db, name)
	if err != nil {
		return lookupError(err)
	}
	if c.Bool("json") {
		return writeJSON(c.App.Writer, r.json())
	}
	r.print(c.App.Writer)
	return nil
}

// loadExperiment reads experiment name's record from one snapshot, with
// the statuses that a run which died left shown as INTERRUPTED.
func loadExperiment(c *cli.Context, db *storage.DB, name string) (*experimentRecord, error) {
	ctx := c.Context
	r := experimentRecord{byStatus: map[string]int{}}
	err := db.Snapshot(ctx, func(s *storage.DB) error {
		var err error
		if r.exp, err = s.Experiment(ctx, name); err != nil {
			return err
		}
		counts, err := s.StatusCounts(ctx, name)
		if err != nil {
			return err
		}
		live := db.RunLive(name)
		for status, n := range counts {
			r.byStatus[storage.ShownTrialStatus(status, live)] += n
		}
		if len(r.exp.Objectives) == 0 {
			if r.best, err = s.BestTrial(ctx, name); errors.Is(err, storage.ErrNotFound) {
				r.best, err = nil, nil
			}
			if err != nil {
				return err
			}
		}
		r.events, err = s.ExperimentEvents(ctx, name)
		return err
	})
	if err != nil {
		return nil, err
	}
	db.ShowLiveStatus(r.exp)
	return &r, nil
}

func (r *experimentRecord) json() experimentShowJSON {
	e := r.exp
	out := experimentShowJSON{experimentJSON: toExperimentJSON(e), ByStatus: r.byStatus, Events: eventsJSON(r.events)}
	if r.best != nil {
		out.BestTrial = &r.best.Number
	}
	return out
}

func (r *experimentRecord) print(w io.Writer) {
	e := r.exp
	var counts []string
	for _, status := range append(slices.Clone(storage.TrialStatuses), storage.TrialInterrupted) {
		if n := r.byStatus[status]; n > 0 {
			counts = append(counts, fmt.Sprintf("%d %s", n, status))
		}
	}
	trials := plural(e.Trials, "trial")
	if len(counts) > 0 {
		trials += ": " + strings.Join(counts, ", ")
	}
	fmt.Fprintf(w, "experiment  %s (%s, %s): %s, %s\n", e.Name, e.Metric, e.Mode, e.Status, trials)
	switch {
	case len(e.Objectives) > 0:
		fmt.Fprintf(w, "best        %d objectives: gotune best %s lists the Pareto front\n", len(e.Objectives), shellQuote(e.Name))
	case r.best != nil:
		fmt.Fprintf(w, "best        trial %d, %s = %s\n", r.best.Number, e.Metric, optFloat(r.best.BestMetric))
	default:
		fmt.Fprintf(w, "best        none: no trial has reported %s\n", e.Metric)
	}
	printEvents(w, r.events)
	fmt.Fprintf(w, "\ngotune trials %s lists the trials; gotune show %s TRIAL shows one\n", shellQuote(e.Name), shellQuote(e.Name))
}
