package sweepfile

import (
	"errors"
	"strings"
	"testing"

	"github.com/gotune/gotune/tuner"
)

const withScheduler = `name = "s"

[objective]
metric = "loss"

[search.space]
lr = { loguniform = [1e-4, 1e-1] }

[scheduler]
kind = "asha"
time_attr = "epoch"
max_t = 27
reduction_factor = 3

[trainer]
model = "mlp"
dataset = "data.csv"
`

func TestDecodeScheduler(t *testing.T) {
	cfg, err := Decode("sweep.toml", []byte(withScheduler))
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Scheduler
	if s.Kind != "asha" || s.TimeAttr != "epoch" || s.MaxT != 27 || s.ReductionFactor != 3 {
		t.Errorf("decoded scheduler %+v", s)
	}
}

// TestDecodeSchedulerErrors checks that the [scheduler] section is
// validated like the rest: file, line and key.
func TestDecodeSchedulerErrors(t *testing.T) {
	asha := "kind = \"asha\"\ntime_attr = \"epoch\"\nmax_t = 27\nreduction_factor = 3\n"
	pbt := "kind = \"pbt\"\nperturbation_interval = 2\n"
	tests := []struct {
		name    string
		replace [2]string
		line    int
		key     string
		msg     string
	}{
		{"misspelt key", [2]string{"max_t = 27", "max_tt = 27"}, 12, "scheduler.max_tt", "unknown key"},
		{"bad value", [2]string{"reduction_factor = 3", "reduction_factor = 1"}, 13, "scheduler.reduction_factor", "must exceed 1"},
		{"wrong type", [2]string{"reduction_factor = 3", `reduction_factor = "3"`}, 13, "scheduler.reduction_factor", "want a number, got a string"},
		{"unknown kind", [2]string{`kind = "asha"`, `kind = "bohb"`}, 10, "scheduler.kind", `unknown scheduler "bohb"`},
		{"key of another kind", [2]string{"max_t = 27", "min_samples_required = 2"}, 12, "scheduler.min_samples_required", `not used by kind "asha"`},
		{"wrong type of an optional number", [2]string{asha, pbt + "resample_probability = \"x\"\n"}, 12, "scheduler.resample_probability", "want a number, got a string"},
		{"pbt mutation", [2]string{asha, pbt + "hyperparam_mutations = { lr = { uniform = [1, 0] } }\n"}, 12, "scheduler.hyperparam_mutations.lr", "inverted"},
		{"pbt mutation of no parameter", [2]string{asha, pbt + "[scheduler.hyperparam_mutations]\nmom = { uniform = [0, 1] }\n"}, 13, "scheduler.hyperparam_mutations.mom", `no parameter "mom"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := strings.Replace(withScheduler, tt.replace[0], tt.replace[1], 1)
			if doc == withScheduler {
				t.Fatal("replacement did not apply")
			}
			_, err := Decode("sweep.toml", []byte(doc))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v (%T), want *Error", err, err)
			}
			if e.Line != tt.line || e.Key != tt.key || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("got %v (line %d key %q), want line %d key %q and %q", err, e.Line, e.Key, tt.line, tt.key, tt.msg)
			}
		})
	}
}

// TestDecodeSchedulerNeedsCheckpoints: PBT copies checkpoints between
// trials, so a command that does not declare [trainer.checkpoint] cannot
// use it, while the built-in models, which always checkpoint, can.
func TestDecodeSchedulerNeedsCheckpoints(t *testing.T) {
	pbt := strings.Replace(withScheduler, "kind = \"asha\"\ntime_attr = \"epoch\"\nmax_t = 27\nreduction_factor = 3", "kind = \"pbt\"\nperturbation_interval = 2", 1)
	if _, err := Decode("sweep.toml", []byte(pbt)); err != nil {
		t.Errorf("pbt with a built-in model: %v", err)
	}
	command := strings.Replace(pbt, "model = \"mlp\"\ndataset = \"data.csv\"", "command = [\"python3\", \"train.py\"]", 1)
	_, err := Decode("sweep.toml", []byte(command))
	var e *Error
	if !errors.As(err, &e) || e.Line != 10 || e.Key != "scheduler.kind" || !strings.Contains(err.Error(), "pbt restarts trials") {
		t.Errorf("pbt with a command that does not checkpoint: got %v, want an error on scheduler.kind at line 10", err)
	}
	promote := strings.Replace(withScheduler, "max_t = 27", "mode = \"promote\"", 1)
	promote = strings.Replace(promote, "model = \"mlp\"\ndataset = \"data.csv\"", "command = [\"python3\", \"train.py\"]", 1)
	_, err = Decode("sweep.toml", []byte(promote))
	if !errors.As(err, &e) || e.Line != 12 || e.Key != "scheduler.mode" || !strings.Contains(err.Error(), `use "stop"`) {
		t.Errorf("asha promote with a command that does not checkpoint: got %v, want an error on scheduler.mode at line 12", err)
	}
	declared := command + "[trainer.checkpoint]\nnum_to_keep = 2\n"
	if _, err := Decode("sweep.toml", []byte(declared)); err != nil {
		t.Errorf("pbt with a command that checkpoints: %v", err)
	}
}

// TestDecodeSchedulerFlags checks the optional flags that default to true:
// absent they stay nil, and false is kept.
func TestDecodeSchedulerFlags(t *testing.T) {
	tests := []struct {
		section string
		get     func(tuner.SchedulerConfig) *bool
	}{
		{"kind = \"asha\"\nstop_last_trials = false\n", func(s tuner.SchedulerConfig) *bool { return s.StopLastTrials }},
		{"kind = \"median\"\nhard_stop = false\n", func(s tuner.SchedulerConfig) *bool { return s.HardStop }},
	}
	for _, tt := range tests {
		src := strings.Replace(withScheduler, "kind = \"asha\"\ntime_attr = \"epoch\"\nmax_t = 27\nreduction_factor = 3\n", tt.section, 1)
		cfg, err := Decode("sweep.toml", []byte(src))
		if err != nil {
			t.Fatalf("%s: %v", tt.section, err)
		}
		if b := tt.get(cfg.Scheduler); b == nil || *b {
			t.Errorf("%s: decoded %v, want false", tt.section, b)
		}
	}
}

// TestDecodePrunerSchedulers checks that Optuna's pruners are kinds of the
// [scheduler] section, with their settings validated like the rest.
func TestDecodePrunerSchedulers(t *testing.T) {
	section := "kind = \"asha\"\ntime_attr = \"epoch\"\nmax_t = 27\nreduction_factor = 3\n"
	tests := []struct {
		section, err string
	}{
		{"kind = \"percentile\"\npercentile = 25\nstartup_trials = 3\ngrace_period = 2\ninterval = 1\n", ""},
		{"kind = \"threshold\"\nupper = 2.5\n", ""},
		{"kind = \"patient\"\npatience = 3\nmin_delta = 0.01\n", ""},
		{"kind = \"wilcoxon\"\np_threshold = 0.05\nstartup_steps = 3\n", ""},
		{"kind = \"patient\"\n", "scheduler.patience"},
		{"kind = \"percentile\"\npercentile = 150\n", "scheduler.percentile"},
	}
	for _, tt := range tests {
		_, err := Decode("sweep.toml", []byte(strings.Replace(withScheduler, section, tt.section, 1)))
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s: %v", tt.section, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: got %v, want an error on %s", tt.section, err, tt.err)
		}
	}
}
