package trainer

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// stepScript trains epochs 1 to 6, reporting each (twice with TWICE=1),
// keeps its last epoch in $GOTUNE_TRIAL_DIR/snap, and fails after epoch 4
// on its first start. With RESUME=own a restart goes on after the epoch in
// snap, as scripts that keep their own snapshot do; otherwise it starts
// over from scratch.
const stepScript = `start=1
if [ "$RESUME" = own ] && [ -f "$GOTUNE_TRIAL_DIR/snap" ]; then start=$(( $(cat "$GOTUNE_TRIAL_DIR/snap") + 1 )); fi
e=$start
while [ $e -le 6 ]; do
  echo "@gotune {\"epoch\": $e, \"part\": 1}"
  if [ "$TWICE" = 1 ]; then echo "@gotune {\"epoch\": $e, \"part\": 2}"; fi
  echo $e > "$GOTUNE_TRIAL_DIR/snap"
  if [ $e -eq 4 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then exit 1; fi
  e=$((e + 1))
done`

// A restarted group records every step once, whether the step is in the
// scheduler's time attribute or only in the report's epoch key, and tells
// of the reports it skipped as work redone.
func TestRestartsRecordEveryStepOnce(t *testing.T) {
	once := "1:1/1 2:2/1 3:3/1 4:4/1 5:5/1 6:6/1"
	twice := "1:1/1 2:1/2 3:2/1 4:2/2 5:3/1 6:3/2 7:4/1 8:4/2 9:5/1 10:5/2 11:6/1 12:6/2"
	for _, tc := range []struct {
		resume, twice, stepKey string
		want, skipped          string
	}{
		{"own", "0", "epoch", once, ""},
		{"scratch", "0", "epoch", once, "skipped 4 reports with epoch 1 to 4"},
		{"own", "1", "epoch", twice, ""},
		{"scratch", "1", "epoch", twice, "skipped 8 reports with epoch 1 to 4"},
		// The time attribute is not reported: the epoch places reports.
		{"own", "0", "training_iteration", once, ""},
		{"scratch", "0", "training_iteration", once, "skipped 4 reports with epoch 1 to 4"},
		{"own", "0", "", once, ""},
		{"own", "1", "", twice, ""},
	} {
		t.Run(fmt.Sprintf("resume=%s twice=%s key=%s", tc.resume, tc.twice, tc.stepKey), func(t *testing.T) {
			spec := Spec{
				Experiment: uniqueName(t), Trial: 1,
				Command:    []string{"sh", "-c", stepScript},
				Failure:    FailureConfig{MaxFailures: 1},
				StepKey:    tc.stepKey,
				TrialDir:   t.TempDir(),
				ScratchDir: filepath.Join(t.TempDir(), "scratch"),
				Env:        []string{"RESUME=" + tc.resume, "TWICE=" + tc.twice},
			}
			sink := &collect{}
			sum, err := Run(context.Background(), spec, sink)
			if err != nil || sum.Restarts != 1 {
				t.Fatalf("Run: %+v, %v", sum, err)
			}
			var got []string
			for _, r := range sink.results {
				got = append(got, fmt.Sprintf("%d:%g/%g", r.Iteration, r.Metrics["epoch"], r.Metrics["part"]))
			}
			if strings.Join(got, " ") != tc.want {
				t.Errorf("reports (iteration:epoch/part)\n got %s\nwant %s", strings.Join(got, " "), tc.want)
			}
			if e := sink.events[0]; e.Recorded != len(strings.Fields(tc.want))*4/6 {
				t.Errorf("the restart says %d reports recorded, want %d", e.Recorded, len(strings.Fields(tc.want))*4/6)
			}
			skipped := sink.causes(EventReportsSkipped)
			switch {
			case tc.skipped == "" && len(skipped) > 0:
				t.Errorf("reports were skipped: %q", skipped)
			case tc.skipped != "" && (len(skipped) != 1 || !strings.HasPrefix(skipped[0], tc.skipped)):
				t.Errorf("skipped events %q, want one that begins %q", skipped, tc.skipped)
			}
		})
	}
}

// Without a step to place them by (the script reports "round"), the
// reports of a restarted group are counted from its checkpoint (here, the
// start), and those counted up to the last one recorded are skipped, with
// an event that says so.
func TestStepLessRestartTellsWhatItSkipped(t *testing.T) {
	spec := Spec{
		Experiment: uniqueName(t), Trial: 1,
		Command:    []string{"sh", "-c", strings.ReplaceAll(stepScript, `\"epoch\"`, `\"round\"`)},
		Failure:    FailureConfig{MaxFailures: 1},
		TrialDir:   t.TempDir(),
		ScratchDir: filepath.Join(t.TempDir(), "scratch"),
		Env:        []string{"RESUME=own", "TWICE=0"},
	}
	sink := &collect{}
	if _, err := Run(context.Background(), spec, sink); err != nil {
		t.Fatal(err)
	}
	if got := sink.series(); strings.Count(got, ":") != 4 {
		t.Errorf("results %s: want the first attempt's 4 (the resumed script's 2 reports are counted as 1 and 2)", got)
	}
	skipped := sink.causes(EventReportsSkipped)
	want := "skipped 2 reports, counted as iterations 1 to 2, which the trial had recorded already"
	if len(skipped) != 1 || !strings.HasPrefix(skipped[0], want) || !strings.Contains(skipped[0], "epoch, step") {
		t.Errorf("skipped events %q, want one that begins %q and names the keys", skipped, want)
	}
}

// A resumed run (a paused trial) drops the steps delivered before it.
func TestResumedRunSkipsDeliveredSteps(t *testing.T) {
	last := Step{"epoch", 4}
	spec := Spec{
		Experiment: uniqueName(t), Trial: 1,
		Command: []string{"sh", "-c", stepScript},
		StepKey: "epoch", LastStep: &last, Delivered: 4,
		TrialDir:   t.TempDir(),
		ScratchDir: filepath.Join(t.TempDir(), "scratch"),
		Env:        []string{"RESUME=scratch"},
	}
	// The script fails after epoch 4 on a first start: the test lets it
	// restart once and checks what is delivered in all.
	spec.Failure.MaxFailures = 1
	sink := &collect{}
	if _, err := Run(context.Background(), spec, sink); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range sink.results {
		got = append(got, fmt.Sprintf("%d:%g", r.Iteration, r.Metrics["epoch"]))
	}
	if strings.Join(got, " ") != "5:5 6:6" {
		t.Errorf("reports (iteration:epoch) %v, want 5:5 6:6", got)
	}
}
