package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotune/gotune/storage"
)

// metricsSweeps are sweeps over the stand-ins in testdata/metrics, which
// print the lines of nanoGPT's train.py, pytorch/examples' mnist/main.py
// and word_language_model/main.py, Hugging Face's Trainer, Lightning's
// progress bar and the tables of skorch and fastai, and write TensorBoard
// event files, with the [trainer.metrics] sections the README shows for
// them; SCRIPT is the stand-in's path. steps are the steps an undisturbed
// trial records, in order.
var metricsSweeps = []struct {
	name, script string
	step         string // the metric that holds the step
	sweep        string
	steps        []float64
}{
	{"nanogpt", "nanogpt_like.py", "step", `
[objective]
metric = "val_loss"
mode = "min"

[search.space]
learning_rate = { loguniform = [1e-5, 1e-1] }

[scheduler]
kind = "asha"
max_t = 100
grace_period = 20
reduction_factor = 2

[trainer]
command = ["python3", "SCRIPT", "config/train_shakespeare_char.py", "--device=cpu", "--compile=False",
           "--learning_rate={learning_rate}", "--max_iters=100", "--eval_interval=20", "--log_interval=10"]

[trainer.metrics]
patterns = [
  'step (?P<step>\d+): train loss (?P<train_loss>[\w.+-]+), val loss (?P<val_loss>[\w.+-]+)',
  'iter (?P<step>\d+): loss (?P<loss>[\w.+-]+), time (?P<time_ms>[\d.]+)ms',
]
`, []float64{0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100}},
	{"mnist", "mnist_like.py", "epoch", `
[objective]
metric = "test_loss"
mode = "min"

[search.space]
lr = { loguniform = [1e-2, 1e1] }

[scheduler]
kind = "asha"
max_t = 6
grace_period = 1
reduction_factor = 2

[trainer]
command = ["python3", "SCRIPT", "--lr={lr}", "--epochs=6", "--no-accel"]

[trainer.metrics]
step = "epoch"
patterns = [
  'Train Epoch: (?P<epoch>\d+) .*Loss: (?P<train_loss>[\w.+-]+)',
  'Test set: Average loss: (?P<test_loss>[\w.+-]+), Accuracy: (?P<correct>\d+)/\d+ \((?P<accuracy>\d+)%\)',
]
`, []float64{1, 2, 3, 4, 5, 6}},
	{"hf_trainer", "hf_trainer_like.py", "epoch", `
[objective]
metric = "eval_loss"
mode = "min"

[search.space]
learning_rate = { loguniform = [1e-5, 1e-1] }

[scheduler]
kind = "asha"
max_t = 4
grace_period = 1
reduction_factor = 2

[trainer]
command = ["python3", "SCRIPT", "--learning_rate={learning_rate}", "--num_train_epochs=4"]

[trainer.metrics]
output = true
step = "epoch"
`, []float64{0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4}},
	{"skorch", "skorch_like.py", "epoch", `
[objective]
metric = "valid_acc"
mode = "max"

[search.space]
lr = { loguniform = [1e-3, 10] }

[scheduler]
kind = "asha"
max_t = 8
grace_period = 2
reduction_factor = 2

[trainer]
command = ["python3", "SCRIPT", "--lr={lr}", "--max_epochs=8"]

[trainer.metrics]
output = true
step = "epoch"
`, []float64{1, 2, 3, 4, 5, 6, 7, 8}},
	{"fastai", "fastai_like.py", "epoch", `
[objective]
metric = "valid_loss"
mode = "min"

[search.space]
lr = { loguniform = [1e-5, 1e-1] }

[scheduler]
kind = "asha"
max_t = 8
grace_period = 2
reduction_factor = 2

[trainer]
command = ["python3", "SCRIPT", "--lr={lr}", "--epochs=8"]

[trainer.metrics]
output = true
step = "epoch"
`, []float64{0, 1, 2, 3, 4, 5, 6, 7}},
	{"lightning", "lightning_like.py", "Epoch", `
[objective]
metric = "val_loss"
mode = "min"

[search.space]
lr = { loguniform = [1e-4, 1] }

[scheduler]
kind = "asha"
max_t = 5
grace_period = 1
reduction_factor = 2

[trainer]
command = ["python3", "SCRIPT", "--lr={lr}", "--max_epochs=6"]

[trainer.metrics]
output = true
step = "Epoch"
`, []float64{0, 1, 2, 3, 4, 5}},
	{"word_language_model", "word_language_model_like.py", "epoch", `
[objective]
metric = "valid_loss"
mode = "min"

[search.space]
lr = { loguniform = [1, 40] }

[scheduler]
kind = "asha"
max_t = 6
grace_period = 1
reduction_factor = 2

[trainer]
command = ["python3", "SCRIPT", "--lr={lr}", "--epochs=6", "--save={trial_dir}/model.pt"]

[trainer.metrics]
output = true
step = "epoch"
`, []float64{1, 2, 3, 4, 5, 6}},
	{"tensorboard", "tb_like.py", "step", `
[objective]
metric = "loss/val"
mode = "min"

[search.space]
lr = { loguniform = [1e-4, 1] }

[scheduler]
kind = "asha"
max_t = 8
grace_period = 2
reduction_factor = 2

[trainer]
command = ["python3", "SCRIPT", "--lr={lr}", "--steps=8"]
workdir = "{trial_dir}"

[trainer.metrics]
tensorboard = "runs"
`, []float64{1, 2, 3, 4, 5, 6, 7, 8}},
}

// TestCollectedMetricsSurviveKill9 runs a TPE sweep with ASHA over each
// stand-in, kills `gotune run` with SIGKILL mid-sweep and runs it again:
// the sweep ends with its objective read from the scripts' own output, and
// every trial has recorded its steps in order, each exactly once.
func TestCollectedMetricsSurviveKill9(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs python3")
	}
	for _, tc := range metricsSweeps {
		t.Run(tc.name, func(t *testing.T) {
			script, err := filepath.Abs(filepath.Join("testdata", "metrics", tc.script))
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			sweep := filepath.Join(dir, "sweep.toml")
			head := fmt.Sprintf("name = %q\nseed = 5\n\n[search]\nalgorithm = \"tpe\"\nnum_samples = 6\nmax_concurrent = 2\n", tc.name)
			if err := os.WriteFile(sweep, []byte(head+strings.ReplaceAll(tc.sweep, "SCRIPT", script)), 0o644); err != nil {
				t.Fatal(err)
			}
			db := filepath.Join(dir, "gotune.db")
			cmd := gotune(t, "run", "--db", db, sweep)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			deadline := time.Now().Add(2 * time.Minute)
			for len(reportSteps(t, db, tc.name, tc.step)) < 2 || countSteps(reportSteps(t, db, tc.name, tc.step)) < 4 {
				select {
				case err := <-exited:
					t.Fatalf("the sweep ended before it could be killed: %v\n%s", err, stderr.String())
				default:
				}
				if time.Now().After(deadline) {
					t.Fatal("the sweep made no progress")
				}
				time.Sleep(20 * time.Millisecond)
			}
			cmd.Process.Signal(syscall.SIGKILL)
			<-exited
			// The kill interrupted a trial, or fell between trials (a
			// loaded machine widens that gap): either way the sweep is
			// unfinished.
			if rows := trialRowsOf(t, db, tc.name); len(rows) == 6 && !slices.ContainsFunc(rows, func(r trialJSON) bool { return r.Status == storage.TrialInterrupted }) {
				t.Fatalf("the kill left no trial unfinished: %+v", rows)
			}
			if code, stdout, stderr := runCLI("run", "--db", db, sweep); code != 0 {
				t.Fatalf("the run after the kill: exit %d\n%s\n%s", code, stdout, stderr)
			}
			steps := reportSteps(t, db, tc.name, tc.step)
			if len(steps) != 6 {
				t.Errorf("%d trials reported, want 6", len(steps))
			}
			for trial, got := range steps {
				if len(got) == 0 || !slices.Equal(got, tc.steps[:min(len(got), len(tc.steps))]) {
					t.Errorf("trial %d recorded steps %v, want a beginning of %v, each once", trial, got, tc.steps)
				}
			}
			// The attempts a worker's log counts go on across the kill, as
			// TORCHELASTIC_RESTART_COUNT does: the trials the second run
			// restarted (it ends those the scheduler had stopped) log a
			// second attempt, and no other trial does.
			restarted := map[string]bool{}
			code, out, errOut := runCLI("query", "--db", db, "--json", `SELECT DISTINCT t.number FROM events e JOIN trials t ON t.id = e.trial_id
				WHERE e.kind = 'restart' AND e.message LIKE 'the experiment was resumed%'`)
			var numbers []struct{ Number int }
			if err := json.Unmarshal([]byte(out), &numbers); code != 0 || err != nil {
				t.Fatalf("query: exit %d, %v\n%s%s", code, err, out, errOut)
			}
			for _, n := range numbers {
				restarted[filepath.Join(dir, "checkpoints", tc.name, fmt.Sprintf("trial_%d", n.Number), "logs", "worker_0.log")] = true
			}
			logs, _ := filepath.Glob(filepath.Join(dir, "checkpoints", tc.name, "trial_*", "logs", "worker_0.log"))
			for _, path := range logs {
				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if n := strings.Count(string(data), "attempt 1: worker 0"); n > 1 {
					t.Errorf("%s says attempt 1 %d times", path, n)
				}
				if second := strings.Contains(string(data), "attempt 2: worker 0"); second != restarted[path] {
					t.Errorf("%s: logs a second attempt: %v; the trial was restarted: %v", path, second, restarted[path])
				}
			}
			if code, out, stderr := runCLI("best", "--db", db, "--json", tc.name); code != 0 {
				t.Errorf("best: exit %d\n%s%s", code, out, stderr)
			}
		})
	}
}

// reportSteps returns each trial's recorded steps (metric key), in report
// order.
func reportSteps(t *testing.T, db, exp, key string) map[int][]float64 {
	t.Helper()
	code, out, stderr := runCLI("query", "--db", db, "--json",
		fmt.Sprintf(`SELECT trial_id AS trial, metrics_json AS metrics FROM reports_v WHERE experiment = '%s' ORDER BY trial_id, iteration`, exp))
	if code != 0 {
		return nil // the database is not made yet
	}
	var rows []struct {
		Trial   int    `json:"trial"`
		Metrics string `json:"metrics"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("query: %v\n%s%s", err, out, stderr)
	}
	steps := map[int][]float64{}
	for _, r := range rows {
		var m map[string]float64
		if err := json.Unmarshal([]byte(r.Metrics), &m); err != nil {
			t.Fatal(err)
		}
		steps[r.Trial] = append(steps[r.Trial], m[key])
	}
	return steps
}

func countSteps(steps map[int][]float64) int {
	n := 0
	for _, s := range steps {
		n += len(s)
	}
	return n
}
