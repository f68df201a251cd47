package tuner

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
)

func TestStragglerWatch(t *testing.T) {
	running := func(rank, pid int, rate float64) trainer.WorkerStatus {
		return trainer.WorkerStatus{Rank: rank, PID: pid, State: trainer.WorkerRunning, StepRate: rate}
	}
	t0 := time.Unix(1000, 0)
	window := 10 * time.Second
	for _, tc := range []struct {
		name  string
		steps [][]trainer.WorkerStatus // one observation a window/2 apart
		want  []int                    // ranks flagged at the last step
	}{
		{"stays below for a window", [][]trainer.WorkerStatus{
			{running(0, 1, 10), running(1, 2, 10), running(2, 3, 5)},
			{running(0, 1, 10), running(1, 2, 10), running(2, 3, 5)},
			{running(0, 1, 10), running(1, 2, 10), running(2, 3, 5)},
		}, []int{2}},
		{"below for less than a window", [][]trainer.WorkerStatus{
			{running(0, 1, 10), running(1, 2, 10), running(2, 3, 5)},
			{running(0, 1, 10), running(1, 2, 10), running(2, 3, 5)},
		}, nil},
		{"recovers in between", [][]trainer.WorkerStatus{
			{running(0, 1, 10), running(1, 2, 10), running(2, 3, 5)},
			{running(0, 1, 10), running(1, 2, 10), running(2, 3, 8)},
			{running(0, 1, 10), running(1, 2, 10), running(2, 3, 5)},
		}, nil},
		{"just above the fraction", [][]trainer.WorkerStatus{
			{running(0, 1, 10), running(1, 2, 10), running(2, 3, 7.6)},
			{running(0, 1, 10), running(1, 2, 10), running(2, 3, 7.6)},
			{running(0, 1, 10), running(1, 2, 10), running(2, 3, 7.6)},
		}, nil},
		{"ranks that do not report are not compared", [][]trainer.WorkerStatus{
			{running(0, 1, 10), running(1, 2, 0), running(2, 3, 0)},
			{running(0, 1, 10), running(1, 2, 0), running(2, 3, 0)},
			{running(0, 1, 10), running(1, 2, 0), running(2, 3, 0)},
		}, nil},
		{"a restarted worker is watched afresh", [][]trainer.WorkerStatus{
			{running(0, 1, 10), running(1, 2, 10), running(2, 3, 5)},
			{running(0, 1, 10), running(1, 2, 10), running(2, 3, 5)},
			{running(0, 4, 10), running(1, 5, 10), running(2, 6, 5)},
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w stragglerWatch
			var got []int
			for i, ws := range tc.steps {
				got = nil
				for _, s := range w.observe(1, ws, t0.Add(time.Duration(i)*window/2), window) {
					got = append(got, s.Rank)
				}
			}
			if len(got) != len(tc.want) || (len(got) > 0 && got[0] != tc.want[0]) {
				t.Errorf("flagged %v, want %v", got, tc.want)
			}
		})
	}
}

// A running command group's workers have their CPU and memory sampled,
// and the rank that reports far less often than the others is flagged.
func TestUsageSamplesAndStragglerEvent(t *testing.T) {
	cfg := testConfig(t, 1)
	cfg.Trainer = trainer.Config{
		Command: []string{"sh", "-c", `n=180; d=0.025
if [ "$GOTUNE_WORLD_RANK" = 2 ]; then n=15; d=0.3; fi
i=0; while [ $i -lt $n ]; do i=$((i+1)); echo "@gotune {\"loss\": 1}"; sleep $d; done`},
		Scaling: trainer.ScalingConfig{NumWorkers: 3, CPUsPerWorker: 0.01},
	}
	tu, err := New(cfg, WithUsageSampling(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	tu.stragglerWindow = time.Second
	if _, err := tu.Fit(context.Background()); err != nil {
		t.Fatal(err)
	}
	db, err := storage.OpenReadOnly(cfg.Storage)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	ws, err := db.Workers(ctx, cfg.Name, 1)
	if err != nil {
		t.Fatal(err)
	}
	samples, err := db.ResourceSamples(ctx, cfg.Name, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	perWorker := map[int64]int{}
	for _, s := range samples {
		if s.GPU == storage.NoGPU && s.MemoryUsed > 0 && s.Util >= 0 {
			perWorker[s.WorkerID]++
		}
	}
	for _, w := range ws {
		if perWorker[w.ID] < 2 {
			t.Errorf("rank %d: %d CPU and memory samples, want a series", w.Rank, perWorker[w.ID])
		}
	}
	events, err := db.Events(ctx, cfg.Name, 1)
	if err != nil {
		t.Fatal(err)
	}
	var flagged []string
	for _, e := range events {
		if e.Kind == storage.EventStraggler {
			var d struct{ Straggler Straggler }
			json.Unmarshal(e.Data, &d)
			flagged = append(flagged, e.Message)
			if d.Straggler.Rank != 2 || d.Straggler.StepRate >= StragglerFraction*d.Straggler.Median {
				t.Errorf("straggler event %s: %s", e.Message, e.Data)
			}
			if !strings.Contains(e.Message, "RSS") {
				t.Errorf("the event does not quote the straggler's resources: %s", e.Message)
			}
		}
	}
	if len(flagged) != 1 {
		t.Errorf("straggler events %q, want one, of rank 2", flagged)
	}
}
