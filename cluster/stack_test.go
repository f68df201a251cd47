package cluster

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gotune/gotune/workers"
)

// A process on an agent's node has its stack taken there, and the scratch
// folder the agent gave it in place of the head's is where its dump goes.
func TestAgentProcessStack(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	helper, _ := filepath.Abs("../python")
	h, _ := testHead(t, HeadConfig{})
	testAgent(t, h, AgentConfig{Node: workers.Node{Name: "a"}, Host: "127.0.0.2"})
	waitAgents(t, h, 1)
	scratch := t.TempDir()
	script := filepath.Join(t.TempDir(), "wait.py")
	os.WriteFile(script, []byte("import gotune, time\ndef remote_wait():\n    print('ready', flush=True)\n    time.sleep(60)\nremote_wait()\n"), 0o644)
	spec := workers.LaunchSpec{Args: []string{python, script}, Scratch: scratch,
		Env: append(os.Environ(), "PYTHONPATH="+helper, "GOTUNE_TRIAL_ID=1", "GOTUNE_CHECKPOINT_DIR="+scratch)}
	p, err := h.Launcher(0).Start(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	until(t, "the script starts", func() bool {
		return slices.ContainsFunc(p.Tail(), func(l string) bool { return strings.Contains(l, "ready") })
	})
	st, err := p.Stack(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Method != workers.StackDumped || !strings.Contains(st.Text, "remote_wait") || st.PID != p.Pid() {
		t.Errorf("got %s stack of pid %d (want %d):\n%s", st.Method, st.PID, p.Pid(), st.Text)
	}
	if _, err := os.Stat(workers.StackFile(scratch, p.Pid())); err == nil {
		t.Error("the dump went to the head's scratch folder, not the node's own")
	}
	p.Kill()
	waitDone(t, p)
	if _, err := p.Stack(context.Background()); err == nil {
		t.Error("a stack of an ended process: want an error")
	}
}
