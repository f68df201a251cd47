package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// chaosWorker is a command worker with a deterministic learning curve: the
// loss at epoch e is (x-0.3)² + 1/e for the trial's x, and every epoch
// hands over a checkpoint that holds e and x. A restarted or promoted
// worker goes on from its checkpoint's epoch; a PBT clone keeps the x it
// was given, as its configuration says.
const chaosWorker = `
x=$1
max=$2
e=0
if [ -n "$GOTUNE_RESUME_DIR" ]; then e=$(cat "$GOTUNE_RESUME_DIR/epoch"); fi
while [ "$e" -lt "$max" ]; do
	e=$((e + 1))
	sleep 0.02
	d="$GOTUNE_CHECKPOINT_DIR/e$e"
	mkdir -p "$d" && echo "$e" > "$d/epoch" || exit 1 # a full disk
	loss=$(awk -v x="$x" -v e="$e" 'BEGIN { printf "%.10g", (x - 0.3) * (x - 0.3) + 1 / e }')
	echo "@gotune {\"epoch\": $e, \"loss\": $loss, \"checkpoint\": \"$d\"}"
done
`

// chaosSchedulers are the deterministic sweeps the chaos test disturbs:
// one trial at a time, a fixed seed, so that an undisturbed run's
// decisions are a function of the sweep file alone.
var chaosSchedulers = []struct{ name, section string }{
	{"fifo", `kind = "fifo"`},
	{"asha-stop", `kind = "asha"
mode = "stop"
time_attr = "epoch"
max_t = 9
grace_period = 1
reduction_factor = 3`},
	{"asha-promote", `kind = "asha"
mode = "promote"
time_attr = "epoch"
max_t = 9
grace_period = 1
reduction_factor = 3`},
	{"hyperband", `kind = "hyperband"
time_attr = "epoch"
max_t = 9
reduction_factor = 3`},
	{"pbt", `kind = "pbt"
time_attr = "epoch"
perturbation_interval = 3
hyperparam_mutations = { x = { uniform = [0.0, 1.0] } }`},
}

// chaosSweep writes the sweep of scheduler section sched into dir.
func chaosSweep(t *testing.T, dir, name, sched string) string {
	t.Helper()
	script := filepath.Join(dir, "worker.sh")
	if err := os.WriteFile(script, []byte(chaosWorker), 0o644); err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`name = %q
seed = 11
[objective]
metric = "loss"
mode = "min"
[search]
algorithm = "random"
num_samples = 6
max_concurrent = 1
[search.space]
x = { uniform = [0.0, 1.0] }
[scheduler]
%s
[trainer]
command = ["sh", %q, "{x}", "9"]
kill_timeout = 2
[trainer.failure]
max_failures = -1
heartbeat_timeout = 3
[trainer.checkpoint]
num_to_keep = 2
`, name, sched, script)
	path := filepath.Join(dir, "sweep.toml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// chaosFault is one disturbance of a running sweep.
type chaosFault int

const (
	killTuner chaosFault = iota
	killWorker
	stopTuner
	fullDisk  // only where the sweep's folder is a small file system
	killAgent // only where the workers run on an agent
	numChaosFaults
)

func (f chaosFault) String() string {
	return [...]string{"kill -9 of the tuner", "kill -9 of a worker", "SIGSTOP of the tuner past the heartbeat timeout",
		"a full disk for a while", "kill -9 of the node agent"}[f]
}

// chaosOutcome is what a sweep is judged by: each trial's configuration,
// status, last iteration and last metric.
type chaosOutcome struct {
	Trial      int
	Status     string
	X          float64
	Iterations int
	Last       string
}

func chaosOutcomes(t *testing.T, db, name string) []chaosOutcome {
	t.Helper()
	var res []chaosOutcome
	for _, r := range trialRowsOf(t, db, name) {
		x, _ := r.Params["x"].(float64)
		last := "none"
		if r.LastMetric != nil {
			last = strconv.FormatFloat(float64(*r.LastMetric), 'g', 10, 64)
		}
		res = append(res, chaosOutcome{r.TrialID, r.Status, x, r.Iterations, last})
	}
	return res
}

// committedReports counts the reports the sweep's database holds.
func committedReports(db, name string) int {
	code, out, _ := runCLI("query", "--db", db, "--csv",
		fmt.Sprintf("SELECT count(*) FROM reports_v WHERE experiment = '%s'", name))
	if code != 0 {
		return -1
	}
	lines := strings.Fields(out)
	if len(lines) < 2 {
		return -1
	}
	n, err := strconv.Atoi(lines[len(lines)-1])
	if err != nil {
		return -1
	}
	return n
}

// workerPIDs lists the running processes of script.
func workerPIDs(script string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(script)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestChaos disturbs deterministic sweeps of every scheduler with kill -9
// of the tuner, of workers and of the node agent that runs them, and with
// SIGSTOP of the tuner, at random moments drawn from a logged seed,
// rerunning the sweep after each kill of the tuner, and checks that every
// trial ends as in an undisturbed run. Each sweep runs twice: with its
// workers on the tuner's node, and on an agent.
func TestChaos(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("GOTUNE_CHAOS_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("GOTUNE_CHAOS_SEED=%d", seed)
	t.Setenv("GOTUNE_TOKEN", "chaos")
	rng := rand.New(rand.NewPCG(seed, 0xc4a05))
	injected := map[chaosFault]int{}
	noFullDisk := false
	for _, sc := range chaosSchedulers {
		t.Run(sc.name, func(t *testing.T) {
			base := t.TempDir()
			want := chaosOutcomes(t, runUndisturbed(t, base, sc.name, sc.section), sc.name)
			total := 0
			for _, o := range want {
				total += o.Iterations
			}
			for _, onAgent := range []bool{false, true} {
				where := "local"
				if onAgent {
					where = "agent"
				}
				dir := filepath.Join(base, where)
				os.MkdirAll(dir, 0o755)
				err := mountSmallFS(t, dir, "64m")
				if err != nil && !noFullDisk {
					t.Logf("no full disk among the faults: %v", err)
					noFullDisk = true
				}
				c := &chaos{t: t, rng: rng, injected: injected, dir: dir, name: sc.name, total: total, fillable: err == nil,
					sweep: chaosSweep(t, dir, sc.name, sc.section), db: filepath.Join(dir, "gotune.db")}
				c.script = filepath.Join(dir, "worker.sh")
				if onAgent {
					c.cert, c.key = selfSigned(t, dir)
					c.addr = "127.0.0.1:" + freePort(t)
					c.startAgent()
				}
				c.run()
				got := chaosOutcomes(t, c.db, sc.name)
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("%s, after the faults:\n%v\nan undisturbed run:\n%v", where, got, want)
					for i := range min(len(got), len(want)) {
						if got[i] != want[i] {
							_, show, _ := runCLI("show", "--db", c.db, sc.name, strconv.Itoa(got[i].Trial))
							t.Logf("trial %d after the faults:\n%s", got[i].Trial, show)
						}
					}
				}
			}
		})
	}
	t.Logf("faults injected: %d kill -9 of the tuner, %d kill -9 of a worker, %d SIGSTOP of the tuner, %d full disks, %d kill -9 of the agent",
		injected[killTuner], injected[killWorker], injected[stopTuner], injected[fullDisk], injected[killAgent])
}

// chaos is one disturbed sweep: its files and, when its workers run on an
// agent, the head's address and the agent.
type chaos struct {
	t                 *testing.T
	rng               *rand.Rand
	injected          map[chaosFault]int
	dir, name         string
	sweep, script, db string
	total             int
	fillable          bool // dir is a small file system of its own

	cert, key, addr string
	agent           *proc
}

// startAgent starts the node agent that runs the sweep's workers; it
// joins the head at c.addr whenever one listens there.
func (c *chaos) startAgent() {
	c.agent = startGotune(c.t, "agent", "--head", c.addr, "--ca", c.cert, "--name", "chaos",
		"--resources", "cpus=2", "--workdir", filepath.Join(c.dir, "agent"))
}

// run reruns the sweep until it finishes, disturbing each run.
func (c *chaos) run() {
	t := c.t
	for run := 0; ; run++ {
		if run > 20 {
			t.Fatal("the sweep did not finish after 20 runs")
		}
		args := []string{"run", "--db", c.db}
		if c.agent != nil {
			args = append(args, "--listen", c.addr, "--cert", c.cert, "--key", c.key,
				"--agents", "1", "--head-workers=false", "--agent-timeout", "2s")
		}
		cmd := gotune(t, append(args, c.sweep)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		killed := c.disturb(cmd.Process, exited)
		err := <-exited
		switch {
		case err == nil:
		case strings.Contains(out.String(), "has already ended"):
			// The kill came after the sweep had ended.
		case killed:
			continue
		default:
			t.Fatalf("run %d: %v\n%s", run, err, out.String())
		}
		return
	}
}

// runUndisturbed runs the sweep once without faults and returns its database.
func runUndisturbed(t *testing.T, base, name, section string) string {
	t.Helper()
	dir := filepath.Join(base, "undisturbed")
	os.MkdirAll(dir, 0o755)
	db := filepath.Join(dir, "gotune.db")
	cmd := gotune(t, "run", "--db", db, chaosSweep(t, dir, name, section))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("undisturbed run: %v\n%s", err, out)
	}
	return db
}

// disturb injects faults into the running tuner p at random report counts
// until the sweep exits or a fault kills the tuner; it reports whether it
// killed the tuner.
func (c *chaos) disturb(p *os.Process, exited chan error) bool {
	gap := func() int { return 1 + c.rng.IntN(max(c.total/3, 1)) }
	next := max(committedReports(c.db, c.name), 0) + gap()
	faults := numChaosFaults
	if c.agent == nil {
		faults = killAgent
	}
	for {
		select {
		case err := <-exited:
			exited <- err
			return false
		default:
		}
		if committedReports(c.db, c.name) < next {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		f := chaosFault(c.rng.IntN(int(faults)))
		if f == fullDisk && !c.fillable {
			continue
		}
		switch f {
		case killTuner:
			p.Signal(syscall.SIGKILL)
			c.injected[f]++
			return true
		case killWorker:
			pids := workerPIDs(c.script)
			if len(pids) == 0 {
				break
			}
			syscall.Kill(pids[c.rng.IntN(len(pids))], syscall.SIGKILL)
			c.injected[f]++
		case stopTuner:
			p.Signal(syscall.SIGSTOP)
			time.Sleep(4 * time.Second) // past the heartbeat timeout
			p.Signal(syscall.SIGCONT)
			c.injected[f]++
		case fullDisk:
			filler := fillFS(c.t, c.dir)
			time.Sleep(time.Duration(500+c.rng.IntN(1500)) * time.Millisecond)
			os.Remove(filler)
			c.injected[f]++
		case killAgent:
			c.agent.cmd.Process.Signal(syscall.SIGKILL)
			c.agent.wait(c.t)
			c.startAgent()
			c.injected[f]++
		}
		next = committedReports(c.db, c.name) + gap()
	}
}
