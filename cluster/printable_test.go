package cluster

import (
	"strings"
	"testing"

	"github.com/gotune/gotune/workers"
)

// TestHostileNodeName has an agent join under a name of escape sequences,
// newlines and 10,000 bytes: the head names the node, and logs it,
// printable and cut to MaxNodeName bytes.
func TestHostileNodeName(t *testing.T) {
	h, logs := testHead(t, HeadConfig{})
	name := "\x1b[2J\x1b[31mevil\nfake log line " + strings.Repeat("a", 10000)
	testAgent(t, h, AgentConfig{Node: workers.Node{Name: name, CPUs: 1}})
	waitAgents(t, h, 1)
	got := h.Manager().Nodes()[0].Name
	if want := workers.Printable(name, workers.MaxNodeName, false); got != want || len(got) > workers.MaxNodeName+len("…(10000 more bytes)") {
		t.Fatalf("node name %q, want %q", got, want)
	}
	logs.mu.Lock()
	for _, line := range logs.lines {
		if strings.ContainsAny(line, "\x1b\n") || len(line) > workers.MaxLogLine+40 {
			t.Errorf("the head logged a line with control characters or %d bytes: %q", len(line), line)
		}
	}
	logs.mu.Unlock()
	if !logs.has(`agent \x1b[2J\x1b[31mevil\nfake log line aaa`) {
		t.Errorf("no join logged with the name escaped: %q", logs.lines)
	}
}
