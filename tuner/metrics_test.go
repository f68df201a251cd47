package tuner

import (
	"context"
	"os"
	"path/filepath"
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

// TestCommandTrialsImportGotune: a Python command imports gotune without
// installing it (gotune's own copy, from the checkpoint root), unless
// PYTHONPATH already holds one, which is then the one imported.
func TestCommandTrialsImportGotune(t *testing.T) {
	own := t.TempDir()
	if err := os.WriteFile(filepath.Join(own, "gotune.py"), []byte("WHOSE = 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `import gotune; print('@gotune {"loss": %d}' % getattr(gotune, "WHOSE", 1))`
	cases := []struct {
		name string
		env  map[string]string
		want float64
	}{
		{"gotune's", nil, 1},
		{"the user's", map[string]string{"PYTHONPATH": own}, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("PYTHONPATH", "")
			cfg := testConfig(t, 1)
			cfg.Trainer.Scaling.NumWorkers = 1
			cfg.Trainer.Command = []string{"python3", "-c", script}
			cfg.Trainer.Env = tc.env
			tu, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			res, err := tu.Fit(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Best; got == nil || got.BestMetric == nil || *got.BestMetric != tc.want {
				t.Errorf("best %+v, want loss %v", got, tc.want)
			}
		})
	}
}
