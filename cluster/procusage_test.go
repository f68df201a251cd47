package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/gotune/gotune/workers"
)

// A worker's usage counts the processes it started, in its process group,
// here and on an agent's node alike.
func TestProcessUsage(t *testing.T) {
	// The shell waits while its child spins.
	script := `while :; do :; done & wait`
	local := func(t *testing.T) *workers.Process {
		p, err := workers.StartProcess(sh(script), nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	remote := func(t *testing.T) *workers.Process {
		h, _ := testHead(t, HeadConfig{})
		testAgent(t, h, AgentConfig{Node: workers.Node{Name: "a"}, Host: "127.0.0.2"})
		waitAgents(t, h, 1)
		p, err := h.Launcher(0).Start(sh(script), nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for name, start := range map[string]func(*testing.T) *workers.Process{"local": local, "agent": remote} {
		t.Run(name, func(t *testing.T) {
			p := start(t)
			defer func() { p.Kill(); waitDone(t, p) }()
			ctx := context.Background()
			var first workers.ProcUsage
			until(t, "the child starts", func() bool {
				u, err := p.Usage(ctx)
				if err != nil {
					t.Fatal(err)
				}
				first = u
				return u.Processes >= 2
			})
			if first.PID != p.Pid() || first.RSS <= 0 {
				t.Errorf("usage %+v of pid %d", first, p.Pid())
			}
			until(t, "CPU time grows", func() bool {
				time.Sleep(50 * time.Millisecond)
				u, err := p.Usage(ctx)
				return err == nil && u.CPUSeconds > first.CPUSeconds
			})
			p.Kill()
			waitDone(t, p)
			if _, err := p.Usage(ctx); err == nil {
				t.Error("usage of an ended process: want an error")
			}
		})
	}
}
