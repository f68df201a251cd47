package workers

import (
	"strings"
	"testing"
)

func TestPrintable(t *testing.T) {
	tests := []struct {
		name, in  string
		max       int
		keepLines bool
		want      string
	}{
		{"plain", "node-1 ok", 64, false, "node-1 ok"},
		{"escape sequence", "\x1b[2J\x1b[31mred", 64, false, `\x1b[2J\x1b[31mred`},
		{"newline escaped", "a\nb\tc", 64, false, `a\nb\tc`},
		{"newline kept", "a\nb\tc\r", 64, true, "a\nb\tc\\r"},
		{"printable already", `a\x1b\n`, 64, false, `a\x1b\n`},
		{"invalid UTF-8", "a\xffb", 64, false, `a\xffb`},
		{"unicode kept", "nœud-é", 64, false, "nœud-é"},
		{"invisible rune", "a\u200bb", 64, false, `a\u200bb`},
		{"cut", strings.Repeat("x", 100), 10, false, "xxxxxxxxxx…(90 more bytes)"},
		{"cut before an escape", "abc\x1b", 5, false, "abc…(1 more bytes)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Printable(tt.in, tt.max, tt.keepLines); got != tt.want {
				t.Errorf("Printable(%q, %d, %v) = %q, want %q", tt.in, tt.max, tt.keepLines, got, tt.want)
			}
		})
	}
}

// TestHostileNodeName has an agent join under a name of escape sequences,
// newlines and 10,000 bytes: the head names the node, and logs it,
// printable and cut to MaxNodeName bytes.
func TestHostileNodeName(t *testing.T) {
	h, logs := testHead(t, HeadConfig{})
	name := "\x1b[2J\x1b[31mevil\nfake log line " + strings.Repeat("a", 10000)
	testAgent(t, h, AgentConfig{Node: Node{Name: name, CPUs: 1}})
	waitAgents(t, h, 1)
	got := h.Manager().Nodes()[0].Name
	if want := Printable(name, MaxNodeName, false); got != want || len(got) > MaxNodeName+len("…(10000 more bytes)") {
		t.Fatalf("node name %q, want %q", got, want)
	}
	logs.mu.Lock()
	for _, line := range logs.lines {
		if strings.ContainsAny(line, "\x1b\n") || len(line) > MaxLogLine+40 {
			t.Errorf("the head logged a line with control characters or %d bytes: %q", len(line), line)
		}
	}
	logs.mu.Unlock()
	if !logs.has(`agent \x1b[2J\x1b[31mevil\nfake log line aaa`) {
		t.Errorf("no join logged with the name escaped: %q", logs.lines)
	}
}
