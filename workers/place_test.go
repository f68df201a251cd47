package workers

import (
	"fmt"
	"reflect"
	"testing"
)

// gpuNodes returns n declared nodes of cpus CPUs and gpus GPUs each.
func gpuNodes(n int, cpus float64, gpus int) []Node {
	return Declared{Nodes: n, CPUs: cpus, Memory: 64 * GiB, GPUs: gpus}.Inventory()
}

// layout renders slots as "node:devs" per worker, for comparing placements.
func layout(slots []slot) []string {
	out := make([]string, len(slots))
	for i, s := range slots {
		out[i] = fmt.Sprintf("%d:%v", s.node, s.devs)
	}
	return out
}

func TestPlace(t *testing.T) {
	tests := []struct {
		name   string
		nodes  []Node
		before [][2]int // (node, device) pairs already fully used
		shared [][3]int // (node, device, ten-thousandths) already used
		n      int
		per    Resources
		policy Placement
		want   []string // nil: does not fit
	}{
		{"pack on one node", gpuNodes(2, 8, 4), nil, nil, 2, Resources{CPUs: 1, GPUs: 1}, Pack,
			[]string{"0:[0]", "0:[1]"}},
		{"pack prefers the fuller node", gpuNodes(2, 8, 4), [][2]int{{1, 0}}, nil, 2, Resources{CPUs: 1, GPUs: 1}, Pack,
			[]string{"1:[1]", "1:[2]"}},
		{"pack keeps a whole node free", gpuNodes(3, 8, 4), [][2]int{{0, 0}, {0, 1}, {0, 2}, {2, 0}}, nil, 1, Resources{GPUs: 1}, Pack,
			[]string{"0:[3]"}},
		{"pack over nodes, roomiest first", gpuNodes(3, 8, 4), [][2]int{{0, 0}, {1, 0}, {1, 1}}, nil, 6, Resources{GPUs: 1}, Pack,
			[]string{"2:[0]", "2:[1]", "2:[2]", "2:[3]", "0:[1]", "0:[2]"}},
		{"spread one per node", gpuNodes(3, 8, 4), nil, nil, 3, Resources{GPUs: 1}, Spread,
			[]string{"0:[0]", "1:[0]", "2:[0]"}},
		{"spread deals round robin", gpuNodes(2, 8, 4), nil, nil, 3, Resources{GPUs: 1}, Spread,
			[]string{"0:[0]", "0:[1]", "1:[0]"}},
		{"spread prefers the emptier node", gpuNodes(2, 8, 4), [][2]int{{0, 0}}, nil, 1, Resources{GPUs: 1}, Spread,
			[]string{"1:[0]"}},
		{"whole devices, two per worker", gpuNodes(1, 8, 4), [][2]int{{0, 1}}, nil, 1, Resources{GPUs: 2}, Pack,
			[]string{"0:[0 2]"}},
		{"a group's shares take distinct devices first", gpuNodes(1, 8, 2), nil, nil, 4, Resources{GPUs: 0.25}, Pack,
			[]string{"0:[0]", "0:[1]", "0:[0]", "0:[1]"}},
		{"a group's shares on distinct devices", gpuNodes(1, 8, 2), nil, nil, 2, Resources{GPUs: 0.5}, Pack,
			[]string{"0:[0]", "0:[1]"}},
		{"a group's shares share the only device", gpuNodes(1, 8, 1), nil, nil, 2, Resources{GPUs: 0.5}, Pack,
			[]string{"0:[0]", "0:[0]"}},
		{"shares fill the fullest device first", gpuNodes(1, 8, 3), nil, [][3]int{{0, 1, 5000}, {0, 2, 2500}}, 1, Resources{GPUs: 0.5}, Pack,
			[]string{"0:[1]"}},
		{"a group's shares fill the fullest devices first", gpuNodes(1, 8, 3), nil, [][3]int{{0, 1, 5000}, {0, 2, 2500}}, 2, Resources{GPUs: 0.5}, Pack,
			[]string{"0:[1]", "0:[2]"}},
		{"shares spread over devices", gpuNodes(1, 8, 2), nil, nil, 2, Resources{GPUs: 0.25}, Spread,
			[]string{"0:[0]", "0:[1]"}},
		{"shares never exceed a device", gpuNodes(1, 8, 1), nil, nil, 4, Resources{GPUs: 0.3}, Pack, nil},
		{"thirds fill a device", gpuNodes(1, 8, 1), nil, nil, 3, Resources{GPUs: 1.0 / 3}, Pack,
			[]string{"0:[0]", "0:[0]", "0:[0]"}},
		{"whole GPU not on a shared device", gpuNodes(1, 8, 2), nil, [][3]int{{0, 0, 1}}, 1, Resources{GPUs: 1}, Pack,
			[]string{"0:[1]"}},
		{"CPUs limit", gpuNodes(2, 2, 0), nil, nil, 5, Resources{CPUs: 1}, Pack, nil},
		{"fractional CPUs", gpuNodes(1, 2, 0), nil, nil, 4, Resources{CPUs: 0.5}, Pack,
			[]string{"0:[]", "0:[]", "0:[]", "0:[]"}},
		{"memory limits", gpuNodes(1, 64, 0), nil, nil, 3, Resources{Memory: 32 * GiB}, Pack, nil},
		{"CPU-only work avoids GPU nodes", append(gpuNodes(1, 8, 4), Node{Name: "cpu", CPUs: 8}), nil, nil, 1, Resources{CPUs: 1}, Pack,
			[]string{"1:[]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := viewOf(tt.nodes)
			for _, u := range tt.before {
				v.gpu[u[0]][u[1]] = 0
			}
			for _, u := range tt.shared {
				v.gpu[u[0]][u[1]] -= int64(u[2])
			}
			before := v.clone()
			slots, ok := place(v, tt.n, demandOf(tt.per), tt.policy, nil, nil)
			if tt.want == nil {
				if ok {
					t.Fatalf("placed %v, want no fit", layout(slots))
				}
				if !reflect.DeepEqual(v, before) {
					t.Error("a failed placement changed the view")
				}
				return
			}
			if !ok {
				t.Fatal("did not fit")
			}
			if got := layout(slots); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
			// The view lost exactly the slots' demand.
			before.apply(slots, demandOf(tt.per), -1)
			if !reflect.DeepEqual(v, before) {
				t.Errorf("view after placement %+v, want %+v", v, before)
			}
		})
	}
}

// TestPlaceReservationPrefersFreeNow checks that a reservation goes where
// the resources are free right now, not where they are busy.
func TestPlaceReservationPrefersFreeNow(t *testing.T) {
	nodes := gpuNodes(3, 8, 4)
	capacity := viewOf(nodes)
	now := viewOf(nodes)
	for d := range 4 {
		now.gpu[0][d] = 0 // node 0 busy
	}
	now.gpu[1][0] = 0 // node 1 partly busy, node 2 idle
	slots, ok := place(capacity, 4, demandOf(Resources{GPUs: 1}), Pack, &now, nil)
	if !ok || slots[0].node != 2 {
		t.Errorf("reserved %v, want node 2, which is idle", layout(slots))
	}
	// Within a node, devices free now come first.
	capacity = viewOf(gpuNodes(1, 8, 4))
	now = viewOf(gpuNodes(1, 8, 4))
	now.gpu[0][0], now.gpu[0][2] = 0, 0
	slots, _ = place(capacity, 1, demandOf(Resources{GPUs: 2}), Pack, &now, nil)
	if got := layout(slots); !reflect.DeepEqual(got, []string{"0:[1 3]"}) {
		t.Errorf("reserved %v, want devices 1 and 3, which are free now", got)
	}
}

// TestPlaceGrowingGroupAvoidsItsDevices: a worker added to an elastic group
// takes a device without one of the group's workers, though the group's
// device is the fullest.
func TestPlaceGrowingGroupAvoidsItsDevices(t *testing.T) {
	v := viewOf(gpuNodes(1, 8, 2))
	group := []slot{{node: 0, devs: []int{0}, share: 5000}}
	v.apply(group, demandOf(Resources{GPUs: 0.5}), -1)
	slots, ok := place(v, 1, demandOf(Resources{GPUs: 0.5}), Pack, nil, group)
	if got := layout(slots); !ok || !reflect.DeepEqual(got, []string{"0:[1]"}) {
		t.Errorf("got %v, want device 1, which holds none of the group", got)
	}
}

func TestSharedDevices(t *testing.T) {
	tests := []struct {
		name  string
		nodes []Node
		req   Request
		want  int
	}{
		{"a device each", gpuNodes(1, 8, 4), Request{Workers: 4, Per: Resources{GPUs: 0.5}}, 0},
		{"two on each of two devices", gpuNodes(1, 8, 2), Request{Workers: 4, Per: Resources{GPUs: 0.5}}, 4},
		{"three on two devices", gpuNodes(1, 8, 2), Request{Workers: 3, Per: Resources{GPUs: 0.25}}, 2},
		{"a node each", gpuNodes(2, 8, 1), Request{Workers: 2, Per: Resources{GPUs: 0.5}, Placement: Spread}, 0},
		{"packed on one node", gpuNodes(2, 8, 1), Request{Workers: 2, Per: Resources{GPUs: 0.5}}, 2},
		{"one worker", gpuNodes(1, 8, 1), Request{Workers: 1, Per: Resources{GPUs: 0.5}}, 0},
		{"whole devices", gpuNodes(1, 8, 2), Request{Workers: 2, Per: Resources{GPUs: 1}}, 0},
		{"an elastic group at its full size", gpuNodes(1, 8, 2), Request{Workers: 3, MinWorkers: 2, Per: Resources{GPUs: 0.5}}, 2},
		{"never fits", gpuNodes(1, 8, 1), Request{Workers: 3, Per: Resources{GPUs: 0.5}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewManager(tt.nodes, ManagerConfig{})
			if got := m.SharedDevices(tt.req); got != tt.want {
				t.Errorf("got %d, want %d", got, tt.want)
			}
		})
	}
}
