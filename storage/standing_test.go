package storage

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestTrialStandingMatchesEveryPair fills experiments of two and three
// objectives — ties, equal points, missing and infinite objectives,
// infeasible trials, trials that never reported — and checks that
// trial_standing_v says what version 4's view, which compares every pair
// of trials, says of every trial.
func TestTrialStandingMatchesEveryPair(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	rng := rand.New(rand.NewPCG(7, 8))
	setups := []struct {
		objectives  []Objective
		constrained bool
	}{
		{[]Objective{{"a", "min"}, {"b", "max"}}, true},
		{[]Objective{{"a", "max"}, {"b", "min"}}, false},
		{[]Objective{{"a", "min"}, {"b", "min"}, {"c", "max"}}, true},
		{[]Objective{{"a", "min"}, {"b", "max"}, {"c", "min"}, {"d", "min"}}, false},
		{nil, true}, // one objective: no front
	}
	var ids []int64
	for i, s := range setups {
		exp, err := db.CreateExperiment(ctx, fmt.Sprintf("e%d", i), "a", "min", map[string]any{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, exp.ID)
		if err := db.SetObjectives(ctx, exp.ID, s.objectives); err != nil {
			t.Fatal(err)
		}
		if s.constrained {
			if err := db.SetConstraints(ctx, exp.ID, []Constraint{{"mem", "<=", 8}}); err != nil {
				t.Fatal(err)
			}
		}
		for n := 1; n <= 150; n++ {
			tr, err := db.CreateTrial(ctx, exp.ID, n, nil)
			if err != nil {
				t.Fatal(err)
			}
			for k := range rng.IntN(3) { // none, one or two reports: the last counts
				m := map[string]float64{"mem": float64(rng.IntN(10))}
				for _, name := range []string{"a", "b", "c", "d"} {
					// Few values, so that ties and equal points are common.
					switch r := rng.IntN(40); {
					case r == 0: // missing
					case r == 1:
						m[name] = math.Inf(1 - 2*rng.IntN(2))
					case r < 20:
						m[name] = float64(rng.IntN(6))
					default:
						m[name] = float64(rng.IntN(6)) + 0.5
					}
				}
				obj := m["a"]
				if err := db.AddReport(ctx, tr.ID(), Report{Iteration: k + 1, Time: time.Now(), Metrics: m}, &obj); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// Trial 152 dominates trial 151 and its objectives sum to the same
	// float: a sweep by sum takes trial 151 first. Their third objective
	// (maximised) beats every other trial's.
	for i, m := range []map[string]float64{{"a": 1e16, "b": 1, "c": 1e300, "mem": 0}, {"a": 1e16, "b": 0, "c": 1e300, "mem": 0}} {
		tr, err := db.CreateTrial(ctx, ids[2], 151+i, nil)
		if err != nil {
			t.Fatal(err)
		}
		obj := m["a"]
		if err := db.AddReport(ctx, tr.ID(), Report{Iteration: 1, Time: time.Now(), Metrics: m}, &obj); err != nil {
			t.Fatal(err)
		}
	}
	v4 := migrations[3]
	v4 = strings.TrimSuffix(strings.TrimSpace(v4[strings.Index(v4, "CREATE VIEW trial_standing_v AS")+len("CREATE VIEW trial_standing_v AS"):]), ";")
	got, want := standingRows(t, db, `SELECT * FROM trial_standing_v`), standingRows(t, db, v4)
	if len(want) != 5*150+2 {
		t.Fatalf("version 4's view gives %d rows, want %d", len(want), 5*150+2)
	}
	if w := want["e2 trial 151"]; w[1] != "0" {
		t.Fatalf("version 4's view puts trial 151 of e2 on the front (%v)", w)
	}
	front := 0
	for k, w := range want {
		if g, ok := got[k]; !ok || !reflect.DeepEqual(g, w) {
			t.Errorf("%s: feasible and on_front %v, want %v", k, g, w)
		}
		if w[1] == "1" {
			front++
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d rows, want %d", len(got), len(want))
	}
	if front < 20 {
		t.Errorf("only %d trials on a front: the comparison proves little", front)
	}
}

// standingRows runs a query of trial_standing_v's columns and returns
// feasible and on_front by experiment and trial, as text.
func standingRows(t *testing.T, db *DB, query string) map[string][2]string {
	t.Helper()
	rows, err := db.Query(context.Background(), query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	out := map[string][2]string{}
	for rows.Next() {
		var exp string
		var trial int
		var feasible, onFront *int
		if err := rows.Scan(&exp, &trial, &feasible, &onFront); err != nil {
			t.Fatal(err)
		}
		text := func(p *int) string {
			if p == nil {
				return "NULL"
			}
			return fmt.Sprint(*p)
		}
		out[fmt.Sprintf("%s trial %d", exp, trial)] = [2]string{text(feasible), text(onFront)}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestParetoFrontOfThousandsOfTrials asks for the front of 3,000 trials
// with a deadline of 5 s, which a comparison of every pair of trials
// (version 4's view, about 15 s here) misses by far.
func TestParetoFrontOfThousandsOfTrials(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	exp, err := db.CreateExperiment(ctx, "mo", "f1", "min", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.SetObjectives(ctx, exp.ID, []Objective{{"f1", "min"}, {"f2", "max"}}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for n := 1; n <= 3000; n++ {
		tr, err := db.CreateTrial(ctx, exp.ID, n, nil)
		if err != nil {
			t.Fatal(err)
		}
		f1 := rng.Float64()
		m := map[string]float64{"f1": f1, "f2": f1 + rng.Float64()}
		if err := db.AddReport(ctx, tr.ID(), Report{Iteration: 1, Time: time.Now(), Metrics: m}, &f1); err != nil {
			t.Fatal(err)
		}
	}
	deadline, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	front, err := db.ParetoFront(deadline, "mo")
	if err != nil {
		t.Fatalf("after %v: %v", time.Since(start), err)
	}
	if len(front) < 10 {
		t.Errorf("%d trials on the front of 3,000 trading f1 against f2, want more", len(front))
	}
}
