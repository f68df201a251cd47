package tuner

import (
	"context"
	"strings"
	"testing"

	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/trainer"
)

// TestSameCurvesAreTold: when the first three trials to complete, with
// different hyperparameters, report the same objective at every step, the
// run says so once (an event and a notice) and goes on; trials whose
// curves differ, a curve that never moves, and trials that share their
// configuration are not told.
func TestSameCurvesAreTold(t *testing.T) {
	// fixed reports the same falling loss whatever the configuration.
	fixed := func(ctx context.Context, w *trainer.Worker) error {
		for s := 1; s <= 4; s++ {
			if err := w.Report(ctx, map[string]float64{"loss": 1 / float64(s), "step": float64(s)}); err != nil {
				return err
			}
		}
		return nil
	}
	flat := func(ctx context.Context, w *trainer.Worker) error {
		for s := 1; s <= 4; s++ {
			if err := w.Report(ctx, map[string]float64{"loss": 1, "step": float64(s)}); err != nil {
				return err
			}
		}
		return nil
	}
	one, err := searchspace.New(searchspace.Param{Name: "x", Domain: searchspace.Choice{Values: []any{0.5}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		train   trainer.TrainFunc
		command []string
		space   *searchspace.Space
		want    string // "" when nothing is told
	}{
		{name: "a trainable that ignores its hyperparameters", train: fixed,
			want: "trials 1, 2 and 3 reported the same loss at every step (1, 0.5, … 0.25) though their hyperparameters differ: the training may not read them"},
		{name: "a command that passes none", command: []string{"sh", "-c", `for s in 1 2 3; do echo "@gotune {\"step\": $s, \"loss\": 0.$((9 - s))}"; done`},
			want: "the command may not pass them on: name them in trainer.command ({x}) or read GOTUNE_CONFIG in the script"},
		{name: "curves that differ", train: quadratic},
		{name: "a curve that never moves", train: flat},
		{name: "one configuration", train: fixed, space: one},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, 5)
			cfg.Search.MaxConcurrent = 1
			cfg.Trainer.Scaling.NumWorkers = 1
			if tc.space != nil {
				cfg.Search.Space = tc.space
			}
			var opts []Option
			if tc.command != nil {
				cfg.Trainer.Command = tc.command
			} else {
				opts = append(opts, WithTrainFunc(tc.train))
			}
			tu, err := New(cfg, opts...)
			if err != nil {
				t.Fatal(err)
			}
			res, err := tu.Fit(context.Background())
			if err != nil || len(res.Trials) != 5 {
				t.Fatalf("Fit: %d trials, %v; want all 5 run", len(res.Trials), err)
			}
			var told []string
			for _, e := range experimentEvents(t, cfg) {
				if e.Kind == EventSameCurves {
					told = append(told, e.Message)
				}
			}
			switch {
			case tc.want == "" && len(told) > 0:
				t.Errorf("told %q, want nothing", told)
			case tc.want != "" && (len(told) != 1 || !strings.Contains(told[0], tc.want)):
				t.Errorf("told %q, want once %q", told, tc.want)
			}
		})
	}
}
