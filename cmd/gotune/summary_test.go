package main

import (
	"strings"
	"testing"

	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/tuner"
)

// TestSummaryNamesWhatItLeavesOut: the summary after a sweep lists every
// trial of a small one, and says so when it lists only the best of a
// larger one, with the command that lists them all.
func TestSummaryNamesWhatItLeavesOut(t *testing.T) {
	var cfg tuner.Config
	cfg.Objective.Metric, cfg.Objective.Mode = "val_acc", "max"
	sweep := func(n int) *tuner.Result {
		res := &tuner.Result{Experiment: "digits"}
		for i := 1; i <= n; i++ {
			acc := float64(i) / 100
			res.Trials = append(res.Trials, &storage.Trial{Number: i, Status: storage.TrialTerminated, Iterations: 1, LastMetric: &acc, BestMetric: &acc})
		}
		res.Best = res.Trials[n-1]
		return res
	}
	for _, c := range []struct {
		trials int
		header string
		rows   []string // the trial numbers listed, best first
	}{
		{3, "digits: 3 trials, 3 TERMINATED; best val_acc (max) per trial:", []string{"3", "2", "1"}},
		{5, "digits: 5 trials, 5 TERMINATED; best val_acc (max) per trial:", []string{"5", "4", "3", "2", "1"}},
		{7, "digits: 7 trials, 7 TERMINATED; the 5 best by val_acc (max), of 7 (all: gotune trials --db x.db digits):", []string{"7", "6", "5", "4", "3"}},
	} {
		var out strings.Builder
		printSummary(&out, cfg, sweep(c.trials), "gotune trials --db x.db digits")
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if lines[0] != c.header {
			t.Errorf("%d trials: header %q, want %q", c.trials, lines[0], c.header)
		}
		var rows []string
		for _, l := range lines[2 : len(lines)-1] {
			rows = append(rows, strings.Fields(l)[0])
		}
		if strings.Join(rows, " ") != strings.Join(c.rows, " ") {
			t.Errorf("%d trials: rows %v, want %v\n%s", c.trials, rows, c.rows, out.String())
		}
	}
}
