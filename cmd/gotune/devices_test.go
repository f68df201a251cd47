package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gotune/gotune/workers"
)

func TestDevicesCommand(t *testing.T) {
	code, out, errOut := runCLI("devices")
	if code != 0 || !strings.HasPrefix(out, "node ") || !strings.Contains(out, "CPUs") {
		t.Fatalf("devices: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = runCLI("devices", "--json")
	if code != 0 {
		t.Fatalf("devices --json: exit %d, stderr %q", code, errOut)
	}
	var nodes []nodeJSON
	if err := json.Unmarshal([]byte(out), &nodes); err != nil {
		t.Fatalf("devices --json printed %q: %v", out, err)
	}
	if len(nodes) != 1 || nodes[0].CPUs < 1 || nodes[0].GPUs == nil {
		t.Errorf("devices --json: %+v", nodes)
	}
	if len(nodes[0].GPUs) == 0 && nodes[0].GPUNote == "" {
		t.Error("no GPUs and no note saying why")
	}
	if code, _, _ := runCLI("devices", "extra"); code != exitBadInput {
		t.Errorf("devices with an argument: exit %d, want %d", code, exitBadInput)
	}
}

func TestPrintInventory(t *testing.T) {
	nodes := []workers.Node{
		{Name: "gpu1", CPUs: 16, Memory: 128 * workers.GiB, GPUs: []workers.GPU{
			{Index: 0, MIG: -1, UUID: "GPU-0a", Name: "NVIDIA H100", Memory: 80 * workers.GiB},
			{Index: 1, MIG: 0, UUID: "MIG-1b", Name: "NVIDIA A100 MIG 3g.20gb", Memory: 20 * workers.GiB},
		}},
		{Name: "cpu1", CPUs: 2, Memory: 0, GPUNote: "no GPUs: no NVIDIA driver is installed"},
	}
	var b bytes.Buffer
	printInventory(&b, nodes)
	want := `node gpu1: 16 CPUs, 128GiB memory, 2 GPUs
GPU  NAME                     MEMORY  UUID
0    NVIDIA H100              80GiB   GPU-0a
1:0  NVIDIA A100 MIG 3g.20gb  20GiB   MIG-1b

node cpu1: 2 CPUs, memory unknown, 0 GPUs
no GPUs: no NVIDIA driver is installed
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
	j := toNodeJSON(nodes[0])
	if j.GPUs[0].MIG != nil || j.GPUs[1].MIG == nil || *j.GPUs[1].MIG != 0 || j.GPUs[1].Visible != "MIG-1b" || j.MemoryBytes != 128<<30 {
		t.Errorf("JSON: %+v", j)
	}
}
