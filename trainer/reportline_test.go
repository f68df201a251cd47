package trainer

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"
)

func TestParseReportLine(t *testing.T) {
	tests := []struct {
		line    string
		metrics map[string]float64
		ckpt    string
		err     bool
	}{
		{` {"epoch": 3, "val_loss": 0.41, "checkpoint": "/tmp/c"}`, map[string]float64{"epoch": 3, "val_loss": 0.41}, "/tmp/c", false},
		{`{"loss": -1e-3}`, map[string]float64{"loss": -0.001}, "", false},
		{` {}`, map[string]float64{}, "", false},
		{`{"checkpoint": null, "a": 1}`, map[string]float64{"a": 1}, "", false},
		{``, nil, "", true},
		{`{not json`, nil, "", true},
		{`[1, 2]`, nil, "", true},
		{`null`, nil, "", true},
		{`{"loss": "high"}`, nil, "", true},
		{`{"ok": true}`, nil, "", true},
		{`{"nested": {"a": 1}}`, nil, "", true},
		{`{"big": 1e999}`, nil, "", true},
		{`{"loss": NaN, "epoch": 2}`, map[string]float64{"loss": math.NaN(), "epoch": 2}, "", false},
		{`{"a": Infinity, "b": -Infinity}`, map[string]float64{"a": math.Inf(1), "b": math.Inf(-1)}, "", false},
		{`{"a": "nan", "b": "-inf", "c": "Infinity", "d": "NaN"}`, map[string]float64{"a": math.NaN(), "b": math.Inf(-1), "c": math.Inf(1), "d": math.NaN()}, "", false},
		{`{"NaN": NaN, "checkpoint": "/tmp/NaN Infinity"}`, map[string]float64{"NaN": math.NaN()}, "/tmp/NaN Infinity", false},
		{`{"a": "1.5"}`, nil, "", true},
		{`{"a": NaNa}`, nil, "", true},
		{`{"a": nan}`, nil, "", true},
		{`{"checkpoint": 3}`, nil, "", true},
		{`{"checkpoint": ""}`, nil, "", true},
		{`{"a": 1} {"b": 2}`, nil, "", true},
		{`{"a": 1} trailing`, nil, "", true},
	}
	for _, tt := range tests {
		m, ckpt, err := ParseReportLine(tt.line)
		if (err != nil) != tt.err {
			t.Errorf("%q: error %v, want error %v", tt.line, err, tt.err)
			continue
		}
		if !tt.err && (!sameMetrics(m, tt.metrics) || ckpt != tt.ckpt) {
			t.Errorf("%q: got %v %q, want %v %q", tt.line, m, ckpt, tt.metrics, tt.ckpt)
		}
	}
}

// sameMetrics compares metrics, a NaN equal to a NaN.
func sameMetrics(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || v != w && !(math.IsNaN(v) && math.IsNaN(w)) {
			return false
		}
	}
	return true
}

// FuzzParseReportLine: any line either fails cleanly or yields metrics
// that survive a round trip through JSON, NaN and infinities as strings.
func FuzzParseReportLine(f *testing.F) {
	for _, s := range []string{` {"epoch": 3, "val_loss": 0.41, "checkpoint": "/tmp/c"}`, `{}`, `{"a": 1e308}`, `{"a":-0}`, `{"checkpoint":null}`, `{"a": NaN, "b": -Infinity}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		m, ckpt, err := ParseReportLine(line)
		if err != nil {
			return
		}
		obj := map[string]any{}
		for k, v := range m {
			obj[k] = v
			if math.IsNaN(v) || math.IsInf(v, 0) {
				obj[k] = fmt.Sprint(v)
			}
		}
		if ckpt != "" {
			obj["checkpoint"] = ckpt
		}
		data, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		m2, ckpt2, err := ParseReportLine(string(data))
		if err != nil || !sameMetrics(m, m2) || ckpt != ckpt2 {
			t.Fatalf("%q: round trip %s gave %v %q %v", line, data, m2, ckpt2, err)
		}
	})
}

func TestExpandCommand(t *testing.T) {
	config := map[string]any{"lr": 1e-5, "hidden": int64(128), "act": "relu", "bn": true, "big": 1e21, "third": 1.0 / 3}
	got, err := ExpandCommand([]string{"python3", "train.py", "--lr={lr}", "--hidden={hidden}", "{act}-{bn}", "{big}", "{third}", "{{lr}}", `{"a": {hidden}}`, "{}"}, config)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"python3", "train.py", "--lr=1e-05", "--hidden=128", "relu-true", "1e+21", fmt.Sprint(1.0 / 3), "{lr}", `{"a": 128}`, "{}"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if _, err := ExpandCommand([]string{"--x={nope}"}, config); !errorContains(err, "{nope} names no hyperparameter") {
		t.Errorf("missing parameter: %v", err)
	}
	if names := Placeholders([]string{"{a}", "{b}-{a}", "{{c}}", "{not valid}"}); !reflect.DeepEqual(names, []string{"a", "b"}) {
		t.Errorf("Placeholders: %v", names)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		key  string
	}{
		{"ok fixed", Config{Command: []string{"true"}, Scaling: ScalingConfig{NumWorkers: 2}}, ""},
		{"ok elastic", Config{Command: []string{"true"}, Scaling: ScalingConfig{MinWorkers: 1, MaxWorkers: 4}}, ""},
		{"model and command", Config{Model: "mlp", Dataset: "d.csv", Command: []string{"true"}}, "command"},
		{"empty command", Config{Command: []string{}}, "command"},
		{"workdir alone", Config{Workdir: "."}, "workdir"},
		{"negative kill timeout", Config{KillTimeout: -1}, "kill_timeout"},
		{"both sizes", Config{Scaling: ScalingConfig{NumWorkers: 2, MaxWorkers: 3}}, "scaling.num_workers"},
		{"min zero", Config{Scaling: ScalingConfig{MaxWorkers: 3}}, "scaling.min_workers"},
		{"max below min", Config{Scaling: ScalingConfig{MinWorkers: 3, MaxWorkers: 2}}, "scaling.max_workers"},
		{"max failures", Config{Failure: FailureConfig{MaxFailures: -2}}, "failure.max_failures"},
		{"unlimited failures", Config{Failure: FailureConfig{MaxFailures: -1}}, ""},
		{"heartbeat", Config{Failure: FailureConfig{HeartbeatTimeout: -1}}, "failure.heartbeat_timeout"},
		{"output heartbeat alone", Config{Failure: FailureConfig{OutputHeartbeat: true}}, "failure.output_heartbeat"},
		{"output heartbeat", Config{Failure: FailureConfig{HeartbeatTimeout: 60, OutputHeartbeat: true}}, ""},
		{"gpu visibility", Config{Scaling: ScalingConfig{GPUVisibility: "all"}}, "scaling.gpu_visibility"},
		{"env naming a contract variable", Config{Command: []string{"true"}, Env: map[string]string{"A": "1", "LOCAL_RANK": "1"}}, "env.LOCAL_RANK"},
		{"env naming gotune's", Config{Command: []string{"true"}, Env: map[string]string{"GOTUNE_SEED": "1"}}, "env.GOTUNE_SEED"},
		{"env with a bad name", Config{Command: []string{"true"}, Env: map[string]string{"A=B": "1"}}, "env.A=B"},
		{"num to keep", Config{Checkpoint: CheckpointConfig{NumToKeep: -1}}, "checkpoint.num_to_keep"},
		{"order", Config{Checkpoint: CheckpointConfig{ScoreAttribute: "loss", Order: "best"}}, "checkpoint.order"},
		{"order alone", Config{Checkpoint: CheckpointConfig{Order: "min"}}, "checkpoint.order"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			var fe *FieldError
			switch {
			case tt.key == "" && err != nil:
				t.Errorf("unexpected error %v", err)
			case tt.key != "" && (!errors.As(err, &fe) || fe.Key != tt.key):
				t.Errorf("got %v, want a FieldError on %s", err, tt.key)
			}
		})
	}
	if lo, hi := (ScalingConfig{}).Bounds(); lo != 1 || hi != 1 {
		t.Errorf("default bounds %d, %d", lo, hi)
	}
}
