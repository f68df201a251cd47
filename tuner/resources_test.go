package tuner

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/workers"
)

// TestResourcesBoundConcurrency runs a sweep on two declared GPUs with one
// GPU per trial: however many trials may run at once, no more than two
// groups ever hold GPUs together, and no device is handed out twice.
func TestResourcesBoundConcurrency(t *testing.T) {
	cfg := testConfig(t, 6)
	cfg.Search.MaxConcurrent = 6
	cfg.Resources = workers.Declared{Nodes: 1, CPUs: 4, GPUs: 2}
	cfg.Trainer.Scaling = trainer.ScalingConfig{NumWorkers: 1, CPUsPerWorker: 0.5, GPUsPerWorker: 1}
	var mu sync.Mutex
	active, peak := 0, 0
	train := func(ctx context.Context, w *trainer.Worker) error {
		mu.Lock()
		active++
		peak = max(peak, active)
		mu.Unlock()
		time.Sleep(10 * time.Millisecond) // let trials overlap if the manager allowed it
		mu.Lock()
		active--
		mu.Unlock()
		return quadratic(ctx, w)
	}
	tu, err := New(cfg, WithTrainFunc(train))
	if err != nil {
		t.Fatal(err)
	}
	res, err := tu.Fit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Trials) != 6 {
		t.Errorf("got %d trials, want 6", len(res.Trials))
	}
	if peak > 2 {
		t.Errorf("%d trials ran at once on 2 GPUs", peak)
	}
}

// TestSharedManager gives two tuners one manager: their trials together
// never exceed its single CPU's worth of groups.
func TestSharedManager(t *testing.T) {
	m := workers.NewManager(workers.Declared{Nodes: 1, CPUs: 1}.Inventory(), workers.ManagerConfig{})
	var mu sync.Mutex
	active, peak := 0, 0
	train := func(ctx context.Context, w *trainer.Worker) error {
		mu.Lock()
		active++
		peak = max(peak, active)
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		active--
		mu.Unlock()
		return quadratic(ctx, w)
	}
	var wg sync.WaitGroup
	for _, name := range []string{"a", "b"} {
		cfg := testConfig(t, 3)
		cfg.Name = name
		cfg.Trainer.Scaling = trainer.ScalingConfig{NumWorkers: 1, CPUsPerWorker: 1}
		tu, err := New(cfg, WithTrainFunc(train), WithManager(m))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if _, err := tu.Fit(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if peak != 1 {
		t.Errorf("%d groups ran at once on one CPU, want 1", peak)
	}
}

func TestNewRefusesGroupThatNeverFits(t *testing.T) {
	cfg := testConfig(t, 1)
	cfg.Resources = workers.Declared{Nodes: 1, CPUs: 8, GPUs: 2}
	cfg.Trainer.Scaling = trainer.ScalingConfig{NumWorkers: 3, GPUsPerWorker: 1}
	_, err := New(cfg, WithTrainFunc(quadratic))
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Key != "trainer.scaling" || !errors.Is(err, workers.ErrNeverFits) {
		t.Fatalf("got %v, want a trainer.scaling error wrapping ErrNeverFits", err)
	}
	// So is a shared manager that is too small.
	m := workers.NewManager(workers.Declared{Nodes: 1, CPUs: 8, GPUs: 2}.Inventory(), workers.ManagerConfig{})
	cfg.Resources = workers.Declared{}
	if _, err := New(cfg, WithTrainFunc(quadratic), WithManager(m)); !errors.Is(err, workers.ErrNeverFits) {
		t.Fatalf("with a shared manager: got %v, want ErrNeverFits", err)
	}
}

func TestResourceSettingsValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		key  string
	}{
		{"memory without unit", func(c *Config) { c.Resources = workers.Declared{Memory: 16} }, "resources.memory"},
		{"negative GPUs", func(c *Config) { c.Resources = workers.Declared{GPUs: -1} }, "resources.gpus"},
		{"fraction above one", func(c *Config) { c.Trainer.Scaling.GPUsPerWorker = 1.5 }, "trainer.scaling.gpus_per_worker"},
		{"worker memory without unit", func(c *Config) { c.Trainer.Scaling.MemoryPerWorker = 4 }, "trainer.scaling.memory_per_worker"},
		{"unknown placement", func(c *Config) { c.Trainer.Scaling.Placement = "scatter" }, "trainer.scaling.placement"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t, 1)
			tt.edit(&cfg)
			var ce *ConfigError
			if err := cfg.Validate(); !errors.As(err, &ce) || ce.Key != tt.key {
				t.Errorf("got %v, want an error for %s", err, tt.key)
			}
		})
	}
}
