package trainer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotune/gotune/cluster"
	"github.com/gotune/gotune/workers"
)

// testCluster is a head on 127.0.0.1 with agents in this process, each on
// a loopback address of its own, running this test binary's workers.
type testCluster struct {
	h     *cluster.Head
	stops map[string]func()
}

func newTestCluster(t *testing.T, shared bool, names ...string) *testCluster {
	t.Helper()
	h, err := cluster.ListenHead("127.0.0.1:0", cluster.HeadConfig{
		Manager: workers.NewManager(nil, workers.ManagerConfig{}), Token: "t", Logf: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	c := &testCluster{h: h, stops: map[string]func(){}}
	for i, name := range names {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			cluster.RunAgent(ctx, cluster.AgentConfig{
				Head: h.Addr(), Token: "t", Node: workers.Node{Name: name, CPUs: 4},
				Host: fmt.Sprintf("127.0.0.%d", i+2), Shared: shared, Logf: t.Logf, Retry: 50 * time.Millisecond,
			})
		}()
		var once sync.Once
		c.stops[name] = func() {
			once.Do(func() {
				cancel()
				<-done
			})
		}
		t.Cleanup(c.stops[name])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := h.WaitAgents(ctx, len(names)); err != nil {
		t.Fatal(err)
	}
	return c
}

// Place puts one worker on this node, then one on each live agent's node,
// in the order they joined.
func (c *testCluster) Place(_ context.Context, lo, hi int) (Placement, error) {
	slots := []Slot{{}}
	for _, a := range c.h.Agents() {
		if !a.Lost {
			slots = append(slots, Slot{Node: a.Name, Launcher: c.h.Launcher(a.Index)})
		}
	}
	if len(slots) < lo {
		return nil, fmt.Errorf("only %d nodes", len(slots))
	}
	return &fixedPlacement{slots: slots[:min(hi, len(slots))]}, nil
}

func TestRemoteWorkersFormOneGroup(t *testing.T) {
	c := newTestCluster(t, false, "a", "b")
	spec := Spec{
		Experiment: uniqueName(t), Trial: 1, Process: "sum",
		Scaling: ScalingConfig{NumWorkers: 3}, Placer: c, Launcher: c.h.Local(),
		ScratchDir: filepath.Join(t.TempDir(), "scratch"), LogDir: filepath.Join(t.TempDir(), "logs"),
	}
	sink := &collect{}
	if _, err := Run(context.Background(), spec, sink); err != nil {
		t.Fatal(err)
	}
	if len(sink.results) != 1 || sink.results[0].Metrics["sum"] != 6 {
		t.Errorf("the sum of ranks 1..3 across three nodes: %+v", sink.results)
	}
	// Each remote worker's log is kept on this node: what it wrote, after
	// where it started.
	for rank := 1; rank <= 2; rank++ {
		data, err := os.ReadFile(filepath.Join(spec.LogDir, fmt.Sprintf("worker_%d.log", rank)))
		if err != nil || !regexp.MustCompile(fmt.Sprintf(`(?s)started on node.*rank %d adds`, rank)).Match(data) {
			t.Errorf("worker %d's log: %q, %v", rank, data, err)
		}
	}
}

// A node lost mid-run fails its group, which restarts on the nodes left
// from the latest checkpoint, whose shards came from every node: the
// results are those of a run without failure.
func TestRemoteGroupSurvivesNodeLoss(t *testing.T) {
	kinds := []struct {
		name string
		spec func(t *testing.T) Spec
	}{
		{"process", func(t *testing.T) Spec {
			return Spec{Process: "counter", Config: map[string]any{"steps": int64(5), "sleep_ms": int64(20)}, KillTimeout: 2 * time.Second}
		}},
		{"command", func(t *testing.T) Spec {
			// In lockstep, as DDP ranks are: every rank's shard of a step
			// is handed over before rank 0 reports the next.
			return commandSpec(t, 3, "--steps=5", "--sleep-ms=20", "--shards", "--lockstep", "--pid-dir="+t.TempDir())
		}},
	}
	for _, kind := range kinds {
		for _, shared := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/shared=%v", kind.name, shared), func(t *testing.T) {
				base := kind.spec(t)
				base.Experiment, base.Trial, base.Seed = uniqueName(t), 1, 5
				base.Scaling = ScalingConfig{MinWorkers: 2, MaxWorkers: 3} // it shrinks
				base.ScratchDir = filepath.Join(t.TempDir(), "scratch")
				base.LogDir = filepath.Join(t.TempDir(), "logs")

				want := &collect{}
				local := base
				local.Checkpoints = &testStore{dir: t.TempDir()}
				if _, err := Run(context.Background(), local, want); err != nil {
					t.Fatal(err)
				}

				c := newTestCluster(t, shared, "a", "b")
				spec := base
				spec.Placer, spec.Launcher = c, c.h.Local()
				spec.Failure.MaxFailures = 2
				store := &testStore{dir: t.TempDir()}
				spec.Checkpoints = store
				var lost bool
				var committed []string
				sink := &collect{on: func(r Result) Action {
					if r.Iteration == 2 && !lost {
						lost = true
						entries, _ := os.ReadDir(r.CheckpointPath)
						for _, e := range entries {
							committed = append(committed, e.Name())
						}
						c.stops["b"]() // its agent goes, and its worker with it
					}
					return Continue
				}}
				sum, err := Run(context.Background(), spec, sink)
				if err != nil {
					t.Fatal(err)
				}
				// A report rank 0 sends while node b goes is not recorded
				// (a reports_skipped event says so); it is made again.
				restarts := sink.restarts()
				if sum.Restarts != 1 || len(restarts) != 1 || restarts[0].Workers != 2 {
					t.Errorf("restarts %d, events %+v; want one restart with 2 workers", sum.Restarts, sink.events)
				}
				if len(restarts) == 1 && !strings.Contains(restarts[0].Cause, "lost with node b") {
					t.Errorf("restart cause %q", restarts[0].Cause)
				}
				if got := strings.Join(committed, " "); got != "state_0 state_1 state_2" {
					t.Errorf("checkpoint 2 holds %q, want every rank's shard", got)
				}
				if got, w := sink.series(), want.series(); got != w {
					t.Errorf("results %s, want %s as without the loss", got, w)
				}
			})
		}
	}
}

// A remote rank's shard is copied to this node before it counts, which
// can take longer than rank 0 takes to report again: each checkpoint
// still waits for it, and none is committed without it. The first waits
// for its line firstRemoteShardWait at most: on a loaded machine the line
// may come later, and then the dropped shard is told.
func TestRemoteShardSlowerThanRankZero(t *testing.T) {
	c := newTestCluster(t, false, "a")
	// Rank 1's shards take longer to copy than a step takes.
	spec := commandSpec(t, 2, "--steps=4", "--sleep-ms=50", "--shards", "--shard-mb=32", "--lockstep", "--pid-dir="+t.TempDir())
	spec.Placer, spec.Launcher = c, c.h.Local()
	spec.Checkpoints = &testStore{dir: t.TempDir()}
	held := map[int]string{}
	sink := &collect{on: func(r Result) Action {
		entries, _ := os.ReadDir(r.CheckpointPath)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		held[r.Iteration] = strings.Join(names, " ")
		return Continue
	}}
	if _, err := Run(context.Background(), spec, sink); err != nil {
		t.Fatal(err)
	}
	for it := 1; it <= 4; it++ {
		got := held[it]
		if it == 1 && got == "state_0" && len(sink.causes(EventReportRefused)) == 1 {
			t.Logf("rank 1's first shard came after the first checkpoint's wait, and was told: %s", sink.causes(EventReportRefused)[0])
			continue
		}
		if got != "pad_1 state_0 state_1" {
			t.Errorf("checkpoint %d holds %q, want both ranks' shards; told %q", it, got, sink.causes(EventReportRefused))
		}
	}
}

// Goroutine workers cannot run on another node: a slot with a launcher
// fails the group at once.
func TestGoroutineWorkersStayHome(t *testing.T) {
	c := newTestCluster(t, true, "a")
	spec := Spec{
		Experiment: uniqueName(t), Trial: 1, Scaling: ScalingConfig{NumWorkers: 2}, Placer: c,
		Train: func(ctx context.Context, w *Worker) error { return nil },
	}
	_, err := Run(context.Background(), spec, &collect{})
	if !IsPermanent(err) || !errorContains(err, "process workers") {
		t.Errorf("goroutine workers on an agent's node: %v", err)
	}
	var nl *workers.NodeLostError
	if errors.As(err, &nl) {
		t.Error("blamed a node loss")
	}
}
