package sweepfile

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/workers"
)

const commandSweep = `name = "torch"

[objective]
metric = "val_acc"
mode = "max"

[search.space]
lr = { loguniform = [1e-3, 1e-1] }

[trainer]
command = ["python3", "train.py", "--lr={lr}"]
workdir = "examples"
kill_timeout = 5

[trainer.scaling]
min_workers = 1
max_workers = 4

[trainer.failure]
max_failures = -1
heartbeat_timeout = 60

[trainer.checkpoint]
num_to_keep = 2
score_attribute = "val_acc"
order = "max"
`

func TestDecodeTrainerSections(t *testing.T) {
	cfg, err := Decode("sweep.toml", []byte(commandSweep))
	if err != nil {
		t.Fatal(err)
	}
	tc := cfg.Trainer
	if !slices.Equal(tc.Command, []string{"python3", "train.py", "--lr={lr}"}) || tc.Workdir != "examples" || tc.KillTimeout != 5 ||
		tc.Scaling.MinWorkers != 1 || tc.Scaling.MaxWorkers != 4 || tc.Failure.MaxFailures != -1 || tc.Failure.HeartbeatTimeout != 60 ||
		tc.Checkpoint.NumToKeep != 2 || tc.Checkpoint.ScoreAttribute != "val_acc" || tc.Checkpoint.Order != "max" {
		t.Errorf("decoded %+v", tc)
	}
}

func TestDecodeTrainerEnv(t *testing.T) {
	sweep := strings.Replace(commandSweep, "kill_timeout = 5", "kill_timeout = 5\nenv = { HF_HOME = \"/data/hf\", OMP_NUM_THREADS = \"4\" }", 1)
	sweep = strings.Replace(sweep, "max_workers = 4", "max_workers = 4\ngpu_visibility = \"worker\"", 1)
	cfg, err := Decode("sweep.toml", []byte(sweep))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Trainer.EnvList(); !slices.Equal(got, []string{"HF_HOME=/data/hf", "OMP_NUM_THREADS=4"}) {
		t.Errorf("env %v", got)
	}
	if cfg.Trainer.Scaling.GPUVisibility != "worker" {
		t.Errorf("gpu_visibility %q", cfg.Trainer.Scaling.GPUVisibility)
	}
}

func TestDecodeTrainerErrors(t *testing.T) {
	tests := []struct {
		replace [2]string
		line    int
		key     string
	}{
		{[2]string{`"--lr={lr}"`, `"--lr={rate}"`}, 11, "trainer.command"},
		{[2]string{"min_workers = 1", "min_workers = 0"}, 16, "trainer.scaling.min_workers"},
		{[2]string{"max_workers = 4", "max_workers = 0"}, 17, "trainer.scaling.max_workers"},
		{[2]string{"max_failures = -1", "max_failures = -3"}, 20, "trainer.failure.max_failures"},
		{[2]string{"heartbeat_timeout = 60", "heartbeat_timeout = -1"}, 21, "trainer.failure.heartbeat_timeout"},
		{[2]string{`order = "max"`, `order = "best"`}, 26, "trainer.checkpoint.order"},
		{[2]string{"num_to_keep = 2", "num_to_keep = -1"}, 24, "trainer.checkpoint.num_to_keep"},
		{[2]string{"max_failures = -1", "max_failure = 1"}, 20, "trainer.failure.max_failure"},
		{[2]string{"kill_timeout = 5", "kill_timeout = 5\nenv = { HF_HOME = \"/data\", RANK = \"3\" }"}, 14, "trainer.env.RANK"},
		{[2]string{"max_workers = 4", "max_workers = 4\ngpu_visibility = \"all\""}, 18, "trainer.scaling.gpu_visibility"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			_, err := Decode("sweep.toml", []byte(strings.Replace(commandSweep, tt.replace[0], tt.replace[1], 1)))
			var e *Error
			if !errors.As(err, &e) || e.Line != tt.line || e.Key != tt.key {
				t.Errorf("got %v, want an error at line %d on %s", err, tt.line, tt.key)
			}
		})
	}
}

// TestDecodeTrainerLogLimits reads the cap on the workers' logs and how
// many rotated files to keep, and names the line and key of a bad one.
func TestDecodeTrainerLogLimits(t *testing.T) {
	with := func(limits string) []byte {
		return []byte(strings.Replace(commandSweep, "kill_timeout = 5", "kill_timeout = 5\n"+limits, 1))
	}
	cfg, err := Decode("sweep.toml", with("log_max_bytes = \"10MiB\"\nlog_keep = 2"))
	if err != nil {
		t.Fatal(err)
	}
	if maxBytes, keep := cfg.Trainer.LogLimits(); maxBytes != 10*workers.MiB || keep != 2 {
		t.Errorf("log limits %v, %d; want 10MiB, 2", maxBytes, keep)
	}
	cfg, err = Decode("sweep.toml", []byte(commandSweep))
	if err != nil {
		t.Fatal(err)
	}
	if maxBytes, keep := cfg.Trainer.LogLimits(); maxBytes != trainer.DefaultLogMaxBytes || keep != trainer.DefaultLogKeep {
		t.Errorf("default log limits %v, %d", maxBytes, keep)
	}
	tests := []struct {
		limits string
		line   int
		key    string
	}{
		{`log_max_bytes = "lots"`, 14, "trainer.log_max_bytes"},
		{`log_max_bytes = -5`, 14, "trainer.log_max_bytes"},
		{"log_max_bytes = \"1MiB\"\nlog_keep = -2", 15, "trainer.log_keep"},
	}
	for _, tt := range tests {
		_, err := Decode("sweep.toml", with(tt.limits))
		var e *Error
		if !errors.As(err, &e) || e.Line != tt.line || e.Key != tt.key {
			t.Errorf("%s: got %v, want an error at line %d on %s", tt.limits, err, tt.line, tt.key)
		}
	}
}

// TestDecodeReportFiles reads [trainer] report_files: absent (nil, files
// on), true or false, and names the line and key of a value that is not
// a boolean.
func TestDecodeReportFiles(t *testing.T) {
	with := func(line string) []byte {
		return []byte(strings.Replace(commandSweep, "kill_timeout = 5", "kill_timeout = 5\n"+line, 1))
	}
	for _, tt := range []struct {
		line string
		want string // "nil", "true" or "false"
	}{
		{"", "nil"},
		{"report_files = true", "true"},
		{"report_files = false", "false"},
	} {
		s, err := DecodeSweep("sweep.toml", with(tt.line))
		if err != nil {
			t.Fatalf("%q: %v", tt.line, err)
		}
		got := "nil"
		if s.ReportFiles != nil {
			got = strconv.FormatBool(*s.ReportFiles)
		}
		if got != tt.want {
			t.Errorf("%q: report_files %s, want %s", tt.line, got, tt.want)
		}
		if s.Config.Trainer.KillTimeout != 5 || len(s.Config.Trainer.Command) != 3 {
			t.Errorf("%q: the rest of [trainer] decoded as %+v", tt.line, s.Config.Trainer)
		}
	}
	for _, tt := range []struct {
		line string
		msg  string
	}{
		{`report_files = "no"`, "want a boolean, got a string"},
		{"report_files = 0", "want a boolean, got an integer"},
		{"report_files = [true]", "want a boolean, got an array"},
		{"report_file = false", "unknown key"},
	} {
		_, err := DecodeSweep("sweep.toml", with(tt.line))
		key := "trainer." + strings.Fields(tt.line)[0]
		var e *Error
		if !errors.As(err, &e) || e.Line != 14 || e.Key != key || !strings.Contains(err.Error(), tt.msg) ||
			!strings.HasPrefix(err.Error(), "sweep.toml:14: "+key+": ") {
			t.Errorf("%s: got %v, want sweep.toml:14: %s: …%s", tt.line, err, key, tt.msg)
		}
	}
}

// TestStorageBesideSweepFile: a relative storage path in a sweep file is
// beside the file, as every relative path in it; an absolute one is kept.
func TestStorageBesideSweepFile(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(t.TempDir())
	for _, tt := range []struct{ storage, want string }{
		{"results/x.db", filepath.Join(dir, "results/x.db")},
		{"/abs/x.db", "/abs/x.db"},
	} {
		path := filepath.Join(dir, "sweep.toml")
		body := "name = \"s\"\nstorage = \"" + tt.storage + "\"\n[objective]\nmetric = \"loss\"\n[trainer]\ncommand = [\"true\"]\n"
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := LoadSweep(path)
		if err != nil || s.Config.Storage != tt.want {
			t.Errorf("storage %q: %q, %v; want %q", tt.storage, s.Config.Storage, err, tt.want)
		}
	}
}
