package trainer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// envMap turns NAME=value entries into a map, failing on a name set twice.
func envMap(t *testing.T, env []string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if _, dup := m[k]; dup {
			t.Errorf("%s is set twice in %v", k, env)
		}
		m[k] = v
	}
	return m
}

func TestWorkerEnvTorchrunVariables(t *testing.T) {
	place := rankInfo{rank: 3, size: 4, localRank: 1, localSize: 2, nodeRank: 1, nodes: 2, gpus: []string{"2", "3"}}
	s := envSpec{experiment: "exp", trial: 7, seed: 4000000000, place: place, masterAddr: "10.0.0.1", masterPort: 29500,
		trialDir: "/runs/trial_7", runID: "exp-trial-7", restartCount: 2, maxRestarts: 3,
		errorFile: "/runs/trial_7/logs/worker_3.error.json", ompThreads: 2}
	got := envMap(t, workerEnv([]string{"PATH=/bin", "RANK=9", "GOTUNE_TRIAL_DIR=/stale", "TORCHELASTIC_TIMER_FILE=/stale"}, s))
	if v, ok := got["TORCHELASTIC_TIMER_FILE"]; ok {
		t.Errorf("the launcher's own TORCHELASTIC_TIMER_FILE=%s went through", v)
	}
	want := map[string]string{
		"PATH": "/bin", "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
		"GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2", "ROLE_NAME": "default", "ROLE_RANK": "3", "ROLE_WORLD_SIZE": "4",
		"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "CUDA_VISIBLE_DEVICES": "2,3",
		"TORCHELASTIC_RUN_ID": "exp-trial-7", "TORCHELASTIC_RESTART_COUNT": "2", "TORCHELASTIC_MAX_RESTARTS": "3",
		"TORCHELASTIC_USE_AGENT_STORE": "False", "TORCHELASTIC_ERROR_FILE": "/runs/trial_7/logs/worker_3.error.json",
		"NCCL_ASYNC_ERROR_HANDLING": "1", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
		"OMP_NUM_THREADS": "2", "PYTHONUNBUFFERED": "1", "GOTUNE_SEED": "4000000000",
		"GOTUNE_TRIAL_DIR": "/runs/trial_7", "GOTUNE_NODE_RANK": "1",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s=%q, want %q", k, got[k], v)
		}
	}
}

func TestWorkerEnvPrecedence(t *testing.T) {
	for _, tc := range []struct {
		name  string
		base  []string
		extra []string
		want  map[string]string // "" means unset
	}{
		{"defaults", []string{"PATH=/bin"}, nil,
			map[string]string{"OMP_NUM_THREADS": "3", "PYTHONUNBUFFERED": "1", "NCCL_ASYNC_ERROR_HANDLING": "1"}},
		{"the caller's environment keeps its values", []string{"OMP_NUM_THREADS=8", "NCCL_ASYNC_ERROR_HANDLING=0", "PYTHONUNBUFFERED=0"}, nil,
			map[string]string{"OMP_NUM_THREADS": "8", "NCCL_ASYNC_ERROR_HANDLING": "0", "PYTHONUNBUFFERED": "0"}},
		{"extra variables replace both", []string{"OMP_NUM_THREADS=8", "HF_HOME=/old"}, []string{"OMP_NUM_THREADS=4", "HF_HOME=/data/hf", "FOO=a=b"},
			map[string]string{"OMP_NUM_THREADS": "4", "HF_HOME": "/data/hf", "FOO": "a=b"}},
		{"extra variables cannot replace the contract's", nil, []string{"RANK=5", "MASTER_PORT=1", "TORCHELASTIC_RUN_ID=x"},
			map[string]string{"RANK": "0", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "run"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := envSpec{place: rankInfo{size: 1, localSize: 1, nodes: 1}, masterPort: 29500, runID: "run", ompThreads: 3, extra: tc.extra}
			got := envMap(t, workerEnv(tc.base, s))
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s=%q, want %q", k, got[k], v)
				}
			}
		})
	}
}

func TestRestartCountAndEnvAcrossRestarts(t *testing.T) {
	out := t.TempDir()
	// Fails until its third start; every start notes its variables.
	script := `echo "$TORCHELASTIC_RESTART_COUNT $TORCHELASTIC_MAX_RESTARTS $OMP_NUM_THREADS $FOO $GOTUNE_TRIAL_DIR" >> "$0/starts"
[ "$TORCHELASTIC_RESTART_COUNT" -ge 2 ] || exit 3
echo '@gotune {"ok": 1}'`
	spec := Spec{
		Experiment: uniqueName(t), Trial: 1,
		Command:    []string{"sh", "-c", script, out},
		Scaling:    ScalingConfig{NumWorkers: 1, CPUsPerWorker: 2.5},
		Failure:    FailureConfig{MaxFailures: 3},
		ScratchDir: filepath.Join(t.TempDir(), "scratch"),
		Env:        []string{"FOO=bar", "OMP_NUM_THREADS=7"},
		TrialDir:   out,
	}
	sum, err := Run(context.Background(), spec, &collect{})
	if err != nil || sum.Restarts != 2 {
		t.Fatalf("Run: %+v, %v", sum, err)
	}
	data, _ := os.ReadFile(filepath.Join(out, "starts"))
	want := fmt.Sprintf("0 3 7 bar %[1]s\n1 3 7 bar %[1]s\n2 3 7 bar %[1]s\n", out)
	if string(data) != want {
		t.Errorf("starts:\n%s\nwant:\n%s", data, want)
	}
	spec.Env, spec.Failure.MaxFailures = nil, 0
	os.Remove(filepath.Join(out, "starts"))
	t.Setenv("OMP_NUM_THREADS", "")
	os.Unsetenv("OMP_NUM_THREADS")
	spec.Command = []string{"sh", "-c", `echo "$OMP_NUM_THREADS" > "$0/omp"`, out}
	if _, err := Run(context.Background(), spec, &collect{}); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(out, "omp")); string(data) != "2\n" {
		t.Errorf("OMP_NUM_THREADS with 2.5 CPUs per worker: %q, want 2", data)
	}
}

func TestOutputCountsAsHeartbeat(t *testing.T) {
	// Prints a line every 0.1 s for three seconds, then reports once. On a
	// loaded machine the watchdog leaves late ticks out of the silence
	// (see watchdog), so the silence lasts well beyond the timeout.
	script := `i=0; while [ $i -lt 30 ]; do echo "batch $i"; sleep 0.1; i=$((i + 1)); done; echo '@gotune {"ok": 1}'`
	for _, output := range []bool{false, true} {
		spec := Spec{
			Experiment: uniqueName(t), Trial: 1,
			Command:    []string{"sh", "-c", script},
			Failure:    FailureConfig{HeartbeatTimeout: 0.4, OutputHeartbeat: output},
			ScratchDir: filepath.Join(t.TempDir(), "scratch"),
			LogDir:     t.TempDir(),
		}
		sink := &collect{}
		_, err := Run(context.Background(), spec, sink)
		if output && (err != nil || len(sink.results) != 1) {
			t.Errorf("output_heartbeat: %v, %d reports", err, len(sink.results))
		}
		if !output && (err == nil || !strings.Contains(err.Error(), "hung")) {
			t.Errorf("without output_heartbeat: %v, want the group hung", err)
		}
	}
}
