package workers

import (
	"fmt"
	"math"
	"strings"
)

// Resources is what one worker of a training group needs.
type Resources struct {
	// CPUs is the logical CPUs reserved; fractions let light workers share a
	// core. Counted in thousandths.
	CPUs float64
	// GPUs is the devices reserved. Below 1 it is a share of a single
	// device, and workers whose shares add up to at most 1 are packed onto
	// the same device; from 1 up it must be a whole number of devices, each
	// the worker's alone. Shares are counted in ten-thousandths. 0 means none.
	GPUs float64
	// Memory is the host memory reserved. 0 means none is accounted.
	Memory Bytes
}

// String describes r for messages, as in "1 CPU, 0.5 GPU, 4GiB".
func (r Resources) String() string {
	parts := []string{plural(r.CPUs, "CPU")}
	if r.GPUs > 0 {
		parts = append(parts, plural(r.GPUs, "GPU"))
	}
	if r.Memory > 0 {
		parts = append(parts, r.Memory.String())
	}
	return strings.Join(parts, ", ")
}

func plural(v float64, unit string) string {
	if v == 1 || v < 1 && v > 0 {
		return fmt.Sprintf("%g %s", v, unit)
	}
	return fmt.Sprintf("%g %ss", v, unit)
}

// Validate checks that r can be asked for: nothing negative, and GPUs
// either below 1 or whole.
func (r Resources) Validate() error {
	switch {
	case !(r.CPUs >= 0 && r.CPUs <= maxCPUs):
		return fmt.Errorf("CPUs per worker must be a non-negative number up to %d, got %g", maxCPUs, r.CPUs)
	case !(r.GPUs >= 0 && r.GPUs <= maxDeclaredGPUs):
		return fmt.Errorf("GPUs per worker must be a non-negative number up to %d, got %g", maxDeclaredGPUs, r.GPUs)
	case r.GPUs > 1 && r.GPUs != math.Trunc(r.GPUs):
		return fmt.Errorf("GPUs per worker above 1 must be whole, got %g: a worker may share one device but not split several", r.GPUs)
	case r.GPUs > 0 && r.GPUs < 1 && gpuUnits(r.GPUs) == 0:
		return fmt.Errorf("GPUs per worker %g is below the smallest share, 0.0001", r.GPUs)
	case r.Memory < 0:
		return fmt.Errorf("memory per worker must not be negative, got %d", int64(r.Memory))
	}
	return nil
}

// ValidateGPUs checks a GPUs-per-worker setting as Resources.Validate does.
func ValidateGPUs(gpus float64) error { return Resources{GPUs: gpus}.Validate() }

// Placement says how a group's workers are spread over nodes.
type Placement string

const (
	// Pack puts a group's workers on as few nodes as it can, on the nodes
	// (and, for GPU shares, the devices) already most used, keeping whole
	// nodes and devices free for large groups. It is the default.
	Pack Placement = "pack"
	// Spread puts a group's workers on as many nodes as it can, one per node
	// first, preferring the least used nodes and devices.
	Spread Placement = "spread"
)

// Validate accepts "", "pack" and "spread"; "" means Pack.
func (p Placement) Validate() error {
	switch p {
	case "", Pack, Spread:
		return nil
	}
	return fmt.Errorf("must be \"pack\" or \"spread\", got %q", string(p))
}

// maxCPUs bounds CPU settings, far above any machine, so that counting in
// thousandths cannot overflow.
const maxCPUs = 1000000

// The manager counts in integers so that sums never drift: CPUs in
// thousandths and GPU shares in ten-thousandths of a device.
const (
	cpuScale = 1000
	gpuScale = 10000
)

func cpuUnits(c float64) int64 { return int64(math.Round(c * cpuScale)) }
func gpuUnits(g float64) int64 { return int64(math.Round(g * gpuScale)) }

// demand is one worker's need in the manager's integer units. For whole
// GPUs, gpu is a multiple of gpuScale and whole is true.
type demand struct {
	cpu, mem, gpu int64
}

func demandOf(r Resources) demand {
	return demand{cpu: cpuUnits(r.CPUs), mem: int64(r.Memory), gpu: gpuUnits(r.GPUs)}
}

// wholeGPUs reports whether d asks for whole devices (1 or more).
func (d demand) wholeGPUs() bool { return d.gpu >= gpuScale }
