package storage

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func trialNumbers(ts []*Trial) []int {
	out := make([]int, len(ts))
	for i, t := range ts {
		out[i] = t.Number
	}
	return out
}

func TestQueryTrials(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	f := newFixture(t, db, "min", 5)
	// best loss: trial 1 0.5, trial 2 0.2, trial 3 0.4, trial 4 none, trial 5 0.3.
	// last acc (1 - last loss): trial 1 0.5, trial 2 0.1, trial 3 0.6, trial 5 0.7.
	for _, r := range []struct {
		trial int
		loss  []float64
	}{{1, []float64{0.5}}, {2, []float64{0.2, 0.9}}, {3, []float64{0.4}}, {5, []float64{0.3}}} {
		for i, l := range r.loss {
			f.report(t, r.trial, i+1, l)
		}
	}
	for _, n := range []int{1, 2} {
		if err := db.FinishTrial(ctx, f.trials[n-1].ID(), TrialTerminated, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.FinishTrial(ctx, f.trials[2].ID(), TrialError, "boom"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		q    TrialQuery
		want []int
	}{
		{"all", TrialQuery{}, []int{1, 2, 3, 4, 5}},
		{"objective, best first", TrialQuery{Sort: "loss"}, []int{2, 5, 3, 1, 4}},
		{"objective reversed", TrialQuery{Sort: "-loss"}, []int{1, 3, 5, 2, 4}},
		{"other metric, last report, ascending", TrialQuery{Sort: "acc"}, []int{2, 1, 3, 5, 4}},
		{"other metric reversed", TrialQuery{Sort: "-acc"}, []int{5, 3, 1, 2, 4}},
		{"unknown metric keeps number order", TrialQuery{Sort: "nope"}, []int{1, 2, 3, 4, 5}},
		{"limit", TrialQuery{Sort: "loss", Limit: 2}, []int{2, 5}},
		{"status", TrialQuery{Status: []string{TrialTerminated}}, []int{1, 2}},
		{"statuses, sorted, limited", TrialQuery{Status: []string{TrialRunning, TrialError}, Sort: "loss", Limit: 2}, []int{5, 3}},
		{"a page", TrialQuery{Sort: "loss", Offset: 1, Limit: 2}, []int{5, 3}},
		{"offset without limit", TrialQuery{Offset: 3}, []int{4, 5}},
		{"column trial reversed", TrialQuery{Column: "-trial"}, []int{5, 4, 3, 2, 1}},
		{"column status", TrialQuery{Column: "status"}, []int{3, 4, 5, 1, 2}},
		{"column iterations", TrialQuery{Column: "iterations"}, []int{4, 1, 3, 5, 2}},
		{"column best", TrialQuery{Column: "best"}, []int{2, 5, 3, 1, 4}},
		{"column last reversed", TrialQuery{Column: "-last"}, []int{2, 1, 3, 5, 4}},
		{"column param reversed", TrialQuery{Column: "-param:lr"}, []int{5, 4, 3, 2, 1}},
		{"param above", TrialQuery{Params: []ParamFilter{{"lr", ">", 0.25}}}, []int{3, 4, 5}},
		{"params, both", TrialQuery{Params: []ParamFilter{{"act", "=", "tanh"}, {"lr", "<", 0.45}}}, []int{2, 4}},
		{"param of another type", TrialQuery{Params: []ParamFilter{{"act", "=", 1}}}, nil},
		{"columns", TrialQuery{Columns: []ColumnFilter{{"iterations", "=", 1}, {"best", "<", 0.45}}}, []int{3, 5}},
		{"text in the error", TrialQuery{Text: []string{"BOOM"}}, []int{3}},
		{"texts, a page", TrialQuery{Text: []string{"tanh", "RUN"}, Column: "-trial", Limit: 1}, []int{4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := db.QueryTrials(ctx, "e", tt.q)
			if err != nil {
				t.Fatal(err)
			}
			if g := trialNumbers(got); !slices.Equal(g, tt.want) {
				t.Errorf("got %v, want %v", g, tt.want)
			}
		})
	}
	if _, err := db.QueryTrials(ctx, "e", TrialQuery{Status: []string{"DONE"}}); err == nil || !strings.Contains(err.Error(), "TERMINATED") {
		t.Errorf("unknown status: got %v, want an error listing the statuses", err)
	}
	for _, q := range []TrialQuery{{Column: "nope"}, {Params: []ParamFilter{{"lr", "~", 1}}}, {Sort: "loss", Column: "trial"},
		{Columns: []ColumnFilter{{"params_json", "=", 1}}}, {Columns: []ColumnFilter{{"best", "<>", 1}}}} {
		if _, err := db.QueryTrials(ctx, "e", q); err == nil {
			t.Errorf("%+v: no error", q)
		}
	}
	if n, err := db.CountTrials(ctx, "e", TrialQuery{Params: []ParamFilter{{"act", "=", "relu"}}, Limit: 1, Offset: 1}); n != 3 || err != nil {
		t.Errorf("count of relu trials: %d, %v; want 3", n, err)
	}
	counts, err := db.StatusCounts(ctx, "e")
	if want := map[string]int{TrialTerminated: 2, TrialError: 1, TrialRunning: 2}; err != nil || !maps.Equal(counts, want) {
		t.Errorf("status counts %v, %v; want %v", counts, err, want)
	}
	tr, err := db.Trial(ctx, "e", 3)
	if err != nil || tr.Status != TrialError || tr.Error != "boom" {
		t.Errorf("trial 3: %+v %v", tr, err)
	}
	if _, err := db.Trial(ctx, "e", 9); !errors.Is(err, ErrNotFound) {
		t.Errorf("trial 9: got %v, want ErrNotFound", err)
	}
}

// TestParamsTable checks that each parameter lands in the params table with
// its JSON type, so SQL can filter on it.
func TestParamsTable(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	exp, _ := db.CreateExperiment(ctx, "e", "loss", "min", nil)
	params := map[string]any{"lr": 0.01, "layers": 3, "act": "relu", "bn": true, "shape": []int{1, 2}}
	if _, err := db.CreateTrial(ctx, exp.ID, 1, params); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Query(ctx, `SELECT name, typeof(value), CAST(value AS TEXT) FROM params ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var name, typ, value string
		if err := rows.Scan(&name, &typ, &value); err != nil {
			t.Fatal(err)
		}
		got = append(got, name+" "+typ+" "+value)
	}
	want := []string{"act text relu", "bn integer 1", "layers integer 3", "lr real 0.01", "shape text [1,2]"}
	if !slices.Equal(got, want) {
		t.Errorf("params rows:\n got %q\nwant %q", got, want)
	}
}

func TestRestartTrialRewindsReports(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		mode               string
		from               int
		wantIter           int
		wantLast, wantBest float64
	}{
		{"min", 2, 2, 0.3, 0.3},
		{"max", 2, 2, 0.3, 0.5},
		{"min", 4, 4, 0.6, 0.1},
	} {
		db := mustOpen(t)
		f := newFixture(t, db, tt.mode, 1)
		for i, l := range []float64{0.5, 0.3, 0.1, 0.6} {
			f.report(t, 1, i+1, l)
		}
		if err := db.FinishTrial(ctx, f.trials[0].ID(), TrialError, "worker died"); err != nil {
			t.Fatal(err)
		}
		if err := db.RestartTrial(ctx, f.trials[0].ID(), tt.from, "worker 1 exited with status 137"); err != nil {
			t.Fatal(err)
		}
		tr, err := db.Trial(ctx, "e", 1)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Status != TrialRunning || tr.Error != "" || tr.Restarts != 1 || tr.Iterations != tt.wantIter ||
			*tr.LastMetric != tt.wantLast || *tr.BestMetric != tt.wantBest {
			t.Errorf("%s from %d: %+v last %v best %v", tt.mode, tt.from, tr, *tr.LastMetric, *tr.BestMetric)
		}
		// The restarted run reports the discarded iterations again.
		f.report(t, 1, tt.from+1, 0.05)
		evs, err := db.Events(ctx, "e", 1)
		if err != nil {
			t.Fatal(err)
		}
		kinds := []string{}
		for _, ev := range evs {
			kinds = append(kinds, ev.Kind)
		}
		if !slices.Equal(kinds, []string{EventStart, EventError, EventRestart}) {
			t.Errorf("events: %v", kinds)
		}
		last := evs[len(evs)-1]
		if last.Message != "worker 1 exited with status 137" || !strings.Contains(string(last.Data), fmt.Sprintf(`"discarded_reports":%d`, 4-tt.from)) {
			t.Errorf("restart event: %+v %s", last, last.Data)
		}
	}
	db := mustOpen(t)
	if err := db.RestartTrial(ctx, 42, 0, "x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("restart of a missing trial: got %v", err)
	}
}

func TestEvents(t *testing.T) {
	ctx := context.Background()
	clock := time.Unix(5000, 0)
	db := mustOpen(t, WithClock(func() time.Time { clock = clock.Add(time.Second); return clock }))
	f := newFixture(t, db, "min", 2)
	data := map[string]any{"rung": 1, "cutoff": 0.42, "action": "STOP"}
	if err := db.AddEvent(ctx, 0, f.trials[1].ID(), EventDecision, "below the rung's cutoff", data); err != nil {
		t.Fatal(err)
	}
	if err := db.AddEvent(ctx, f.exp.ID, 0, "note", "experiment-wide", nil); err != nil {
		t.Fatal(err)
	}
	if err := db.AddEvent(ctx, 0, 0, "note", "", nil); err == nil {
		t.Error("an event of nothing was accepted")
	}
	all, err := db.Events(ctx, "e", 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range all {
		got = append(got, ev.Kind)
	}
	if want := []string{"start", "start", "decision", "note"}; !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	two, err := db.Events(ctx, "e", 2)
	if err != nil || len(two) != 2 || two[1].Trial != 2 || string(two[1].Data) != `{"action":"STOP","cutoff":0.42,"rung":1}` {
		t.Errorf("trial 2's events: %+v %v", two, err)
	}
	if all[3].Trial != 0 || !all[3].Time.After(all[2].Time) {
		t.Errorf("experiment event: %+v", all[3])
	}
	// The latest events, oldest first, of the experiment or of a trial;
	// another experiment's events are never among them.
	other, err := db.CreateExperiment(ctx, "other", "loss", "min", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.AddEvent(ctx, other.ID, 0, "note", "elsewhere", nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		trial, n int
		want     []string
	}{{0, 3, []string{"start", "decision", "note"}}, {0, 9, []string{"start", "start", "decision", "note"}}, {2, 1, []string{"decision"}}} {
		evs, err := db.RecentEvents(ctx, "e", c.trial, c.n)
		var got []string
		for _, ev := range evs {
			got = append(got, ev.Kind)
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("latest %d events of trial %d: %v, %v; want %v", c.n, c.trial, got, err, c.want)
		}
	}
	if _, err := db.RecentEvents(ctx, "e", 0, 0); err == nil {
		t.Error("RecentEvents of 0 events: no error")
	}
	// The experiment's own events: none of a trial, none of another
	// experiment.
	if own, err := db.ExperimentEvents(ctx, "e"); err != nil || len(own) != 1 || own[0].Message != "experiment-wide" || own[0].Trial != 0 {
		t.Errorf("experiment events %+v, %v; want the one note", own, err)
	}
	// A queued event commits in order, before the write made after it.
	if err := db.QueueEvent(0, f.trials[0].ID(), EventDecision, "queued", nil); err != nil {
		t.Fatal(err)
	}
	if err := db.FinishTrial(ctx, f.trials[0].ID(), TrialTerminated, ""); err != nil {
		t.Fatal(err)
	}
	one, err := db.Events(ctx, "e", 1)
	var kinds []string
	for _, ev := range one {
		kinds = append(kinds, ev.Kind+":"+ev.Message)
	}
	if want := []string{"start:trial 1 started", "decision:queued", "complete:trial TERMINATED"}; err != nil || !slices.Equal(kinds, want) {
		t.Errorf("trial 1's events %v, %v; want %v", kinds, err, want)
	}
	if err := db.QueueEvent(0, 0, "note", "", nil); err == nil {
		t.Error("a queued event of nothing was accepted")
	}
}

func TestWorkersAndResourceSamples(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	f := newFixture(t, db, "min", 1)
	id := f.trials[0].ID()
	w0, err := db.SetWorker(ctx, id, WorkerRecord{Rank: 0, Node: "n1", PID: 100, Status: "RUNNING", LogPath: "/logs/0"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.SetWorker(ctx, id, WorkerRecord{Rank: 1, Node: "n1", PID: 101, Status: "RUNNING"}); err != nil {
		t.Fatal(err)
	}
	again, err := db.SetWorker(ctx, id, WorkerRecord{Rank: 0, Node: "n1", PID: 100, Status: "RUNNING", LogPath: "/logs/0", StepRate: 12.5})
	if err != nil || again != w0 {
		t.Fatalf("update of worker 0: id %d (first %d), %v", again, w0, err)
	}
	if err := db.RestartTrial(ctx, id, 0, "rank 1 died"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SetWorker(ctx, id, WorkerRecord{Attempt: 1, Rank: 0, Node: "n2", PID: 200, Status: "RUNNING"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SetWorker(ctx, 999, WorkerRecord{Status: "RUNNING"}); err == nil {
		t.Error("a worker of a missing trial was accepted")
	}
	ws, err := db.Workers(ctx, "e", 1)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range ws {
		got = append(got, fmt.Sprintf("%d %d %s %s", w.Attempt, w.Rank, w.Node, w.LogPath))
	}
	if want := []string{"0 0 n1 /logs/0", "0 1 n1 ", "1 0 n2 "}; !slices.Equal(got, want) {
		t.Errorf("workers %q, want %q", got, want)
	}
	if ws[0].StepRate != 12.5 || ws[0].PID != 100 {
		t.Errorf("worker 0: %+v", ws[0])
	}

	samples := []ResourceSample{
		{Time: time.Unix(10, 0), Node: "n1", GPU: NoGPU, Util: 50, MemoryUsed: 1 << 30, MemoryTotal: 8 << 30},
		{Time: time.Unix(11, 0), Node: "n1", WorkerID: w0, GPU: 0, Util: 97.5, MemoryUsed: 3 << 30, MemoryTotal: 16 << 30},
	}
	if err := db.AddResourceSamples(ctx, f.exp.ID, samples); err != nil {
		t.Fatal(err)
	}
	gotS, err := db.ResourceSamples(ctx, "e", time.Unix(11, 0))
	if err != nil || len(gotS) != 1 || gotS[0].WorkerID != w0 || gotS[0].GPU != 0 || gotS[0].Util != 97.5 {
		t.Errorf("samples since 11s: %+v %v", gotS, err)
	}
	all, err := db.ResourceSamples(ctx, "e", time.Time{})
	if err != nil || len(all) != 2 || all[0].GPU != NoGPU || all[0].WorkerID != 0 {
		t.Errorf("all samples: %+v %v", all, err)
	}
}

// TestEndRunningWorkers ends the workers an interrupted run left recorded
// as running, and only those, of only its experiment.
func TestEndRunningWorkers(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	f := newFixture(t, db, "min", 2)
	other, err := db.CreateExperiment(ctx, "other", "loss", "min", nil)
	if err != nil {
		t.Fatal(err)
	}
	otherTrial, err := db.CreateTrial(ctx, other.ID, 1, map[string]any{"x": 1.0})
	if err != nil {
		t.Fatal(err)
	}
	set := func(trialID int64, rank int, status string) {
		if _, err := db.SetWorker(ctx, trialID, WorkerRecord{Rank: rank, Node: "n", Status: status}); err != nil {
			t.Fatal(err)
		}
	}
	set(f.trials[0].ID(), 0, "RUNNING")
	set(f.trials[0].ID(), 1, "EXITED")
	set(f.trials[1].ID(), 0, "RUNNING")
	set(otherTrial.ID(), 0, "RUNNING")
	n, err := db.EndRunningWorkers(ctx, f.exp.ID, "STOPPED")
	if err != nil || n != 2 {
		t.Fatalf("ended %d, %v; want 2", n, err)
	}
	var got []string
	for _, tr := range []struct {
		exp   string
		trial int
	}{{"e", 1}, {"e", 2}, {"other", 1}} {
		ws, err := db.Workers(ctx, tr.exp, tr.trial)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			got = append(got, fmt.Sprintf("%s/%d/%d %s", tr.exp, tr.trial, w.Rank, w.Status))
		}
	}
	want := []string{"e/1/0 STOPPED", "e/1/1 EXITED", "e/2/0 STOPPED", "other/1/0 RUNNING"}
	if !slices.Equal(got, want) {
		t.Errorf("workers %q, want %q", got, want)
	}
}

func TestCheckpointRecords(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	f := newFixture(t, db, "max", 2)
	id := f.trials[0].ID()
	if _, err := db.LatestCheckpoint(ctx, "e", 1); !errors.Is(err, ErrNotFound) {
		t.Errorf("latest of none: got %v", err)
	}
	var ids []int64
	for it, loss := range []float64{0.3, 0.9, 0.5} {
		c, err := db.RecordCheckpoint(ctx, id, it+1, filepath.Join("/ck", string(rune('a'+it))), map[string]float64{"loss": loss})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c)
	}
	best, err := db.BestCheckpoint(ctx, "e", 1)
	if err != nil || best.Iteration != 2 || best.Path != "/ck/b" {
		t.Errorf("best checkpoint (max loss): %+v %v", best, err)
	}
	if err := db.MarkCheckpointDeleted(ctx, ids[2]); err != nil {
		t.Fatal(err)
	}
	latest, err := db.LatestCheckpoint(ctx, "e", 1)
	if err != nil || latest.Iteration != 2 || latest.Metrics["loss"] != 0.9 {
		t.Errorf("latest kept: %+v %v", latest, err)
	}
	all, err := db.CheckpointRecords(ctx, "e", 1)
	if err != nil || len(all) != 3 || all[2].Kept() || !all[1].Kept() {
		t.Errorf("all checkpoints: %+v %v", all, err)
	}
	if err := db.MarkCheckpointDeleted(ctx, 999); !errors.Is(err, ErrNotFound) {
		t.Errorf("delete of a missing checkpoint: got %v", err)
	}
	if _, err := db.CheckpointRecords(ctx, "e", 2); err != nil {
		t.Errorf("checkpoints of a trial without: %v", err)
	}
	// Without the metric in any checkpoint, the latest kept is the best.
	c, _ := db.RecordCheckpoint(ctx, f.trials[1].ID(), 1, "/x/1", nil)
	db.RecordCheckpoint(ctx, f.trials[1].ID(), 2, "/x/2", map[string]float64{"acc": 1})
	if best, err := db.BestCheckpoint(ctx, "e", 2); err != nil || best.Path != "/x/2" {
		t.Errorf("best without the metric: %+v %v (first id %d)", best, err, c)
	}
}

func TestResumeState(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	f := newFixture(t, db, "min", 3)
	f.report(t, 1, 1, 0.5)
	f.report(t, 2, 1, 0.4)
	f.report(t, 2, 2, 0.3)
	db.FinishTrial(ctx, f.trials[0].ID(), TrialTerminated, "")
	db.RecordCheckpoint(ctx, f.trials[1].ID(), 1, "/ck/2/1", nil)
	db.SetTrialStatus(ctx, f.trials[2].ID(), TrialPaused)
	// Trial 2 ran attempts 0 and 2 (1 started no worker), trial 3 one.
	for _, w := range []struct {
		trial   int
		attempt int
	}{{1, 0}, {1, 2}, {1, 2}, {2, 0}} {
		if _, err := db.SetWorker(ctx, f.trials[w.trial].ID(), WorkerRecord{Attempt: w.attempt, Status: "EXITED"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.SetTrialStatus(ctx, 999, TrialPaused); !errors.Is(err, ErrNotFound) {
		t.Errorf("status of a missing trial: %v", err)
	}
	st, err := db.ResumeState(ctx, "e")
	if err != nil {
		t.Fatal(err)
	}
	if st.Experiment.Name != "e" || len(st.Trials) != 3 {
		t.Fatalf("state: %+v", st)
	}
	var got []string
	for _, s := range st.Trials {
		ck := "-"
		if s.Checkpoint != nil {
			ck = s.Checkpoint.Path
		}
		got = append(got, fmt.Sprintf("%s %d %s %d", s.Trial.Status, len(s.Reports), ck, s.Attempts))
		if s.Unfinished() == (s.Trial.Status == TrialTerminated) {
			t.Errorf("trial %d %s: unfinished %v", s.Trial.Number, s.Trial.Status, s.Unfinished())
		}
	}
	if want := []string{"TERMINATED 1 - 0", "RUNNING 2 /ck/2/1 3", "PAUSED 0 - 1"}; !slices.Equal(got, want) {
		t.Errorf("state %q, want %q", got, want)
	}
	if _, err := db.ResumeState(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("state of a missing experiment: %v", err)
	}
	if err := db.FinishExperiment(ctx, f.exp.ID, ExperimentFinished); err != nil {
		t.Fatal(err)
	}
	if err := db.ResumeExperiment(ctx, f.exp.ID); err != nil {
		t.Fatal(err)
	}
	e, _ := db.Experiment(ctx, "e")
	evs, _ := db.Events(ctx, "e", 0)
	if e.Status != ExperimentRunning || evs[len(evs)-1].Kind != EventResume {
		t.Errorf("after ResumeExperiment: %s, last event %+v", e.Status, evs[len(evs)-1])
	}
}

func TestSnapshotSeesOneState(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	f := newFixture(t, db, "min", 1)
	f.report(t, 1, 1, 0.5)
	err := db.Snapshot(ctx, func(s *DB) error {
		before, err := s.Reports(ctx, "e", 1)
		if err != nil {
			return err
		}
		f.report(t, 1, 2, 0.4)
		if _, err := db.CreateTrial(ctx, f.exp.ID, 2, nil); err != nil {
			return err
		}
		after, err := s.Reports(ctx, "e", 1)
		if err != nil {
			return err
		}
		ts, err := s.Trials(ctx, "e")
		if err != nil {
			return err
		}
		if len(before) != 1 || len(after) != 1 || len(ts) != 1 {
			t.Errorf("the snapshot moved: %d then %d reports, %d trials", len(before), len(after), len(ts))
		}
		if err := s.AddEvent(ctx, f.exp.ID, 0, "x", "", nil); !errors.Is(err, ErrReadOnly) {
			t.Errorf("write through a snapshot: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if reps, _ := db.Reports(ctx, "e", 1); len(reps) != 2 {
		t.Errorf("after the snapshot: %d reports, want 2", len(reps))
	}
}

// TestPublicViews pins the columns of the three public views.
func TestPublicViews(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	f := newFixture(t, db, "min", 2)
	f.report(t, 1, 1, 0.5)
	f.report(t, 2, 1, 0.2)
	want := map[string][]string{
		"experiments_v": {"name", "status", "metric", "mode", "created_at", "trials", "best"},
		"trials_v":      {"experiment", "trial_id", "status", "params_json", "iterations", "last_metric", "best_metric", "restarts", "error"},
		"reports_v":     {"experiment", "trial_id", "iteration", "time", "metrics_json"},
	}
	for view, cols := range want {
		rows, err := db.Query(ctx, `SELECT name FROM pragma_table_info(?)`, view)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for rows.Next() {
			var c string
			rows.Scan(&c)
			got = append(got, c)
		}
		rows.Close()
		if !slices.Equal(got, cols) {
			t.Errorf("%s columns %v, want %v", view, got, cols)
		}
	}
	var trials int
	var best float64
	if err := db.r.QueryRow(`SELECT trials, best FROM experiments_v WHERE name = 'e'`).Scan(&trials, &best); err != nil || trials != 2 || best != 0.2 {
		t.Errorf("experiments_v: %d trials, best %v, %v", trials, best, err)
	}
}

// TestQueryRefusesWrites runs statements that would change the database
// through the read-only connection: SQLite refuses each one.
func TestQueryRefusesWrites(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "gotune.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	newFixture(t, db, "min", 1)
	db.Close()
	ro, err := OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	for _, stmt := range []string{
		`INSERT INTO experiments (name, status, metric, mode, config_json, created_at) VALUES ('x', 'RUNNING', 'm', 'min', '{}', 0)`,
		`UPDATE trials SET status = 'ERROR'`,
		`DELETE FROM reports`,
		`DROP VIEW trials_v`,
		`CREATE TABLE t (x)`,
		`CREATE TEMP TABLE t AS SELECT * FROM trials_v; DELETE FROM trials`,
		`PRAGMA user_version = 7`,
		`PRAGMA journal_mode = DELETE`,
		`VACUUM`,
		`ATTACH '` + filepath.Join(dir, "other.db") + `' AS o`,
		`VACUUM INTO '` + filepath.Join(dir, "copy.db") + `'`,
		`WITH x AS (SELECT 1) DELETE FROM trials`,
		`SELECT 1; DELETE FROM trials`,
	} {
		rows, err := ro.Query(ctx, stmt)
		if err == nil {
			for rows.Next() {
			}
			err = rows.Err()
			rows.Close()
		}
		if err == nil {
			t.Errorf("%s: not refused", stmt)
		} else if msg := ExplainRefusal(err).Error(); !strings.Contains(msg, "queries are read-only") {
			t.Errorf("%s: %v, which does not say why", stmt, msg)
		}
	}
	var status string
	var trials, reports, v int
	ro.r.QueryRow(`SELECT count(*) FROM trials`).Scan(&trials)
	ro.r.QueryRow(`SELECT count(*) FROM reports`).Scan(&reports)
	ro.r.QueryRow(`SELECT status FROM trials`).Scan(&status)
	ro.r.QueryRow(`PRAGMA user_version`).Scan(&v)
	if trials != 1 || status != TrialRunning || v != SchemaVersion {
		t.Errorf("the database changed: %d trials (%s), version %d", trials, status, v)
	}
	for _, f := range []string{"other.db", "copy.db"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("a read-only query created %s", f)
		}
	}
	if err := ro.AddEvent(ctx, 1, 0, "x", "", nil); !errors.Is(err, ErrReadOnly) {
		t.Errorf("write through a read-only DB: got %v", err)
	}
}

func TestExperimentLock(t *testing.T) {
	db := mustOpen(t)
	a, err := db.LockExperiment("e")
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.LockExperiment("e")
	if !errors.Is(err, ErrExperimentRunning) || !strings.Contains(err.Error(), "process ") || !strings.Contains(err.Error(), "run again") {
		t.Errorf("second lock: got %v", err)
	}
	other, err := db.LockExperiment("f")
	if err != nil {
		t.Errorf("another experiment's lock: %v", err)
	}
	other.Release()
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
	a.Release()
	b, err := db.LockExperiment("e")
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	b.Release()

	for name, plain := range map[string]bool{"digits-mlp": true, "a/b": false, "..": false, "x y": false, strings.Repeat("n", 65): false} {
		p := LockPath("/d/gotune.db", name)
		if filepath.Dir(p) != "/d" || strings.Contains(p, name) != plain {
			t.Errorf("LockPath(%q) = %s", name, p)
		}
	}
}

func TestLockFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "checkpoints", "e") // neither exists yet
	a, err := LockFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = LockFolder(dir)
	if !errors.Is(err, ErrExperimentRunning) || !strings.Contains(err.Error(), fmt.Sprintf("process %d", os.Getpid())) || !strings.Contains(err.Error(), dir) {
		t.Errorf("second lock: got %v, want ErrExperimentRunning naming the folder and this process", err)
	}
	if _, err := LockFolder(dir + "2"); err != nil {
		t.Errorf("another folder's lock: %v", err)
	}
	a.Release()
	b, err := LockFolder(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	b.Release()
}

func TestOpenOtherSQLiteAndEmptyFiles(t *testing.T) {
	dir := t.TempDir()
	foreign := filepath.Join(dir, "foreign.db")
	rawExec(t, foreign, `CREATE TABLE notes (x)`)
	for _, open := range []func(string) (*DB, error){func(p string) (*DB, error) { return Open(p) }, OpenReadOnly} {
		if _, err := open(foreign); err == nil || !strings.Contains(err.Error(), "another program") {
			t.Errorf("foreign SQLite file: got %v", err)
		}
	}
	empty := filepath.Join(dir, "empty.db")
	os.WriteFile(empty, nil, 0o644)
	if _, err := OpenReadOnly(empty); err == nil || !strings.Contains(err.Error(), "no gotune results") {
		t.Errorf("empty file read-only: got %v", err)
	}
	db, err := Open(empty)
	if err != nil {
		t.Fatalf("an empty file is a new database: %v", err)
	}
	db.Close()
}

// TestConcurrentOpensOfANewDatabase opens one new file from many handles
// at once, as two runs started together would: each migrates or sees the
// migration done, and all can write.
func TestConcurrentOpensOfANewDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gotune.db")
	const n = 8
	errs := make(chan error, n)
	for i := range n {
		go func() {
			db, err := Open(path)
			if err != nil {
				errs <- err
				return
			}
			defer db.Close()
			_, err = db.CreateExperiment(context.Background(), string(rune('a'+i)), "m", "min", nil)
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	ro, err := OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if exps, err := ro.Experiments(context.Background()); err != nil || len(exps) != n {
		t.Errorf("%d experiments, %v", len(exps), err)
	}
}

func TestSetTrialParams(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	exp, _ := db.CreateExperiment(ctx, "e", "loss", "min", nil)
	tr, err := db.CreateTrial(ctx, exp.ID, 1, map[string]any{"lr": 0.1, "hidden": int64(32)})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.SetTrialParams(ctx, tr.ID(), map[string]any{"lr": 0.2, "hidden": int64(64)}, "exploited trial 3"); err != nil {
		t.Fatal(err)
	}
	got, err := db.Trial(ctx, "e", 1)
	if err != nil {
		t.Fatal(err)
	}
	if got.Params["lr"] != 0.2 || got.Params["hidden"] != 64.0 {
		t.Errorf("params after SetTrialParams: %v", got.Params)
	}
	rows, err := db.Query(ctx, `SELECT value FROM params WHERE trial_id = ? AND name = 'hidden'`, tr.ID())
	if err != nil {
		t.Fatal(err)
	}
	var hidden any
	for rows.Next() {
		if err := rows.Scan(&hidden); err != nil {
			t.Fatal(err)
		}
	}
	rows.Close()
	if hidden != int64(64) {
		t.Errorf("params table: hidden = %v (%T), want int64 64", hidden, hidden)
	}
	evs, err := db.Events(ctx, "e", 1)
	if err != nil {
		t.Fatal(err)
	}
	if last := evs[len(evs)-1]; last.Kind != EventParams || last.Message != "exploited trial 3" {
		t.Errorf("last event %+v, want a params event", last)
	}
	if err := db.SetTrialParams(ctx, 9999, map[string]any{}, ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown trial: got %v, want ErrNotFound", err)
	}
}

// TestEachTrialReport: one trial's reports, in order, and only its own;
// a trial that does not exist is ErrNotFound; fn's error stops the walk.
func TestEachTrialReport(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	f := newFixture(t, db, "min", 2)
	for it := 1; it <= 3; it++ {
		f.report(t, 1, it, 1/float64(it))
		f.report(t, 2, it, 2)
	}
	var got []int
	err := db.EachTrialReport(ctx, "e", 1, func(r Report) error {
		if r.Metrics["loss"] != 1/float64(r.Iteration) {
			t.Errorf("iteration %d: loss %v", r.Iteration, r.Metrics["loss"])
		}
		got = append(got, r.Iteration)
		return nil
	})
	if err != nil || !slices.Equal(got, []int{1, 2, 3}) {
		t.Errorf("trial 1: iterations %v, %v; want 1 2 3", got, err)
	}
	if err := db.EachTrialReport(ctx, "e", 9, func(Report) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Errorf("trial 9: got %v, want ErrNotFound", err)
	}
	stop := errors.New("stop")
	calls := 0
	if err := db.EachTrialReport(ctx, "e", 2, func(Report) error { calls++; return stop }); err != stop || calls != 1 {
		t.Errorf("fn's error: got %v after %d calls, want it after 1", err, calls)
	}
}

// CreateTrials records a batch all or nothing, and a queued end is read
// back once Flush has returned.
func TestCreateTrialsAndQueuedFinish(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	exp, err := db.CreateExperiment(ctx, "e", "loss", "min", nil)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := db.CreateTrials(ctx, exp.ID, []NewTrial{{Number: 1, Params: map[string]any{"x": 1.0}}, {Number: 2, Params: map[string]any{"x": 2.0}, Pending: true}})
	if err != nil || len(ts) != 2 || ts[0].ID() == ts[1].ID() {
		t.Fatalf("CreateTrials: %v, %v", ts, err)
	}
	// Trial 2 exists: the batch of 3 and 2 fails as a whole.
	if _, err := db.CreateTrials(ctx, exp.ID, []NewTrial{{Number: 3}, {Number: 2}}); err == nil || !strings.Contains(err.Error(), "create trials 3–2") {
		t.Errorf("a batch with a taken number: %v", err)
	}
	if ts[0].Status != TrialRunning || ts[1].Status != TrialPending {
		t.Errorf("created %s and %s, want RUNNING and (Pending) PENDING", ts[0].Status, ts[1].Status)
	}
	if err := db.QueueFinishTrial(ts[0].ID(), TrialTerminated, ""); err != nil {
		t.Fatal(err)
	}
	// Trial 2's group has its workers; trial 1 has ended and stays so.
	for _, ts := range ts {
		if err := db.QueueTrialRunning(ts.ID()); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	trials, err := db.Trials(ctx, "e")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tr := range trials {
		got = append(got, fmt.Sprintf("%d %s", tr.Number, tr.Status))
	}
	if want := []string{"1 " + TrialTerminated, "2 " + TrialRunning}; !slices.Equal(got, want) {
		t.Errorf("trials %q, want %q", got, want)
	}
	// A queued end of a trial that does not exist fails, and Flush says so.
	db.QueueFinishTrial(ts[1].ID()+100, TrialTerminated, "")
	if err := db.Flush(ctx); err == nil {
		t.Error("Flush after a failed queued write: no error")
	}
}

// QueueWorkers records a group's workers in one queued write and tells
// their ids, the ids SetWorker would return.
func TestQueueWorkers(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	f := newFixture(t, db, "min", 1)
	id := f.trials[0].ID()
	learned := map[int]int64{}
	ws := []WorkerRecord{{Rank: 0, Node: "n", PID: 10, Status: "RUNNING"}, {Rank: 1, Node: "n", PID: 11, Status: "RUNNING"}}
	if err := db.QueueWorkers(id, ws, func(rank int, id int64) { learned[rank] = id }); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := db.SetWorker(ctx, id, WorkerRecord{Rank: 1, Node: "n", PID: 11, Status: "EXITED"})
	if err != nil {
		t.Fatal(err)
	}
	if len(learned) != 2 || learned[0] == learned[1] || learned[1] != again {
		t.Errorf("learned %v; rank 1 is %d", learned, again)
	}
}

// DataVersion changes after every commit, of this process's writer or of
// another opening of the database, and only then.
func TestDataVersionTellsCommits(t *testing.T) {
	ctx := context.Background()
	db := mustOpen(t)
	f := newFixture(t, db, "min", 1)
	ro, err := OpenReadOnly(db.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	iteration := 0
	for _, reader := range []*DB{db, ro} {
		v0, err := reader.DataVersion(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if v, err := reader.DataVersion(ctx); err != nil || v != v0 {
			t.Fatalf("no commit: version %d then %d (%v)", v0, v, err)
		}
		for it := range 3 {
			iteration++
			f.report(t, 1, iteration, 0.5)
			v, err := reader.DataVersion(ctx)
			if err != nil || v == v0 {
				t.Fatalf("commit %d: version stayed %d (%v)", it, v, err)
			}
			v0 = v
		}
	}
}

// TestReleasedLocksLeaveNoFile takes and releases each kind of lock: no
// lock file stays behind, and one that a killed holder left is taken over.
func TestReleasedLocksLeaveNoFile(t *testing.T) {
	db := mustOpen(t)
	dir := filepath.Join(filepath.Dir(db.Path()), "checkpoints", "e")
	locks := []struct {
		path string
		take func() (*ExperimentLock, error)
	}{
		{LockPath(db.Path(), "e"), func() (*ExperimentLock, error) { return db.LockExperiment("e") }},
		{dir + ".lock", func() (*ExperimentLock, error) { return LockFolder(dir) }},
	}
	for _, l := range locks {
		// A lock file that a killed run left.
		if err := os.MkdirAll(filepath.Dir(l.path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(l.path, []byte("999999\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		a, err := l.take()
		if err != nil {
			t.Fatalf("%s: lock over a left file: %v", l.path, err)
		}
		if _, err := l.take(); !errors.Is(err, ErrExperimentRunning) {
			t.Errorf("%s: a second lock while held: %v", l.path, err)
		}
		if err := a.Release(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(l.path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after the release: %v, want it removed", l.path, err)
		}
		b, err := l.take()
		if err != nil {
			t.Fatalf("%s: lock after the release: %v", l.path, err)
		}
		b.Release()
	}
}

// TestShownExperimentStatus: a RUNNING experiment that no run holds shows
// as INTERRUPTED; every other status, and a live run's, shows as recorded.
func TestShownExperimentStatus(t *testing.T) {
	for _, st := range []string{ExperimentRunning, ExperimentFinished, ExperimentFailed, ExperimentInterrupted} {
		want := st
		if st == ExperimentRunning {
			want = ExperimentInterrupted
		}
		if got := ShownExperimentStatus(st, false); got != want {
			t.Errorf("dead run, %s shows as %s, want %s", st, got, want)
		}
		if got := ShownExperimentStatus(st, true); got != st {
			t.Errorf("live run, %s shows as %s", st, got)
		}
	}
}

// TestShownWorkerStatus: a dead run's RUNNING workers show as
// INTERRUPTED; every other status, and a live run's, shows as recorded.
func TestShownWorkerStatus(t *testing.T) {
	for _, c := range []struct {
		status string
		live   bool
		want   string
	}{
		{WorkerRunning, false, TrialInterrupted},
		{WorkerRunning, true, WorkerRunning},
		{"EXITED", false, "EXITED"},
		{"FAILED", false, "FAILED"},
		{"STOPPED", false, "STOPPED"},
		{"STOPPED", true, "STOPPED"},
	} {
		if got := ShownWorkerStatus(c.status, c.live); got != c.want {
			t.Errorf("ShownWorkerStatus(%s, live %v) = %s, want %s", c.status, c.live, got, c.want)
		}
	}
}

// TestShownTrialStatus: a dead run's PENDING and RUNNING trials show, and
// are selected, as INTERRUPTED; a live run's show as recorded.
func TestShownTrialStatus(t *testing.T) {
	for _, st := range TrialStatuses {
		want := st
		if st == TrialPending || st == TrialRunning {
			want = TrialInterrupted
		}
		if got := ShownTrialStatus(st, false); got != want {
			t.Errorf("dead run, %s shows as %s, want %s", st, got, want)
		}
		if got := ShownTrialStatus(st, true); got != st {
			t.Errorf("live run, %s shows as %s", st, got)
		}
	}
	cases := []struct {
		shown []string
		live  bool
		want  []string
	}{
		{[]string{TrialInterrupted}, false, []string{TrialPending, TrialRunning}},
		{[]string{TrialInterrupted}, true, nil},
		{[]string{TrialRunning}, false, nil},
		{[]string{TrialRunning, TrialError}, false, []string{TrialError}},
		{[]string{TrialRunning, TrialPaused}, true, []string{TrialRunning, TrialPaused}},
		{[]string{TrialInterrupted, TrialTerminated}, false, []string{TrialPending, TrialRunning, TrialTerminated}},
	}
	for _, c := range cases {
		got, ok := RecordedTrialStatuses(c.shown, c.live)
		if !slices.Equal(got, c.want) || ok != (len(c.want) > 0) {
			t.Errorf("RecordedTrialStatuses(%v, live %v) = %v, %v; want %v", c.shown, c.live, got, ok, c.want)
		}
	}
}
