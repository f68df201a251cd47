package sweepfile

import (
	"errors"
	"strings"
	"testing"

	"github.com/gotune/gotune/workers"
)

func TestDecodeResources(t *testing.T) {
	tests := []struct {
		name string
		add  string
		want workers.Declared
	}{
		{"none", "", workers.Declared{}},
		{"full", "\n[resources]\ncpus = 8\nmemory = \"32GiB\"\ngpus = 2\n", workers.Declared{Nodes: 1, CPUs: 8, Memory: 32 * workers.GiB, GPUs: 2}},
		{"empty section declares one node", "\n[resources]\n", workers.Declared{Nodes: 1}},
		{"many nodes", "\n[resources]\nnodes = 64\ngpus = 8\n", workers.Declared{Nodes: 64, GPUs: 8}},
		{"memory in bytes", "\n[resources]\nmemory = 17179869184\n", workers.Declared{Nodes: 1, Memory: 16 * workers.GiB}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Decode("sweep.toml", []byte(valid+tt.add))
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Resources != tt.want {
				t.Errorf("got %+v, want %+v", cfg.Resources, tt.want)
			}
		})
	}
	cfg, err := Decode("sweep.toml", []byte(strings.Replace(valid, "num_workers = 2", "num_workers = 2\ngpus_per_worker = 0.5\nmemory_per_worker = \"4GiB\"\nplacement = \"spread\"", 1)))
	if err != nil {
		t.Fatal(err)
	}
	sc := cfg.Trainer.Scaling
	if sc.GPUsPerWorker != 0.5 || sc.MemoryPerWorker != 4*workers.GiB || sc.Placement != workers.Spread {
		t.Errorf("scaling: %+v", sc)
	}
}

// TestDecodeResourceErrors checks that each resource mistake names the
// file, the line and the key.
func TestDecodeResourceErrors(t *testing.T) {
	const res = "\n[resources]\ncpus = 8\nmemory = \"32GiB\"\ngpus = 2\n" // lines 24-27
	tests := []struct {
		name string
		doc  string
		line int
		key  string
		msg  string
	}{
		{"unknown unit", strings.Replace(valid+res, `"32GiB"`, `"32XB"`, 1), 26, "resources.memory", `unknown unit "XB"`},
		{"no unit", strings.Replace(valid+res, `"32GiB"`, `"32"`, 1), 26, "resources.memory", "has no unit"},
		{"integer too small", strings.Replace(valid+res, `"32GiB"`, `32`, 1), 26, "resources.memory", "give a unit"},
		{"fractional declared GPUs", strings.Replace(valid+res, "gpus = 2", "gpus = 1.5", 1), 27, "resources.gpus", "want an integer"},
		{"negative GPUs", strings.Replace(valid+res, "gpus = 2", "gpus = -1", 1), 27, "resources.gpus", "from 0"},
		{"zero nodes", valid + res + "nodes = 0\n", 28, "resources.nodes", "at least 1"},
		{"unknown key", valid + res + "gpu_memory = 3\n", 28, "resources.gpu_memory", "unknown key"},
		{"fraction above one", strings.Replace(valid, "num_workers = 2", "num_workers = 2\ngpus_per_worker = 1.5", 1), 23, "trainer.scaling.gpus_per_worker", "must be whole"},
		{"worker memory unit", strings.Replace(valid, "num_workers = 2", "num_workers = 2\nmemory_per_worker = \"4 gigs\"", 1), 23, "trainer.scaling.memory_per_worker", "unknown unit"},
		{"placement", strings.Replace(valid, "num_workers = 2", "num_workers = 2\nplacement = \"scatter\"", 1), 23, "trainer.scaling.placement", `"pack" or "spread"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode("sweep.toml", []byte(tt.doc))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v (%T), want *Error", err, err)
			}
			if e.File != "sweep.toml" || e.Line != tt.line || e.Key != tt.key {
				t.Errorf("got file %q line %d key %q, want sweep.toml line %d key %q (%v)", e.File, e.Line, e.Key, tt.line, tt.key, err)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not mention %q", err, tt.msg)
			}
		})
	}
}
