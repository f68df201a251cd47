package tuner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotune/gotune/cluster"
	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/workers"
)

func init() {
	// hostSteps reports "steps" times, with a checkpoint each time and
	// the last byte of the address its node's workers listen on, so a
	// test can tell where it runs.
	trainer.Register("hostSteps", func(ctx context.Context, w *trainer.Worker) error {
		host := os.Getenv(trainer.EnvHost)
		octet, _ := strconv.Atoi(host[strings.LastIndexByte(host, '.')+1:])
		start := 0
		if rd := w.ResumeDir(); rd != "" {
			data, err := os.ReadFile(filepath.Join(rd, "step"))
			if err != nil {
				return err
			}
			start = len(data)
		}
		for s := start + 1; s <= w.Int("steps", 3); s++ {
			time.Sleep(20 * time.Millisecond)
			var opts []trainer.ReportOption
			if w.Rank() == 0 {
				dir, err := w.CheckpointDir()
				if err != nil {
					return err
				}
				os.WriteFile(filepath.Join(dir, "step"), []byte(strings.Repeat("x", s)), 0o644)
				opts = append(opts, trainer.WithCheckpoint(dir))
			}
			if err := w.Report(ctx, map[string]float64{"loss": 1 / float64(s), "host": float64(octet)}, opts...); err != nil {
				return err
			}
		}
		return nil
	})
}

// clusterOf starts a head whose own node offers nothing and agents in this
// process on 127.0.0.2, .3, …, each offering cpus CPUs, and returns the
// head and a function that stops agent i (from 0).
func clusterOf(t *testing.T, agents int, cpus float64) (*cluster.Head, func(i int)) {
	t.Helper()
	h, err := cluster.ListenHead("127.0.0.1:0", cluster.HeadConfig{
		Manager: workers.NewManager(nil, workers.ManagerConfig{}), Token: "t", Logf: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	stops := make([]func(), agents)
	for i := range agents {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			cluster.RunAgent(ctx, cluster.AgentConfig{
				Head: h.Addr(), Token: "t", Node: workers.Node{Name: fmt.Sprintf("agent%d", i), CPUs: cpus},
				Host: fmt.Sprintf("127.0.0.%d", i+2), Logf: t.Logf, Retry: 50 * time.Millisecond,
			})
		}()
		var once sync.Once
		stops[i] = func() { once.Do(func() { cancel(); <-done }) }
		t.Cleanup(stops[i])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := h.WaitAgents(ctx, agents); err != nil {
		t.Fatal(err)
	}
	return h, func(i int) { stops[i]() }
}

// A built-in model runs in process workers spread over the agents' nodes,
// its collectives across them.
func TestClusterBuiltinModel(t *testing.T) {
	h, _ := clusterOf(t, 3, 2)
	cfg := testConfig(t, 2)
	space, _ := searchspace.New(
		searchspace.Param{Name: "epochs", Domain: searchspace.Constant{Value: int64(2)}},
		searchspace.Param{Name: "lr", Domain: searchspace.LogUniform{Low: 0.01, High: 0.1}},
	)
	cfg.Search.Space = space
	cfg.Objective = Objective{Metric: "val_acc", Mode: "max"}
	cfg.Trainer = trainer.Config{Model: "mlp", Dataset: "../examples/data/digits.csv",
		Scaling: trainer.ScalingConfig{NumWorkers: 3, CPUsPerWorker: 1, Placement: workers.Spread}}
	tu, err := New(cfg, WithCluster(h))
	if err != nil {
		t.Fatal(err)
	}
	res, err := tu.Fit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range res.Trials {
		if tr.Status != storage.TrialTerminated || tr.Iterations != 2 || tr.BestMetric == nil || *tr.BestMetric < 0.5 {
			t.Errorf("trial %d: %s, %d iterations, best %v", tr.Number, tr.Status, tr.Iterations, tr.BestMetric)
		}
	}
	// Spread: each trial's three workers ran on the three agents.
	db, err := storage.Open(cfg.Storage)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for trial := 1; trial <= 2; trial++ {
		ws, err := db.Workers(context.Background(), cfg.Name, trial)
		if err != nil {
			t.Fatal(err)
		}
		nodes := map[string]bool{}
		for _, w := range ws {
			nodes[w.Node] = true
		}
		if len(nodes) != 3 || !nodes["agent0"] || !nodes["agent1"] || !nodes["agent2"] {
			t.Errorf("trial %d ran on %v, want every agent", trial, nodes)
		}
	}
}

// killer stops the agent that hosts the first report's trial at its
// second report, once, and records the groups' restarts.
type killer struct {
	nopObserver
	stop   func(i int)
	killed bool
	mu     sync.Mutex
	events []trainer.Event
	hosts  map[int]map[float64]bool
}

func (k *killer) OnReport(trial int, r trainer.Result) {
	if k.hosts[trial] == nil {
		k.hosts[trial] = map[float64]bool{}
	}
	k.hosts[trial][r.Metrics["host"]] = true
	if !k.killed && r.Iteration == 2 {
		k.killed = true
		k.stop(int(r.Metrics["host"]) - 2)
	}
}

func (k *killer) OnEvent(trial int, e trainer.Event) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.events = append(k.events, e)
}

func TestClusterSurvivesAgentLoss(t *testing.T) {
	h, stop := clusterOf(t, 3, 2)
	cfg := testConfig(t, 4)
	space, _ := searchspace.New(searchspace.Param{Name: "steps", Domain: searchspace.Constant{Value: int64(5)}})
	cfg.Search.Space = space
	cfg.Trainer.Scaling = trainer.ScalingConfig{NumWorkers: 2, CPUsPerWorker: 1}
	cfg.Trainer.Failure.MaxFailures = 2
	obs := &killer{stop: stop, hosts: map[int]map[float64]bool{}}
	tu, err := New(cfg, WithCluster(h), WithWorkerProcess("hostSteps"), WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	res, err := tu.Fit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range res.Trials {
		if tr.Status != storage.TrialTerminated || tr.Iterations != 5 {
			t.Errorf("trial %d: %s with %d iterations: %s", tr.Number, tr.Status, tr.Iterations, tr.Error)
		}
	}
	// A report that raced the loss may be told as skipped: the restart
	// is what counts.
	var restarts []trainer.Event
	for _, e := range obs.events {
		if e.Kind == trainer.EventRestart {
			restarts = append(restarts, e)
		}
	}
	if len(restarts) != 1 || !strings.Contains(restarts[0].Cause, "was lost with node agent") || restarts[0].Iteration != 2 {
		t.Fatalf("events %+v, want one restart after the node's loss, from iteration 2", obs.events)
	}
	moved := false
	for _, hosts := range obs.hosts {
		moved = moved || len(hosts) > 1
	}
	if !moved {
		t.Errorf("no trial moved to another node: %v", obs.hosts)
	}
}

func TestClusterRefusesGoFunctions(t *testing.T) {
	h, _ := clusterOf(t, 1, 2)
	_, err := New(testConfig(t, 1), WithCluster(h), WithTrainFunc(quadratic))
	var ce *ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "WithWorkerProcess") {
		t.Errorf("a Go training function with a cluster: %v", err)
	}
}
