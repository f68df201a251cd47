package workers

import (
	"errors"
	"strings"
	"testing"
)

func TestParseDeclared(t *testing.T) {
	tests := []struct {
		in   string
		want Declared
	}{
		{"cpus=8,gpus=2,memory=32GiB", Declared{Nodes: 1, CPUs: 8, GPUs: 2, Memory: 32 * GiB}},
		{" cpus = 0.5 ", Declared{Nodes: 1, CPUs: 0.5}},
		{"gpus=0", Declared{Nodes: 1}},
		{"nodes=64,gpus=8,cpus=64,memory=512GiB", Declared{Nodes: 64, CPUs: 64, GPUs: 8, Memory: 512 * GiB}},
	}
	for _, tt := range tests {
		got, err := ParseDeclared(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseDeclared(%q): got %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

func TestParseDeclaredErrors(t *testing.T) {
	tests := []struct{ in, key, msg string }{
		{"", "", "empty"},
		{"cpus", "", "not key=value"},
		{"cpus=8,", "", "not key=value"},
		{"cpu=8", "cpu", "unknown key"},
		{"cpus=eight", "cpus", `"eight" is not a number`},
		{"cpus=-1", "cpus", "positive"},
		{"gpus=1.5", "gpus", "whole number"},
		{"gpus=-2", "gpus", "from 0"},
		{"memory=32", "memory", "has no unit"},
		{"memory=32XB", "memory", "unknown unit"},
		{"nodes=0", "nodes", "from 1"},
		{"cpus=1,cpus=2", "cpus", "given twice"},
	}
	for _, tt := range tests {
		_, err := ParseDeclared(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("ParseDeclared(%q): got %v, want an error mentioning %q", tt.in, err, tt.msg)
			continue
		}
		var se *SettingError
		if got := errors.As(err, &se); got != (tt.key != "") || got && se.Key != tt.key {
			t.Errorf("ParseDeclared(%q): error %v does not name key %q", tt.in, err, tt.key)
		}
	}
}

func TestDeclaredInventory(t *testing.T) {
	nodes := Declared{Nodes: 3, CPUs: 4, Memory: 8 * GiB, GPUs: 2}.Inventory()
	if len(nodes) != 3 {
		t.Fatalf("got %d nodes, want 3", len(nodes))
	}
	for i, n := range nodes {
		if n.Name != "node"+string(rune('0'+i)) || n.CPUs != 4 || n.Memory != 8*GiB || len(n.GPUs) != 2 || n.GPUNote != "" {
			t.Errorf("node %d: %+v", i, n)
		}
		for g, gpu := range n.GPUs {
			if gpu.VisibleID() != string(rune('0'+g)) || gpu.MIG != -1 || gpu.Label() != gpu.VisibleID() {
				t.Errorf("node %d GPU %d: %+v, visible as %q", i, g, gpu, gpu.VisibleID())
			}
		}
	}
	// Left-out CPUs and memory are this machine's; GPUs are none.
	local := Discover()
	n := Declared{Nodes: 1}.Inventory()
	if len(n) != 1 || n[0].CPUs != local.CPUs || n[0].Memory != local.Memory || len(n[0].GPUs) != 0 || n[0].GPUNote == "" {
		t.Errorf("Declared{Nodes: 1}: got %+v, want this machine's CPUs and memory and no GPUs", n)
	}
}

func TestDiscover(t *testing.T) {
	n := Discover()
	if n.CPUs < 1 || n.Name == "" {
		t.Errorf("Discover: %+v", n)
	}
	if len(n.GPUs) == 0 && (n.GPUNote == "" || strings.Contains(n.GPUNote, "\n")) {
		t.Errorf("Discover found no GPUs and says why in %q, want one line", n.GPUNote)
	}
	if len(Declared{}.Inventory()) != 1 {
		t.Error("the zero Declared does not discover one node")
	}
}

// FuzzParseDeclared checks that the --resources parser never panics, that
// what it accepts is valid, and that it reads back what it writes.
func FuzzParseDeclared(f *testing.F) {
	for _, s := range []string{"cpus=8,gpus=2,memory=32GiB", "nodes=64,gpus=8", "gpus=0", "=", ",,", "memory=1e400GiB", "cpus=NaN"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDeclared(s)
		if err != nil {
			return
		}
		if err := d.Validate(); err != nil {
			t.Fatalf("ParseDeclared(%q) accepted %+v, which fails Validate: %v", s, d, err)
		}
		back, err := ParseDeclared(d.String())
		if err != nil || back != d {
			t.Fatalf("ParseDeclared(%q) = %+v, written %q, read back %+v, %v", s, d, d.String(), back, err)
		}
	})
}
