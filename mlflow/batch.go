package mlflow

import (
	"encoding/json"
	"unicode/utf8"
)

// Limits bound the content of one runs/log-batch request.
type Limits struct {
	Metrics, Params, Tags int
	// Items bounds metrics, params and tags together.
	Items int
	// Bytes bounds the request's JSON body.
	Bytes int
}

// DefaultLimits are MLflow's documented limits of one runs/log-batch
// request: 1,000 metrics, 100 params, 100 tags, 1,000 items in all and a
// JSON body of 1 MB.
var DefaultLimits = Limits{Metrics: 1000, Params: 100, Tags: 100, Items: 1000, Bytes: 1 << 20}

// The longest values every MLflow backend keeps, in bytes; longer ones are
// cut (see clip).
const (
	maxParamValue = 500
	maxTagValue   = 5000
)

// Batch is the content of one runs/log-batch request.
type Batch struct {
	Metrics []Metric
	Params  []Param
	Tags    []Tag
	// Done counts the reports given to Pack whose metrics are all in this
	// batch or the ones before it: once this batch is delivered, so are
	// those reports.
	Done int
}

func (b Batch) empty() bool { return len(b.Metrics)+len(b.Params)+len(b.Tags) == 0 }

func (b Batch) request(runID string) any {
	return struct {
		RunID   string   `json:"run_id"`
		Metrics []Metric `json:"metrics"`
		Params  []Param  `json:"params"`
		Tags    []Tag    `json:"tags"`
	}{runID, nonNil(b.Metrics), nonNil(b.Params), nonNil(b.Tags)}
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// envelope bounds the bytes of a request besides its items: the run id
// and the field names.
const envelope = 256

// Pack splits params, tags and the metrics of reports (one slice per
// report, in order) into batches within lim, params first, then tags, then
// metrics; a report's metrics share a batch unless they alone pass a
// limit. Batches with nothing to send are left out, except a last one that
// only moves Done past reports without metrics.
func Pack(lim Limits, params []Param, tags []Tag, reports [][]Metric) []Batch {
	var out []Batch
	var cur Batch
	size := envelope
	flush := func() {
		if !cur.empty() || (cur.Done > 0 && (len(out) == 0 || out[len(out)-1].Done < cur.Done)) {
			out = append(out, cur)
		}
		cur = Batch{Done: cur.Done}
		size = envelope
	}
	// room makes room in cur for one more item of n bytes whose kind cur
	// holds have of, at most max.
	room := func(have, max, n int) {
		items := len(cur.Metrics) + len(cur.Params) + len(cur.Tags)
		if !cur.empty() && (have+1 > max || items+1 > lim.Items || size+n > lim.Bytes) {
			flush()
		}
	}
	for _, p := range params {
		n := itemSize(p)
		room(len(cur.Params), lim.Params, n)
		cur.Params = append(cur.Params, p)
		size += n
	}
	for _, t := range tags {
		n := itemSize(t)
		room(len(cur.Tags), lim.Tags, n)
		cur.Tags = append(cur.Tags, t)
		size += n
	}
	for i, ms := range reports {
		// Start a report in a new batch when the whole of it fits there
		// but not here.
		if n := groupSize(ms); len(ms) <= lim.Metrics && n+envelope <= lim.Bytes &&
			(len(cur.Metrics)+len(ms) > lim.Metrics || len(cur.Metrics)+len(cur.Params)+len(cur.Tags)+len(ms) > lim.Items || size+n > lim.Bytes) {
			flush()
		}
		for _, m := range ms {
			n := itemSize(m)
			room(len(cur.Metrics), lim.Metrics, n)
			cur.Metrics = append(cur.Metrics, m)
			size += n
		}
		cur.Done = i + 1
	}
	flush()
	return out
}

// itemSize is the bytes item adds to a request: its JSON and a comma.
func itemSize(item any) int {
	b, _ := json.Marshal(item)
	return len(b) + 1
}

func groupSize(ms []Metric) int {
	n := 0
	for _, m := range ms {
		n += itemSize(m)
	}
	return n
}

// clip cuts s to at most n bytes, at a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
