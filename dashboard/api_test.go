package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/workers"
)

func TestExperimentsAPI(t *testing.T) {
	srv, path := fixtureServer(t)
	// "digits" is RUNNING in the database, but no run holds it: its run
	// died, and it shows INTERRUPTED until a run holds its lock again.
	var exps []map[string]any
	getJSON(t, srv.URL+"/api/experiments", &exps)
	var detail map[string]any
	getJSON(t, srv.URL+"/api/experiments/digits", &detail)
	if len(exps) == 0 || exps[0]["status"] != storage.ExperimentInterrupted || detail["status"] != storage.ExperimentInterrupted {
		t.Errorf("digits without a live run: %v and %v, want INTERRUPTED", exps, detail["status"])
	}
	holdRun(t, path, "digits")
	exps = nil
	getJSON(t, srv.URL+"/api/experiments", &exps)
	if len(exps) != 2 {
		t.Fatalf("got %d experiments, want 2: %v", len(exps), exps)
	}
	d := exps[0]
	want := map[string]any{"name": "digits", "status": "RUNNING", "metric": "val_loss", "mode": "min",
		"trials": 4.0, "best": 0.2, "num_samples": 6.0, "created_at": "2026-01-02T03:04:05Z"}
	for k, v := range want {
		if d[k] != v {
			t.Errorf("digits %s: got %v, want %v", k, d[k], v)
		}
	}
	wantCounts := map[string]any{"PENDING": 0.0, "RUNNING": 1.0, "PAUSED": 0.0, "TERMINATED": 1.0, "STOPPED": 1.0, "ERROR": 1.0, "INTERRUPTED": 0.0}
	if !reflect.DeepEqual(d["counts"], wantCounts) {
		t.Errorf("digits counts: got %v, want %v", d["counts"], wantCounts)
	}
	if o := exps[1]; o["name"] != "other" || o["best"] != nil || o["num_samples"] != 0.0 {
		t.Errorf("other: %v", o)
	}
}

func TestExperimentAPI(t *testing.T) {
	srv, _ := fixtureServer(t)
	var d struct {
		Name    string          `json:"name"`
		Metrics []string        `json:"metrics"`
		Params  []Param         `json:"params"`
		Config  json.RawMessage `json:"config"`
	}
	getJSON(t, srv.URL+"/api/experiments/digits", &d)
	if want := []string{"acc", "epoch", "val_loss"}; !reflect.DeepEqual(d.Metrics, want) {
		t.Errorf("metrics: got %v, want %v", d.Metrics, want)
	}
	want := []Param{{"hidden", "choice[32 64]", false}, {"lr", "{ loguniform = [0.001, 0.1] }", true}}
	if !reflect.DeepEqual(d.Params, want) {
		t.Errorf("params: got %v, want %v", d.Params, want)
	}
	if !strings.Contains(string(d.Config), `"num_samples":6`) {
		t.Errorf("config: %s", d.Config)
	}
	// One objective: the page need not ask for a Pareto front.
	var objs struct {
		Objectives *[]storage.Objective `json:"objectives"`
	}
	getJSON(t, srv.URL+"/api/experiments/digits", &objs)
	if objs.Objectives == nil || len(*objs.Objectives) != 0 {
		t.Errorf("objectives of a single-objective experiment: %v, want []", objs.Objectives)
	}
	code, body, _ := get(t, srv.URL+"/api/experiments/nope")
	if code != http.StatusNotFound || !strings.Contains(body, `"error":`) || !strings.Contains(body, "nope") {
		t.Errorf("unknown experiment: %d %s", code, body)
	}
}

func TestTrialsAPI(t *testing.T) {
	srv, _ := fixtureServer(t)
	numbers := func(query string) []int {
		t.Helper()
		var ts []Trial
		getJSON(t, srv.URL+"/api/experiments/digits/trials"+query, &ts)
		out := []int{}
		for _, tr := range ts {
			out = append(out, tr.Number)
		}
		return out
	}
	cases := []struct {
		query string
		want  []int
	}{
		{"", []int{1, 2, 3, 4}},
		{"?sort=val_loss", []int{1, 2, 4, 3}}, // best first: 0.2, 0.667, 0.7, 3
		{"?sort=-val_loss", []int{3, 4, 2, 1}},
		{"?sort=val_loss&limit=2", []int{1, 2}},
		{"?status=INTERRUPTED,ERROR", []int{3, 4}}, // no run holds digits: trial 4 is INTERRUPTED
		{"?sort=acc", []int{2, 4, 1, 3}},           // last report's acc, ascending; none last
		{"?order=-trial&offset=1&limit=2", []int{3, 2}},
		{"?order=param:lr", []int{3, 1, 4, 2}},
		{"?order=best", []int{1, 2, 4, 3}},
		{"?param=hidden=64", []int{2, 4}},
		{"?param=hidden=32&param=lr%3E0.005", []int{1}},
		{"?text=EXITED", []int{3}},
		{"?text=0.0&text=64", []int{2, 4}},
		{"?where=iterations%3E=3&where=best%3C1", []int{1, 2}},
	}
	for _, c := range cases {
		if got := numbers(c.query); !reflect.DeepEqual(got, c.want) {
			t.Errorf("trials%s: got %v, want %v", c.query, got, c.want)
		}
	}
	var ts []map[string]any
	getJSON(t, srv.URL+"/api/experiments/digits/trials?status=ERROR", &ts)
	want := map[string]any{"trial_id": 3.0, "status": "ERROR", "iterations": 2.0, "last_metric": 3.0, "best_metric": 3.0,
		"restarts": 0.0, "error": "worker 1 exited with status 1", "params": map[string]any{"lr": 0.002, "hidden": 32.0}}
	if len(ts) != 1 || !reflect.DeepEqual(ts[0], want) {
		t.Errorf("failed trial: got %v, want %v", ts, want)
	}
	// A page of a long list says how long the list is.
	code, body, header := get(t, srv.URL+"/api/experiments/digits/trials?param=hidden=64&order=trial&limit=1")
	if code != http.StatusOK || header.Get("X-Total-Count") != "2" || !strings.HasPrefix(body, `[{"trial_id":2,`) {
		t.Errorf("a page of one: %d, total %q, %s", code, header.Get("X-Total-Count"), body)
	}
	for query, code := range map[string]int{
		"digits/trials?status=BORED":         http.StatusBadRequest,
		"digits/trials?limit=x":              http.StatusBadRequest,
		"digits/trials?offset=-1":            http.StatusBadRequest,
		"digits/trials?order=nope":           http.StatusBadRequest,
		"digits/trials?param=lr~1":           http.StatusBadRequest,
		"digits/trials?where=best<x":         http.StatusBadRequest,
		"digits/trials?where=params_json=1":  http.StatusBadRequest,
		"digits/trials?sort=acc&order=trial": http.StatusBadRequest,
		"nope/trials?order=trial":            http.StatusNotFound,
		"nope/trials":                        http.StatusNotFound,
		"nope/trials?status=RUNNING":         http.StatusNotFound,
	} {
		if got, body, _ := get(t, srv.URL+"/api/experiments/"+query); got != code {
			t.Errorf("%s: got %d %s, want %d", query, got, body, code)
		}
	}
}

// TestInterruptedTrials: the PENDING and RUNNING trials of an experiment
// whose run died (its lock file left behind, held by no one) show, count
// and are selected by status as INTERRUPTED in every view of them; while
// a run holds the experiment's lock they show as recorded.
func TestInterruptedTrials(t *testing.T) {
	srv, path := fixtureServer(t)
	db, err := storage.OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// What a run killed with -9 leaves: the lock file, which the kernel
	// let go of with the process.
	if err := os.WriteFile(storage.LockPath(db.Path(), "digits"), []byte("4194304\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		live bool
		// status is how digits and its trial 4, recorded RUNNING, show.
		status string
		counts map[string]any
		// selected are the trials each status filter selects.
		selected map[string][]int
	}{
		{"dead run", false, storage.TrialInterrupted,
			map[string]any{"PENDING": 0.0, "RUNNING": 0.0, "PAUSED": 0.0, "TERMINATED": 1.0, "STOPPED": 1.0, "ERROR": 1.0, "INTERRUPTED": 1.0},
			map[string][]int{"INTERRUPTED": {4}, "RUNNING": {}, "RUNNING,ERROR": {3}, "INTERRUPTED,ERROR": {3, 4}, "PENDING,RUNNING": {}}},
		{"live run", true, storage.TrialRunning,
			map[string]any{"PENDING": 0.0, "RUNNING": 1.0, "PAUSED": 0.0, "TERMINATED": 1.0, "STOPPED": 1.0, "ERROR": 1.0, "INTERRUPTED": 0.0},
			map[string][]int{"INTERRUPTED": {}, "RUNNING": {4}, "RUNNING,ERROR": {3, 4}, "INTERRUPTED,ERROR": {3}, "PENDING,RUNNING": {4}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.live {
				holdRun(t, path, "digits")
			}
			var exps []Experiment
			getJSON(t, srv.URL+"/api/experiments", &exps)
			var detail map[string]any
			getJSON(t, srv.URL+"/api/experiments/digits", &detail)
			if len(exps) != 2 || exps[0].Status != c.status || detail["status"] != c.status {
				t.Fatalf("digits shows %v and %v, want %s", exps, detail["status"], c.status)
			}
			wantCounts := map[string]int{}
			for st, n := range c.counts {
				wantCounts[st] = int(n.(float64))
			}
			if !reflect.DeepEqual(exps[0].Counts, wantCounts) || !reflect.DeepEqual(detail["counts"], c.counts) {
				t.Errorf("digits counts: list %v, detail %v; want %v", exps[0].Counts, detail["counts"], c.counts)
			}
			// No run holds "other" either way: its PENDING trial is
			// INTERRUPTED.
			wantOther := map[string]int{"PENDING": 0, "RUNNING": 0, "PAUSED": 0, "TERMINATED": 0, "STOPPED": 0, "ERROR": 0, "INTERRUPTED": 1}
			if !reflect.DeepEqual(exps[1].Counts, wantOther) {
				t.Errorf("other counts: got %v, want %v", exps[1].Counts, wantOther)
			}
			var others []Trial
			getJSON(t, srv.URL+"/api/experiments/other/trials", &others)
			if len(others) != 1 || others[0].Status != storage.TrialInterrupted {
				t.Errorf("other's trials: %+v, want trial 1 INTERRUPTED", others)
			}

			shown := map[int]string{}
			var ts []Trial
			getJSON(t, srv.URL+"/api/experiments/digits/trials", &ts)
			for _, tr := range ts {
				shown[tr.Number] = tr.Status
			}
			want := map[int]string{1: "TERMINATED", 2: "STOPPED", 3: "ERROR", 4: c.status}
			if !reflect.DeepEqual(shown, want) {
				t.Errorf("trial list: got %v, want %v", shown, want)
			}
			for filter, wantNumbers := range c.selected {
				code, body, header := get(t, srv.URL+"/api/experiments/digits/trials?status="+filter)
				var page []Trial
				if code != http.StatusOK || json.Unmarshal([]byte(body), &page) != nil {
					t.Errorf("status=%s: %d %s", filter, code, body)
					continue
				}
				got := []int{}
				for _, tr := range page {
					got = append(got, tr.Number)
				}
				if !reflect.DeepEqual(got, wantNumbers) || header.Get("X-Total-Count") != strconv.Itoa(len(wantNumbers)) {
					t.Errorf("status=%s: got %v (total %s), want %v", filter, got, header.Get("X-Total-Count"), wantNumbers)
				}
			}
			var d TrialDetail
			getJSON(t, srv.URL+"/api/experiments/digits/trials/4", &d)
			if d.Status != c.status {
				t.Errorf("trial 4's detail: %s, want %s", d.Status, c.status)
			}
			for _, w := range d.Workers {
				if w.Status != c.status {
					t.Errorf("trial 4's worker %d, recorded RUNNING: %s, want %s", w.Rank, w.Status, c.status)
				}
			}
			var f Front
			getJSON(t, srv.URL+"/api/experiments/digits/front", &f)
			for _, ft := range f.Trials {
				if ft.Number == 4 && ft.Status != c.status {
					t.Errorf("trial 4 on the front's plot: %s, want %s", ft.Status, c.status)
				}
			}
			for query, code := range map[string]int{
				"nope/trials?status=INTERRUPTED":         http.StatusNotFound,
				"digits/trials?status=INTERRUPTED,BORED": http.StatusBadRequest,
			} {
				if got, body, _ := get(t, srv.URL+"/api/experiments/"+query); got != code {
					t.Errorf("%s: got %d %s, want %d", query, got, body, code)
				}
			}
		})
	}
}

func TestCurvesAPI(t *testing.T) {
	srv, _ := fixtureServer(t)
	var c Curves
	getJSON(t, srv.URL+"/api/experiments/digits/curves?metric=val_loss&trials=1,3,4", &c)
	want := Curves{Metric: "val_loss", X: "iteration", Curves: []Curve{
		{1, [][2]float64{{1, 1}, {2, 0.5}, {3, 1.0 / 3}, {4, 0.25}, {5, 0.2}}, 0},
		{3, [][2]float64{{1, 3}}, 0}, // the NaN is left out
		{4, [][2]float64{{1, 0.9}, {2, 0.7}}, 0},
	}}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("curves: got %+v, want %+v", c, want)
	}
	getJSON(t, srv.URL+"/api/experiments/digits/curves?metric=acc&x=time&trials=2", &c)
	want = Curves{Metric: "acc", X: "time", Curves: []Curve{{2, [][2]float64{{201, 0.4}, {202, 0.4}, {203, 0.4}}, 0}}}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("curves against time: got %+v, want %+v", c, want)
	}
	// Four points: the first, the last, and the highest and lowest of the
	// three between.
	getJSON(t, srv.URL+"/api/experiments/digits/curves?metric=val_loss&trials=1&points=4", &c)
	want = Curves{Metric: "val_loss", X: "iteration", Curves: []Curve{{1, [][2]float64{{1, 1}, {2, 0.5}, {4, 0.25}, {5, 0.2}}, 1}}}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("curves with points=4: got %+v, want %+v", c, want)
	}
	getJSON(t, srv.URL+"/api/experiments/digits/curves?metric=acc&x=epoch&trials=3", &c)
	if len(c.Curves) != 1 || len(c.Curves[0].Points) != 0 {
		t.Errorf("a trial without the metric: got %+v, want no points", c)
	}
	for query, code := range map[string]int{
		"digits/curves?trials=1":                                               http.StatusBadRequest,
		"digits/curves?metric=acc&trials=x":                                    http.StatusBadRequest,
		"digits/curves?metric=acc&trials=1&points=3":                           http.StatusBadRequest,
		"digits/curves?metric=acc&trials=1&points=many":                        http.StatusBadRequest,
		"digits/curves?metric=acc&trials=9":                                    http.StatusNotFound,
		"nope/curves?metric=acc&trials=1":                                      http.StatusNotFound,
		"digits/curves?metric=acc&trials=" + strings.Repeat("1,", maxCurves+1): http.StatusBadRequest,
	} {
		if got, body, _ := get(t, srv.URL+"/api/experiments/"+query); got != code {
			t.Errorf("%s: got %d %s, want %d", query, got, body, code)
		}
	}
}

func TestTrialAPI(t *testing.T) {
	srv, _ := fixtureServer(t)
	var d TrialDetail
	getJSON(t, srv.URL+"/api/experiments/digits/trials/4", &d)
	// No run holds digits: its RUNNING trial shows INTERRUPTED.
	if d.Number != 4 || d.Status != storage.TrialInterrupted || len(d.Workers) != 3 {
		t.Fatalf("trial 4: %+v", d)
	}
	var got []string
	for _, w := range d.Workers {
		s := fmt.Sprintf("rank %d %s %s pid %d rate %v straggler %v", w.Rank, w.Node, w.Status, w.PID, *w.StepRate, w.Straggler)
		for _, g := range w.GPUs {
			s += fmt.Sprintf(" gpu %d %v%% %d", g.Index, g.Util, g.MemoryUsed>>30)
		}
		got = append(got, s)
	}
	// Its workers, recorded RUNNING, show INTERRUPTED as well.
	want := []string{
		"rank 0 node0 INTERRUPTED pid 100 rate 10 straggler false gpu 0 87% 2", // the latest sample
		"rank 1 node0 INTERRUPTED pid 101 rate 9.5 straggler false gpu 1 80% 3",
		"rank 2 node0 INTERRUPTED pid 102 rate 4 straggler true",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("workers:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	getJSON(t, srv.URL+"/api/experiments/digits/trials/1", &d)
	if len(d.Checkpoints) != 1 || d.Checkpoints[0].Iteration != 5 || !d.Checkpoints[0].Kept || len(d.Workers) != 0 {
		t.Errorf("trial 1 checkpoints and workers: %+v %+v", d.Checkpoints, d.Workers)
	}
	var kinds []string
	for _, e := range d.Events {
		kinds = append(kinds, e.Kind)
	}
	if !reflect.DeepEqual(kinds, []string{"start", "complete"}) {
		t.Errorf("trial 1 events: %v", kinds)
	}
	for query, code := range map[string]int{"digits/trials/x": 400, "digits/trials/9": 404, "nope/trials/1": 404} {
		if got, body, _ := get(t, srv.URL+"/api/experiments/"+query); got != code {
			t.Errorf("%s: got %d %s, want %d", query, got, body, code)
		}
	}
}

func TestMarkStragglers(t *testing.T) {
	rate := func(v float64) *storage.Number { return storage.NumberPtr(&v) }
	ws := []Worker{
		{Attempt: 0, Rank: 0, StepRate: rate(1)}, // alone in its attempt with a rate
		{Attempt: 0, Rank: 1},
		{Attempt: 1, Rank: 0, StepRate: rate(10)},
		{Attempt: 1, Rank: 1, StepRate: rate(7.4)},
		{Attempt: 1, Rank: 2, StepRate: rate(7.6)},
		{Attempt: 1, Rank: 3, StepRate: rate(10)},
	}
	markStragglers(ws) // attempt 1's median is 8.8; below 6.6 is a straggler
	for i, want := range []bool{false, false, false, false, false, false} {
		if ws[i].Straggler != want {
			t.Errorf("worker %d: straggler %v, want %v", i, ws[i].Straggler, want)
		}
	}
	ws[3].StepRate = rate(6.5)
	markStragglers(ws)
	if !ws[3].Straggler {
		t.Error("a worker at 6.5 steps/s beside a median of 8.75 is not marked")
	}
}

func TestEventsAPI(t *testing.T) {
	srv, _ := fixtureServer(t)
	var evs []Event
	getJSON(t, srv.URL+"/api/experiments/digits/events", &evs)
	var got []string
	for _, e := range evs {
		got = append(got, fmt.Sprintf("%d %s", e.Number, e.Kind))
	}
	want := []string{"1 start", "1 complete", "2 start", "2 decision", "2 stop", "3 start", "3 error", "4 start"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events: got %v, want %v", got, want)
	}
	if string(evs[3].Data) != `{"action":"STOP","rung":3}` {
		t.Errorf("decision data: %s", evs[3].Data)
	}
	getJSON(t, srv.URL+"/api/experiments/digits/events?limit=2", &evs)
	if len(evs) != 2 || evs[1].Kind != "start" || evs[1].Number != 4 {
		t.Errorf("the latest 2 events: %+v", evs)
	}
	getJSON(t, srv.URL+"/api/experiments/digits/events?trial=2", &evs)
	if len(evs) != 3 {
		t.Errorf("trial 2's events: %+v", evs)
	}
	for _, q := range []string{"?trial=0", "?limit=-1", "?limit=x"} {
		if code, body, _ := get(t, srv.URL+"/api/experiments/digits/events"+q); code != http.StatusBadRequest {
			t.Errorf("events%s: %d %s", q, code, body)
		}
	}
}

func TestResourcesAPI(t *testing.T) {
	srv, _ := fixtureServer(t)
	var res Resources
	getJSON(t, srv.URL+"/api/experiments/digits/resources", &res)
	if res.Manager != nil {
		t.Errorf("a dashboard outside a sweep knows no manager: %+v", res.Manager)
	}
	var got []string
	for _, s := range res.Samples {
		got = append(got, fmt.Sprintf("%s/%d %v", s.Node, s.Index, s.Util))
	}
	if want := []string{"node0/-1 35.5", "node0/0 87", "node0/1 80"}; !reflect.DeepEqual(got, want) {
		t.Errorf("samples: got %v, want %v", got, want)
	}

	usage := workers.Usage{Capacity: workers.Resources{CPUs: 8, GPUs: 2, Memory: 32 << 30},
		InUse: workers.Resources{CPUs: 3, GPUs: 1.5, Memory: 4 << 30}, Waiting: 2}
	srv, _ = fixtureServer(t, WithUsage(func() workers.Usage { return usage }))
	getJSON(t, srv.URL+"/api/experiments/digits/resources", &res)
	want := Usage{CPUs: 8, CPUsInUse: 3, GPUs: 2, GPUsInUse: 1.5, Memory: 32 << 30, MemoryInUse: 4 << 30, WaitingGroups: 2}
	if res.Manager == nil || *res.Manager != want {
		t.Errorf("manager usage: got %+v, want %+v", res.Manager, want)
	}
}

// TestNonFiniteJSON checks that NaN and infinities reach the page as the
// strings the CLI's --json uses.
func TestNonFiniteJSON(t *testing.T) {
	srv, _ := fixtureServer(t)
	_, body, _ := get(t, srv.URL+"/api/experiments/digits/trials/3")
	if !strings.Contains(body, `"last_metric":3`) {
		t.Errorf("trial 3: %s", body)
	}
	b, err := json.Marshal([]storage.Number{storage.Number(nan()), storage.Number(inf(1)), storage.Number(inf(-1)), 0.5})
	if err != nil || string(b) != `["NaN","Infinity","-Infinity",0.5]` {
		t.Errorf("got %s (%v)", b, err)
	}
}

func TestPageAndHeaders(t *testing.T) {
	srv, _ := fixtureServer(t)
	code, body, h := get(t, srv.URL+"/")
	if code != 200 || !strings.Contains(body, "<!doctype html>") {
		t.Fatalf("GET /: %d\n%s", code, body)
	}
	if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
		t.Errorf("no content security policy: %q", csp)
	}
	for _, asset := range []string{"/app.js", "/style.css"} {
		if code, _, _ := get(t, srv.URL+asset); code != 200 {
			t.Errorf("GET %s: %d", asset, code)
		}
	}
	code, body, _ = get(t, srv.URL+"/api/nothing")
	if code != http.StatusNotFound || !strings.Contains(body, `"error"`) {
		t.Errorf("unknown endpoint: %d %s", code, body)
	}
	resp, err := http.Post(srv.URL+"/api/experiments", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Error("POST to the read-only API succeeded")
	}
}

func TestListen(t *testing.T) {
	for _, addr := range []string{":0", "0", "127.0.0.1:0"} {
		l, err := Listen(addr)
		if err != nil {
			t.Fatalf("Listen(%q): %v", addr, err)
		}
		host, _, _ := net.SplitHostPort(l.Addr().String())
		l.Close()
		if host != "127.0.0.1" {
			t.Errorf("Listen(%q) bound %s, want 127.0.0.1", addr, host)
		}
	}
	l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := Listen(l.Addr().String()); err == nil || !strings.Contains(err.Error(), "--addr") {
		t.Errorf("a port in use: %v", err)
	}
	if _, err := Listen("a:b:c"); err == nil {
		t.Error("a malformed address was accepted")
	}
}

func TestDownsample(t *testing.T) {
	// A falling curve of 100,000 points with one spike up and one dip
	// below its end.
	var points [][2]float64
	for i := range 100000 {
		points = append(points, [2]float64{float64(i), 1 / float64(i+1)})
	}
	points[31337][1] = 5
	points[77777][1] = -1
	for _, limit := range []int{4, 5, 500, 1001} {
		got := downsample(points, limit)
		if len(got) > limit || len(got) < limit-1 {
			t.Errorf("limit %d: %d points", limit, len(got))
		}
		if got[0] != points[0] || got[len(got)-1] != points[len(points)-1] {
			t.Errorf("limit %d: first or last point lost", limit)
		}
		has := func(p [2]float64) bool { return slices.Contains(got, p) }
		if !has(points[31337]) || !has(points[77777]) {
			t.Errorf("limit %d: the highest or the lowest point lost", limit)
		}
		for i := 1; i < len(got); i++ {
			if got[i][0] <= got[i-1][0] {
				t.Fatalf("limit %d: points out of order at %d", limit, i)
			}
		}
	}
	if got := downsample(points[:10], 10); len(got) != 10 {
		t.Errorf("a curve within the bound: %d points, want all 10", len(got))
	}
}

// Without limit, the trial list answers its first DefaultTrialPage
// trials, the total, and a link to the next page, which leads through the
// whole list; limit=0 asks for every trial.
func TestTrialsAPIPagesByDefault(t *testing.T) {
	const n = 2*DefaultTrialPage + 30
	srv := httptest.NewServer(New(largeExperiment(t, n)))
	defer srv.Close()
	next := "/api/experiments/large/trials?order=-trial"
	var seen []int
	for pages := 0; next != ""; pages++ {
		if pages > 3 {
			t.Fatalf("more than 3 pages: %v", next)
		}
		code, body, h := get(t, srv.URL+next)
		var page []Trial
		if err := json.Unmarshal([]byte(body), &page); code != http.StatusOK || err != nil {
			t.Fatalf("GET %s: %d %v %.200s", next, code, err, body)
		}
		if h.Get("X-Total-Count") != strconv.Itoa(n) {
			t.Errorf("GET %s: X-Total-Count %q, want %d", next, h.Get("X-Total-Count"), n)
		}
		if len(page) > DefaultTrialPage {
			t.Errorf("GET %s: %d trials, want at most %d", next, len(page), DefaultTrialPage)
		}
		for _, tr := range page {
			seen = append(seen, tr.Number)
		}
		next = ""
		if link := h.Get("Link"); link != "" {
			m := regexp.MustCompile(`^<([^>]+)>; rel="next"$`).FindStringSubmatch(link)
			if m == nil {
				t.Fatalf("Link: %q", link)
			}
			next = m[1]
		}
	}
	if len(seen) != n || seen[0] != n || seen[n-1] != 1 {
		t.Errorf("paged through %d trials, from %v to %v; want %d from %d down to 1", len(seen), seen[0], seen[len(seen)-1], n, n)
	}
	var all []Trial
	getJSON(t, srv.URL+"/api/experiments/large/trials?limit=0", &all)
	if len(all) != n {
		t.Errorf("limit=0: %d trials, want %d", len(all), n)
	}
}

// /api/version changes when something is committed, and only then.
func TestVersionAPI(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gotune.db")
	db, err := storage.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exp, err := db.CreateExperiment(ctx, "v", "loss", "min", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	ro, err := storage.OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	srv := httptest.NewServer(New(ro))
	defer srv.Close()
	var v0, v1, v2 Version
	getJSON(t, srv.URL+"/api/version", &v0)
	getJSON(t, srv.URL+"/api/version", &v1)
	if v1 != v0 {
		t.Errorf("nothing committed, yet the version went from %d to %d", v0.Version, v1.Version)
	}
	if _, err := db.CreateTrial(ctx, exp.ID, 1, map[string]any{"x": 1}); err != nil {
		t.Fatal(err)
	}
	getJSON(t, srv.URL+"/api/version", &v2)
	if v2.Version <= v1.Version {
		t.Errorf("after a commit the version went from %d to %d, want it to grow", v1.Version, v2.Version)
	}
}
