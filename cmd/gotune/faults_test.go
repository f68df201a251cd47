package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunRecordsNonFiniteMetrics runs a command whose report lines carry
// NaN and infinities the ways Python's json module and hand-written
// scripts write them: each is a report of the trial, recorded as such and
// shown by the CLI, and keeps the heartbeat alive.
func TestRunRecordsNonFiniteMetrics(t *testing.T) {
	sweep := writeSweep(t, `name = "diverged"
[objective]
metric = "loss"
[search]
num_samples = 1
[search.space]
x = 1
[trainer]
command = ["sh", "-c", '''
for l in NaN Infinity -Infinity '"nan"' '"-inf"'; do
	i=$((i + 1))
	echo "@gotune {\"epoch\": $i, \"loss\": $l}"
	sleep 0.3
done
''']
[trainer.failure]
heartbeat_timeout = 1
`)
	db := filepath.Join(t.TempDir(), "gotune.db")
	if out, err := gotune(t, "run", "--db", db, sweep).CombinedOutput(); err != nil {
		t.Fatalf("gotune run: %v\n%s", err, out)
	}
	code, out, stderr := runCLI("export", "--db", db, "--format", "json", "diverged")
	if code != 0 {
		t.Fatalf("export: exit %d\n%s", code, stderr)
	}
	var reports []struct {
		Metrics map[string]any `json:"metrics"`
	}
	if err := json.Unmarshal([]byte(out), &reports); err != nil {
		t.Fatalf("export: %v\n%s", err, out)
	}
	var losses []string
	for _, r := range reports {
		losses = append(losses, fmtAny(r.Metrics["loss"]))
	}
	if got, want := strings.Join(losses, " "), "NaN Infinity -Infinity NaN -Infinity"; got != want {
		t.Errorf("losses %s, want %s\n%s", got, want, out)
	}
	code, out, _ = runCLI("trials", "--db", db, "--json", "diverged")
	var rows []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 {
		t.Fatalf("trials: exit %d\n%s", code, out)
	}
	if rows[0]["status"] != "TERMINATED" || rows[0]["iterations"] != 5.0 || rows[0]["last_metric"] != "-Infinity" || rows[0]["restarts"] != 0.0 {
		t.Errorf("trial: %v, want TERMINATED after 5 iterations, last -Infinity, no restart", rows[0])
	}
	code, out, _ = runCLI("show", "--db", db, "diverged", "1")
	if code != 0 || !strings.Contains(out, "NaN") || strings.Contains(out, "hung") {
		t.Errorf("show: exit %d\n%s", code, out)
	}
}

func fmtAny(v any) string {
	b, _ := json.Marshal(v)
	return strings.Trim(string(b), `"`)
}

// TestRunStoppedTunerDoesNotBlameItsWorkers stops `gotune run` with
// SIGSTOP for longer than the heartbeat timeout while its worker reports
// steadily: on waking, the silence was the tuner's own, so the trial goes
// on without a restart.
func TestRunStoppedTunerDoesNotBlameItsWorkers(t *testing.T) {
	sweep := writeSweep(t, `name = "asleep"
[objective]
metric = "loss"
[search]
num_samples = 1
[search.space]
x = 1
[trainer]
command = ["sh", "-c", 'for i in $(seq 1 40); do echo "@gotune {\"epoch\": $i, \"loss\": 1}"; sleep 0.1; done']
[trainer.failure]
max_failures = 3
heartbeat_timeout = 1
`)
	db := filepath.Join(t.TempDir(), "gotune.db")
	cmd := gotune(t, "run", "--db", db, sweep)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for committedReports(db, "asleep") < 3 {
		select {
		case err := <-exited:
			t.Fatalf("the sweep ended before it could be stopped: %v\n%s", err, out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(2500 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGCONT)
	if err := <-exited; err != nil {
		t.Fatalf("gotune run: %v\n%s", err, out.String())
	}
	code, js, _ := runCLI("trials", "--db", db, "--json", "asleep")
	var rows []map[string]any
	if code != 0 || json.Unmarshal([]byte(js), &rows) != nil || len(rows) != 1 {
		t.Fatalf("trials: exit %d\n%s", code, js)
	}
	if rows[0]["status"] != "TERMINATED" || rows[0]["iterations"] != 40.0 || rows[0]["restarts"] != 0.0 {
		t.Errorf("trial: %v, want TERMINATED after 40 iterations without a restart\n%s", rows[0], out.String())
	}
}
