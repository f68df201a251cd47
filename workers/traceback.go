package workers

import (
	"regexp"
	"strings"
)

// Traceback is the last Python traceback in a process's log: from its
// "Traceback (most recent call last):" line to its exception line.
type Traceback struct {
	// Lines are the traceback's first line and, at most MaxTracebackLines
	// in all, its last ones: the frames nearest the raise, and the
	// exception line last once it was written.
	Lines []string
	// Omitted is how many frame lines were left out after the first line.
	Omitted int
	// LinesAfter is how many log lines the process wrote after the
	// traceback's last line.
	LinesAfter int
}

// MaxTracebackLines bounds Traceback.Lines.
const MaxTracebackLines = 30

// maxTracebackLine bounds each line a traceback keeps, in bytes: an error
// quotes less of it.
const maxTracebackLine = 4096

// pythonTracebackStart is the line Python starts a traceback with.
const pythonTracebackStart = "Traceback (most recent call last):"

// exceptionLine matches the line that ends a Python traceback: the
// exception's (dotted) class name, alone or before a colon.
var exceptionLine = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*(:|$)`)

// traceback follows a process's log lines for its last Python traceback.
// A traceback is its first line, indented frame lines, and the exception
// line. Lines of another writer (stdout and stderr are read apart) can fall
// in between: whatever precedes the first line ("[rank0]: " from torchrun)
// must precede the others, and a line that is neither indented nor an
// exception line is skipped.
type traceback struct {
	lines   []string
	omitted int
	prefix  string
	open    bool // the exception line has not come yet
	end     int  // log lines written up to the traceback's last line
}

// follow takes the log's n-th line.
func (t *traceback) follow(line string, n int) {
	if len(line) > maxTracebackLine {
		line = line[:maxTracebackLine]
	}
	if i := strings.Index(line, pythonTracebackStart); i >= 0 {
		*t = traceback{lines: []string{line}, prefix: line[:i], open: true, end: n}
		return
	}
	if !t.open {
		return
	}
	body, ok := strings.CutPrefix(line, t.prefix)
	indented := strings.HasPrefix(body, " ") || strings.HasPrefix(body, "\t")
	if !ok || strings.TrimSpace(body) == "" || !indented && !exceptionLine.MatchString(body) {
		return
	}
	if len(t.lines) == MaxTracebackLines {
		t.lines = append(t.lines[:1], t.lines[2:]...)
		t.omitted++
	}
	t.lines = append(t.lines, line)
	t.end = n
	t.open = indented
}
