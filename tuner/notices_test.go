package tuner

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/workers"
)

// Settings that make every trial (or every grid cell's trials) run one
// configuration are said, and so is a space that varies outside a grid
// with num_samples not set (one configuration per grid cell is drawn);
// only those.
func TestConfigNotices(t *testing.T) {
	lr := searchspace.Param{Name: "lr", Domain: searchspace.Uniform{Low: 0, High: 1}}
	grid := searchspace.Param{Name: "batch", Domain: searchspace.Grid{Values: []any{int64(32), int64(64)}}}
	epochs := searchspace.Param{Name: "epochs", Domain: searchspace.Constant{Value: int64(3)}}
	one := searchspace.Param{Name: "opt", Domain: searchspace.Choice{Values: []any{"sgd"}}}
	for _, tc := range []struct {
		name    string
		samples int
		params  []searchspace.Param
		want    string
	}{
		{"empty space", 4, nil, "[search.space] is empty: the 4 trials"},
		{"empty space, one sample", 1, nil, ""},
		{"grid alone", 4, []searchspace.Param{grid}, "each of the 2 grid cells runs 4 times"},
		{"grid and constants", 2, []searchspace.Param{grid, epochs, one}, "each of the 2 grid cells runs 2 times"},
		{"grid once", 1, []searchspace.Param{grid}, ""},
		{"grid and a random parameter", 4, []searchspace.Param{grid, lr}, ""},
		{"random parameter", 4, []searchspace.Param{lr}, ""},
		{"random parameter, samples not set", 0, []searchspace.Param{lr}, "search.num_samples is not set, so one trial runs, with one configuration drawn from [search.space]"},
		{"grid and a random parameter, samples not set", 0, []searchspace.Param{grid, lr}, "search.num_samples is not set, so each of the 2 grid cells runs once"},
		{"grid alone, samples not set", 0, []searchspace.Param{grid}, ""},
		{"random parameter once", 1, []searchspace.Param{lr}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			space, err := searchspace.New(tc.params...)
			if err != nil {
				t.Fatal(err)
			}
			cfg := testConfig(t, tc.samples)
			cfg.Search.Space = space
			got := strings.Join(cfg.Notices(), "\n")
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("notices %q, want one that says %q", got, tc.want)
			}
		})
	}
}

// An objective whose name says which way it goes (an accuracy up, a loss
// down) and whose mode, given or the default, goes the other way is said;
// names that say nothing, or both, are not.
func TestModeNotices(t *testing.T) {
	for _, tc := range []struct {
		objective Objective
		want      string
	}{
		{Objective{Metric: "val_acc"}, `objective val_acc reads like a metric to maximise, but objective.mode defaults to "min": the sweep looks for the trials with the lowest val_acc (set mode = "max" if higher is better)`},
		{Objective{Metric: "val_acc", Mode: "max"}, ""},
		{Objective{Metric: "val_loss"}, ""},
		{Objective{Metric: "val_loss", Mode: "min"}, ""},
		{Objective{Metric: "test/loss", Mode: "max"}, `objective test/loss reads like a metric to minimise, but objective.mode is "max": the sweep looks for the trials with the highest test/loss (set mode = "min" if that is not what you want)`},
		{Objective{Metric: "Accuracy", Mode: "min"}, `objective Accuracy reads like a metric to maximise, but objective.mode is "min": the sweep looks for the trials with the lowest Accuracy`},
		{Objective{Metric: "score"}, ""},
		{Objective{Metric: "accumulated_steps"}, ""},
		{Objective{Metric: "loss_acc_gap", Mode: "max"}, ""},
		{Objective{Metrics: []string{"val_loss", "mAP"}}, `objective mAP reads like a metric to maximise, but objective.mode defaults to "min"`},
		{Objective{Metrics: []string{"val_loss", "f1"}, Modes: []string{"min", "max"}}, ""},
	} {
		cfg := testConfig(t, 1)
		cfg.Objective = tc.objective
		got := strings.Join(cfg.Notices(), "\n")
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%+v: notices %q, want %q", tc.objective, got, tc.want)
		}
	}
}

// A command that names some varying parameters in no placeholder, whose
// script (nor a file of its kind beside it) never mentions gotune, hears
// which make no difference; one that passes them all, reads GOTUNE_CONFIG
// or imports gotune, or runs a file gotune cannot read, hears nothing.
func TestUnpassedParametersNotice(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"plain/main.py":  "import argparse\np = argparse.ArgumentParser()\np.add_argument('--lr', type=float)\n",
		"reads/reads.py": "import json, os\ncfg = json.loads(os.environ['GOTUNE_CONFIG'])\n",
		"plain/train.sh": "#!/bin/sh\npython3 main.py \"$@\"\n",
		"helper/a.py":    "import b\n",
		"helper/b.py":    "import gotune\nlr = gotune.config()['lr']\n",
		"binary":         "\x7fELF\x00\x00",
	}
	for name, text := range files {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	space, err := searchspace.New(
		searchspace.Param{Name: "lr", Domain: searchspace.LogUniform{Low: 1e-3, High: 1}},
		searchspace.Param{Name: "dropout", Domain: searchspace.Uniform{Low: 0, High: 0.5}},
		searchspace.Param{Name: "epochs", Domain: searchspace.Constant{Value: int64(3)}},
	)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		command []string
		want    string // "" for no notice
	}{
		{"none passed", []string{"python3", "plain/main.py"}, "trainer.command passes on none of the searched parameters (dropout, lr), and main.py never mentions GOTUNE_CONFIG: every trial would train the same model. Name them in the command (\"--dropout={dropout}\")"},
		{"one passed", []string{"python3", "-u", "plain/main.py", "--lr={lr}"}, "trainer.command does not pass on dropout (it passes lr), and main.py never mentions GOTUNE_CONFIG"},
		{"a script of its own", []string{"./plain/train.sh"}, "train.sh never mentions GOTUNE_CONFIG"},
		{"all passed", []string{"python3", "plain/main.py", "--lr={lr}", "--dropout={dropout}"}, ""},
		{"GOTUNE_CONFIG read", []string{"python3", "reads/reads.py"}, ""},
		{"gotune imported by a module beside it", []string{"python3", "helper/a.py"}, ""},
		{"a binary", []string{"./binary"}, ""},
		{"no such script", []string{"python3", "missing.py"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, 4)
			cfg.Search.Space = space
			cfg.Trainer.Command, cfg.Trainer.PathBase = tc.command, dir
			got := strings.Join(cfg.Notices(), "\n")
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("notices %q, want %q", got, tc.want)
			}
		})
	}
}

// A run records its notices as experiment events.
func TestFitRecordsConfigNotices(t *testing.T) {
	cfg := testConfig(t, 2)
	cfg.Search.Space = &searchspace.Space{}
	mustFit(t, cfg)
	evs := experimentEvents(t, cfg)
	for _, e := range evs {
		if e.Kind == EventConfigNotice && strings.Contains(e.Message, "[search.space] is empty") {
			return
		}
	}
	t.Errorf("no config_notice event among %v", evs)
}

// A command whose group's workers must share a GPU hears, at the start,
// that PyTorch's NCCL backend refuses that; one with a device per worker,
// and workers in Go, hear nothing.
func TestSharedGPUNotice(t *testing.T) {
	tests := []struct {
		name    string
		gpus    int
		command bool
		want    bool
	}{
		{"two workers on one GPU", 1, true, true},
		{"a GPU each", 2, true, false},
		{"workers in Go", 1, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t, 1)
			cfg.Resources = workers.Declared{Nodes: 1, CPUs: 4, GPUs: tt.gpus}
			cfg.Trainer.Scaling = trainer.ScalingConfig{NumWorkers: 2, CPUsPerWorker: 0.5, GPUsPerWorker: 0.5}
			var opts []Option
			if tt.command {
				cfg.Trainer.Command = []string{"sh", "-c", `echo '@gotune {"loss": 1}'`}
			} else {
				opts = append(opts, WithTrainFunc(quadratic))
			}
			tu, err := New(cfg, opts...)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tu.Fit(context.Background()); err != nil {
				t.Fatal(err)
			}
			var notices []string
			for _, e := range experimentEvents(t, cfg) {
				if e.Kind == EventConfigNotice && strings.Contains(e.Message, "NCCL") {
					notices = append(notices, e.Message)
				}
			}
			if got := len(notices) == 1 && strings.Contains(notices[0], "2 of a trial's workers share a GPU"); got != tt.want || len(notices) > 1 {
				t.Errorf("NCCL notices %q, want one: %v", notices, tt.want)
			}
		})
	}
}

// experimentEvents reads the events of cfg's experiment.
func experimentEvents(t *testing.T, cfg Config) []storage.Event {
	t.Helper()
	evs, err := openResults(t, cfg).Events(context.Background(), cfg.Name, 0)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}
