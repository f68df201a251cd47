package trainer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ReportPrefix starts a command worker's report line on stdout:
//
//	@gotune {"epoch": 3, "val_loss": 0.41, "checkpoint": "/path/to/dir"}
const ReportPrefix = "@gotune"

// ParseReportLine parses what follows ReportPrefix on a report line: one
// JSON object whose values are numbers, except "checkpoint", which is a
// folder path (or null for none). An empty object is a heartbeat: it only
// shows the worker is alive.
//
// A diverging trial's metric may be NaN or infinite, which JSON cannot
// write: such a value may be given bare, as Python's json module and
// JavaScript write it (NaN, Infinity, -Infinity), or as a string that
// strconv.ParseFloat reads as NaN or an infinity ("nan", "inf", "-Infinity",
// in any case). A finite number must be a JSON number: one too large for a
// float64 (1e999) is an error, not an infinity.
func ParseReportLine(s string) (metrics map[string]float64, checkpoint string, err error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, "", errors.New("no JSON object after @gotune")
	}
	dec := json.NewDecoder(strings.NewReader(quoteNonFinite(s)))
	dec.UseNumber()
	var raw map[string]json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return nil, "", fmt.Errorf("not a JSON object: %w", err)
	}
	if raw == nil {
		return nil, "", errors.New("not a JSON object: null")
	}
	if dec.More() {
		return nil, "", errors.New("more than one JSON value on the line")
	}
	metrics = make(map[string]float64, len(raw))
	for k, v := range raw {
		v = bytes.TrimSpace(v)
		if k == "checkpoint" {
			if string(v) == "null" {
				continue
			}
			if err := json.Unmarshal(v, &checkpoint); err != nil {
				return nil, "", fmt.Errorf("checkpoint: want a folder path, got %s", v)
			}
			if checkpoint == "" {
				return nil, "", errors.New("checkpoint: empty path")
			}
			continue
		}
		if len(v) > 0 && v[0] == '"' {
			var str string
			f, err := math.NaN(), json.Unmarshal(v, &str)
			if err == nil {
				f, err = strconv.ParseFloat(str, 64)
			}
			if err != nil || !(math.IsNaN(f) || math.IsInf(f, 0)) {
				return nil, "", fmt.Errorf("%q: want a number, got %s", k, v)
			}
			metrics[k] = f
			continue
		}
		if len(v) == 0 || !(v[0] == '-' || (v[0] >= '0' && v[0] <= '9')) {
			return nil, "", fmt.Errorf("%q: want a number, got %s", k, v)
		}
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil || math.IsInf(f, 0) {
			return nil, "", fmt.Errorf("%q: %s is not a finite number", k, v)
		}
		metrics[k] = f
	}
	return metrics, checkpoint, nil
}

// nonFinite are the bare words JSON's supersets (Python's json module,
// JavaScript) write for the values JSON has no number for.
var nonFinite = []string{"NaN", "Infinity", "-Infinity"}

// quoteNonFinite puts the bare words NaN, Infinity and -Infinity that stand
// as values (outside strings) in quotes, so that a JSON decoder reads them
// as strings.
func quoteNonFinite(s string) string {
	var b strings.Builder
	inString, escaped := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			b.WriteByte(c)
			continue
		}
		if c == '"' {
			inString = true
			b.WriteByte(c)
			continue
		}
		word := ""
		for _, w := range nonFinite {
			if strings.HasPrefix(s[i:], w) && (i+len(w) == len(s) || !isWordByte(s[i+len(w)])) && (i == 0 || !isWordByte(s[i-1])) {
				word = w
			}
		}
		if word == "" {
			b.WriteByte(c)
			continue
		}
		b.WriteString(`"` + word + `"`)
		i += len(word) - 1
	}
	return b.String()
}

func isWordByte(c byte) bool {
	return c == '_' || c == '-' || c == '+' || c == '.' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}
