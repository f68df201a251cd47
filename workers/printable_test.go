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
