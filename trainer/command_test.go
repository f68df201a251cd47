package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gotune/gotune/workers"
)

// commandSpec runs the test binary's counter command with n workers.
func commandSpec(t *testing.T, n int, args ...string) Spec {
	return Spec{
		Experiment: uniqueName(t), Trial: 1, Seed: 5,
		Command:     append([]string{os.Args[0], testCommandArg}, args...),
		Scaling:     ScalingConfig{NumWorkers: n},
		KillTimeout: 2 * time.Second,
		ScratchDir:  filepath.Join(t.TempDir(), "scratch"),
		LogDir:      filepath.Join(t.TempDir(), "logs"),
	}
}

func TestCommandEnvironmentAndPlaceholders(t *testing.T) {
	out := t.TempDir()
	spec := Spec{
		Experiment: uniqueName(t), Trial: 4, Seed: 11,
		Config: map[string]any{"lr": 0.001, "hidden": int64(64), "act": "relu", "out": out},
		Command: []string{"sh", "-c", `env > "$1/env_$GOTUNE_WORLD_RANK"; echo "$2" > "$1/args"; echo '@gotune {"ok": 1}'`,
			"sh", "{out}", "--lr={lr} --hidden={hidden} {act} {{lr}} {\"json\": 1}"},
		Scaling:    ScalingConfig{NumWorkers: 2},
		ScratchDir: filepath.Join(t.TempDir(), "scratch"),
	}
	t.Setenv("CUDA_VISIBLE_DEVICES", "0,1") // the contract's value replaces the caller's
	t.Setenv("GOTUNE_RESUME_DIR", "/stale")
	sink := &collect{}
	if _, err := Run(context.Background(), spec, sink); err != nil {
		t.Fatal(err)
	}
	if len(sink.results) != 1 || sink.results[0].Metrics["ok"] != 1 {
		t.Errorf("results %+v", sink.results)
	}
	args, _ := os.ReadFile(filepath.Join(out, "args"))
	if got, want := strings.TrimSpace(string(args)), `--lr=0.001 --hidden=64 relu {lr} {"json": 1}`; got != want {
		t.Errorf("expanded argument %q, want %q", got, want)
	}
	var port string
	for rank := range 2 {
		data, err := os.ReadFile(filepath.Join(out, fmt.Sprintf("env_%d", rank)))
		if err != nil {
			t.Fatal(err)
		}
		env := map[string]string{}
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				env[k] = v
			}
		}
		want := map[string]string{
			"GOTUNE_EXPERIMENT": spec.Experiment, "GOTUNE_TRIAL_ID": "4",
			"GOTUNE_WORLD_SIZE": "2", "GOTUNE_WORLD_RANK": fmt.Sprint(rank), "GOTUNE_LOCAL_RANK": fmt.Sprint(rank),
			"GOTUNE_LOCAL_WORLD_SIZE": "2", "GOTUNE_NODE_RANK": "0", "GOTUNE_SEED": "11",
			"RANK": fmt.Sprint(rank), "WORLD_SIZE": "2", "LOCAL_RANK": fmt.Sprint(rank), "LOCAL_WORLD_SIZE": "2",
			"MASTER_ADDR": "127.0.0.1", "CUDA_VISIBLE_DEVICES": "",
			"TORCHELASTIC_RUN_ID": spec.Experiment + "-trial-4", "TORCHELASTIC_RESTART_COUNT": "0",
			"TORCHELASTIC_MAX_RESTARTS": "0", "TORCHELASTIC_USE_AGENT_STORE": "False",
			"GROUP_WORLD_SIZE": "1", "ROLE_NAME": "default", "ROLE_RANK": fmt.Sprint(rank), "ROLE_WORLD_SIZE": "2",
		}
		for k, v := range want {
			if got, ok := env[k]; !ok || got != v {
				t.Errorf("rank %d: %s=%q (set: %v), want %q", rank, k, got, ok, v)
			}
		}
		if _, ok := env["GOTUNE_RESUME_DIR"]; ok {
			t.Errorf("rank %d: GOTUNE_RESUME_DIR is set on a fresh start", rank)
		}
		var config map[string]any
		if err := json.Unmarshal([]byte(env["GOTUNE_CONFIG"]), &config); err != nil || config["lr"] != 0.001 || config["act"] != "relu" {
			t.Errorf("rank %d: GOTUNE_CONFIG %s (%v)", rank, env["GOTUNE_CONFIG"], err)
		}
		if dir := env["GOTUNE_CHECKPOINT_DIR"]; !strings.HasPrefix(dir, spec.ScratchDir) {
			t.Errorf("rank %d: GOTUNE_CHECKPOINT_DIR %q is not in the scratch folder", rank, dir)
		}
		if rank == 0 {
			port = env["MASTER_PORT"]
		} else if env["MASTER_PORT"] != port || port == "" || port == "0" {
			t.Errorf("MASTER_PORT %q and %q", port, env["MASTER_PORT"])
		}
	}
}

func TestCommandKilledWorkerResumes(t *testing.T) {
	for _, shards := range []bool{false, true} {
		t.Run(fmt.Sprintf("shards=%v", shards), func(t *testing.T) {
			pids := t.TempDir()
			args := []string{"--steps=8", "--ckpt-every=2", "--sleep-ms=20", fmt.Sprintf("--shards=%v", shards)}
			spec := commandSpec(t, 2, append(args, "--pid-dir="+pids, "--lockstep")...)
			spec.Failure.MaxFailures = 1
			store := &testStore{dir: t.TempDir()}
			spec.Checkpoints = store
			killed := false
			sink := &collect{on: func(r Result) Action {
				if r.Iteration == 3 && !killed {
					killed = true
					killWorker(t, filepath.Join(pids, "rank1"))
				}
				return Continue
			}}
			sum, err := Run(context.Background(), spec, sink)
			if err != nil || sum.Restarts != 1 {
				t.Fatalf("Run: %+v, %v", sum, err)
			}
			if r := sink.restarts(); len(r) != 1 || !strings.Contains(r[0].Cause, "worker 1") || !strings.Contains(r[0].Cause, "killed by signal 9") {
				t.Errorf("restarts %+v, want one for worker 1 killed by signal 9", r)
			}
			undisturbed := &collect{}
			if _, err := Run(context.Background(), commandSpec(t, 2, args...), undisturbed); err != nil {
				t.Fatal(err)
			}
			if sink.series() != undisturbed.series() {
				t.Errorf("after a kill:  %s\nundisturbed:   %s", sink.series(), undisturbed.series())
			}
			// Every committed checkpoint holds the files of every rank
			// that handed any over.
			want := []string{"state"}
			if shards {
				want = []string{"state_0", "state_1"}
			}
			for _, it := range store.its {
				entries, _ := os.ReadDir(filepath.Join(store.dir, fmt.Sprintf("checkpoint_%06d", it)))
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				if !slices.Equal(names, want) {
					t.Errorf("checkpoint %d holds %v, want %v", it, names, want)
				}
			}
			if left := leftovers(t, spec.Experiment); len(left) > 0 {
				t.Errorf("processes left behind: %v", left)
			}
		})
	}
}

func TestCommandHungWorkerIsRestarted(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "hung-once")
	spec := commandSpec(t, 2, "--steps=6", "--ckpt-every=2", "--hang-at=3", "--hang-marker="+marker)
	// Longer than a worker takes to start on a loaded machine.
	spec.Failure = FailureConfig{MaxFailures: 1, HeartbeatTimeout: 3}
	spec.Checkpoints = &testStore{dir: t.TempDir()}
	sink := &collect{}
	sum, err := Run(context.Background(), spec, sink)
	if r := sink.restarts(); err != nil || sum.Restarts != 1 || len(r) != 1 || !strings.Contains(r[0].Cause, "hung") {
		t.Fatalf("Run: %+v, %v, events %+v", sum, err, sink.events)
	}
	if got := sink.series(); strings.Count(got, ":") != 6 {
		t.Errorf("results %s, want 6", got)
	}
	if left := leftovers(t, spec.Experiment); len(left) > 0 {
		t.Errorf("processes left behind: %v", left)
	}
}

func TestCommandMalformedLinesAreWarnings(t *testing.T) {
	spec := commandSpec(t, 1, "--steps=3", "--malformed")
	sink := &collect{}
	if _, err := Run(context.Background(), spec, sink); err != nil {
		t.Fatal(err)
	}
	if len(sink.results) != 3 {
		t.Errorf("got %d results, want 3", len(sink.results))
	}
	log, err := os.ReadFile(filepath.Join(spec.LogDir, "worker_0.log"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(log), "gotune: warning: ignored a malformed report line"); n != 6 {
		t.Errorf("%d warnings in the log, want 6:\n%s", n, log)
	}
	if !strings.Contains(string(log), "a log line") || strings.Contains(string(log), `"step"`) {
		t.Errorf("log:\n%s", log)
	}
}

func TestCommandFailures(t *testing.T) {
	tests := []struct {
		name     string
		command  []string
		restarts int
		want     []string
	}{
		{"not found", []string{"gotune-no-such-program", "--lr=1"}, 0,
			[]string{"launch gotune-no-such-program", "executable file not found"}},
		{"exits at once", []string{"sh", "-c", "echo 'cannot parse --lr' >&2; exit 2"}, 1,
			[]string{"exited with status 2", "cannot parse --lr"}},
		{"exits midway", []string{os.Args[0], testCommandArg, "--steps=5", "--exit-at=3"}, 1,
			[]string{"exited with status 4"}},
		// Failures no restart can fix, as Python writes them.
		{"a module it cannot import", pythonFailure(t, "Traceback (most recent call last):", `  File "train.py", line 2, in <module>`,
			"ModuleNotFoundError: No module named 'matplotlib'", "closing the loader"), 0,
			[]string{"ModuleNotFoundError", "not restarted: a ModuleNotFoundError fails every attempt alike"}},
		{"torchrun's prefix", pythonFailure(t, "[rank0]: Traceback (most recent call last):", `[rank0]:   File "train.py", line 9, in <module>`,
			"[rank0]: ImportError: cannot import name 'ddp' from 'torch.nn'"), 0,
			[]string{"not restarted: an ImportError"}},
		{"a script that does not compile", pythonFailure(t, `  File "train.py", line 3`, "    def f(:", "          ^", "SyntaxError: invalid syntax"), 0,
			[]string{"SyntaxError: invalid syntax", "not restarted: a SyntaxError"}},
		{"another exception", pythonFailure(t, "Traceback (most recent call last):", `  File "train.py", line 20, in <module>`,
			"RuntimeError: DataLoader worker (pid 123) is killed by signal: Killed."), 1,
			[]string{"RuntimeError: DataLoader worker"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := commandSpec(t, 2)
			spec.Command = tt.command
			spec.Failure.MaxFailures = 1
			sink := &collect{}
			sum, err := Run(context.Background(), spec, sink)
			for _, w := range tt.want {
				if !errorContains(err, w) {
					t.Errorf("error %v lacks %q", err, w)
				}
			}
			if sum.Restarts != tt.restarts {
				t.Errorf("restarts %d, want %d", sum.Restarts, tt.restarts)
			}
			if left := leftovers(t, spec.Experiment); len(left) > 0 {
				t.Errorf("processes left behind: %v", left)
			}
		})
	}
}

// pythonFailure is a command that writes lines to stderr, as a failing
// Python script does, and exits with status 1.
func pythonFailure(t *testing.T, lines ...string) []string {
	out := filepath.Join(t.TempDir(), "stderr.txt")
	if err := os.WriteFile(out, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"sh", "-c", `cat "$0" >&2; exit 1`, out}
}

func TestCommandStopLeavesNoProcess(t *testing.T) {
	spec := commandSpec(t, 3, "--steps=1000", "--sleep-ms=5", "--background")
	sink := &collect{on: func(r Result) Action {
		if r.Iteration == 2 {
			return Stop
		}
		return Continue
	}}
	sum, err := Run(context.Background(), spec, sink)
	if err != nil || sum.Outcome != Stopped || len(sink.results) != 2 {
		t.Fatalf("Run: %+v, %v, %d results", sum, err, len(sink.results))
	}
	if left := leftovers(t, spec.Experiment); len(left) > 0 {
		t.Errorf("processes left behind (the workers' children included): %v", left)
	}
}

func TestCommandCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	spec := commandSpec(t, 2, "--steps=1000", "--sleep-ms=5")
	sink := &collect{on: func(r Result) Action {
		if r.Iteration == 2 {
			cancel()
		}
		return Continue
	}}
	if _, err := Run(ctx, spec, sink); err != context.Canceled {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if left := leftovers(t, spec.Experiment); len(left) > 0 {
		t.Errorf("processes left behind: %v", left)
	}
}

// TestErrorFileFolderWhileRunning: torch's error file can be written while
// a worker runs (its folder exists), and a group whose workers wrote
// nothing leaves no log folder behind.
func TestErrorFileFolderWhileRunning(t *testing.T) {
	spec := Spec{
		Experiment: uniqueName(t), Trial: 1,
		Command:    []string{"sh", "-c", `test -d "$(dirname "$TORCHELASTIC_ERROR_FILE")" && echo '@gotune {"ok": 1}'`},
		Scaling:    ScalingConfig{NumWorkers: 1},
		ScratchDir: filepath.Join(t.TempDir(), "scratch"),
		LogDir:     filepath.Join(t.TempDir(), "logs"),
	}
	sink := &collect{}
	if _, err := Run(context.Background(), spec, sink); err != nil {
		t.Fatal(err)
	}
	if len(sink.results) != 1 {
		t.Errorf("results %+v: the error file's folder was missing", sink.results)
	}
	if _, err := os.Stat(spec.LogDir); !os.IsNotExist(err) {
		t.Errorf("log folder after the run: %v, want none", err)
	}
}

// TestFirstCheckpointWaitsForRanksElsewhere: rank 0's first checkpoint
// waits for the shard of a rank that has handed over nothing yet until
// rank 0 moves on, for a rank on this node, and until firstRemoteShardWait
// passes, for a rank on another node, whose lines come through its agent
// and may arrive after rank 0's next one though printed before it.
func TestFirstCheckpointWaitsForRanksElsewhere(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		remote, moved, timeout bool
		ready                  bool
	}{
		{"this node, rank 0 not moved on", false, false, false, false},
		{"this node, rank 0 moved on", false, true, false, true},
		{"another node, rank 0 moved on", true, true, false, false},
		{"another node, the wait over", true, true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &attempt{slots: make([]Slot, 2)}
			if tc.remote {
				a.slots[1].Launcher = workers.LocalLauncher{Address: "127.0.0.2"}
			}
			c := &collator{a: a, n: 2, shards: []map[int]string{{}, {}}, contributor: make([]bool, 2), exitedRank: make([]bool, 2),
				movedOn: tc.moved, firstWaitOver: tc.timeout}
			if got := c.ready(&lineReport{ordinal: 1, dir: "ckpt"}); got != tc.ready {
				t.Errorf("ready = %v, want %v", got, tc.ready)
			}
		})
	}
}

// TestLateShardIsTold: a rank that hands over its first shard after rank
// 0's checkpoint went without it (past firstShardWait) has it dropped, and
// the group says so in a report_refused event, not only in the rank's
// log; its later shards join their checkpoints.
func TestLateShardIsTold(t *testing.T) {
	spec := commandSpec(t, 2)
	spec.Command = []string{"sh", "-c", `
hand() { d=$(mktemp -d "$GOTUNE_CHECKPOINT_DIR/c-XXXXXX"); echo "$1" > "$d/state_$RANK"; echo "@gotune {$2\"checkpoint\": \"$d\"}"; }
if [ "$RANK" = 0 ]; then
	hand 1 '"loss": 1, '; sleep 1.5; hand 2 '"loss": 0.5, '; sleep 1
else
	sleep 1; hand 1 ''; sleep 0.3; hand 2 ''
fi`}
	store := &testStore{dir: t.TempDir()}
	spec.Checkpoints = store
	sink := runCollecting(t, spec)
	var told []string
	for _, e := range sink.events {
		if e.Kind == EventReportRefused {
			told = append(told, e.Cause)
		}
	}
	if len(told) != 1 || !strings.Contains(told[0], "worker 1: dropped checkpoint") || !strings.Contains(told[0], "its checkpoint 1") {
		t.Errorf("report_refused events %q, want one for worker 1's late first shard", told)
	}
	for it, want := range map[int]string{1: "state_0", 2: "state_0 state_1"} {
		entries, _ := os.ReadDir(filepath.Join(store.dir, fmt.Sprintf("checkpoint_%06d", it)))
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		if got := strings.Join(names, " "); got != want {
			t.Errorf("checkpoint %d holds %q, want %q", it, got, want)
		}
	}
}
