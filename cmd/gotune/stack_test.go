package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/tuner"
	"github.com/gotune/gotune/workers"
)

// TestStackCommand runs a sweep of a Python command in another process and
// takes its running trial's stacks with `gotune stack`, as a user would.
func TestStackCommand(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	dir := t.TempDir()
	helper, _ := filepath.Abs(filepath.Join(repoRoot, "python"))
	release := filepath.Join(dir, "release")
	os.WriteFile(filepath.Join(dir, "wait.py"), []byte(`import os, time
import gotune
def cli_waits_here():
    while not os.path.exists(os.environ["RELEASE"]):
        time.sleep(0.05)
cli_waits_here()
gotune.report(loss=1.0)
`), 0o644)
	sweep := writeSweep(t, fmt.Sprintf(`name = "stacks"
[objective]
metric = "loss"
mode = "min"
[search]
num_samples = 1
[search.space]
x = { choice = [1] }
[trainer]
command = ["python3", %q]
[trainer.env]
PYTHONPATH = %q
RELEASE = %q
[trainer.scaling]
num_workers = 2
cpus_per_worker = 0.01
`, filepath.Join(dir, "wait.py"), helper, release))
	db := filepath.Join(dir, "gotune.db")
	p := startGotune(t, "run", sweep, "--db", db)

	// Until both interpreters have started and imported gotune.py.
	var out string
	deadline := time.Now().Add(hangBound)
	for {
		_, js, _ := runCLI("stack", "stacks", "1", "--db", db, "--json")
		var reply tuner.StacksReply
		json.Unmarshal([]byte(js), &reply)
		ready := len(reply.Stacks) == 2
		for _, s := range reply.Stacks {
			ready = ready && s.Method == workers.StackDumped && strings.Contains(s.Text, "in cli_waits_here")
		}
		if ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no dumped stacks of both workers; last output:\n%s\ngotune run:\n%s", js, p.text())
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, out, _ = runCLI("stack", "stacks", "1", "--db", db)
	for rank := range 2 {
		if !regexp.MustCompile(fmt.Sprintf(`=== trial 1, rank %d \(\S+, pid \d+\), by dump\n.*\n.*line 5 in cli_waits_here`, rank)).MatchString(out) {
			t.Errorf("no stack of rank %d:\n%s", rank, out)
		}
	}
	code, one, stderr := runCLI("stack", "stacks", "1", "--rank", "1", "--db", db, "--json")
	if code != 0 || !strings.Contains(one, `"rank": 1`) || strings.Contains(one, `"rank": 0`) {
		t.Errorf("--rank 1 --json: exit %d, %s%s", code, one, stderr)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"stacks", "x"}, 2, "want a trial number"},
		{[]string{"stacks", "7"}, 2, "trial 7"},
		{[]string{"nope", "1"}, 2, "nope"},
		{[]string{"stacks", "1", "--rank", "4"}, 2, "no rank 4"},
	} {
		code, _, stderr := runCLI(append(append([]string{"stack"}, tc.args...), "--db", db)...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("stack %v: exit %d, stderr %q; want %d and %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
	os.WriteFile(release, nil, 0o644)
	if err := p.wait(t); err != nil {
		t.Fatalf("gotune run: %v\n%s", err, p.text())
	}
	code, _, stderr = runCLI("stack", "stacks", "1", "--db", db)
	if code != 1 || !strings.Contains(stderr, "not running") {
		t.Errorf("after the run: exit %d, stderr %q", code, stderr)
	}
}

func TestEventDataCountsStacks(t *testing.T) {
	for _, tc := range []struct{ data, want string }{
		{`{"attempt":1,"stacks":[{"rank":0,"text":"long"},{"rank":1,"text":"long"}],"workers":2}`,
			`{"attempt":1,"stacks":"2 stacks: see gotune show --json","workers":2}`},
		{`{"attempt":1,"workers":2}`, `{"attempt":1,"workers":2}`},
		{`[1,2]`, `[1,2]`},
	} {
		if got := eventData([]byte(tc.data)); got != tc.want {
			t.Errorf("eventData(%s) = %s, want %s", tc.data, got, tc.want)
		}
	}
}

func TestDescribeHungEvent(t *testing.T) {
	e := trainer.Event{Kind: trainer.EventHung, Cause: "hung: no report from any worker for 3s (failure.heartbeat_timeout)",
		Workers: 2, Stacks: make([]trainer.WorkerStack, 2)}
	want := "hung: no report from any worker for 3s (failure.heartbeat_timeout); the stacks of its 2 workers are in its hung event (gotune show --json)"
	if got := describeEvent(e); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
