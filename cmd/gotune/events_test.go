package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gotune/gotune/trainer"
)

// TestEventLinesTellARepeatOnce: a metrics pattern that matches nothing is
// told in full by the first trial, with its last output line that is no
// rule of "=" (a script's frame around its results), and as a
// repeat by the next; another pattern, or another kind of event, is told
// in full. A refused checkpoint is told in full once, its repeats within
// the trial as well as in others condensed.
func TestEventLinesTellARepeatOnce(t *testing.T) {
	unmatched := func(pattern, lines string) trainer.Event {
		return trainer.Event{Kind: trainer.EventMetricsUnmatched,
			Cause: `metrics pattern "` + pattern + `" matched none of rank 0's ` + lines + ` output lines by its end; its last lines:` + "\nepoch 1\nepoch 2 loss 0.2\n" + strings.Repeat("=", 89)}
	}
	restart := trainer.Event{Kind: trainer.EventRestart, Workers: 1, Cause: "worker 0 exited with status 1"}
	refused := func(trial, epoch int, why string) trainer.Event {
		return trainer.Event{Kind: trainer.EventCheckpointRefused,
			Cause: fmt.Sprintf("worker 0: refused its checkpoint; the report counts without one: /sweep/trial_%d/ckpt%d %s", trial, epoch, why)}
	}
	const outside = "is outside the worker's scratch folder"
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
		// A refused checkpoint repeats at every report: told in full once.
		{6, refused(6, 1, outside), "checkpoint_refused: worker 0: refused its checkpoint; the report counts without one: /sweep/trial_6/ckpt1 " + outside},
		{6, refused(6, 2, outside), "checkpoint_refused: as in trial 6"},
		{7, refused(7, 1, outside), "checkpoint_refused: as in trial 6"},
		{7, refused(7, 2, "cannot be read"), "checkpoint_refused: worker 0: refused its checkpoint; the report counts without one: /sweep/trial_7/ckpt2 cannot be read"},
	} {
		if got := d.describe(step.trial, step.e); got != step.want {
			t.Errorf("trial %d:\n got %s\nwant %s", step.trial, got, step.want)
		}
	}
}

// TestOneLineSaysWhy: a failure quoted over several lines (a worker's
// last Python traceback, the end of its log) is summed up by its first
// line and its last quoted line, the exception, in a restart's line and in
// a repeated failure's; a message of one line stays as it is.
func TestOneLineSaysWhy(t *testing.T) {
	const head = "worker 1 (pid 4445) exited with status 1; its last Python traceback (/s/trial_1/logs/worker_1.log):"
	for _, tc := range []struct{ name, msg, want string }{
		{"one line", "worker 0 exited with status 1", "worker 0 exited with status 1"},
		{"traceback", head + "\n    Traceback (most recent call last):\n      File \"train.py\", line 3, in <module>\n        import torch\n    ModuleNotFoundError: No module named 'torch' (after 2 restarts, failure.max_failures = 2)",
			head + " ModuleNotFoundError: No module named 'torch' (after 2 restarts, failure.max_failures = 2)"},
		{"traceback cut short", head + "\n    Traceback (most recent call last):\n    … 40 lines left out\n    RuntimeError: CUDA out of memory",
			head + " RuntimeError: CUDA out of memory"},
		{"output after the traceback", head + "\n    Traceback (most recent call last):\n    ValueError: bad lr\n  followed by:\n    cleaning up",
			head + " ValueError: bad lr"},
		{"end of its log", "worker 0 (pid 7) exited with status 2; the end of its log (/s/w.log):\n    epoch 1\n    error: out of disk",
			"worker 0 (pid 7) exited with status 2; the end of its log (/s/w.log): error: out of disk"},
		{"nothing quoted", "the sweep stopped:\nsee above", "the sweep stopped:"},
	} {
		if got := oneLine(tc.msg); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
	restart := trainer.Event{Kind: trainer.EventRestart, Workers: 2, Cause: head + "\n    Traceback (most recent call last):\n    KeyError: 'lr'"}
	if got, want := describeEvent(restart), "restart with 2 workers from no committed checkpoint, 0 reports recorded: "+head+" KeyError: 'lr'"; got != want {
		t.Errorf("restart: got %q, want %q", got, want)
	}
}
