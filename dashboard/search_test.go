package dashboard

import (
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gotune/gotune/storage"
)

// multiSpace is the search space of twoObjectiveExperiment's experiments,
// recorded as the tuner records one.
var multiSpace = map[string]string{"lr": "{ uniform = [0, 1] }", "width": "{ choice = [16, 32, 64] }"}

// twoObjectiveExperiment records "multi" into a new database and returns
// its path: objectives loss (min) and latency (min), constraint mem <= 40,
// trials 1 to 7 finished with the objectives below (1, 2 and 3 on the
// front; 5 better than all but infeasible) and trial 8 still pending;
// and "young" (loss, min) of one finished trial.
// lr grows with the loss, so it matters more than width.
func twoObjectiveExperiment(t testing.TB) string {
	t.Helper()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "gotune.db")
	db, err := storage.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	exp, err := db.CreateExperiment(ctx, "multi", "loss", "min", map[string]any{
		"search": map[string]any{"num_samples": 8}, "space": multiSpace})
	must(err)
	must(db.SetObjectives(ctx, exp.ID, []storage.Objective{{Metric: "loss", Mode: "min"}, {Metric: "latency", Mode: "min"}}))
	must(db.SetConstraints(ctx, exp.ID, []storage.Constraint{{Metric: "mem", Op: "<=", Bound: 40}}))
	for i, r := range [][3]float64{{1, 5, 10}, {2, 2, 10}, {3, 1, 10}, {3, 4, 10}, {0.5, 0.5, 50}, {4, 6, 10}, {2.5, 3, 10}} {
		width := []int{16, 32, 64}[i%3]
		tr, err := db.CreateTrial(ctx, exp.ID, i+1, map[string]any{"lr": r[0] / 5, "width": width})
		must(err)
		loss := r[0]
		must(db.AddReport(ctx, tr.ID(), storage.Report{Iteration: 1, Time: time.Now(),
			Metrics: map[string]float64{"loss": loss, "latency": r[1], "mem": r[2]}}, &loss))
		must(db.FinishTrial(ctx, tr.ID(), storage.TrialTerminated, ""))
	}
	tr, err := db.CreateTrial(ctx, exp.ID, 8, map[string]any{"lr": 0.5, "width": 16})
	must(err)
	must(db.SetTrialStatus(ctx, tr.ID(), storage.TrialPending))
	young, err := db.CreateExperiment(ctx, "young", "loss", "min", map[string]any{"space": multiSpace})
	must(err)
	tr, err = db.CreateTrial(ctx, young.ID, 1, map[string]any{"lr": 0.5, "width": 16})
	must(err)
	loss := 1.0
	must(db.AddReport(ctx, tr.ID(), storage.Report{Iteration: 1, Time: time.Now(), Metrics: map[string]float64{"loss": loss}}, &loss))
	must(db.FinishTrial(ctx, tr.ID(), storage.TrialTerminated, ""))
	return path
}

// searchServer serves the two-objective experiment and the fixture's
// single-objective one from one read-only database each, by name.
func searchServer(t *testing.T) (multi, single string) {
	t.Helper()
	db, err := storage.OpenReadOnly(twoObjectiveExperiment(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	srv := httptestServer(t, New(db))
	fsrv, _ := fixtureServer(t)
	return srv, fsrv.URL
}

func TestFrontAPI(t *testing.T) {
	multi, single := searchServer(t)
	var f Front
	getJSON(t, multi+"/api/experiments/multi/front", &f)
	if want := []storage.Objective{{Metric: "loss", Mode: "min"}, {Metric: "latency", Mode: "min"}}; !reflect.DeepEqual(f.Objectives, want) {
		t.Errorf("objectives: got %v, want %v", f.Objectives, want)
	}
	if len(f.Trials) != 8 {
		t.Fatalf("got %d trials, want 8: %+v", len(f.Trials), f.Trials)
	}
	yes, no := true, false
	tests := []struct {
		n             int
		loss, latency float64 // NaN: absent
		feasible      *bool
		onFront       bool
	}{
		{1, 1, 5, &yes, true},
		{2, 2, 2, &yes, true},
		{3, 3, 1, &yes, true},
		{4, 3, 4, &yes, false},
		{5, 0.5, 0.5, &no, false},
		{6, 4, 6, &yes, false},
		{7, 2.5, 3, &yes, false},
		{8, math.NaN(), math.NaN(), nil, false},
	}
	for i, tt := range tests {
		got := f.Trials[i]
		if got.Number != tt.n || got.OnFront != tt.onFront || !reflect.DeepEqual(got.Feasible, tt.feasible) {
			t.Errorf("trial %d: got %+v (feasible %v), want on_front %v, feasible %v", tt.n, got, got.Feasible, tt.onFront, tt.feasible)
		}
		for metric, want := range map[string]float64{"loss": tt.loss, "latency": tt.latency} {
			v, ok := got.Values[metric]
			if math.IsNaN(want) && ok || !math.IsNaN(want) && float64(v) != want {
				t.Errorf("trial %d %s: got %v (present %v), want %v", tt.n, metric, v, ok, want)
			}
		}
	}
	// A single-objective experiment: its metric, no front.
	getJSON(t, single+"/api/experiments/digits/front", &f)
	if len(f.Objectives) != 1 || f.Objectives[0].Metric != "val_loss" || len(f.Trials) != 4 {
		t.Errorf("digits: %+v", f)
	}
	for _, tr := range f.Trials {
		if tr.OnFront {
			t.Errorf("digits trial %d is on a front", tr.Number)
		}
	}
	if code, body, _ := get(t, multi+"/api/experiments/nope/front"); code != http.StatusNotFound || !strings.Contains(body, "nope") {
		t.Errorf("unknown experiment: %d %s", code, body)
	}
}

func TestImportanceAPI(t *testing.T) {
	multi, _ := searchServer(t)
	tests := []struct {
		name, url string
		code      int
		metric    string
		trials    int
		errText   string
	}{
		{"default objective", multi + "/api/experiments/multi/importance", 200, "loss", 6, ""},
		{"second objective", multi + "/api/experiments/multi/importance?metric=latency&quantile=0.5", 200, "latency", 6, ""},
		{"not an objective", multi + "/api/experiments/multi/importance?metric=mem", 400, "", 0, `metric \"mem\" is not an objective`},
		{"bad quantile", multi + "/api/experiments/multi/importance?quantile=2", 400, "", 0, "quantile must be"},
		{"unknown experiment", multi + "/api/experiments/nope/importance", 404, "", 0, "nope"},
		{"too few trials", multi + "/api/experiments/young/importance", 409, "", 0, "need at least 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body, _ := get(t, tt.url)
			if code != tt.code {
				t.Fatalf("got %d %s, want %d", code, body, tt.code)
			}
			if tt.code != 200 {
				if !strings.Contains(body, tt.errText) {
					t.Errorf("body %s lacks %q", body, tt.errText)
				}
				return
			}
			var v ImportanceView
			getJSON(t, tt.url, &v)
			if v.Metric != tt.metric || v.Trials != tt.trials || len(v.Params) != 2 {
				t.Fatalf("got %+v", v)
			}
			sum := 0.0
			for _, p := range v.Params {
				sum += p.Importance
			}
			if math.Abs(sum-1) > 1e-9 {
				t.Errorf("shares add up to %g, want 1: %+v", sum, v.Params)
			}
		})
	}
	var v ImportanceView
	getJSON(t, multi+"/api/experiments/multi/importance", &v)
	if v.Params[0].Name != "lr" {
		t.Errorf("loss follows lr, yet %s ranks first: %+v", v.Params[0].Name, v.Params)
	}
}

// httptestServer serves h for the test and returns its URL.
func httptestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}
