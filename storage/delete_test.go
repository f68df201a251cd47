package storage

import (
	"context"
	"errors"
	"reflect"
	"testing"
)

// TestDeleteExperimentLeavesOthersAlone records two experiments with
// reports, params, checkpoints, events, workers and scheduler inputs,
// deletes one, and finds every table as it was before that one was
// created; deleting it again finds nothing.
func TestDeleteExperimentLeavesOthersAlone(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	populate := func(name string) {
		t.Helper()
		exp, err := db.CreateExperiment(ctx, name, "loss", "min", map[string]any{"seed": 1})
		if err != nil {
			t.Fatal(err)
		}
		for n := 1; n <= 2; n++ {
			tr, err := db.CreateTrial(ctx, exp.ID, n, map[string]any{"lr": 0.1 * float64(n)})
			if err != nil {
				t.Fatal(err)
			}
			loss := 0.5
			if err := db.AddReport(ctx, tr.ID(), Report{Iteration: 1, Metrics: map[string]float64{"loss": loss}}, &loss); err != nil {
				t.Fatal(err)
			}
			if _, err := db.RecordCheckpoint(ctx, tr.ID(), 1, "/ck", nil); err != nil {
				t.Fatal(err)
			}
			if _, err := db.SetWorker(ctx, tr.ID(), WorkerRecord{Rank: 0, Node: "n", PID: 1, Status: "RUNNING"}); err != nil {
				t.Fatal(err)
			}
			if err := db.LogSchedulerInput(exp.ID, SchedulerInput{Trial: n, Kind: "add", Data: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.SetConstraints(ctx, exp.ID, []Constraint{{Metric: "loss", Op: "<=", Bound: 1}}); err != nil {
			t.Fatal(err)
		}
		if err := db.AddEvent(ctx, exp.ID, 0, "note", "an experiment event", nil); err != nil {
			t.Fatal(err)
		}
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	counts := func() map[string]int {
		t.Helper()
		rows, err := db.Query(ctx, `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				t.Fatal(err)
			}
			names = append(names, name)
		}
		rows.Close()
		out := map[string]int{}
		for _, name := range names {
			var n int
			r, err := db.Query(ctx, `SELECT count(*) FROM "`+name+`"`)
			if err != nil {
				t.Fatal(err)
			}
			r.Next()
			if err := r.Scan(&n); err != nil {
				t.Fatal(err)
			}
			r.Close()
			out[name] = n
		}
		return out
	}
	populate("keep")
	before := counts()
	populate("gone")
	if err := db.DeleteExperiment(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if after := counts(); !reflect.DeepEqual(after, before) {
		t.Errorf("rows after the delete:\n%v\nbefore the experiment:\n%v", after, before)
	}
	if _, err := db.Experiment(ctx, "gone"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the deleted experiment: %v", err)
	}
	if ts, err := db.Trials(ctx, "keep"); err != nil || len(ts) != 2 || *ts[0].BestMetric != 0.5 {
		t.Errorf("the other experiment's trials: %v %v", ts, err)
	}
	if err := db.DeleteExperiment(ctx, "gone"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a second delete: %v, want ErrNotFound", err)
	}
}

// TestLeaderboardPutsUnreportedTrialsLast reads leaderboard_v of an
// experiment to minimise and of one to maximise whose trials 2 and 4
// never reported: they come last, after the others best first.
func TestLeaderboardPutsUnreportedTrialsLast(t *testing.T) {
	ctx := context.Background()
	for mode, want := range map[string][]int{"min": {3, 1, 2, 4}, "max": {1, 3, 2, 4}} {
		db := mustOpen(t)
		f := newFixture(t, db, mode, 4)
		f.report(t, 1, 1, 0.5)
		f.report(t, 3, 1, 0.2)
		rows, err := db.Query(ctx, `SELECT place, trial_id FROM leaderboard_v WHERE experiment = 'e' LIMIT 10`)
		if err != nil {
			t.Fatal(err)
		}
		var got []int
		for rows.Next() {
			var place, trial int
			if err := rows.Scan(&place, &trial); err != nil {
				t.Fatal(err)
			}
			if place != len(got)+1 {
				t.Errorf("%s: trial %d in place %d, row %d", mode, trial, place, len(got)+1)
			}
			got = append(got, trial)
		}
		rows.Close()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: leaderboard %v, want %v", mode, got, want)
		}
	}
}
