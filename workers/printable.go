package workers

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds on the strings that peers supply (node names, agents' error
// messages, workers' output) where gotune logs or prints them.
const (
	// MaxNodeName is the longest node name an agent may join under, in
	// bytes; a longer one is cut.
	MaxNodeName = 64
	// MaxLogLine is the longest line the head and agents log, in bytes.
	MaxLogLine = 1000
	// MaxPeerError is the longest error message kept from an agent.
	MaxPeerError = 2000
)

// Printable returns s safe to print on a terminal or in a log: control
// characters (escape sequences included), other non-printing runes and
// invalid UTF-8 are written as Go escapes (\x1b, \u200b), newlines and
// tabs too unless keepLines, and the result is cut to at most max bytes,
// ending in "…" and how much was cut. A backslash stays as it is, so that
// a string already made printable comes out the same.
func Printable(s string, max int, keepLines bool) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		var piece string
		switch {
		case r == utf8.RuneError && size == 1:
			piece = fmt.Sprintf(`\x%02x`, s[i])
		case keepLines && (r == '\n' || r == '\t'):
			piece = string(r)
		case r == ' ' || unicode.IsPrint(r):
			piece = s[i : i+size]
		default:
			q := strconv.QuoteRune(r) // 'x' with the rune escaped
			piece = q[1 : len(q)-1]
		}
		if b.Len()+len(piece) > max {
			return b.String() + fmt.Sprintf("…(%d more bytes)", len(s)-i)
		}
		b.WriteString(piece)
		i += size
	}
	return b.String()
}
