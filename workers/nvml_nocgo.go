//go:build !cgo

package workers

import "errors"

// NVML reads NVIDIA GPUs through the driver's management library. This
// build has no cgo, which the library needs, so OpenNVML always fails.
type NVML struct{}

// OpenNVML fails: gotune was built without cgo.
func OpenNVML() (*NVML, error) {
	return nil, errors.New("gotune was built without cgo (CGO_ENABLED=0), which GPU discovery through NVML needs")
}

// Devices returns nothing: an NVML is never opened in this build.
func (*NVML) Devices() ([]GPU, error) { return nil, nil }

// ReadGPUs returns nothing: an NVML is never opened in this build.
func (*NVML) ReadGPUs() ([]GPUSample, error) { return nil, nil }

// Close does nothing.
func (*NVML) Close() error { return nil }
