package workers

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestTracebackFollowsTheLog(t *testing.T) {
	frames := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf(`  File "train.py", line %d, in f%d`, i+1, i), "    f()")
		}
		return out
	}
	join := func(parts ...[]string) []string { return slices.Concat(parts...) }
	tests := []struct {
		name    string
		log     []string
		want    []string // nil: no traceback
		omitted int
		after   int
	}{
		{"none", []string{"step 1", "ValueError: not after a traceback"}, nil, 0, 0},
		{"followed by output",
			join([]string{"step 1"}, []string{"Traceback (most recent call last):"}, frames(1), []string{"ValueError: boom", "step 2", "step 3"}),
			join([]string{"Traceback (most recent call last):"}, frames(1), []string{"ValueError: boom"}), 0, 2},
		{"the last of a chain",
			[]string{"Traceback (most recent call last):", "  a", "KeyError: 'x'", "", "During handling of the above exception, another exception occurred:", "",
				"Traceback (most recent call last):", "  b", "torch.distributed.DistBackendError: NCCL error", "Last error:"},
			[]string{"Traceback (most recent call last):", "  b", "torch.distributed.DistBackendError: NCCL error"}, 0, 1},
		{"other output in between",
			[]string{"Traceback (most recent call last):", "  a", "step 7: loss 2.5", "", "  b", "KeyboardInterrupt"},
			[]string{"Traceback (most recent call last):", "  a", "  b", "KeyboardInterrupt"}, 0, 0},
		{"torchrun's prefix",
			[]string{"[rank1]: Traceback (most recent call last):", "[rank0]: step 3", "[rank1]:   a", "[rank1]: RuntimeError: x", "[rank0]: step 4"},
			[]string{"[rank1]: Traceback (most recent call last):", "[rank1]:   a", "[rank1]: RuntimeError: x"}, 0, 1},
		{"still being written", []string{"Traceback (most recent call last):", "  a"},
			[]string{"Traceback (most recent call last):", "  a"}, 0, 0},
		{"a long one keeps its first and last lines",
			join([]string{"Traceback (most recent call last):"}, frames(40), []string{"RecursionError: too deep"}),
			join([]string{"Traceback (most recent call last):"}, frames(40)[80-(MaxTracebackLines-2):], []string{"RecursionError: too deep"}),
			80 - (MaxTracebackLines - 2), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &processLog{}
			for _, line := range tt.log {
				l.write([]byte(line), true)
			}
			tb := l.traceback()
			if tt.want == nil {
				if tb != nil {
					t.Fatalf("got %+v, want none", tb)
				}
				return
			}
			if tb == nil {
				t.Fatal("got no traceback")
			}
			if !slices.Equal(tb.Lines, tt.want) || tb.Omitted != tt.omitted || tb.LinesAfter != tt.after {
				t.Errorf("got %q, %d left out, %d lines after;\nwant %q, %d, %d", tb.Lines, tb.Omitted, tb.LinesAfter, tt.want, tt.omitted, tt.after)
			}
		})
	}
}

// FuzzTraceback: whatever a process writes, the traceback kept is bounded,
// starts with its first line, and holds only lines of the log.
func FuzzTraceback(f *testing.F) {
	f.Add("step 1\nTraceback (most recent call last):\n  a\nValueError: x\nstep 2")
	f.Add("[r]: Traceback (most recent call last):\n[r]:   a\nb\n[r]: E")
	f.Fuzz(func(t *testing.T, log string) {
		lines := strings.Split(log, "\n")
		l := &processLog{}
		for _, line := range lines {
			l.write([]byte(line), true)
		}
		tb := l.traceback()
		if tb == nil {
			return
		}
		if len(tb.Lines) == 0 || len(tb.Lines) > MaxTracebackLines || !strings.Contains(tb.Lines[0], pythonTracebackStart) {
			t.Fatalf("traceback %q", tb.Lines)
		}
		if tb.LinesAfter < 0 || tb.LinesAfter >= len(lines) || tb.Omitted < 0 {
			t.Fatalf("%d lines after, %d left out, of %d", tb.LinesAfter, tb.Omitted, len(lines))
		}
		for _, line := range tb.Lines {
			if len(line) > maxTracebackLine || !strings.Contains(log, line) {
				t.Fatalf("line %q is not the log's", line)
			}
		}
	})
}
