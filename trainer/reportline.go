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
// JSON object whose values are finite numbers, except "checkpoint", which
// is a folder path (or null for none). An empty object is a heartbeat: it
// only shows the worker is alive.
func ParseReportLine(s string) (metrics map[string]float64, checkpoint string, err error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, "", errors.New("no JSON object after @gotune")
	}
	dec := json.NewDecoder(strings.NewReader(s))
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
