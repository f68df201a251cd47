//go:build cgo

package workers

import (
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// fakeDevice is an NVML device as NVIDIA's mock package models it.
func fakeDevice(uuid, name string, memTotal uint64, util uint32, mig []nvml.Device) *mock.Device {
	d := &mock.Device{
		GetUUIDFunc: func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
		GetNameFunc: func() (string, nvml.Return) { return name, nvml.SUCCESS },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: memTotal, Used: memTotal / 4}, nvml.SUCCESS
		},
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: util}, nvml.SUCCESS
		},
		GetMigModeFunc: func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED },
	}
	if mig != nil {
		d.GetMigModeFunc = func() (int, int, nvml.Return) { return nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS }
		d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
		d.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
			if i < len(mig) {
				return mig[i], nvml.SUCCESS
			}
			return nil, nvml.ERROR_NOT_FOUND
		}
	}
	return d
}

// fakeLibrary is an NVML library with the given devices.
func fakeLibrary(devs ...nvml.Device) *mock.Interface {
	return &mock.Interface{
		InitFunc:           func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:       func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			return devs[i], nvml.SUCCESS
		},
	}
}

func TestNVMLDevices(t *testing.T) {
	mig := fakeDevice("MIG-1", "NVIDIA A100 MIG 3g.20gb", 20<<30, 0, nil)
	mig.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED }
	mig2 := fakeDevice("MIG-2", "NVIDIA A100 MIG 3g.20gb", 20<<30, 0, nil)
	mig2.GetUtilizationRatesFunc = mig.GetUtilizationRatesFunc
	lib := fakeLibrary(
		fakeDevice("GPU-0", "NVIDIA H100", 80<<30, 42, nil),
		fakeDevice("GPU-1", "NVIDIA A100", 40<<30, 0, []nvml.Device{mig, mig2}),
	)
	g, err := openNVML(lib, "box")
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := g.Devices()
	if err != nil {
		t.Fatal(err)
	}
	want := []GPU{
		{Index: 0, MIG: -1, UUID: "GPU-0", Name: "NVIDIA H100", Memory: 80 * GiB},
		{Index: 1, MIG: 0, UUID: "MIG-1", Name: "NVIDIA A100 MIG 3g.20gb", Memory: 20 * GiB},
		{Index: 1, MIG: 1, UUID: "MIG-2", Name: "NVIDIA A100 MIG 3g.20gb", Memory: 20 * GiB},
	}
	if !reflect.DeepEqual(gpus, want) {
		t.Errorf("Devices:\ngot  %+v\nwant %+v", gpus, want)
	}
	if got := gpus[2].Label(); got != "1:1" {
		t.Errorf("MIG label %q, want 1:1", got)
	}

	samples, err := g.ReadGPUs()
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != 3 {
		t.Fatalf("got %d samples, want 3", len(samples))
	}
	s := samples[0]
	if s.Node != "box" || s.GPU != "GPU-0" || !s.HasUtilization || s.Utilization != 42 || s.MemoryTotal != 80*GiB || s.MemoryUsed != 20*GiB {
		t.Errorf("whole GPU sample %+v", s)
	}
	if samples[1].HasUtilization || samples[1].MemoryTotal != 20*GiB {
		t.Errorf("MIG sample %+v: want memory and no utilisation", samples[1])
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if len(lib.ShutdownCalls()) != 1 {
		t.Errorf("Shutdown called %d times, want once", len(lib.ShutdownCalls()))
	}
	if _, err := g.ReadGPUs(); err == nil {
		t.Error("ReadGPUs after Close passed")
	}
}

func TestNVMLSkipsBrokenDevices(t *testing.T) {
	broken := fakeDevice("GPU-1", "x", 1<<30, 0, nil)
	broken.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }
	empty := fakeDevice("GPU-2", "y", 1<<30, 0, []nvml.Device{})
	g, err := openNVML(fakeLibrary(fakeDevice("GPU-0", "ok", 1<<30, 0, nil), broken, empty), "box")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	gpus, err := g.Devices()
	if len(gpus) != 1 || gpus[0].UUID != "GPU-0" {
		t.Errorf("Devices: %+v, want only GPU-0", gpus)
	}
	for _, want := range []string{"GPU 1 skipped", "ERROR_GPU_IS_LOST", "GPU 2 skipped: MIG is enabled but no MIG devices"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Devices error %v does not mention %q", err, want)
		}
	}
}

func TestNVMLInitFailures(t *testing.T) {
	tests := []struct {
		ret  nvml.Return
		want string
	}{
		{nvml.ERROR_LIBRARY_NOT_FOUND, "no NVIDIA driver is installed"},
		{nvml.ERROR_DRIVER_NOT_LOADED, "not running"},
		{nvml.ERROR_NO_PERMISSION, "no permission"},
		{nvml.ERROR_UNKNOWN, "failed to start"},
	}
	for _, tt := range tests {
		lib := &mock.Interface{InitFunc: func() nvml.Return { return tt.ret }}
		_, err := openNVML(lib, "box")
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Init %v: got %v, want one line mentioning %q", tt.ret, err, tt.want)
		}
	}
	lib := fakeLibrary()
	lib.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
	if _, err := openNVML(lib, "box"); err == nil || len(lib.ShutdownCalls()) != 1 {
		t.Errorf("a failed device count: got %v with %d Shutdown calls, want an error and a shutdown", err, len(lib.ShutdownCalls()))
	}
}

// TestNVMLReadErrors checks that a device failing mid-sweep is left out of
// a sample batch and named, while the others are still read.
func TestNVMLReadErrors(t *testing.T) {
	flaky := fakeDevice("GPU-1", "x", 1<<30, 0, nil)
	g, err := openNVML(fakeLibrary(fakeDevice("GPU-0", "ok", 1<<30, 5, nil), flaky), "box")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	flaky.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.ERROR_GPU_IS_LOST }
	samples, err := g.ReadGPUs()
	if len(samples) != 1 || samples[0].GPU != "GPU-0" {
		t.Errorf("samples %+v, want GPU-0's only", samples)
	}
	if err == nil || !strings.Contains(err.Error(), "GPU 1: reading utilisation") {
		t.Errorf("got %v, want an error naming GPU 1", err)
	}
}

// TestOpenNVMLHere runs the real library loader: on a machine without an
// NVIDIA driver it must fail cleanly, with one line saying why.
func TestOpenNVMLHere(t *testing.T) {
	g, err := OpenNVML()
	if err == nil {
		gpus, _ := g.Devices()
		t.Logf("NVML found %d devices", len(gpus))
		g.Close()
		return
	}
	if msg := err.Error(); msg == "" || strings.Contains(msg, "\n") {
		t.Errorf("OpenNVML: %q, want one line", err)
	}
	t.Logf("OpenNVML: %v", err)
}
