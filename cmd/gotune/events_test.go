package main

import (
	"testing"

	"github.com/gotune/gotune/trainer"
)

// TestEventLinesTellARepeatOnce: a metrics pattern that matches nothing is
// told in full by the first trial, with its last output line, and as a
// repeat by the next; another pattern, or another kind of event, is told
// in full.
func TestEventLinesTellARepeatOnce(t *testing.T) {
	unmatched := func(pattern, lines string) trainer.Event {
		return trainer.Event{Kind: trainer.EventMetricsUnmatched,
			Cause: `metrics pattern "` + pattern + `" matched none of rank 0's ` + lines + ` output lines by its end; its last lines:` + "\nepoch 1\nepoch 2 loss 0.2"}
	}
	restart := trainer.Event{Kind: trainer.EventRestart, Workers: 1, Cause: "worker 0 exited with status 1"}
	var d eventLines
	for _, step := range []struct {
		trial int
		e     trainer.Event
		want  string
	}{
		{2, unmatched("loss=(\\S+)", "3"), `metrics_unmatched: metrics pattern "loss=(\S+)" matched none of rank 0's 3 output lines by its end; its last line: "epoch 2 loss 0.2" (gotune show has more)`},
		{1, unmatched("loss=(\\S+)", "12"), "metrics_unmatched: as in trial 2"},
		{1, unmatched("acc=(\\S+)", "12"), `metrics_unmatched: metrics pattern "acc=(\S+)" matched none of rank 0's 12 output lines by its end; its last line: "epoch 2 loss 0.2" (gotune show has more)`},
		{3, restart, "restart with 1 workers from no committed checkpoint, 0 reports recorded: worker 0 exited with status 1"},
		{4, restart, "restart with 1 workers from no committed checkpoint, 0 reports recorded: worker 0 exited with status 1"},
		{5, unmatched("acc=(\\S+)", "7"), "metrics_unmatched: as in trial 1"},
	} {
		if got := d.describe(step.trial, step.e); got != step.want {
			t.Errorf("trial %d:\n got %s\nwant %s", step.trial, got, step.want)
		}
	}
}
