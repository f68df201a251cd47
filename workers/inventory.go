package workers

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// Node is one machine's resources as the manager hands them out.
type Node struct {
	// Name identifies the node in allocations and messages: the host name
	// for a discovered node, "node0", "node1", … for declared ones.
	Name string `json:"name"`
	// CPUs is the logical CPUs the node offers.
	CPUs float64 `json:"cpus"`
	// Memory is the host memory the node offers; 0 means unknown, and then
	// memory is not accounted on this node (any demand fits).
	Memory Bytes `json:"memory_bytes"`
	// GPUs are the devices workers can be given, in index order: whole
	// GPUs, and the MIG devices of GPUs with MIG enabled in their place.
	GPUs []GPU `json:"gpus"`
	// GPUNote says, in one line, why a node has no GPUs when discovery
	// found none (for example no NVIDIA driver); "" otherwise.
	GPUNote string `json:"gpu_note,omitempty"`
}

// Validate checks that n's resources lie within the bounds the Manager
// counts in, as those of a node another machine offers (an agent's) must
// before the node joins.
func (n Node) Validate() error {
	if !(n.CPUs >= 0 && n.CPUs <= maxCPUs) {
		return fmt.Errorf("CPUs must be between 0 and %d, got %g", maxCPUs, n.CPUs)
	}
	if n.Memory < 0 {
		return fmt.Errorf("memory must not be negative, got %d", int64(n.Memory))
	}
	if len(n.GPUs) > maxDeclaredGPUs {
		return fmt.Errorf("at most %d GPUs, got %d", maxDeclaredGPUs, len(n.GPUs))
	}
	return nil
}

// Describe is n's resources in a few words, for a log line, as in
// "8 CPUs, 32GiB memory, 2 GPUs".
func (n Node) Describe() string {
	s := plural(n.CPUs, "CPU")
	if n.Memory > 0 {
		s += ", " + n.Memory.Human() + " memory"
	}
	return s + ", " + count(len(n.GPUs), "GPU")
}

// GPU is one device a worker can be given: a whole GPU or a MIG device.
type GPU struct {
	// Index is the device's NVML index; for a MIG device, its parent's.
	Index int `json:"index"`
	// MIG is the MIG device's index within its parent; -1 for a whole GPU.
	MIG int `json:"mig"`
	// UUID is NVML's identifier ("GPU-…" or "MIG-…"); "" for a declared GPU.
	UUID string `json:"uuid,omitempty"`
	// Name is the product name, "declared" for a declared GPU.
	Name string `json:"name"`
	// Memory is the device's memory; 0 when unknown.
	Memory Bytes `json:"memory_bytes"`
}

// VisibleID is how CUDA_VISIBLE_DEVICES names the device: its UUID when
// it was discovered (exact whatever CUDA_DEVICE_ORDER is, and the only way
// to name a MIG device), otherwise its index.
func (g GPU) VisibleID() string {
	if g.UUID != "" {
		return g.UUID
	}
	return strconv.Itoa(g.Index)
}

// Label is a short name for display: "0" for a whole GPU, "0:1" for MIG
// device 1 of GPU 0.
func (g GPU) Label() string {
	if g.MIG >= 0 {
		return strconv.Itoa(g.Index) + ":" + strconv.Itoa(g.MIG)
	}
	return strconv.Itoa(g.Index)
}

// Discover describes this machine: its logical CPUs, total memory, and the
// GPUs NVML finds. When NVML cannot be used (no NVIDIA driver, no GPU, a
// build without cgo) the node has no GPUs and GPUNote says why; everything
// else works as usual. Inside a Slurm job it describes what the job gave
// this task instead (see InSlurm).
func Discover() Node {
	n, _ := InSlurm(discover(), os.Getenv)
	return n
}

// discover describes the whole machine.
func discover() Node {
	n := Node{Name: hostName(), CPUs: float64(runtime.NumCPU()), Memory: totalMemory()}
	lib, err := OpenNVML()
	if err != nil {
		n.GPUNote = "no GPUs: " + err.Error()
		return n
	}
	defer lib.Close()
	gpus, err := lib.Devices()
	switch {
	case err != nil:
		n.GPUNote = "no GPUs: " + err.Error()
	case len(gpus) == 0:
		n.GPUNote = "no GPUs: the NVIDIA driver is loaded but reports no devices"
	default:
		n.GPUs = gpus
	}
	return n
}

func hostName() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "local"
	}
	return h
}

// totalMemory reads MemTotal from /proc/meminfo; 0 where it cannot (a
// non-Linux host).
func totalMemory() Bytes {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err == nil {
				return Bytes(kb) * KiB
			}
		}
	}
	return 0
}
