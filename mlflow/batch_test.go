package mlflow

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
)

// reportsOf makes n reports of k metrics each.
func reportsOf(n, k int) [][]Metric {
	out := make([][]Metric, n)
	for i := range out {
		for j := range k {
			out[i] = append(out[i], Metric{Key: fmt.Sprintf("m%03d", j), Value: Value(float64(i*1000+j) + 0.123456789), Timestamp: 1700000000000 + int64(i), Step: int64(i + 1)})
		}
	}
	return out
}

func paramsOf(n, size int) []Param {
	out := make([]Param, n)
	for i := range out {
		out[i] = Param{Key: fmt.Sprintf("p%03d", i), Value: strings.Repeat("v", size)}
	}
	return out
}

func tagsOf(n, size int) []Tag {
	out := make([]Tag, n)
	for i := range out {
		out[i] = Tag{Key: fmt.Sprintf("t%03d", i), Value: strings.Repeat("t", size)}
	}
	return out
}

// TestPackLimits checks that every batch keeps within the limits, that
// everything given is sent once and in order, and that Done counts the
// reports completed so far.
func TestPackLimits(t *testing.T) {
	for _, tc := range []struct {
		name    string
		lim     Limits
		params  []Param
		tags    []Tag
		reports [][]Metric
		// batches is the number of requests wanted; reports of 7 metrics
		// fill a 1,000-metric batch with 142 whole reports.
		batches int
	}{
		{"metrics", DefaultLimits, nil, nil, reportsOf(2500, 1), 3},
		{"whole reports", DefaultLimits, nil, nil, reportsOf(300, 7), 3},
		{"params", DefaultLimits, paramsOf(250, 10), nil, nil, 3},
		{"tags", DefaultLimits, nil, tagsOf(230, 10), nil, 3},
		{"all", DefaultLimits, paramsOf(150, 10), tagsOf(150, 10), reportsOf(900, 1), 3},
		{"items in all", DefaultLimits, paramsOf(100, 10), tagsOf(100, 10), reportsOf(900, 1), 2},
		{"bytes", Limits{Metrics: 1000, Params: 1000, Tags: 1000, Items: 1000, Bytes: 1 << 20}, nil, tagsOf(250, maxTagValue), nil, 2},
		{"small bytes", Limits{Metrics: 1000, Params: 100, Tags: 100, Items: 1000, Bytes: 4096}, nil, nil, reportsOf(100, 3), 0},
		{"report larger than a batch", DefaultLimits, nil, nil, reportsOf(3, 1500), 5},
		{"reports without metrics", DefaultLimits, nil, nil, reportsOf(4, 0), 1},
		{"nothing", DefaultLimits, nil, nil, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bs := Pack(tc.lim, tc.params, tc.tags, tc.reports)
			if tc.batches > 0 && len(bs) != tc.batches {
				t.Errorf("%d batches, want %d", len(bs), tc.batches)
			}
			var params []Param
			var tags []Tag
			var metrics []Metric
			done := 0
			for i, b := range bs {
				body, err := json.Marshal(b.request(strings.Repeat("r", 32)))
				if err != nil {
					t.Fatal(err)
				}
				items := len(b.Metrics) + len(b.Params) + len(b.Tags)
				if len(b.Metrics) > tc.lim.Metrics || len(b.Params) > tc.lim.Params || len(b.Tags) > tc.lim.Tags ||
					items > tc.lim.Items || len(body) > tc.lim.Bytes {
					t.Errorf("batch %d: %d metrics, %d params, %d tags, %d bytes: over %+v", i, len(b.Metrics), len(b.Params), len(b.Tags), len(body), tc.lim)
				}
				if b.Done < done {
					t.Errorf("batch %d: Done %d after %d", i, b.Done, done)
				}
				// Everything of the reports Done counts is sent by now.
				want := 0
				for _, r := range tc.reports[:b.Done] {
					want += len(r)
				}
				if got := len(metrics) + len(b.Metrics); got < want {
					t.Errorf("batch %d: Done %d, but only %d of their %d metrics sent", i, b.Done, got, want)
				}
				done = b.Done
				params, tags, metrics = append(params, b.Params...), append(tags, b.Tags...), append(metrics, b.Metrics...)
			}
			if done != len(tc.reports) {
				t.Errorf("Done ends at %d, want %d", done, len(tc.reports))
			}
			var all []Metric
			for _, r := range tc.reports {
				all = append(all, r...)
			}
			if fmt.Sprint(params) != fmt.Sprint(tc.params) || fmt.Sprint(tags) != fmt.Sprint(tc.tags) || fmt.Sprint(metrics) != fmt.Sprint(all) {
				t.Errorf("sent %d params, %d tags, %d metrics; want %d, %d, %d in order", len(params), len(tags), len(metrics), len(tc.params), len(tc.tags), len(all))
			}
		})
	}
}

// TestPackKeepsReportsWhole checks that a report that fits in a batch is
// never split between two.
func TestPackKeepsReportsWhole(t *testing.T) {
	reports := reportsOf(500, 7)
	bs := Pack(DefaultLimits, nil, nil, reports)
	for i, b := range bs {
		if n := len(b.Metrics); n%7 != 0 {
			t.Errorf("batch %d holds %d metrics, not whole reports of 7", i, n)
		}
	}
}

func TestValueJSON(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{{1.5, "1.5"}, {math.NaN(), `"NaN"`}, {math.Inf(1), `"Infinity"`}, {math.Inf(-1), `"-Infinity"`}, {1e21, "1e+21"}} {
		b, err := json.Marshal(Value(tc.v))
		if err != nil || string(b) != tc.want {
			t.Errorf("Value(%v): got %s, %v; want %s", tc.v, b, err, tc.want)
		}
	}
}

func TestClip(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{{"abc", 5, "abc"}, {"abcdef", 3, "abc"}, {"aé", 2, "a"}} {
		if got := clip(tc.s, tc.n); got != tc.want {
			t.Errorf("clip(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}
