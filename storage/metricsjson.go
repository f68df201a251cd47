package storage

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// Metrics are kept as JSON objects (metrics_json columns), keys sorted.
// JSON has no NaN or infinities, yet a diverging trial reports them, so
// they are written as the strings "NaN", "Infinity" and "-Infinity"; SQL
// sees strings there and this package reads them back as the numbers.

// Number is a float64 that JSON can always hold: it marshals as
// AppendJSONFloat writes it, NaN and infinities as strings. Use it for
// metrics in JSON output, as the CLI and the dashboard do.
type Number float64

// MarshalJSON implements json.Marshaler.
func (n Number) MarshalJSON() ([]byte, error) { return AppendJSONFloat(nil, float64(n)), nil }

// UnmarshalJSON implements json.Unmarshaler: it reads what MarshalJSON
// writes.
func (n *Number) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("not a number: %q", s)
		}
		*n = Number(f)
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*n = Number(f)
	return nil
}

// NumberPtr converts an optional float64.
func NumberPtr(f *float64) *Number {
	if f == nil {
		return nil
	}
	n := Number(*f)
	return &n
}

// Numbers converts metrics.
func Numbers(m map[string]float64) map[string]Number {
	out := make(map[string]Number, len(m))
	for k, v := range m {
		out[k] = Number(v)
	}
	return out
}

// AppendJSONFloat appends f to b as the store writes metrics: a JSON number
// formatted as encoding/json does, or one of the strings "NaN", "Infinity"
// and "-Infinity".
func AppendJSONFloat(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(b, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(b, `"-Infinity"`...)
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// 1e-07 -> 1e-7, as encoding/json writes it.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// encodeMetrics renders m as a JSON object with sorted keys. As with
// encoding/json, invalid UTF-8 in a key becomes U+FFFD.
func encodeMetrics(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	size := 2
	for k := range m {
		keys = append(keys, k)
		size += len(k) + 28
	}
	slices.Sort(keys)
	b := make([]byte, 0, size)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = AppendJSONFloat(b, m[k])
	}
	return string(append(b, '}'))
}

// appendJSONString appends s quoted as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// metricValue decodes a number or one of the strings AppendJSONFloat writes.
type metricValue float64

func (v *metricValue) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case `"NaN"`:
		*v = metricValue(math.NaN())
	case `"Infinity"`:
		*v = metricValue(math.Inf(1))
	case `"-Infinity"`:
		*v = metricValue(math.Inf(-1))
	case `null`:
		return fmt.Errorf("metric is null")
	default:
		f, err := strconv.ParseFloat(string(b), 64)
		if err != nil {
			return fmt.Errorf("metric %s is not a number", b)
		}
		*v = metricValue(f)
	}
	return nil
}

// decodeMetrics reads what encodeMetrics wrote; "null" decodes to nil.
func decodeMetrics(s string) (map[string]float64, error) {
	var raw map[string]metricValue
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return nil, err
	}
	if raw == nil {
		return nil, nil
	}
	m := make(map[string]float64, len(raw))
	for k, v := range raw {
		m[k] = float64(v)
	}
	return m, nil
}
