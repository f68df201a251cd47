package sweepfile

import (
	"errors"
	"strings"
	"testing"
)

// TestDecodeMetrics reads [trainer.metrics] and names the line and key of
// each mistake in it.
func TestDecodeMetrics(t *testing.T) {
	good := commandSweep + `
[trainer.metrics]
step = "iter"
patterns = [
  'step (?P<iter>\d+): train loss (?P<train_loss>[\w.+-]+)',
]
file = "{trial_dir}/metrics.csv"
tensorboard = "runs"
`
	c, err := Decode("sweep.toml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	m := c.Trainer.Metrics
	if m.Step != "iter" || len(m.Patterns) != 1 || m.File != "{trial_dir}/metrics.csv" || m.TensorBoard != "runs" {
		t.Errorf("decoded %+v", m)
	}
	for _, tt := range []struct {
		section string
		line    int
		key     string
		msg     string
	}{
		{"patterns = ['(?P<a>ok)', 'loss=(']", 29, "trainer.metrics.patterns[1]", "missing closing )"},
		{"patterns = ['loss (\\S+)']", 29, "trainer.metrics.patterns[0]", "has no named group"},
		{"format = \"tsv\"\nfile = \"m\"", 29, "trainer.metrics.format", `must be "jsonl" or "csv"`},
		{"output = true\nstep = \"epoch\"\n\n[scheduler]\ntime_attr = \"iteration\"", 30, "trainer.metrics.step", `scheduler.time_attr is "iteration"`},
		{"pattern = 'x'", 29, "trainer.metrics.pattern", "unknown key"},
	} {
		_, err := Decode("sweep.toml", []byte(commandSweep+"\n[trainer.metrics]\n"+tt.section+"\n"))
		var e *Error
		if !errors.As(err, &e) || e.Line != tt.line || e.Key != tt.key || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: got %v (line %d), want line %d, key %s: …%s…", tt.section, err, lineOf(e), tt.line, tt.key, tt.msg)
		}
	}
}

func lineOf(e *Error) int {
	if e == nil {
		return 0
	}
	return e.Line
}
