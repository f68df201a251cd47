package cluster

import (
	"strings"
	"testing"

	"github.com/gotune/gotune/workers"
)

// TestGroupResources checks what an agent job asks Slurm for: one trial
// group at its largest, packed on one node or spread one worker a node.
func TestGroupResources(t *testing.T) {
	for _, tt := range []struct {
		name  string
		group GroupSize
		want  string
	}{
		{"defaults", GroupSize{}, "--nodes=1 --ntasks=1 --cpus-per-task=1"},
		{"half CPUs", GroupSize{Workers: 3, CPUsPerWorker: 0.5}, "--nodes=1 --ntasks=1 --cpus-per-task=2"},
		{"memory and GPUs", GroupSize{Workers: 2, CPUsPerWorker: 4, GPUsPerWorker: 0.5, MemoryPerWorker: 3 * workers.GiB},
			"--nodes=1 --ntasks=1 --cpus-per-task=8 --mem=6144M --gpus=1"},
		{"four workers", GroupSize{Workers: 4, CPUsPerWorker: 2}, "--nodes=1 --ntasks=1 --cpus-per-task=8"},
		{"spread", GroupSize{Workers: 4, CPUsPerWorker: 8, GPUsPerWorker: 2, MemoryPerWorker: 1536 * workers.MiB, Placement: workers.Spread},
			"--nodes=4 --ntasks-per-node=1 --cpus-per-task=8 --mem=1536M --gpus-per-node=2"},
		{"spread of one", GroupSize{Workers: 1, CPUsPerWorker: 2, Placement: workers.Spread}, "--nodes=1 --ntasks=1 --cpus-per-task=2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := strings.Join(groupResources(tt.group), " "); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}
