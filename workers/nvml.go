//go:build cgo

package workers

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NVML reads this machine's NVIDIA GPUs through the driver's management
// library: the devices at open, and their utilisation and memory on each
// ReadGPUs. Open it with OpenNVML and Close it when done. It is safe for
// concurrent use.
type NVML struct {
	lib  nvml.Interface
	node string

	mu      sync.Mutex
	closed  bool
	gpus    []GPU
	handles []nvml.Device
	skipped error
}

// OpenNVML loads the NVIDIA management library and lists the devices.
// Without an NVIDIA driver it fails with an error that says so in one line.
func OpenNVML() (*NVML, error) { return openNVML(nvml.New(), hostName()) }

// openNVML opens lib, a real library or a fake one, for node.
func openNVML(lib nvml.Interface, node string) (*NVML, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		// After a failed Init no other library call is safe: with the
		// library missing, its symbols do not even resolve.
		return nil, initError(ret)
	}
	g := &NVML{lib: lib, node: node}
	if err := g.list(); err != nil {
		lib.Shutdown()
		return nil, err
	}
	return g, nil
}

func initError(ret nvml.Return) error {
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return errors.New("the NVIDIA management library (libnvidia-ml.so.1) was not found: no NVIDIA driver is installed")
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return errors.New("the NVIDIA driver is installed but not running (check nvidia-smi)")
	case nvml.ERROR_NO_PERMISSION:
		return errors.New("no permission to use the NVIDIA driver (check the access rights of /dev/nvidia*)")
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return errors.New("the NVIDIA driver and its management library are different versions (reboot after a driver update)")
	}
	return fmt.Errorf("the NVIDIA management library failed to start: %v", ret)
}

// list enumerates the devices: whole GPUs, and in place of a GPU with MIG
// enabled, its MIG devices. A device that cannot be read is skipped and
// named in g.skipped.
func (g *NVML) list() error {
	count, ret := g.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("counting GPUs: %v", ret)
	}
	var skipped []error
	for i := range count {
		dev, ret := g.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			skipped = append(skipped, fmt.Errorf("GPU %d skipped: %v", i, ret))
			continue
		}
		mode, _, ret := dev.GetMigMode()
		if ret == nvml.SUCCESS && mode == nvml.DEVICE_MIG_ENABLE {
			if err := g.addMIG(i, dev); err != nil {
				skipped = append(skipped, err)
			}
			continue
		}
		gpu, err := describe(dev, i, -1)
		if err != nil {
			skipped = append(skipped, err)
			continue
		}
		g.gpus = append(g.gpus, gpu)
		g.handles = append(g.handles, dev)
	}
	g.skipped = errors.Join(skipped...)
	return nil
}

// addMIG adds the MIG devices of GPU i.
func (g *NVML) addMIG(i int, parent nvml.Device) error {
	n, ret := parent.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("GPU %d skipped: MIG is enabled but its devices cannot be counted: %v", i, ret)
	}
	found := 0
	for j := range n {
		mig, ret := parent.GetMigDeviceHandleByIndex(j)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue // no MIG device in this slot
		}
		if ret != nvml.SUCCESS {
			return fmt.Errorf("GPU %d MIG device %d skipped: %v", i, j, ret)
		}
		gpu, err := describe(mig, i, j)
		if err != nil {
			return err
		}
		g.gpus = append(g.gpus, gpu)
		g.handles = append(g.handles, mig)
		found++
	}
	if found == 0 {
		return fmt.Errorf("GPU %d skipped: MIG is enabled but no MIG devices are configured (create some with nvidia-smi mig)", i)
	}
	return nil
}

func describe(dev nvml.Device, index, mig int) (GPU, error) {
	what := fmt.Sprintf("GPU %d", index)
	if mig >= 0 {
		what = fmt.Sprintf("GPU %d MIG device %d", index, mig)
	}
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		return GPU{}, fmt.Errorf("%s skipped: reading its UUID: %v", what, ret)
	}
	name, ret := dev.GetName()
	if ret != nvml.SUCCESS {
		return GPU{}, fmt.Errorf("%s skipped: reading its name: %v", what, ret)
	}
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return GPU{}, fmt.Errorf("%s skipped: reading its memory: %v", what, ret)
	}
	return GPU{Index: index, MIG: mig, UUID: uuid, Name: name, Memory: Bytes(mem.Total)}, nil
}

// Devices returns the devices found at open, in index order, and an error
// naming any device that could not be read and was left out.
func (g *NVML) Devices() ([]GPU, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]GPU(nil), g.gpus...), g.skipped
}

// ReadGPUs samples every device's utilisation and memory now. MIG devices
// report memory but not utilisation. A device that cannot be read is left
// out and named in the error; the others are still returned.
func (g *NVML) ReadGPUs() ([]GPUSample, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, errors.New("NVML is closed")
	}
	now := time.Now()
	var out []GPUSample
	var errs []error
	for i, dev := range g.handles {
		gpu := g.gpus[i]
		s := GPUSample{Time: now, Node: g.node, GPU: gpu.VisibleID(), Label: gpu.Label()}
		mem, ret := dev.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			errs = append(errs, fmt.Errorf("GPU %s: reading memory: %v", gpu.Label(), ret))
			continue
		}
		s.MemoryUsed, s.MemoryTotal = Bytes(mem.Used), Bytes(mem.Total)
		util, ret := dev.GetUtilizationRates()
		switch ret {
		case nvml.SUCCESS:
			s.Utilization, s.HasUtilization = float64(util.Gpu), true
		case nvml.ERROR_NOT_SUPPORTED: // MIG devices
		default:
			errs = append(errs, fmt.Errorf("GPU %s: reading utilisation: %v", gpu.Label(), ret))
			continue
		}
		out = append(out, s)
	}
	return out, errors.Join(errs...)
}

// Close releases the library. Calling it again does nothing.
func (g *NVML) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	if ret := g.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("closing the NVIDIA management library: %v", ret)
	}
	return nil
}
