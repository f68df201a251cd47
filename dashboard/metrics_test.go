package dashboard

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gotune/gotune/workers"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it):\n%s", name, got)
	}
}

// Lines of the text exposition format, as Prometheus's parser reads them.
var (
	metricName = `[a-zA-Z_:][a-zA-Z0-9_:]*`
	labelValue = `"(?:[^"\\\n]|\\\\|\\"|\\n)*"`
	labelPair  = `[a-zA-Z_][a-zA-Z0-9_]*=` + labelValue
	helpLine   = regexp.MustCompile(`^# HELP (` + metricName + `) .*$`)
	typeLine   = regexp.MustCompile(`^# TYPE (` + metricName + `) (counter|gauge|histogram|summary|untyped)$`)
	sampleLine = regexp.MustCompile(`^(` + metricName + `)(\{` + labelPair + `(?:,` + labelPair + `)*\})? ` +
		`(NaN|[+-]Inf|[-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)$`)
)

// checkExposition checks every line of a /metrics body against the
// format: each family's HELP and TYPE come first and once, and each sample
// belongs to the family announced last.
func checkExposition(t *testing.T, body string) {
	t.Helper()
	if !strings.HasSuffix(body, "\n") {
		t.Error("the exposition does not end with a line break")
	}
	seen := map[string]bool{}
	family := ""
	for i, line := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
		if m := helpLine.FindStringSubmatch(line); m != nil {
			if seen[m[1]] {
				t.Errorf("line %d: family %s announced twice", i+1, m[1])
			}
			seen[m[1]], family = true, m[1]
			continue
		}
		if m := typeLine.FindStringSubmatch(line); m != nil {
			if m[1] != family {
				t.Errorf("line %d: TYPE of %s after HELP of %s", i+1, m[1], family)
			}
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("line %d is not valid exposition format: %q", i+1, line)
			continue
		}
		if m[1] != family {
			t.Errorf("line %d: a sample of %s under family %s", i+1, m[1], family)
		}
	}
}

func TestMetrics(t *testing.T) {
	srv, path := fixtureServer(t)
	code, body, h := get(t, srv.URL+"/metrics")
	if code != 200 {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	if ct := h.Get("Content-Type"); ct != "text/plain; version=0.0.4; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	checkExposition(t, body)
	// No run holds digits: its RUNNING trial counts as INTERRUPTED, and
	// its workers run no more.
	golden(t, "metrics.txt", body)

	// A run holds digits: its trial and workers are running.
	release := holdRun(t, path, "digits")
	_, body, _ = get(t, srv.URL+"/metrics")
	release()
	checkExposition(t, body)
	for _, want := range []string{
		`gotune_trials{experiment="digits",status="RUNNING"} 1`,
		`gotune_trials{experiment="digits",status="INTERRUPTED"} 0`,
		`gotune_trials{experiment="other",status="INTERRUPTED"} 1`,
		`gotune_workers{experiment="digits",status="RUNNING"} 3`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics while a run holds digits lacks %q:\n%s", want, body)
		}
	}

	usage := workers.Usage{Capacity: workers.Resources{CPUs: 8, GPUs: 2, Memory: 32 << 30},
		InUse: workers.Resources{CPUs: 2.5, GPUs: 0.5}, Waiting: 1}
	srv, _ = fixtureServer(t, WithUsage(func() workers.Usage { return usage }))
	_, body, _ = get(t, srv.URL+"/metrics")
	checkExposition(t, body)
	for _, want := range []string{
		`gotune_resources_in_use{resource="cpus"} 2.5`,
		`gotune_resources_in_use{resource="gpus"} 0.5`,
		`gotune_resources_capacity{resource="memory_bytes"} 34359738368`,
		`gotune_groups_waiting 1`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics with a manager lacks %q", want)
		}
	}
}

func TestExpositionEscapes(t *testing.T) {
	f := &family{name: "x", typ: "gauge", help: "a \\ help\nline"}
	f.add(nan(), "l", "a \"quoted\"\nvalue\\")
	f.add(inf(-1))
	var b bytes.Buffer
	writeFamilies(&b, []*family{f})
	want := "# HELP x a \\\\ help\\nline\n# TYPE x gauge\nx{l=\"a \\\"quoted\\\"\\nvalue\\\\\"} NaN\nx -Inf\n"
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
	checkExposition(t, b.String())
}
