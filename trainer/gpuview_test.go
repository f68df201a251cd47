package trainer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gotune/gotune/workers"
)

// declaredSlots places a group through a resource manager of declared
// nodes with GPUs, as the tuner does, and returns its slots.
func declaredSlots(t *testing.T, d workers.Declared, req workers.Request) []Slot {
	t.Helper()
	m := workers.NewManager(d.Inventory(), workers.ManagerConfig{})
	a, err := m.Acquire(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Release)
	var slots []Slot
	for _, w := range a.Workers() {
		s := Slot{Node: w.Node}
		if w.CUDAVisibleDevices != "" {
			s.GPUs = strings.Split(w.CUDAVisibleDevices, ",")
		}
		slots = append(slots, s)
	}
	return slots
}

func TestGPUViewWithDeclaredGPUs(t *testing.T) {
	for _, tc := range []struct {
		name       string
		declared   workers.Declared
		req        workers.Request
		visibility string
		// seen is each rank's CUDA_VISIBLE_DEVICES length; group says
		// whether entry LOCAL_RANK must be the worker's own first device.
		seen  []int
		group bool
	}{
		{"one GPU each, group view", workers.Declared{Nodes: 1, GPUs: 4},
			workers.Request{Workers: 4, Per: workers.Resources{CPUs: 0.1, GPUs: 1}}, "", []int{4, 4, 4, 4}, true},
		{"one GPU each on two nodes", workers.Declared{Nodes: 2, GPUs: 2},
			workers.Request{Workers: 4, Per: workers.Resources{CPUs: 0.1, GPUs: 1}, Placement: workers.Spread}, GPUViewGroup, []int{2, 2, 2, 2}, true},
		{"two GPUs each", workers.Declared{Nodes: 1, GPUs: 4},
			workers.Request{Workers: 2, Per: workers.Resources{CPUs: 0.1, GPUs: 2}}, GPUViewGroup, []int{4, 4}, true},
		{"half a GPU each: each its own", workers.Declared{Nodes: 1, GPUs: 1},
			workers.Request{Workers: 2, Per: workers.Resources{CPUs: 0.1, GPUs: 0.5}}, GPUViewGroup, []int{1, 1}, false},
		{"worker view", workers.Declared{Nodes: 1, GPUs: 4},
			workers.Request{Workers: 3, Per: workers.Resources{CPUs: 0.1, GPUs: 1}}, GPUViewWorker, []int{1, 1, 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			slots := declaredSlots(t, tc.declared, tc.req)
			places := placeRanks(slots, tc.visibility)
			for r, p := range places {
				own := slots[r].GPUs
				if len(p.gpus) != tc.seen[r] {
					t.Errorf("rank %d sees %v, want %d devices", r, p.gpus, tc.seen[r])
					continue
				}
				for _, g := range own {
					if !slices.Contains(p.gpus, g) {
						t.Errorf("rank %d sees %v without its own device %s", r, p.gpus, g)
					}
				}
				if tc.group && p.gpus[p.localRank] != own[0] {
					t.Errorf("rank %d (local rank %d) sees %v: cuda:%d is %s, not its own %s", r, p.localRank, p.gpus, p.localRank, p.gpus[p.localRank], own[0])
				}
				if !tc.group && !slices.Equal(p.gpus, own) {
					t.Errorf("rank %d sees %v, want its own %v", r, p.gpus, own)
				}
				for q, other := range places {
					if tc.group && other.nodeRank == p.nodeRank && !slices.Equal(other.gpus, p.gpus) {
						t.Errorf("ranks %d and %d on one node see %v and %v", r, q, p.gpus, other.gpus)
					}
				}
			}
		})
	}
}

// slotPlacer places a fixed group on given slots.
type slotPlacer []Slot

func (p slotPlacer) Place(context.Context, int, int) (Placement, error) {
	return &fixedPlacement{slots: p}, nil
}

func TestCommandSeesTheGroupsGPUs(t *testing.T) {
	out := t.TempDir()
	for _, tc := range []struct{ visibility, want0, want1 string }{
		{"", "2,0", "2,0"},
		{GPUViewWorker, "2", "0"},
	} {
		spec := Spec{
			Experiment: uniqueName(t), Trial: 1,
			Command:    []string{"sh", "-c", `echo "$CUDA_VISIBLE_DEVICES" > "$0/cvd_$LOCAL_RANK"`, out},
			Scaling:    ScalingConfig{NumWorkers: 2, GPUVisibility: tc.visibility},
			Placer:     slotPlacer{{GPUs: []string{"2"}}, {GPUs: []string{"0"}}},
			ScratchDir: filepath.Join(t.TempDir(), "scratch"),
		}
		if _, err := Run(context.Background(), spec, &collect{}); err != nil {
			t.Fatal(err)
		}
		for rank, want := range []string{tc.want0, tc.want1} {
			data, _ := os.ReadFile(filepath.Join(out, fmt.Sprintf("cvd_%d", rank)))
			if got := strings.TrimSpace(string(data)); got != want {
				t.Errorf("gpu_visibility %q: local rank %d sees CUDA_VISIBLE_DEVICES=%q, want %q", tc.visibility, rank, got, want)
			}
		}
	}
}
