package workers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// GPUSample is one device's state at one moment.
type GPUSample struct {
	Time time.Time
	// Node names the node the device is on, as in Node.Name.
	Node string
	// GPU is the device's VisibleID, as in CUDA_VISIBLE_DEVICES.
	GPU string
	// Label is the device's short name for display, as in GPU.Label.
	Label string
	// Utilization is the percentage (0–100) of the driver's last sample
	// period in which a kernel ran. Valid only when HasUtilization: MIG
	// devices do not report it.
	Utilization    float64
	HasUtilization bool
	// MemoryUsed and MemoryTotal are the device's memory in use and in all.
	MemoryUsed, MemoryTotal Bytes
}

// GPUReader reads every device's state now. *NVML is one; tests use fakes.
type GPUReader interface {
	ReadGPUs() ([]GPUSample, error)
}

// DefaultSampleInterval is how often a sweep samples its GPUs.
const DefaultSampleInterval = 5 * time.Second

// Sampler reads GPUs through Reader once when opened and then every
// Interval, handing each batch to OnSample, until closed. Set the fields,
// then call Open; Close stops it. An Interval of 0 disables sampling: Open
// and Close then do nothing, which keeps tests deterministic.
type Sampler struct {
	// Reader is where samples come from; required unless Interval is 0.
	Reader GPUReader
	// Interval is the time between samples; 0 disables the sampler.
	Interval time.Duration
	// OnSample receives each batch, from the sampler's goroutine. It should
	// return quickly: the next sample waits for it.
	OnSample func([]GPUSample)

	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	firstErr error
	failed   int
}

// Open starts sampling. It fails when the sampler is already open or has
// no Reader or OnSample.
func (s *Sampler) Open() error {
	if s.Interval == 0 {
		return nil
	}
	switch {
	case s.Interval < 0:
		return fmt.Errorf("sampler: negative interval %v", s.Interval)
	case s.Reader == nil || s.OnSample == nil:
		return errors.New("sampler: set Reader and OnSample before Open")
	case s.done != nil:
		return errors.New("sampler: already open")
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan struct{})
	go s.loop(ctx)
	return nil
}

func (s *Sampler) loop(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.Interval)
	defer t.Stop()
	for {
		batch, err := s.Reader.ReadGPUs()
		if err != nil {
			s.mu.Lock()
			if s.firstErr == nil {
				s.firstErr = err
			}
			s.failed++
			s.mu.Unlock()
		}
		if len(batch) > 0 && ctx.Err() == nil {
			s.OnSample(batch)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Close stops sampling and waits for the sampler's goroutine, or for ctx
// to end. After it returns nil, OnSample is not called again. It returns
// the first read error (with how many reads failed), which a caller should
// report rather than treat as fatal: the samples that were read were
// delivered. Closing a sampler that was never opened does nothing.
func (s *Sampler) Close(ctx context.Context) error {
	if s.done == nil {
		return nil
	}
	s.cancel()
	select {
	case <-s.done:
	case <-ctx.Done():
		return fmt.Errorf("sampler: stopping: %w", ctx.Err())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.firstErr != nil {
		return fmt.Errorf("sampling GPUs: %d reads failed, the first with: %w", s.failed, s.firstErr)
	}
	return nil
}

// WorkerSample is a device sample attributed to one worker of a group.
type WorkerSample struct {
	// Worker is the worker's position in Allocation.Workers.
	Worker int
	GPUSample
}

// Attribute picks out of samples those of the group's devices, one for each
// worker and device it uses, in worker order. Workers sharing a device each
// get the device's sample (utilisation is per device, not per process).
func (a *Allocation) Attribute(samples []GPUSample) []WorkerSample {
	type key struct{ node, gpu string }
	byDevice := make(map[key]GPUSample, len(samples))
	for _, s := range samples {
		byDevice[key{s.Node, s.GPU}] = s
	}
	var out []WorkerSample
	for i, w := range a.Workers() {
		for _, g := range w.GPUs {
			if s, ok := byDevice[key{w.Node, g.GPU.VisibleID()}]; ok {
				out = append(out, WorkerSample{Worker: i, GPUSample: s})
			}
		}
	}
	return out
}
