package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gotune/gotune/cmd/gotune/sweepfile"
)

// hangBound bounds waits that end only when something works, so that a
// failure fails the test rather than hang it.
const hangBound = 3 * time.Minute

// proc is a gotune process of a test with its output, line by line.
type proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  strings.Builder // stdout and stderr
	done chan struct{}
	err  error
}

func startGotune(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: gotune(t, args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() || os.Getenv("GOTUNE_TEST_VERBOSE") != "" {
			t.Logf("gotune %s:\n%s", strings.Join(args, " "), p.text())
		}
	})
	return p
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *proc) text() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// await waits until the output matches re and returns the submatches.
func (p *proc) await(t *testing.T, re string) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(hangBound)
	for {
		if m := rx.FindStringSubmatch(p.text()); m != nil {
			return m
		}
		select {
		case <-p.done:
			if m := rx.FindStringSubmatch(p.text()); m != nil {
				return m
			}
			t.Fatalf("gotune exited (%v) before printing /%s/:\n%s", p.err, re, p.text())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for /%s/", re)
		}
	}
}

func (p *proc) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(hangBound):
		t.Fatal("gotune did not exit")
		return nil
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T, dir string) (cert, key string) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "head"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, "head.crt"), filepath.Join(dir, "head.key")
	os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	return cert, key
}

// gatedTrainer is a command worker: rank 0 reports steps 1 to 4 with a
// checkpoint each, the other ranks heartbeats, and every rank waits before
// step 3 until the file $2 exists. A restarted rank goes on from the step
// of its checkpoint.
const gatedTrainer = `
start=0
if [ -n "$GOTUNE_RESUME_DIR" ]; then start=$(cat "$GOTUNE_RESUME_DIR/step"); fi
s=$start
while [ "$s" -lt 4 ]; do
	s=$((s + 1))
	if [ "$s" -eq 3 ]; then
		while [ ! -e "$2" ]; do sleep 0.05; done
	fi
	if [ "$GOTUNE_WORLD_RANK" = 0 ]; then
		d="$GOTUNE_CHECKPOINT_DIR/ck$s"
		mkdir -p "$d" && echo "$s" > "$d/step"
		echo "@gotune {\"step\": $s, \"loss\": $1, \"checkpoint\": \"$d\"}"
	else
		echo "@gotune {}"
	fi
	sleep 0.05
done
`

// TestClusterSweepSurvivesAgentKill runs a sweep whose groups spread over
// the head and three agents (separate processes on 127.0.0.2-4, talking
// gRPC over TLS), kills one agent with SIGKILL while its trials wait
// mid-run, brings it back under its name, and checks that every trial
// completes, the ones hit resuming from the checkpoints the agents sent.
func TestClusterSweepSurvivesAgentKill(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t, dir)
	script := filepath.Join(dir, "train.sh")
	gate := filepath.Join(dir, "gate")
	os.WriteFile(script, []byte(gatedTrainer), 0o644)
	sweep := writeSweep(t, fmt.Sprintf(`name = "cluster"
[objective]
metric = "loss"
mode = "min"
[search]
num_samples = 4
max_concurrent = 2
[search.space]
x = { uniform = [0.0, 1.0] }
[trainer]
command = ["sh", %q, "{x}", %q]
[trainer.scaling]
num_workers = 3
cpus_per_worker = 1
placement = "spread"
[trainer.failure]
max_failures = 3
`, script, gate))
	db := filepath.Join(dir, "gotune.db")
	t.Setenv("GOTUNE_TOKEN", "s3cret")
	head := startGotune(t, "run", "--db", db, "--listen", "127.0.0.1:0", "--cert", cert, "--key", key,
		"--agents", "3", "--resources", "cpus=1", sweep)
	addr := head.await(t, `listening for agents on (\S+)`)[1]

	// A wrong token is refused, with exit code 2, and the head logs it.
	intruder := startGotune(t, "agent", "--head", addr, "--ca", cert, "--token", "guess", "--name", "intruder")
	var ee *exec.ExitError
	if err := intruder.wait(t); !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(intruder.text(), "token") {
		t.Errorf("an agent with a wrong token: %v\n%s", err, intruder.text())
	}
	head.await(t, `refused a call to \S+ from 127\.0\.0\.1:\d+: a wrong token`)

	agent := func(name, host string) *proc {
		return startGotune(t, "agent", "--head", addr, "--ca", cert, "--name", name, "--host", host, "--resources", "cpus=2")
	}
	agents := map[string]*proc{"a": agent("a", "127.0.0.2"), "b": agent("b", "127.0.0.3"), "c": agent("c", "127.0.0.4")}

	// Trials wait at the gate after their second report; kill agent c
	// once a trial with a worker on it has made its second report.
	trial := agents["c"].await(t, `started pid \d+ \(trial (\d+), rank \d+\)`)[1]
	head.await(t, `trial `+trial+` +iter 2 `)
	if err := agents["c"].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	agents["c"].wait(t)
	head.await(t, `agent c lost`)
	agents["c"] = agent("c", "127.0.0.4")
	head.await(t, `agent c joined from 127\.0\.0\.4(?s:.*)agent c joined from 127\.0\.0\.4`)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	if err := head.wait(t); err != nil {
		t.Fatalf("the sweep: %v\n%s", err, head.text())
	}
	if !regexp.MustCompile(`trial ` + trial + ` +restart with \d+ workers from the checkpoint of iteration 2, \d+ reports recorded: worker \d+ \(pid \d+\) was lost with node c`).MatchString(head.text()) {
		t.Errorf("no restart of trial %s after the loss of node c:\n%s", trial, head.text())
	}
	code, stdout, stderr := runCLI("trials", "--db", db, "--json", "cluster")
	if code != 0 {
		t.Fatalf("trials: %s", stderr)
	}
	var rows []trialJSON
	if err := json.Unmarshal([]byte(stdout), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 {
		t.Errorf("%d trials, want 4", len(rows))
	}
	for _, r := range rows {
		if r.Status != "TERMINATED" || r.Iterations != 4 {
			t.Errorf("trial %d: %s with %d iterations, want TERMINATED with 4", r.TrialID, r.Status, r.Iterations)
		}
	}
	// The trial hit ends with the checkpoint of its last step, which an
	// agent or the head wrote and the head's store committed.
	step, err := os.ReadFile(filepath.Join(dir, "checkpoints", "cluster", "trial_"+trial, "checkpoint_000004", "step"))
	if err != nil || strings.TrimSpace(string(step)) != "4" {
		t.Errorf("trial %s's last checkpoint: %q, %v", trial, step, err)
	}
	// Every agent ran workers.
	for name, a := range agents {
		if !strings.Contains(a.text(), "started pid") {
			t.Errorf("agent %s ran no worker", name)
		}
		a.cmd.Process.Signal(syscall.SIGTERM)
	}
	for name, a := range agents {
		if err := a.wait(t); err != nil {
			t.Errorf("agent %s after SIGTERM: %v", name, err)
		}
	}
}

func TestListenNeedsAToken(t *testing.T) {
	t.Setenv("GOTUNE_TOKEN", "")
	code, _, stderr := runCLI("run", "--listen", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "db"), liveSweep(t, "x", 1, 1))
	if code != 2 || !strings.Contains(stderr, "token") {
		t.Errorf("--listen without a token: exit %d\n%s", code, stderr)
	}
	code, _, stderr = runCLI("agent", "--head", "127.0.0.1:1")
	if code != 2 || !strings.Contains(stderr, "token") {
		t.Errorf("agent without a token: exit %d\n%s", code, stderr)
	}
	code, _, stderr = runCLI("run", "--agents", "2", "--db", filepath.Join(t.TempDir(), "db"), liveSweep(t, "x", 1, 1))
	if code != 2 || !strings.Contains(stderr, "--agents needs --listen") {
		t.Errorf("--agents without --listen: exit %d\n%s", code, stderr)
	}
}

// TestDeployedSweepIsValid decodes and validates the sweep file the
// Kubernetes manifest ships in its ConfigMap.
func TestDeployedSweepIsValid(t *testing.T) {
	manifest, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "kubernetes", "gotune.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(manifest), "  sweep.toml: |\n")
	if !ok {
		t.Fatal("the manifest has no sweep.toml in its ConfigMap")
	}
	var sweep strings.Builder
	for _, line := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(line, "    ") {
			break
		}
		sweep.WriteString(strings.TrimPrefix(line, "    ") + "\n")
	}
	cfg, err := sweepfile.Decode("gotune.yaml", []byte(sweep.String()))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.Trainer.Dataset != "/data/digits.csv" {
		t.Errorf("dataset %q: the image ships it as /data/digits.csv", cfg.Trainer.Dataset)
	}
}
