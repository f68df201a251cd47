package tuner

import (
	"strings"
	"testing"

	"github.com/gotune/gotune/trainer"
)

// TestCollectedMetricsStepIsTheTimeAttr: a sweep that collects metrics
// counts progress by their step unless time_attr says otherwise, and a
// time_attr that is not the step is refused, naming the key.
func TestCollectedMetricsStepIsTheTimeAttr(t *testing.T) {
	cases := []struct {
		step, timeAttr string
		want           string // time_attr in effect, or the error's start
	}{
		{"", "", "step"},
		{"iter", "", "iter"},
		{"epoch", "epoch", "epoch"},
		{"", "epoch", `trainer.metrics.step: collected metrics carry their step as "step", but scheduler.time_attr is "epoch"`},
	}
	for _, tc := range cases {
		cfg := testConfig(t, 1)
		cfg.Trainer.Command = []string{"python3", "train.py"}
		cfg.Trainer.Metrics = trainer.MetricsConfig{Output: true, Step: tc.step}
		cfg.Scheduler.TimeAttr = tc.timeAttr
		err := cfg.Validate()
		switch {
		case strings.HasPrefix(tc.want, "trainer."):
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("step %q, time_attr %q: got %v, want %s…", tc.step, tc.timeAttr, err, tc.want)
			}
		case err != nil:
			t.Errorf("step %q, time_attr %q: %v", tc.step, tc.timeAttr, err)
		case cfg.withDefaults().Scheduler.TimeAttr != tc.want:
			t.Errorf("step %q, time_attr %q: time_attr %q in effect, want %q", tc.step, tc.timeAttr, cfg.withDefaults().Scheduler.TimeAttr, tc.want)
		}
	}
}
