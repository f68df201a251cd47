package workers

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// countingReader returns one sample per read and signals each read.
type countingReader struct {
	mu    sync.Mutex
	reads int
	fail  bool
	read  chan int
}

func (r *countingReader) ReadGPUs() ([]GPUSample, error) {
	r.mu.Lock()
	r.reads++
	n, fail := r.reads, r.fail
	r.mu.Unlock()
	select {
	case r.read <- n:
	default:
	}
	if fail {
		return nil, errors.New("GPU is lost")
	}
	return []GPUSample{{Node: "box", GPU: "0", Utilization: float64(n), HasUtilization: true}}, nil
}

func TestSamplerDelivers(t *testing.T) {
	r := &countingReader{read: make(chan int)}
	var mu sync.Mutex
	var got []float64
	s := &Sampler{Reader: r, Interval: time.Millisecond, OnSample: func(b []GPUSample) {
		mu.Lock()
		got = append(got, b[0].Utilization)
		mu.Unlock()
	}}
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	if err := s.Open(); err == nil {
		t.Error("a second Open passed")
	}
	for n := 0; n < 3; n = <-r.read {
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	delivered := len(got)
	mu.Unlock()
	if delivered < 2 {
		t.Errorf("%d batches delivered after 3 reads", delivered)
	}
	for i, u := range got {
		if u != float64(i+1) {
			t.Errorf("batch %d has utilisation %g, want the batches in order", i, u)
		}
	}
	// Nothing is delivered after Close.
	r.mu.Lock()
	reads := r.reads
	r.mu.Unlock()
	time.Sleep(5 * time.Millisecond)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reads != reads {
		t.Errorf("the sampler read %d more times after Close", r.reads-reads)
	}
}

func TestSamplerZeroIntervalDisables(t *testing.T) {
	r := &countingReader{read: make(chan int, 1)}
	s := &Sampler{Reader: r, OnSample: func([]GPUSample) { t.Error("a disabled sampler delivered") }}
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r.reads != 0 {
		t.Errorf("a disabled sampler read %d times", r.reads)
	}
}

func TestSamplerErrors(t *testing.T) {
	if err := (&Sampler{Interval: time.Second}).Open(); err == nil {
		t.Error("Open without Reader passed")
	}
	if err := (&Sampler{Interval: -time.Second, Reader: &countingReader{}, OnSample: func([]GPUSample) {}}).Open(); err == nil {
		t.Error("Open with a negative interval passed")
	}
	r := &countingReader{fail: true, read: make(chan int)}
	s := &Sampler{Reader: r, Interval: time.Millisecond, OnSample: func([]GPUSample) { t.Error("a failed read delivered") }}
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < 2; n = <-r.read {
	}
	err := s.Close(context.Background())
	if err == nil || !strings.Contains(err.Error(), "GPU is lost") || !strings.Contains(err.Error(), "reads failed") {
		t.Errorf("Close: got %v, want the first read error and a count", err)
	}
}

func TestAttribute(t *testing.T) {
	nodes := []Node{{Name: "box", CPUs: 8, GPUs: []GPU{{Index: 0, MIG: -1, UUID: "GPU-b"}, {Index: 1, MIG: -1, UUID: "GPU-a"}}}}
	m, _ := newTestManager(nodes, time.Hour)
	// b takes GPU-b whole, so a's two workers share GPU-a.
	b := mustGranted(t, mustSubmit(t, m, Request{Workers: 1, Per: Resources{GPUs: 1}}))
	a := mustGranted(t, mustSubmit(t, m, Request{Workers: 2, Per: Resources{GPUs: 0.5}}))
	samples := []GPUSample{
		{Node: "box", GPU: "GPU-a", Utilization: 10},
		{Node: "box", GPU: "GPU-b", Utilization: 90},
		{Node: "other", GPU: "GPU-a", Utilization: 50},
	}
	got := a.Attribute(samples)
	want := []WorkerSample{{0, samples[0]}, {1, samples[0]}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("shared device: got %+v, want %+v", got, want)
	}
	if got := b.Attribute(samples); len(got) != 1 || got[0].Utilization != 90 {
		t.Errorf("whole device: got %+v", got)
	}
}
