package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotune/gotune/storage"
)

// TestRunRecordsNonFiniteMetrics runs a command whose report lines carry
// NaN and infinities the ways Python's json module and hand-written
// scripts write them: each is a report of the trial, recorded as such and
// shown by the CLI, and keeps the heartbeat alive.
func TestRunRecordsNonFiniteMetrics(t *testing.T) {
	sweep := writeSweep(t, `name = "diverged"
[objective]
metric = "loss"
[search]
num_samples = 1
[search.space]
x = 1
[trainer]
command = ["sh", "-c", '''
for l in NaN Infinity -Infinity '"nan"' '"-inf"'; do
	i=$((i + 1))
	echo "@gotune {\"epoch\": $i, \"loss\": $l}"
	sleep 0.3
done
''']
[trainer.failure]
heartbeat_timeout = 1
`)
	db := filepath.Join(t.TempDir(), "gotune.db")
	if out, err := gotune(t, "run", "--db", db, sweep).CombinedOutput(); err != nil {
		t.Fatalf("gotune run: %v\n%s", err, out)
	}
	code, out, stderr := runCLI("export", "--db", db, "--format", "json", "diverged")
	if code != 0 {
		t.Fatalf("export: exit %d\n%s", code, stderr)
	}
	var reports []struct {
		Metrics map[string]any `json:"metrics"`
	}
	if err := json.Unmarshal([]byte(out), &reports); err != nil {
		t.Fatalf("export: %v\n%s", err, out)
	}
	var losses []string
	for _, r := range reports {
		losses = append(losses, fmtAny(r.Metrics["loss"]))
	}
	if got, want := strings.Join(losses, " "), "NaN Infinity -Infinity NaN -Infinity"; got != want {
		t.Errorf("losses %s, want %s\n%s", got, want, out)
	}
	code, out, _ = runCLI("trials", "--db", db, "--json", "diverged")
	var rows []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 {
		t.Fatalf("trials: exit %d\n%s", code, out)
	}
	if rows[0]["status"] != "TERMINATED" || rows[0]["iterations"] != 5.0 || rows[0]["last_metric"] != "-Infinity" || rows[0]["restarts"] != 0.0 {
		t.Errorf("trial: %v, want TERMINATED after 5 iterations, last -Infinity, no restart", rows[0])
	}
	code, out, _ = runCLI("show", "--db", db, "diverged", "1")
	if code != 0 || !strings.Contains(out, "NaN") || strings.Contains(out, "hung") {
		t.Errorf("show: exit %d\n%s", code, out)
	}
}

func fmtAny(v any) string {
	b, _ := json.Marshal(v)
	return strings.Trim(string(b), `"`)
}

// TestRunStoppedTunerDoesNotBlameItsWorkers stops `gotune run` with
// SIGSTOP for longer than the heartbeat timeout while its worker reports
// steadily: on waking, the silence was the tuner's own, so the trial goes
// on without a restart.
func TestRunStoppedTunerDoesNotBlameItsWorkers(t *testing.T) {
	sweep := writeSweep(t, `name = "asleep"
[objective]
metric = "loss"
[search]
num_samples = 1
[search.space]
x = 1
[trainer]
command = ["sh", "-c", 'for i in $(seq 1 40); do echo "@gotune {\"epoch\": $i, \"loss\": 1}"; sleep 0.1; done']
[trainer.failure]
max_failures = 3
heartbeat_timeout = 1
`)
	db := filepath.Join(t.TempDir(), "gotune.db")
	cmd := gotune(t, "run", "--db", db, sweep)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for committedReports(db, "asleep") < 3 {
		select {
		case err := <-exited:
			t.Fatalf("the sweep ended before it could be stopped: %v\n%s", err, out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(2500 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGCONT)
	if err := <-exited; err != nil {
		t.Fatalf("gotune run: %v\n%s", err, out.String())
	}
	code, js, _ := runCLI("trials", "--db", db, "--json", "asleep")
	var rows []map[string]any
	if code != 0 || json.Unmarshal([]byte(js), &rows) != nil || len(rows) != 1 {
		t.Fatalf("trials: exit %d\n%s", code, js)
	}
	if rows[0]["status"] != "TERMINATED" || rows[0]["iterations"] != 40.0 || rows[0]["restarts"] != 0.0 {
		t.Errorf("trial: %v, want TERMINATED after 40 iterations without a restart\n%s", rows[0], out.String())
	}
}

// leftoverWorker is a command worker that starts a process which leaves
// its process group (setsid) and notes its pid in the file $1, checks that
// its scratch folder holds nothing of an earlier run, and reports 30 epochs.
const leftoverWorker = `
setsid sleep 1000 >/dev/null 2>&1 &
echo $! >> "$1"
if [ -e "$GOTUNE_CHECKPOINT_DIR/mine" ]; then echo "a killed run's scratch" >&2; exit 3; fi
touch "$GOTUNE_CHECKPOINT_DIR/mine"
for i in $(seq 1 30); do echo "@gotune {\"epoch\": $i, \"loss\": 1}"; sleep 0.05; done
`

// running reports whether pid is a process that has not exited.
func running(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// wardenOf returns the pid of the warden that gotune process pid started.
func wardenOf(t *testing.T, pid int) int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		w, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 && strings.Contains(string(env), "\x00GOTUNE_WARDEN=1\x00") {
			if f := strings.Fields(string(stat[i+1:])); len(f) > 1 && f[1] == strconv.Itoa(pid) {
				return w
			}
		}
	}
	t.Fatalf("gotune (pid %d) has no warden", pid)
	return 0
}

// TestRunAfterKill9LeavesNothingBehind kills `gotune run` with SIGKILL
// while its worker runs a process that left the worker's process group.
// Its warden kills that process at once. When the warden is killed too,
// running the sweep again ends that process, marks the killed run's
// workers as no longer running, and restarts the trial in an empty scratch
// folder; and the process the new run's worker leaves behind dies with the
// worker.
func TestRunAfterKill9LeavesNothingBehind(t *testing.T) {
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("needs /proc")
	}
	t.Run("warden", func(t *testing.T) { testKill9LeavesNothingBehind(t, false) })
	t.Run("rerun", func(t *testing.T) { testKill9LeavesNothingBehind(t, true) })
}

func testKill9LeavesNothingBehind(t *testing.T, killWarden bool) {
	dir := t.TempDir()
	script, pids := filepath.Join(dir, "worker.sh"), filepath.Join(dir, "pids")
	if err := os.WriteFile(script, []byte(leftoverWorker), 0o644); err != nil {
		t.Fatal(err)
	}
	sweep := writeSweep(t, fmt.Sprintf(`name = "leftovers"
[objective]
metric = "loss"
[search]
num_samples = 1
[search.space]
x = 1
[trainer]
command = ["sh", %q, %q]
`, script, pids))
	db := filepath.Join(dir, "gotune.db")
	readPIDs := func() []int {
		data, _ := os.ReadFile(pids)
		var out []int
		for _, f := range strings.Fields(string(data)) {
			pid, _ := strconv.Atoi(f)
			out = append(out, pid)
		}
		return out
	}
	t.Cleanup(func() {
		for _, pid := range readPIDs() {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})

	cmd := gotune(t, "run", "--db", db, sweep)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for committedReports(db, "leftovers") < 2 {
		select {
		case err := <-exited:
			t.Fatalf("the sweep ended before it could be killed: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if killWarden {
		syscall.Kill(wardenOf(t, cmd.Process.Pid), syscall.SIGKILL)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-exited
	left := readPIDs()
	if len(left) != 1 {
		t.Fatalf("the killed run left %v, want one process", left)
	}
	if !killWarden {
		for i := 0; running(left[0]); i++ {
			if i == 500 {
				t.Fatalf("process %d, which left its worker's process group, outlived gotune killed with SIGKILL", left[0])
			}
			time.Sleep(10 * time.Millisecond)
		}
		return
	}
	if !running(left[0]) {
		t.Fatalf("process %d died with gotune and its warden", left[0])
	}
	countRunning := func() string {
		_, out, _ := runCLI("query", "--db", db, "--csv", "SELECT count(*) FROM workers WHERE status = 'RUNNING'")
		return strings.TrimSpace(out)
	}
	if got := countRunning(); !strings.HasSuffix(got, "\n1") {
		t.Fatalf("workers recorded as running after the kill: %q, want 1", got)
	}
	// What people read says how the run ended; the database keeps what
	// the run wrote last, for the rerun to continue from.
	shown := []struct {
		args []string
		want string
	}{
		{[]string{"ls"}, "leftovers  INTERRUPTED"},
		{[]string{"trials", "leftovers"}, "1      INTERRUPTED"},
		{[]string{"trials", "--status", "interrupted", "leftovers"}, "1      INTERRUPTED"},
		{[]string{"show", "leftovers", "1"}, "trial       1: INTERRUPTED"},
	}
	for _, c := range shown {
		args := append([]string{c.args[0], "--db", db}, c.args[1:]...)
		if code, out, errOut := runCLI(args...); code != 0 || !strings.Contains(out, c.want) {
			t.Errorf("gotune %s: exit %d, %q%s, want %q", strings.Join(c.args, " "), code, out, errOut, c.want)
		}
	}
	// Its worker, recorded RUNNING, shows as INTERRUPTED as well.
	var shownTrial showJSON
	if _, out, errOut := runCLI("show", "--db", db, "--json", "leftovers", "1"); json.Unmarshal([]byte(out), &shownTrial) != nil ||
		len(shownTrial.Workers) != 1 || shownTrial.Workers[0].Status != storage.TrialInterrupted {
		t.Errorf("gotune show --json leftovers 1: workers %+v, want one INTERRUPTED\n%s%s", shownTrial.Workers, out, errOut)
	}
	if _, out, _ := runCLI("trials", "--status", "RUNNING", "--db", db, "leftovers"); strings.Contains(out, "\n1 ") {
		t.Errorf("gotune trials --status RUNNING lists the interrupted trial:\n%s", out)
	}

	rerun, err := gotune(t, "run", "--db", db, sweep).CombinedOutput()
	if err != nil {
		t.Fatalf("the run after the kill: %v\n%s", err, rerun)
	}
	if want := "trial 1: the experiment was resumed; the trial restarts"; !strings.Contains(string(rerun), want) {
		t.Errorf("the run after the kill does not say %q:\n%s", want, rerun)
	}
	all := readPIDs()
	for _, pid := range all {
		if running(pid) {
			t.Errorf("process %d, which left its worker's process group, is still running", pid)
		}
	}
	if len(all) != 2 {
		t.Errorf("pids %v, want one of each run", all)
	}
	if got := countRunning(); !strings.HasSuffix(got, "\n0") {
		t.Errorf("workers recorded as running after the sweep: %q, want 0", got)
	}
	rows := trialRowsOf(t, db, "leftovers")
	if len(rows) != 1 || rows[0].Status != "TERMINATED" || rows[0].Iterations != 30 {
		t.Errorf("trials %+v, want one TERMINATED after 30 iterations", rows)
	}
	_, out, _ := runCLI("query", "--db", db, "--csv", "SELECT message FROM events WHERE kind = 'cleanup'")
	if !strings.Contains(out, "processes that workers of the interrupted run left running") {
		t.Errorf("cleanup events: %q", out)
	}
}

// TestRunRecordsARefusedReportLine runs a command that prints a report
// line over the size limit and a malformed one: each is an event on the
// trial, which goes on.
func TestRunRecordsARefusedReportLine(t *testing.T) {
	sweep := writeSweep(t, `name = "oversize"
[objective]
metric = "loss"
[search]
num_samples = 1
[search.space]
x = 1
[trainer]
command = ["sh", "-c", '''
printf '@gotune {"loss": 1, "pad": "'; head -c 2000000 /dev/zero | tr '\0' a; echo '"}'
echo '@gotune {"loss": oops}'
echo '@gotune {"loss": 2}'
''']
`)
	db := filepath.Join(t.TempDir(), "gotune.db")
	out, err := gotune(t, "run", "--db", db, sweep).CombinedOutput()
	if err != nil {
		t.Fatalf("gotune run: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "report_refused: worker 0: a report line of 2000030 bytes is over the limit") {
		t.Errorf("gotune run does not say a line was refused:\n%s", out)
	}
	_, events, _ := runCLI("query", "--db", db, "--csv", "SELECT message FROM events WHERE kind = 'report_refused' ORDER BY id")
	if !strings.Contains(events, "worker 0: a report line of 2000030 bytes is over the limit of 1048576: it is in the worker's log") ||
		!strings.Contains(events, "malformed report line") {
		t.Errorf("events of refused lines:\n%s", events)
	}
	rows := trialRowsOf(t, db, "oversize")
	if len(rows) != 1 || rows[0].Status != "TERMINATED" || rows[0].Iterations != 1 {
		t.Errorf("trials %+v, want one TERMINATED after 1 iteration", rows)
	}
}

// TestRunRotatesWorkerLogs runs a chatty command with a small cap on its
// log: the log is rotated, and only log_keep older files are kept.
func TestRunRotatesWorkerLogs(t *testing.T) {
	sweep := writeSweep(t, `name = "chatty"
[objective]
metric = "loss"
[search]
num_samples = 1
[search.space]
x = 1
[trainer]
command = ["sh", "-c", 'for i in $(seq 1 200); do printf "line %03d %090d\n" $i 0; done; echo "@gotune {\"loss\": 1}"']
log_max_bytes = "2KiB"
log_keep = 1
`)
	dir := t.TempDir()
	db := filepath.Join(dir, "gotune.db")
	if out, err := gotune(t, "run", "--db", db, sweep).CombinedOutput(); err != nil {
		t.Fatalf("gotune run: %v\n%s", err, out)
	}
	log := filepath.Join(dir, "checkpoints", "chatty", "trial_1", "logs", "worker_0.log")
	for _, path := range []string{log, log + ".1"} {
		fi, err := os.Stat(path)
		if err != nil || fi.Size() == 0 || fi.Size() > 2048 {
			t.Errorf("%s: %v; want 1 to 2048 bytes", path, err)
		}
	}
	if _, err := os.Stat(log + ".2"); err == nil {
		t.Errorf("%s.2 is there: log_keep = 1", log)
	}
	if data, _ := os.ReadFile(log); !strings.Contains(string(data), fmt.Sprintf("line 200 %090d\n", 0)) {
		t.Errorf("the log does not end with the last line:\n%s", data)
	}
}
