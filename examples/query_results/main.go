// Command query_results shows the Go API over a results database: it opens
// the database read-only (it works while a sweep writes it), lists the
// experiments, the top trials of one, the reports and events of its best
// trial, and runs one SQL query over the public views.
//
//	go run ./cmd/gotune run examples/quickstart.toml
//	go run ./examples/query_results -db gotune.db -experiment quickstart
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/gotune/gotune/storage"
)

func main() {
	path := flag.String("db", "gotune.db", "the results database")
	name := flag.String("experiment", "", "the experiment to look into (default: the newest)")
	top := flag.Int("top", 5, "how many of the best trials to list")
	flag.Parse()
	if err := run(context.Background(), *path, *name, *top); err != nil {
		fmt.Fprintln(os.Stderr, "query_results:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, path, name string, top int) error {
	db, err := storage.OpenReadOnly(path)
	if err != nil {
		return err
	}
	defer db.Close()

	exps, err := db.Experiments(ctx)
	if err != nil {
		return err
	}
	if len(exps) == 0 {
		return errors.New("the database holds no experiment yet")
	}
	fmt.Println("experiments:")
	for _, e := range exps {
		best := "-"
		if e.Best != nil {
			best = fmt.Sprintf("%.4g", *e.Best)
		}
		fmt.Printf("  %-20s %-9s %3d trials, best %s %s (%s)\n", e.Name, e.Status, e.Trials, e.Metric, best, e.Mode)
	}
	if name == "" {
		name = exps[len(exps)-1].Name
	}
	exp, err := db.Experiment(ctx, name)
	if err != nil {
		return err
	}

	// The best finished trials, best first by the objective.
	trials, err := db.QueryTrials(ctx, name, storage.TrialQuery{
		Status: []string{storage.TrialTerminated, storage.TrialStopped},
		Sort:   exp.Metric,
		Limit:  top,
	})
	if err != nil {
		return err
	}
	fmt.Printf("\ntop %d finished trials of %s by %s:\n", top, name, exp.Metric)
	for _, t := range trials {
		fmt.Printf("  trial %-3d %-10s best %.4g after %d iterations, params %v\n", t.Number, t.Status, *t.BestMetric, t.Iterations, t.Params)
	}

	best, err := db.BestTrial(ctx, name)
	if errors.Is(err, storage.ErrNotFound) {
		fmt.Println("\nno trial has reported the objective yet")
		return nil
	}
	if err != nil {
		return err
	}
	reports, err := db.Reports(ctx, name, best.Number)
	if err != nil {
		return err
	}
	fmt.Printf("\nlearning curve of the best trial, %d:\n", best.Number)
	for _, r := range reports {
		fmt.Printf("  iteration %-3d %s = %.4g\n", r.Iteration, exp.Metric, r.Metrics[exp.Metric])
	}
	events, err := db.Events(ctx, name, best.Number)
	if err != nil {
		return err
	}
	fmt.Println("\nits events:")
	for _, e := range events {
		fmt.Printf("  %s  %-9s %s\n", e.Time.Local().Format("15:04:05"), e.Kind, e.Message)
	}

	// Any SQL over the public views, through a read-only connection.
	rows, err := db.Query(ctx, `SELECT status, count(*) FROM trials_v WHERE experiment = ? GROUP BY status ORDER BY status`, name)
	if err != nil {
		return err
	}
	defer rows.Close()
	fmt.Println("\ntrials by status (SQL over trials_v):")
	for rows.Next() {
		var status string
		var n int
		if err := rows.Scan(&status, &n); err != nil {
			return err
		}
		fmt.Printf("  %-10s %d\n", status, n)
	}
	return rows.Err()
}
