package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gotune/gotune/cmd/gotune/sweepfile"
	"github.com/gotune/gotune/storage"
)

// TestRunCommandSweep runs a sweep whose trials are a shell command, end to
// end through gotune run, with two workers per trial.
func TestRunCommandSweep(t *testing.T) {
	dir := t.TempDir()
	sweep := filepath.Join(dir, "sweep.toml")
	os.WriteFile(sweep, []byte(`name = "shell"
seed = 3

[objective]
metric = "loss"

[search]
num_samples = 3
max_concurrent = 2

[search.space]
x = { uniform = [0, 1] }

[trainer]
command = ["sh", "-c", "for i in 1 2 3; do echo \"@gotune {\\\"loss\\\": {x}, \\\"step\\\": $i}\"; done; echo done >&2", "{x}"]

[trainer.scaling]
num_workers = 2
cpus_per_worker = 0.1
`), 0o644)
	db := filepath.Join(dir, "sweep.db")
	cmd := gotune(t, "run", "--db", db, sweep)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("gotune run: %v\n%s\n%s", err, out.String(), errOut.String())
	}
	if n := strings.Count(out.String(), " iter "); n != 9 {
		t.Errorf("%d report lines, want 9:\n%s", n, out.String())
	}
	if !strings.Contains(out.String(), "best trial:") {
		t.Errorf("no summary:\n%s", out.String())
	}
	log, err := os.ReadFile(filepath.Join(dir, "checkpoints", "shell", "trial_1", "logs", "worker_1.log"))
	if err != nil || !strings.Contains(string(log), "done") {
		t.Errorf("worker log: %q, %v", log, err)
	}
}

// torchAvailable reports whether the system Python has PyTorch. Without
// it the test is skipped, except in CI (GOTUNE_CI=1) where it fails.
func torchAvailable(t *testing.T) {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import torch").Run(); err != nil {
		if os.Getenv("GOTUNE_CI") == "1" {
			t.Fatalf("PyTorch is needed in CI (apt-get install python3-torch): %v", err)
		}
		t.Skipf("no PyTorch for /usr/bin/python3: %v", err)
	}
}

// TestPyTorchExample runs examples/pytorch_ddp.py under gotune, 2 workers
// per trial, as examples/pytorch_ddp.toml does but shorter, and then
// unchanged under torchrun.
func TestPyTorchExample(t *testing.T) {
	torchAvailable(t)
	if _, err := sweepfile.Load(filepath.Join(repoRoot, "examples", "pytorch_ddp.toml")); err != nil {
		t.Fatalf("the example sweep file: %v", err)
	}
	dir := t.TempDir()
	sweep := filepath.Join(dir, "ddp.toml")
	os.WriteFile(sweep, []byte(`name = "ddp-test"
seed = 7

[objective]
metric = "val_acc"
mode = "max"

[search]
num_samples = 2
max_concurrent = 1

[search.space]
lr = { loguniform = [0.05, 0.2] }
hidden = { choice = [32, 64] }

[trainer]
command = ["/usr/bin/python3", "examples/pytorch_ddp.py", "--lr={lr}", "--hidden={hidden}", "--epochs=2"]

[trainer.scaling]
num_workers = 2
cpus_per_worker = 1

[trainer.checkpoint]
num_to_keep = 1
score_attribute = "val_acc"
`), 0o644)
	db := filepath.Join(dir, "ddp.db")
	cmd := gotune(t, "run", "--db", db, sweep)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("gotune run: %v\n%s\n%s", err, out.String(), errOut.String())
	}
	code, stdout, _ := runCLI("trials", "--db", db, "--json", "ddp-test")
	var rows []trialJSON
	if code != 0 || json.Unmarshal([]byte(stdout), &rows) != nil || len(rows) != 2 {
		t.Fatalf("trials: %d\n%s", code, stdout)
	}
	for _, r := range rows {
		if r.Status != "TERMINATED" || r.Iterations != 2 || r.BestMetric == nil || *r.BestMetric < 0.5 {
			t.Errorf("trial %+v", r)
		}
	}
	for trial := 1; trial <= 2; trial++ {
		ckpt := filepath.Join(dir, "checkpoints", "ddp-test", fmt.Sprintf("trial_%d", trial), "checkpoint_000002", "ckpt.pt")
		if _, err := os.Stat(ckpt); err != nil {
			t.Errorf("trial %d's last checkpoint: %v", trial, err)
		}
	}

	port := freePort(t)
	torchrun := exec.Command("/usr/bin/python3", "-m", "torch.distributed.run", "--nproc_per_node=2",
		"--master_addr=127.0.0.1", "--master_port="+port, "--redirects", "9:0", "--tee", "9:0",
		"examples/pytorch_ddp.py", "--epochs=1")
	torchrun.Dir = repoRoot
	got, err := torchrun.CombinedOutput()
	if err != nil || !strings.Contains(string(got), `@gotune {"epoch": 1,`) {
		t.Errorf("under torchrun: %v\n%s", err, got)
	}
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

// TestRunRefusesCheckpointsOutside runs a command worker that hands over a
// folder of the user's (standing for /etc), a link that leads to it, and
// checkpoints of its own holding a link to it, which retention deletes:
// the folder stays as it was, gotune show lists a refusal for each of the
// first two, and every report is recorded.
func TestRunRefusesCheckpointsOutside(t *testing.T) {
	dir := t.TempDir()
	etc := filepath.Join(dir, "etc")
	os.MkdirAll(etc, 0o755)
	os.WriteFile(filepath.Join(etc, "passwd"), []byte("keep"), 0o644)
	worker := filepath.Join(dir, "worker.sh")
	os.WriteFile(worker, []byte(`out="$1"
for e in 1 2 3 4 5; do
	case $e in
	1) d="$out" ;;
	2) ln -s "$out" "$GOTUNE_CHECKPOINT_DIR/link"; d="$GOTUNE_CHECKPOINT_DIR/link" ;;
	*) d="$GOTUNE_CHECKPOINT_DIR/e$e"; mkdir "$d"; echo $e > "$d/epoch"; ln -s "$out" "$d/escape" ;;
	esac
	echo "@gotune {\"epoch\": $e, \"loss\": 0.$e, \"checkpoint\": \"$d\"}"
done
`), 0o644)
	sweep := filepath.Join(dir, "sweep.toml")
	os.WriteFile(sweep, []byte(fmt.Sprintf(`name = "confined"

[objective]
metric = "loss"

[search]
num_samples = 1

[search.space]
x = 1

[trainer]
command = ["sh", %q, %q]

[trainer.checkpoint]
num_to_keep = 1
`, worker, etc)), 0o644)
	db := filepath.Join(dir, "sweep.db")
	if code, out, errOut := runCLI("run", "--db", db, sweep); code != 0 {
		t.Fatalf("gotune run: exit %d\n%s\n%s", code, out, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(etc, "passwd")); err != nil || string(b) != "keep" {
		t.Errorf("the folder outside after the run: %q, %v; want it untouched", b, err)
	}
	code, stdout, stderr := runCLI("show", "--db", db, "--json", "confined", "1")
	var show showJSON
	if code != 0 || json.Unmarshal([]byte(stdout), &show) != nil {
		t.Fatalf("show: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if len(show.Reports) != 5 {
		t.Errorf("%d reports, want 5", len(show.Reports))
	}
	var refused []string
	for _, e := range show.Events {
		if e.Kind == storage.EventCheckpointRefused {
			refused = append(refused, e.Message)
		}
	}
	if len(refused) != 2 || !strings.Contains(refused[0], etc+" is outside") || !strings.Contains(refused[1], "link (it resolves to "+etc+")") {
		t.Errorf("refusals %q; want one for %s and one for the link to it", refused, etc)
	}
	var kept []int
	for _, ck := range show.Checkpoints {
		if ck.Kept {
			kept = append(kept, ck.Iteration)
		}
	}
	if len(show.Checkpoints) != 3 || fmt.Sprint(kept) != "[4 5]" {
		t.Errorf("checkpoints %+v; want 3, 4 and 5 committed and 4 and 5 kept", show.Checkpoints)
	}
	// The plain listing shows the refusal too.
	if code, stdout, _ := runCLI("show", "--db", db, "confined", "1"); code != 0 || !strings.Contains(stdout, "checkpoint_refused") {
		t.Errorf("show: exit %d, no refusal listed:\n%s", code, stdout)
	}
}
