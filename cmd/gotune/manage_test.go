package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gotune/gotune/storage"
)

// TestManageAnExperiment takes a sweep through a user's afternoon: every
// trial fails, so the experiment is FAILED; a plain run again says what
// can be done; --rerun-failed reruns the trials once the cause is gone;
// a larger num_samples extends the sweep; a changed space is refused
// with the key named; rm asks first and refuses without an answer; and
// --restart starts over. Each step's exit code follows the README's rule.
func TestManageAnExperiment(t *testing.T) {
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken")
	if err := os.WriteFile(broken, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sweep := filepath.Join(dir, "sweep.toml")
	write := func(samples int, space string) {
		t.Helper()
		err := os.WriteFile(sweep, []byte(fmt.Sprintf(`name = "manage"
seed = 3

[objective]
metric = "loss"

[search]
num_samples = %d
max_concurrent = 2

[search.space]
x = %s

[trainer]
command = ["sh", "-c", "echo \"@gotune {\\\"loss\\\": $1}\"; test ! -e %s", "sh", "{x}"]
`, samples, space, broken)), 0o644)
		if err != nil {
			t.Fatal(err)
		}
	}
	db := filepath.Join(dir, "gotune.db")
	statuses := func() string {
		t.Helper()
		var s []string
		for _, r := range trialRowsOf(t, db, "manage") {
			s = append(s, fmt.Sprintf("%d:%s:%d", r.TrialID, r.Status, r.Restarts))
		}
		return strings.Join(s, " ")
	}
	steps := []struct {
		name     string
		before   func()
		args     []string
		code     int
		inStderr []string
		// notInStderr: a hint that would not help here.
		notInStderr []string
		inStdout    []string
		statuses    string
	}{
		{name: "every trial fails", before: func() { write(2, "{ uniform = [0, 1] }") },
			args: []string{"run", "--db", db, sweep}, code: 1, statuses: "1:ERROR:0 2:ERROR:0"},
		{name: "a plain run again", args: []string{"run", "--db", db, sweep}, code: 2,
			inStderr: []string{"has already ended (FAILED)", "`gotune run --rerun-failed " + sweep + "` to rerun its 2 failed trials", "gotune run --restart " + sweep, "gotune rm --db " + db + " manage"},
			statuses: "1:ERROR:0 2:ERROR:0"},
		{name: "the failed trials rerun", before: func() { os.Remove(broken) },
			args:     []string{"run", "--rerun-failed", "--db", db, sweep},
			inStdout: []string{"trial 1: rerun of the failed trial from scratch", "trial 2: rerun of the failed trial from scratch"},
			statuses: "1:TERMINATED:1 2:TERMINATED:1"},
		{name: "a larger num_samples", before: func() { write(4, "{ uniform = [0, 1] }") },
			args: []string{"run", "--db", db, sweep}, statuses: "1:TERMINATED:1 2:TERMINATED:1 3:TERMINATED:0 4:TERMINATED:0"},
		{name: "a plain run of the finished experiment", args: []string{"run", "--db", db, sweep}, code: 2,
			inStderr: []string{"has already ended (FINISHED)", "raise num_samples", "gotune run --restart " + sweep}, notInStderr: []string{"--rerun-failed"},
			statuses: "1:TERMINATED:1 2:TERMINATED:1 3:TERMINATED:0 4:TERMINATED:0"},
		{name: "a changed space", before: func() { write(4, "{ uniform = [0, 2] }") },
			args: []string{"run", "--db", db, sweep}, code: 2,
			inStderr: []string{"search.space.x: { uniform = [0.0, 1.0] } → { uniform = [0.0, 2.0] }", "gotune run --restart"},
			statuses: "1:TERMINATED:1 2:TERMINATED:1 3:TERMINATED:0 4:TERMINATED:0"},
		{name: "a restart with the changed space", args: []string{"run", "--restart", "--db", db, sweep},
			statuses: "1:TERMINATED:0 2:TERMINATED:0 3:TERMINATED:0 4:TERMINATED:0"},
		{name: "--restart with --rerun-failed", args: []string{"run", "--restart", "--rerun-failed", "--db", db, sweep}, code: 2,
			inStderr: []string{"--restart starts the experiment over"}, statuses: "1:TERMINATED:0 2:TERMINATED:0 3:TERMINATED:0 4:TERMINATED:0"},
		{name: "rm of a missing experiment", args: []string{"rm", "-y", "--db", db, "nothing"}, code: 2,
			inStderr: []string{`experiment "nothing"`}, statuses: "1:TERMINATED:0 2:TERMINATED:0 3:TERMINATED:0 4:TERMINATED:0"},
	}
	for _, s := range steps {
		if s.before != nil {
			s.before()
		}
		code, stdout, stderr := runCLI(s.args...)
		if code != s.code {
			t.Fatalf("%s: exit %d, want %d\n%s\n%s", s.name, code, s.code, stdout, stderr)
		}
		for _, want := range s.inStderr {
			if !strings.Contains(stderr, want) {
				t.Errorf("%s: stderr lacks %q:\n%s", s.name, want, stderr)
			}
		}
		for _, unwanted := range s.notInStderr {
			if strings.Contains(stderr, unwanted) {
				t.Errorf("%s: stderr has %q:\n%s", s.name, unwanted, stderr)
			}
		}
		for _, want := range s.inStdout {
			if !strings.Contains(stdout, want) {
				t.Errorf("%s: stdout lacks %q:\n%s", s.name, want, stdout)
			}
		}
		if got := statuses(); got != s.statuses {
			t.Errorf("%s: trials %s, want %s", s.name, got, s.statuses)
		}
	}

	// rm asks; with nothing on stdin it refuses and removes nothing, "n"
	// keeps the experiment, "y" removes it with its files.
	rm := func(stdin string) (int, string) {
		cmd := gotune(t, "rm", "--db", db, "manage")
		cmd.Stdin = strings.NewReader(stdin)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.Run()
		return cmd.ProcessState.ExitCode(), out.String()
	}
	if code, out := rm(""); code != 2 || !strings.Contains(out, "manage (FINISHED, 4 trials)") || !strings.Contains(out, "pass --yes") {
		t.Errorf("rm without an answer: exit %d\n%s", code, out)
	}
	if code, out := rm("n\n"); code != 0 || !strings.Contains(out, "nothing removed") {
		t.Errorf("rm answered n: exit %d\n%s", code, out)
	}
	if got := statuses(); !strings.HasPrefix(got, "1:TERMINATED") {
		t.Fatalf("after rm was refused: %s", got)
	}
	// The socket a run killed with -9 leaves behind goes too.
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: storage.ControlPath(db, "manage"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	if code, out := rm("y\n"); code != 0 || !strings.Contains(out, "removed manage") {
		t.Errorf("rm answered y: exit %d\n%s", code, out)
	}
	if code, _, stderr := runCLI("trials", "--db", db, "manage"); code != 2 || !strings.Contains(stderr, "manage") {
		t.Errorf("trials of the removed experiment: exit %d\n%s", code, stderr)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, f := range left {
		if base := filepath.Base(f); base != "gotune.db" && base != "sweep.toml" && base != "checkpoints" && !strings.HasPrefix(base, "gotune.db-") {
			t.Errorf("rm left %s", f)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "checkpoints", "manage*")); len(left) > 0 {
		t.Errorf("rm left %v", left)
	}
}

// TestVersionAndUnknownCommands: --version answers, an unknown command is
// said not to be one and the commands are listed, help still helps.
func TestVersionAndUnknownCommands(t *testing.T) {
	for _, c := range []struct {
		args     []string
		code     int
		inStdout string
		inStderr []string
	}{
		{args: []string{"--version"}, inStdout: "gotune version "},
		{args: []string{"frobnicate"}, code: 2, inStderr: []string{`"frobnicate" is not a gotune command`, "run, ls, trials", "rm"}},
		{args: []string{"help", "frobnicate"}, code: 2, inStderr: []string{`"frobnicate" is not a gotune command`}},
		{args: []string{"help", "rm"}, inStdout: "gotune rm - remove experiments"},
	} {
		code, stdout, stderr := runCLI(c.args...)
		if code != c.code || !strings.Contains(stdout, c.inStdout) || strings.Contains(stderr, "No help topic") {
			t.Errorf("gotune %v: exit %d, want %d\n%s\n%s", c.args, code, c.code, stdout, stderr)
		}
		for _, want := range c.inStderr {
			if !strings.Contains(stderr, want) {
				t.Errorf("gotune %v: stderr lacks %q:\n%s", c.args, want, stderr)
			}
		}
	}
}

// TestQueryPrintsTimesInISO8601: the time columns (time, *_at) of a
// query's result print as ISO 8601 in every format, and as stored with
// --epoch, in positional notation; other numbers stay numbers, with an
// exponent only where positional notation would be long.
func TestQueryPrintsTimesInISO8601(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gotune.db")
	w, err := storage.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	exp, err := w.CreateExperiment(ctx, "e", "loss", "min", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := w.CreateTrial(ctx, exp.ID, 1, map[string]any{"x": 1})
	if err != nil {
		t.Fatal(err)
	}
	loss := 0.5
	if err := w.AddReport(ctx, tr.ID(), storage.Report{Iteration: 1, Time: time.Date(2026, 11, 26, 22, 17, 52, 238_000_000, time.UTC),
		Metrics: map[string]float64{"loss": loss}}, &loss); err != nil {
		t.Fatal(err)
	}
	w.Close()
	for _, c := range []struct {
		args []string
		want *regexp.Regexp
	}{
		{[]string{"SELECT created_at FROM experiments_v"}, regexp.MustCompile(`(?m)^created_at\n\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\n$`)},
		{[]string{"--csv", "SELECT time, iteration FROM reports_v"}, regexp.MustCompile(`^time,iteration\n2026-11-26T22:17:52\.238Z,1\n$`)},
		{[]string{"--json", "SELECT time, iteration FROM reports_v"}, regexp.MustCompile(`"time": "2026-11-26T22:17:52\.238Z", "iteration": 1}`)},
		{[]string{"--epoch", "--csv", "SELECT time FROM reports_v"}, regexp.MustCompile(`^time\n1795731472\.238\d*\n$`)},
		{[]string{"--csv", "SELECT 1e22 AS big, 0.00001 AS small, 1234567.5 AS plain, -0.25 AS neg"}, regexp.MustCompile(`^big,small,plain,neg\n1e\+22,1e-05,1234567\.5,-0\.25\n$`)},
	} {
		code, out, stderr := runCLI(append([]string{"query", "--db", db}, c.args...)...)
		if code != 0 || !c.want.MatchString(out) {
			t.Errorf("query %v: exit %d\n%s%s", c.args, code, out, stderr)
		}
	}
}

// TestBrokenScriptEndsTheSweep runs, as a user does (a separate process in
// the sweep file's folder, relative paths, the default database), a sweep
// of 20 trials whose Python script cannot import a module: the first 5
// trials fail the same way, so the sweep stops there (exit 1,
// INTERRUPTED) with the traceback, printed once, and the way on, instead
// of failing all 20; once the script is mended, --rerun-failed runs the
// failed trials again and the sweep goes on to its end.
func TestBrokenScriptEndsTheSweep(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("train.py", "import gotune_test_missing_module\n")
	write("sweep.toml", `name = "broken"
seed = 2

[objective]
metric = "loss"

[search]
num_samples = 20
max_concurrent = 2

[search.space]
lr = { loguniform = [0.001, 0.1] }

[trainer]
command = ["python3", "train.py", "{lr}"]
`)
	code, stdout, stderr := gotuneIn(t, dir, "run", "sweep.toml")
	for _, want := range []string{"the first 5 trials all failed the same way", "ModuleNotFoundError: No module named 'gotune_test_missing_module'",
		"`gotune run --rerun-failed sweep.toml` runs them again"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("run: stderr lacks %q", want)
		}
	}
	if code != 1 || t.Failed() {
		t.Fatalf("run: exit %d, want 1\n%s\n%s", code, stdout, stderr)
	}
	// The traceback is printed once; the trials that repeat it say so,
	// with its exception.
	if n := strings.Count(stdout, "Traceback (most recent call last)"); n != 1 || strings.Count(stdout, "ModuleNotFoundError: No module named 'gotune_test_missing_module' (the same failure as trial") < 4 {
		t.Errorf("run: the traceback printed %d times, want once and the repeats named:\n%s", n, stdout)
	}
	db := filepath.Join(dir, "gotune.db")
	rows := trialRowsOf(t, db, "broken")
	failed := 0
	for _, r := range rows {
		switch r.Status {
		case storage.TrialError:
			failed++
		case storage.TrialInterrupted:
		default:
			t.Errorf("trial %d is %s, want ERROR or INTERRUPTED", r.TrialID, r.Status)
		}
	}
	if failed < 5 || len(rows) >= 20 {
		t.Errorf("%d trials started, %d failed: want the sweep stopped once its first 5 failed", len(rows), failed)
	}
	write("train.py", "import json, sys\nprint('@gotune ' + json.dumps({'loss': float(sys.argv[1])}))\n")
	if code, stdout, stderr := gotuneIn(t, dir, "run", "--rerun-failed", "sweep.toml"); code != 0 || stderr != "" {
		t.Fatalf("run --rerun-failed: exit %d, want 0 with nothing on stderr\n%s\n%s", code, stdout, stderr)
	}
	rows = trialRowsOf(t, db, "broken")
	for _, r := range rows {
		if r.Status != storage.TrialTerminated {
			t.Errorf("after the rerun, trial %d is %s, want TERMINATED", r.TrialID, r.Status)
		}
	}
	if len(rows) != 20 {
		t.Errorf("after the rerun, %d trials, want 20", len(rows))
	}
}

// TestScriptMissingItsDataSaysWhereItIs runs, as a user does (a separate
// process in the sweep file's folder, the default database), an unchanged
// script that reads data.txt where it runs, with a metrics pattern for its
// output. Every trial runs in its own folder, so the script fails there;
// gotune's output says that data.txt lies beside the sweep file and how
// to name it, and adds no word on the pattern matching nothing.
func TestScriptMissingItsDataSaysWhereItIs(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"data.txt": "1 2 3\n",
		"train.py": "import sys\nvals = open('data.txt').read().split()\nfor epoch in range(3):\n    print(f'epoch {epoch} loss {float(sys.argv[1]) * len(vals)}')\n",
		"sweep.toml": `name = "reads-data"

[objective]
metric = "loss"

[search]
num_samples = 3

[search.space]
lr = { loguniform = [0.001, 0.1] }

[trainer]
command = ["python3", "train.py", "{lr}"]

[trainer.metrics]
patterns = ['epoch (?P<epoch>\\d+) loss (?P<loss>\\S+)']
step = "epoch"
`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, stdout, _ := gotuneIn(t, dir, "run", "sweep.toml")
	if code == 0 {
		t.Fatalf("run: no failure\n%s", stdout)
	}
	for _, want := range []string{"FileNotFoundError: [Errno 2] No such file or directory: 'data.txt'",
		"data.txt is in the sweep file's folder " + dir + ", but the command runs in " + filepath.Join(dir, "checkpoints", "reads-data", "trial_"),
		"{sweep_dir}/data.txt"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("run: stdout lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "metrics_unmatched") {
		t.Errorf("run: a pattern that matched nothing told beside the failure:\n%s", stdout)
	}
}

// TestFailFast: with [trainer.failure] fail_fast, the first failed trial
// ends the sweep (exit 1, the experiment INTERRUPTED, the trial running
// beside it interrupted, no later trial started), and once the cause is
// gone --rerun-failed runs the failed trial again and the sweep goes on
// to its end, with fail_fast turned off (not part of the experiment).
func TestFailFast(t *testing.T) {
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken")
	if err := os.WriteFile(broken, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sweep := filepath.Join(dir, "sweep.toml")
	// Trial 1 reports and fails while the file is there; the others take
	// a second, so trial 2 is running when trial 1 fails.
	script := fmt.Sprintf(`echo "@gotune {\"loss\": $1}"; if [ "$GOTUNE_TRIAL_ID" = 1 ] && [ -e %s ]; then exit 3; fi; sleep 1`, broken)
	err := os.WriteFile(sweep, []byte(fmt.Sprintf(`name = "fast"
seed = 3

[objective]
metric = "loss"

[search]
num_samples = 4
max_concurrent = 2

[search.space]
x = { uniform = [0, 1] }

[trainer]
command = ["sh", "-c", %q, "sh", "{x}"]

[trainer.failure]
fail_fast = true
`, script)), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "gotune.db")
	code, stdout, stderr := runCLI("run", "--db", db, sweep)
	if code != 1 || !strings.Contains(stderr, "trial 1 failed, and [trainer.failure] fail_fast ends the sweep at the first failure") ||
		!strings.Contains(stderr, "`gotune run --rerun-failed "+sweep+"` runs it again") {
		t.Fatalf("run: exit %d, want 1 with the failure and the way on\n%s\n%s", code, stdout, stderr)
	}
	// The run's own summary shows the trial it interrupted as every reader
	// does afterwards.
	if !strings.Contains(stdout, "fast: 2 trials, 1 ERROR, 1 INTERRUPTED") {
		t.Errorf("run: the summary does not show the interrupted trial:\n%s", stdout)
	}
	var got []string
	for _, r := range trialRowsOf(t, db, "fast") {
		got = append(got, fmt.Sprintf("%d:%s", r.TrialID, r.Status))
	}
	if want := "1:ERROR 2:INTERRUPTED"; strings.Join(got, " ") != want {
		t.Errorf("after the failure: trials %s, want %s", strings.Join(got, " "), want)
	}
	if code, out, _ := runCLI("ls", "--db", db); code != 0 || !strings.Contains(out, "INTERRUPTED") {
		t.Errorf("ls: exit %d, want the experiment INTERRUPTED\n%s", code, out)
	}
	os.Remove(broken)
	// fail_fast is not part of the experiment: the rerun may go without it.
	data, err := os.ReadFile(sweep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sweep, bytes.Replace(data, []byte("fail_fast = true"), []byte("fail_fast = false"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := runCLI("run", "--rerun-failed", "--db", db, sweep); code != 0 ||
		!strings.Contains(stdout, "trial 1: rerun of the failed trial") {
		t.Fatalf("run --rerun-failed: exit %d\n%s\n%s", code, stdout, stderr)
	}
	got = got[:0]
	for _, r := range trialRowsOf(t, db, "fast") {
		got = append(got, fmt.Sprintf("%d:%s", r.TrialID, r.Status))
	}
	if want := "1:TERMINATED 2:TERMINATED 3:TERMINATED 4:TERMINATED"; strings.Join(got, " ") != want {
		t.Errorf("after the rerun: trials %s, want %s", strings.Join(got, " "), want)
	}
}
