package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/gotune/gotune/storage"
)

func TestCustomSearcherTunes(t *testing.T) {
	res, err := run(context.Background(), filepath.Join(t.TempDir(), "gotune.db"), 30)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(res.Trials); n < 5 || n > 30 {
		t.Errorf("%d trials, want between the 4 random ones and the cap of 30", n)
	}
	// The noise on y has variance 0.01, the floor of the validation loss.
	if res.Best == nil || *res.Best.BestMetric > 0.02 {
		t.Errorf("best trial %+v, want a loss below 0.02", res.Best)
	}
	for _, tr := range res.Trials {
		if tr.Status == storage.TrialRunning {
			t.Errorf("trial %d still RUNNING after Fit", tr.Number)
		}
	}
}
