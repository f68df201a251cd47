package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// runCLI measures each of ns through a gotune binary it builds, with and
// without the trials' report files, and prints a JSON line for each.
func runCLI(ns []int, concurrent int, scheduler string) error {
	dir, err := os.MkdirTemp("", "gotune-bench-scale-bin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin, err := buildGotune(dir)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	for _, n := range ns {
		for _, reportFiles := range []string{"", "report_files = false"} {
			res, err := measureCLI(bin, n, concurrent, scheduler, reportFiles)
			if err != nil {
				return err
			}
			enc.Encode(res)
		}
	}
	return nil
}

// buildGotune builds the gotune command into dir and returns its path.
func buildGotune(dir string) (string, error) {
	bin := filepath.Join(dir, "gotune")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/gotune/gotune/cmd/gotune")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %w\n%s", err, out)
	}
	return bin, nil
}

// cliSweep is the sweep file of the instant-trial sweep that measure runs
// through the library, for gotune run; reportFiles is its [trainer]
// report_files line, "" to leave it out.
func cliSweep(n, concurrent int, scheduler, reportFiles string) string {
	return fmt.Sprintf(`name = "scale"
seed = 1

[objective]
metric = "loss"
mode = "min"

[search]
algorithm = "random"
num_samples = %d
max_concurrent = %d

[search.space]
x = { uniform = [0, 1] }

[scheduler]
kind = %q

[trainer]
command = ["/bin/echo", "@gotune {\"loss\": {x}}"]
%s

[trainer.scaling]
num_workers = 1
cpus_per_worker = 1

[resources]
cpus = %d
`, n, concurrent, scheduler, reportFiles, concurrent)
}

// measureCLI runs the instant-trial sweep of n trials as a user does:
// `gotune run sweep.toml` in a fresh folder, with bin, the sweep file
// setting reportFiles in [trainer] ("" leaves it out). The database and
// the trials' folders go beside the sweep file, as by default; the disk
// figures count everything in the folder but the sweep file.
func measureCLI(bin string, n, concurrent int, scheduler, reportFiles string) (map[string]any, error) {
	dir, err := os.MkdirTemp("", "gotune-bench-scale-cli-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	sweep := filepath.Join(dir, "sweep.toml")
	if err := os.WriteFile(sweep, []byte(cliSweep(n, concurrent, scheduler, reportFiles)), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "run", "sweep.toml")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	// Plain lines, as on a pipe: "   1.2s  trial 7   TERMINATED" ends a
	// trial; the times of each tenth's last end give the rates by tenth.
	var at []time.Time
	ended := 0
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		f := strings.Fields(lines.Text())
		if len(f) >= 4 && f[1] == "trial" && f[3] != "iter" && f[3] == strings.ToUpper(f[3]) {
			ended++
			if ended*10 >= (len(at)+1)*n {
				at = append(at, time.Now())
			}
		}
	}
	err = cmd.Wait()
	wall := time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("gotune run: %w\n%s", err, stderr.Bytes())
	}
	if ended != n {
		return nil, fmt.Errorf("gotune run ended %d trials, want %d\n%s", ended, n, stderr.Bytes())
	}
	rates := make([]float64, 0, 10)
	prev := start
	for _, t := range at {
		rates = append(rates, round(float64(n)/10/t.Sub(prev).Seconds(), 1))
		prev = t
	}
	disk, folders, err := diskUsage(dir)
	if err != nil {
		return nil, err
	}
	sweepBytes, _, err := diskUsage(sweep)
	if err != nil {
		return nil, err
	}
	disk -= sweepBytes
	files, _, err := diskUsage(filepath.Join(dir, "checkpoints"))
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	// The rusage of the process and its waited-for children: gotune and
	// its workers.
	ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	setting := "default"
	if reportFiles != "" {
		setting = reportFiles
	}
	out := map[string]any{
		"bench":                       "scale",
		"mode":                        "cli",
		"trials":                      n,
		"concurrent":                  concurrent,
		"scheduler":                   scheduler,
		"report_files":                setting,
		"wall_s":                      round(wall.Seconds(), 2),
		"trials_per_s":                round(float64(n)/wall.Seconds(), 1),
		"trials_per_s_by_tenth":       rates,
		"disk_bytes_per_trial":        round(float64(disk)/float64(n), 0),
		"trial_files_bytes_per_trial": round(float64(files)/float64(n), 0),
		"folders":                     folders,
		"cpus":                        runtime.NumCPU(),
	}
	if ru != nil {
		out["cpu_ms_per_trial"] = round(float64(cpu(*ru).Microseconds())/1000/float64(n), 3)
		out["peak_rss_mb"] = round(float64(ru.Maxrss)/1024, 1)
	}
	if msg := strings.TrimSpace(stderr.String()); msg != "" {
		out["stderr"] = msg // gotune's notice of what the trials' files cost
	}
	if len(rates) == 10 {
		out["flat_ratio"] = round(rates[9]/rates[0], 2)
	}
	return out, nil
}
