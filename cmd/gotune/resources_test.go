package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestRunResourcesFlag checks --resources on `gotune run`: it is parsed
// with clear errors, it replaces the machine's resources, and a sweep
// whose group can never fit them is refused before anything runs.
func TestRunResourcesFlag(t *testing.T) {
	dataset, _ := filepath.Abs(filepath.Join(repoRoot, "examples/data/digits.csv"))
	sweep := func(scaling string) string {
		return writeSweep(t, `name = "r"
[objective]
metric = "val_acc"
mode = "max"
[search]
num_samples = 2
max_concurrent = 2
[search.space]
epochs = 1
[trainer]
model = "mlp"
dataset = "`+dataset+`"
[trainer.scaling]
num_workers = 2
cpus_per_worker = 0.5
`+scaling)
	}
	tests := []struct {
		name      string
		resources string
		scaling   string
		code      int
		inStderr  []string
	}{
		{"bad unit", "memory=32XB", "", 2, []string{"--resources: memory:", `unknown unit "XB"`}},
		{"unknown key", "cores=4", "", 2, []string{"--resources: cores: unknown key"}},
		{"group never fits", "cpus=0.5", "", 2, []string{"trainer.scaling", "a group of 2 workers × (0.5 CPU)", "can never be placed", "0.5 CPU in all"}},
		{"GPU group on one GPU", "cpus=4,gpus=1", "gpus_per_worker = 1", 2, []string{"1 GPU in all"}},
		{"GPU shares on one GPU", "cpus=4,gpus=1", "gpus_per_worker = 0.5", 0, nil},
		{"declared without GPUs", "gpus=0", "", 0, nil},
		{"fits one group at a time", "cpus=1", "", 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI("run", "--db", filepath.Join(t.TempDir(), "db"), "--resources", tt.resources, sweep(tt.scaling))
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tt.code, stderr)
			}
			for _, want := range tt.inStderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr %q does not mention %q", stderr, want)
				}
			}
		})
	}
}
