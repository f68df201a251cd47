package trainer

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// needPython skips a test when /usr/bin/python3 is missing, except in CI
// (GOTUNE_CI=1), where it fails.
func needPython(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		if os.Getenv("GOTUNE_CI") == "1" {
			t.Fatal("CI needs /usr/bin/python3")
		}
		t.Skip("no /usr/bin/python3")
	}
}

// TestPythonHelperSpeaksTheContract runs a script written with gotune.py as
// a group of two command workers, each handing over a shard of every
// checkpoint, through a crash of rank 1.
func TestPythonHelperSpeaksTheContract(t *testing.T) {
	needPython(t)
	spec := Spec{
		Experiment: uniqueName(t), Trial: 3,
		Config:      map[string]any{"x": 1.5, "steps": int64(3), "dir": t.TempDir()},
		Command:     []string{"/usr/bin/python3", "testdata/gotune_worker.py"},
		Scaling:     ScalingConfig{NumWorkers: 2},
		Failure:     FailureConfig{MaxFailures: 1},
		Checkpoints: &testStore{dir: t.TempDir()},
		LogDir:      t.TempDir(),
	}
	sink := &collect{}
	sum, err := Run(context.Background(), spec, sink)
	if err != nil || sum.Restarts != 1 {
		t.Fatalf("Run: %+v, %v", sum, err)
	}
	if got, want := sink.series(), "1:1.5 2:3 3:4.5 "; got != want {
		t.Errorf("results %s, want %s", got, want)
	}
	last := sink.results[len(sink.results)-1].Metrics
	if last["rank"] != 0 || last["size"] != 2 || last["shards"] != 2 || last["trial"] != 3 {
		t.Errorf("last report %v: want rank 0's, in a group of 2, resumed from both shards", last)
	}
	entries, _ := os.ReadDir(sum.Checkpoint)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"shard_0", "shard_1"}) {
		t.Errorf("final checkpoint holds %v", names)
	}
	log, _ := os.ReadFile(filepath.Join(spec.LogDir, "worker_1.log"))
	if !strings.Contains(string(log), "rank 1 of 2 starts after step 1") {
		t.Errorf("worker 1's log:\n%s", log)
	}
}

func TestPythonHelperRefusesBadReports(t *testing.T) {
	needPython(t)
	script := `
import gotune, math
for bad in ({"loss": "high"}, {"ok": True}, {"checkpoint": "/nonexistent/dir"}):
    try:
        gotune.report(**bad)
    except ValueError:
        continue
    raise SystemExit("accepted %r" % (bad,))
gotune.report(**{"val/loss": 1})
gotune.report(loss=float("nan"), a=math.inf, b=-math.inf)
gotune.heartbeat()
assert gotune.world_size() == 1 and gotune.resume_dir() is None and gotune.config() == {}
`
	cmd := exec.Command("/usr/bin/python3", "-c", script)
	cmd.Env = append(os.Environ(), "PYTHONPATH=../python")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := string(out); got != "@gotune {\"val/loss\": 1}\n@gotune {\"loss\": NaN, \"a\": Infinity, \"b\": -Infinity}\n@gotune {}\n" {
		t.Errorf("output %q", got)
	}
	// What the helper writes for NaN and the infinities is what the report
	// lines accept.
	m, _, err := ParseReportLine(strings.Split(string(out), "\n")[1][len(ReportPrefix):])
	if err != nil || !math.IsNaN(m["loss"]) || !math.IsInf(m["a"], 1) || !math.IsInf(m["b"], -1) {
		t.Errorf("the helper's non-finite metrics read back as %v, %v", m, err)
	}
}

// TestNestedTorchrunReportsOnce runs torchrun with two processes as the
// command of a one-worker trial; each process reports every step through
// gotune.py, and only the nested rank 0's reports are printed.
func TestNestedTorchrunReportsOnce(t *testing.T) {
	needPython(t)
	if err := exec.Command("/usr/bin/python3", "-c", "import torch.distributed.run").Run(); err != nil {
		if os.Getenv("GOTUNE_CI") == "1" {
			t.Fatalf("CI needs PyTorch (apt-get install python3-torch): %v", err)
		}
		t.Skipf("no PyTorch for /usr/bin/python3: %v", err)
	}
	spec := Spec{
		Experiment: uniqueName(t), Trial: 2,
		Command: []string{"sh", "-c", `exec /usr/bin/python3 -m torch.distributed.run --nproc_per_node=2 ` +
			`--master_addr=127.0.0.1 --master_port="$MASTER_PORT" --redirects 9:0 --tee 9:0 testdata/nested_report.py`},
		ScratchDir: filepath.Join(t.TempDir(), "scratch"),
	}
	sink := &collect{}
	if _, err := Run(context.Background(), spec, sink); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range sink.results {
		got = append(got, fmt.Sprintf("%g/%g/%g", r.Metrics["step"], r.Metrics["rank"], r.Metrics["nested"]))
	}
	if strings.Join(got, " ") != "1/0/1 2/0/1 3/0/1" {
		t.Errorf("reports (step/rank/nested) %v, want each step once, from the nested rank 0", got)
	}
}

// TestPythonTracebackInTheError: a script that raises and then writes more
// (its exit handlers, a logger shutting down) fails with an error that
// quotes the traceback, not only the ordinary lines after it.
func TestPythonTracebackInTheError(t *testing.T) {
	needPython(t)
	script := filepath.Join(t.TempDir(), "train.py")
	os.WriteFile(script, []byte(`import atexit, sys

def shutdown():
    for i in range(10):
        print(f"closing loader {i}", file=sys.stderr)

def load_batch(step):
    raise ValueError(f"the real cause at step {step}")

atexit.register(shutdown)
for step in range(50):
    print(f"step {step}: loss {1 / (step + 1):.3f}")
load_batch(50)
`), 0o644)
	spec := Spec{
		Experiment: uniqueName(t), Trial: 1,
		Command:    []string{"/usr/bin/python3", script},
		Scaling:    ScalingConfig{NumWorkers: 1},
		ScratchDir: filepath.Join(t.TempDir(), "scratch"),
		LogDir:     t.TempDir(),
	}
	_, err := Run(context.Background(), spec, &collect{})
	for _, want := range []string{
		"exited with status 1", "its last Python traceback", "Traceback (most recent call last):",
		"in load_batch", "ValueError: the real cause at step 50", "followed",
	} {
		if !errorContains(err, want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}
