package tuner

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/workers"
)

// Trials that wait for resources are PENDING: with room for one group at a
// time and three trials allowed at once, only the trial whose group runs
// is RUNNING.
func TestTrialsWaitingForResourcesArePending(t *testing.T) {
	cfg := testConfig(t, 3)
	cfg.Search.MaxConcurrent = 3
	cfg.Resources = workers.Declared{Nodes: 1, CPUs: 1}
	cfg.Trainer.Scaling = trainer.ScalingConfig{NumWorkers: 1, CPUsPerWorker: 1}
	db, err := storage.Open(cfg.Storage)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var mu sync.Mutex
	var seen []string
	train := func(ctx context.Context, w *trainer.Worker) error {
		// The first report commits after the trial was set RUNNING.
		if err := w.Report(ctx, map[string]float64{"loss": 1}); err != nil {
			return err
		}
		trials, err := db.Trials(ctx, cfg.Name)
		if err != nil {
			return err
		}
		statuses := ""
		for _, tr := range trials {
			statuses += fmt.Sprintf("%d:%s ", tr.Number, tr.Status)
		}
		mu.Lock()
		seen = append(seen, statuses)
		mu.Unlock()
		return nil
	}
	tu, err := New(cfg, WithTrainFunc(train), WithDB(db))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tu.Fit(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Groups are placed in any order: the first to run sees itself
	// RUNNING and the two others PENDING. (Later ones may still see the
	// trial before them RUNNING: its group has given its workers back
	// before the loop records its end.)
	if len(seen) != 3 || strings.Count(seen[0], "RUNNING") != 1 || strings.Count(seen[0], "PENDING") != 2 {
		t.Errorf("statuses seen by each trial's first report: %q; want the first to see one trial RUNNING and two PENDING", seen)
	}
}
