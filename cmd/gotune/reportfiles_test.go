package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gotune/gotune/dashboard/trialfiles"
	"github.com/gotune/gotune/tfevents"
)

// reportOnlySweep is a sweep of samples trials whose command prints one
// report and nothing else; extra goes into [trainer].
func reportOnlySweep(samples int, extra string) string {
	return fmt.Sprintf(`name = "quiet"
[objective]
metric = "loss"
[search]
num_samples = %d
max_concurrent = 1
[search.space]
x = { uniform = [0, 1] }
[trainer]
command = ["/bin/echo", "@gotune {\"loss\": {x}}"]
%s
[trainer.scaling]
cpus_per_worker = 0.1
`, samples, extra)
}

// TestReportFiles runs a sweep of trials that only report: by default
// every trial's folder holds its TensorBoard event file and reports.csv;
// with report_files = false no trial leaves a folder, and gotune export
// still gives every report.
func TestReportFiles(t *testing.T) {
	for _, tc := range []struct {
		extra   string
		folders bool
	}{
		{"", true},
		{"report_files = true", true},
		{"report_files = false", false},
	} {
		t.Run(tc.extra, func(t *testing.T) {
			sweep := writeSweep(t, reportOnlySweep(3, tc.extra))
			dir := filepath.Dir(sweep)
			db := filepath.Join(dir, "quiet.db")
			if code, out, errOut := runCLI("run", "--db", db, sweep); code != 0 {
				t.Fatalf("gotune run: exit %d\n%s\n%s", code, out, errOut)
			}
			for trial := 1; trial <= 3; trial++ {
				td := filepath.Join(dir, "checkpoints", "quiet", fmt.Sprintf("trial_%d", trial))
				entries, err := os.ReadDir(td)
				if !tc.folders {
					if !os.IsNotExist(err) {
						t.Errorf("trial %d left a folder (%v) holding %v", trial, err, entries)
					}
					continue
				}
				var csv, events bool
				for _, e := range entries {
					csv = csv || e.Name() == trialfiles.CSVName
					events = events || tfevents.IsEventFile(e.Name())
				}
				if err != nil || !csv || !events {
					t.Errorf("trial %d's folder: %v, holding %v; want %s and an event file", trial, err, entries, trialfiles.CSVName)
				}
			}
			code, out, errOut := runCLI("export", "--db", db, "quiet", "--format", "json")
			var reports []map[string]any
			if code != 0 || json.Unmarshal([]byte(out), &reports) != nil || len(reports) != 3 {
				t.Errorf("export: exit %d, want 3 reports:\n%s\n%s", code, out, errOut)
			}
		})
	}
}

// TestReportFilesNotice starts gotune run on sweeps around the size above
// which it says what the per-trial files cost on disk, and interrupts each
// once a trial has reported: the notice comes only for a sweep of more
// than 10,000 trials that leaves report_files out.
func TestReportFilesNotice(t *testing.T) {
	for _, tc := range []struct {
		samples int
		extra   string
		notice  bool
	}{
		{20_000, "", true},
		{10_000, "", false},
		{20_000, "report_files = true", false},
		{20_000, "report_files = false", false},
	} {
		t.Run(fmt.Sprintf("%d %s", tc.samples, tc.extra), func(t *testing.T) {
			sweep := writeSweep(t, reportOnlySweep(tc.samples, tc.extra))
			cmd := gotune(t, "run", "--db", filepath.Join(filepath.Dir(sweep), "quiet.db"), sweep)
			var errOut strings.Builder
			cmd.Stderr = &errOut
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			lines := bufio.NewScanner(stdout)
			reported := false
			for !reported && lines.Scan() {
				reported = strings.Contains(lines.Text(), " iter 1 ")
			}
			cmd.Process.Signal(syscall.SIGTERM)
			io.Copy(io.Discard, stdout)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				cmd.Process.Kill()
				t.Fatal("gotune run did not stop on SIGTERM")
			}
			if !reported {
				t.Fatalf("no trial reported:\n%s", errOut.String())
			}
			want := fmt.Sprintf("gotune: %d trials: the TensorBoard and CSV files of each trial take about 12 KiB of disk", tc.samples)
			if got := strings.Contains(errOut.String(), want) && strings.Contains(errOut.String(), "report_files = false in [trainer]"); got != tc.notice {
				t.Errorf("notice %v, want %v; stderr:\n%s", got, tc.notice, errOut.String())
			}
		})
	}
}
