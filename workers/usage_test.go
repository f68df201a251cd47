package workers

import (
	"testing"
	"time"
)

// TestUsage follows what a manager reports in use as groups are granted,
// wait, and are released: fractional GPU shares add up, a waiting group
// holds nothing, and a node without known memory adds none.
func TestUsage(t *testing.T) {
	nodes := append(gpuNodes(2, 8, 2), Node{Name: "nomem", CPUs: 4})
	m, _ := newTestManager(nodes, time.Hour)
	idle := Usage{Capacity: Resources{CPUs: 20, GPUs: 4, Memory: 128 * GiB}}
	if got := m.Usage(); got != idle {
		t.Fatalf("idle: got %+v, want %+v", got, idle)
	}
	a := mustGranted(t, mustSubmit(t, m, Request{Name: "a", Workers: 3, Per: Resources{CPUs: 1.5, GPUs: 0.5, Memory: GiB}}))
	b := mustGranted(t, mustSubmit(t, m, Request{Name: "b", Workers: 2, Per: Resources{CPUs: 2, GPUs: 1}}))
	w := mustSubmit(t, m, Request{Name: "w", Workers: 2, Per: Resources{CPUs: 1, GPUs: 1}})
	if granted(w) {
		t.Fatal("a group of 2 GPUs was granted with 0.5 GPU free")
	}
	want := idle
	want.InUse = Resources{CPUs: 3*1.5 + 2*2, GPUs: 3*0.5 + 2, Memory: 3 * GiB}
	want.Waiting = 1
	if got := m.Usage(); got != want {
		t.Errorf("busy: got %+v, want %+v", got, want)
	}
	w.Cancel()
	a.Release()
	b.Release()
	if got := m.Usage(); got != idle {
		t.Errorf("after release: got %+v, want %+v", got, idle)
	}
}
