// Command resources measures the resource manager on a declared cluster of
// 64 nodes × 8 GPUs, and prints one JSON line per figure:
//
//   - placement latency: with 1,000 groups waiting (groups of 1, 2, 4 and
//     8 one-GPU workers), the time of one placement decision, that is one
//     pass over every waiting group after a group ends or a new one
//     arrives (target: median ≤ 1 ms);
//
//   - a simulated mixed workload (groups of 1, 2, 4 and 8 GPUs arriving at
//     random with random durations, more work offered than the cluster
//     holds) placed by gotune's manager and by a plain first-fit placer:
//     idle GPU-hours while groups wait, makespan, and waits by group size.
//
//     go run ./bench/resources [-nodes 64] [-gpus 8] [-pending 1000] [-decisions 2000] [-groups 4000] [-seeds 5]
package main

import (
	"container/heap"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/gotune/gotune/workers"
)

func main() {
	nodes := flag.Int("nodes", 64, "declared nodes")
	gpus := flag.Int("gpus", 8, "GPUs per node")
	pending := flag.Int("pending", 1000, "groups kept waiting while latency is measured")
	decisions := flag.Int("decisions", 2000, "placement decisions timed")
	groups := flag.Int("groups", 4000, "groups in each simulated workload")
	seeds := flag.Int("seeds", 5, "simulated workloads (different seeds); figures are means")
	load := flag.Float64("load", 1.2, "work offered while groups arrive, as a multiple of the cluster's GPU time")
	flag.Parse()
	cluster := workers.Declared{Nodes: *nodes, CPUs: 64, Memory: 512 * workers.GiB, GPUs: *gpus}
	if err := cluster.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "resources:", err)
		os.Exit(2)
	}
	emit(latency(cluster, *pending, *decisions))
	sims := []placer{
		{name: "gotune", reserveAfter: workers.DefaultReserveAfter},
		{name: "gotune", reserveAfter: time.Hour},
		{name: "first-fit"},
	}
	var results []map[string]any
	for _, p := range sims {
		results = append(results, simulateMean(cluster, p, *groups, *seeds, *load))
		emit(results[len(results)-1])
	}
	ff := results[len(results)-1]["idle_gpu_hours"].(float64)
	for _, r := range results[:len(results)-1] {
		emit(map[string]any{
			"bench": "resources", "figure": "idle_gpu_hours_ratio",
			"system": "gotune", "reserve_after_s": r["reserve_after_s"], "peer": "first-fit",
			"ratio": round(r["idle_gpu_hours"].(float64)/ff, 3),
		})
	}
}

func emit(v map[string]any) {
	if err := json.NewEncoder(os.Stdout).Encode(v); err != nil {
		fmt.Fprintln(os.Stderr, "resources:", err)
		os.Exit(1)
	}
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// sizes are the GPUs of a group, drawn with weights: many small groups,
// few large ones.
var (
	sizes   = []int{1, 2, 4, 8}
	weights = []float64{0.4, 0.3, 0.2, 0.1}
)

func drawSize(rng *rand.Rand) int {
	u := rng.Float64()
	for i, w := range weights {
		if u < w {
			return sizes[i]
		}
		u -= w
	}
	return sizes[len(sizes)-1]
}

// latency fills the cluster, keeps `pending` groups waiting, and times
// placement decisions: each step ends a random running group (one pass)
// and submits a new one (another pass). The clock moves a second a step,
// so groups that wait long reserve, as they would in a real sweep.
func latency(cluster workers.Declared, pending, decisions int) map[string]any {
	rng := rand.New(rand.NewPCG(1, 2))
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := workers.NewManager(cluster.Inventory(), workers.ManagerConfig{Now: func() time.Time { return clock }})
	var running []*workers.Allocation
	var waiting []*workers.Ticket
	request := func() workers.Request {
		n := drawSize(rng)
		placement := workers.Pack
		if rng.IntN(4) == 0 {
			placement = workers.Spread
		}
		return workers.Request{Workers: n, Per: workers.Resources{CPUs: 4, GPUs: 1, Memory: 32 * workers.GiB}, Placement: placement}
	}
	collect := func() {
		kept := waiting[:0]
		for _, t := range waiting {
			select {
			case <-t.Ready():
				running = append(running, t.Allocation())
			default:
				kept = append(kept, t)
			}
		}
		waiting = kept
	}
	submit := func() time.Duration {
		r := request()
		start := time.Now()
		t, err := m.Submit(r)
		d := time.Since(start)
		if err != nil {
			panic(err)
		}
		waiting = append(waiting, t)
		return d
	}
	for len(waiting) < pending {
		submit()
		collect()
	}
	var release, arrive []float64
	for range decisions / 2 {
		clock = clock.Add(time.Second)
		i := rng.IntN(len(running))
		a := running[i]
		running = slices.Delete(running, i, i+1)
		start := time.Now()
		a.Release()
		release = append(release, float64(time.Since(start).Microseconds()))
		collect()
		for len(waiting) < pending {
			arrive = append(arrive, float64(submit().Microseconds()))
			collect()
		}
	}
	all := append(slices.Clone(release), arrive...)
	return map[string]any{
		"bench": "resources", "figure": "placement_latency", "system": "gotune",
		"nodes": cluster.Nodes, "gpus_per_node": cluster.GPUs, "pending": pending,
		"decisions":         len(all),
		"median_ms":         round(quantile(all, 0.5)/1000, 4),
		"p90_ms":            round(quantile(all, 0.9)/1000, 4),
		"p99_ms":            round(quantile(all, 0.99)/1000, 4),
		"max_ms":            round(quantile(all, 1)/1000, 4),
		"release_median_ms": round(quantile(release, 0.5)/1000, 4),
		"arrival_median_ms": round(quantile(arrive, 0.5)/1000, 4),
		"target_median_ms":  1.0,
		"meets_target":      quantile(all, 0.5) <= 1000,
		"waiting_at_end":    len(waiting),
		"running_at_end":    len(running),
	}
}

func quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return math.NaN()
	}
	return s[int(math.Min(float64(len(s)-1), math.Floor(q*float64(len(s)))))]
}

// placer is one way of placing the simulated groups: gotune's manager
// with a ReserveAfter, or plain first-fit.
type placer struct {
	name         string
	reserveAfter time.Duration
}

// group is one simulated training group: g GPUs on one worker (so the
// group must fit on one node), arriving at `arrive` and running for `run`.
type group struct {
	id          int
	gpus        int
	arrive, run time.Duration
	start       time.Duration
}

func workload(rng *rand.Rand, n, capacity int, load float64) []*group {
	const meanRun = 2 * time.Hour
	meanSize := 0.0
	for i, s := range sizes {
		meanSize += weights[i] * float64(s)
	}
	// Arrivals at rate λ offer `load` times the cluster's GPU time.
	rate := load * float64(capacity) / (meanSize * meanRun.Hours()) // groups per hour
	var t float64
	gs := make([]*group, n)
	for i := range gs {
		t += rng.ExpFloat64() / rate
		run := time.Duration(rng.ExpFloat64() * float64(meanRun))
		gs[i] = &group{id: i, gpus: drawSize(rng), arrive: time.Duration(t * float64(time.Hour)), run: max(run, time.Minute)}
	}
	return gs
}

// events orders group completions by time, then by group.
type events []*group

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	ti, tj := e[i].start+e[i].run, e[j].start+e[j].run
	return ti < tj || ti == tj && e[i].id < e[j].id
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(*group)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// scheduler is the part of a placer the simulation drives.
type scheduler interface {
	// arrive queues g; release ends g. Both return the groups that started.
	arrive(g *group) []*group
	release(g *group) []*group
}

func simulateMean(cluster workers.Declared, p placer, n, seeds int, load float64) map[string]any {
	sum := map[string]float64{}
	for seed := range seeds {
		for k, v := range simulate(cluster, p, n, uint64(seed), load) {
			sum[k] += v
		}
	}
	out := map[string]any{
		"bench": "resources", "figure": "mixed_workload", "system": p.name,
		"nodes": cluster.Nodes, "gpus_per_node": cluster.GPUs, "groups": n, "seeds": seeds, "load": load,
	}
	if p.name == "gotune" {
		out["reserve_after_s"] = p.reserveAfter.Seconds()
	}
	for k, v := range sum {
		out[k] = round(v/float64(seeds), 2)
	}
	return out
}

// simulate plays one workload through p and returns its figures.
func simulate(cluster workers.Declared, p placer, n int, seed uint64, load float64) map[string]float64 {
	capacity := cluster.Nodes * cluster.GPUs
	gs := workload(rand.New(rand.NewPCG(seed, 99)), n, capacity, load)
	var now time.Duration
	var s scheduler
	if p.name == "first-fit" {
		s = newFirstFit(cluster)
	} else {
		s = newManaged(cluster, p.reserveAfter, &now)
	}
	var running events
	busy, waiting := 0, 0
	var idleWhileWaiting, work float64 // GPU-hours
	started := func(gs []*group) {
		for _, g := range gs {
			g.start = now
			heap.Push(&running, g)
			busy += g.gpus
			waiting--
		}
	}
	advance := func(t time.Duration) {
		if waiting > 0 {
			idleWhileWaiting += float64(capacity-busy) * (t - now).Hours()
		}
		now = t
	}
	next := 0
	for next < len(gs) || running.Len() > 0 {
		if next < len(gs) && (running.Len() == 0 || gs[next].arrive <= running[0].start+running[0].run) {
			g := gs[next]
			next++
			advance(g.arrive)
			waiting++
			started(s.arrive(g))
			continue
		}
		g := heap.Pop(&running).(*group)
		advance(g.start + g.run)
		busy -= g.gpus
		work += float64(g.gpus) * g.run.Hours()
		started(s.release(g))
	}
	if waiting != 0 {
		panic(fmt.Sprintf("%s: %d groups never started", p.name, waiting))
	}
	out := map[string]float64{
		"idle_gpu_hours": idleWhileWaiting,
		"makespan_h":     now.Hours(),
		"utilisation":    work / (float64(capacity) * now.Hours()),
	}
	for _, size := range sizes {
		var waits []float64
		for _, g := range gs {
			if g.gpus == size {
				waits = append(waits, (g.start - g.arrive).Hours())
			}
		}
		mean := 0.0
		for _, w := range waits {
			mean += w
		}
		out[fmt.Sprintf("wait_h_mean_%dgpu", size)] = mean / float64(len(waits))
		out[fmt.Sprintf("wait_h_max_%dgpu", size)] = quantile(waits, 1)
	}
	return out
}

// managed drives gotune's manager on a simulated clock.
type managed struct {
	m       *workers.Manager
	waiting []*workers.Ticket
	groupOf map[*workers.Ticket]*group
	allocs  map[*group]*workers.Allocation
}

func newManaged(cluster workers.Declared, reserveAfter time.Duration, now *time.Duration) *managed {
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return &managed{
		m:       workers.NewManager(cluster.Inventory(), workers.ManagerConfig{ReserveAfter: reserveAfter, Now: func() time.Time { return epoch.Add(*now) }}),
		groupOf: map[*workers.Ticket]*group{},
		allocs:  map[*group]*workers.Allocation{},
	}
}

func (s *managed) arrive(g *group) []*group {
	t, err := s.m.Submit(workers.Request{Workers: 1, Per: workers.Resources{CPUs: 1, GPUs: float64(g.gpus)}})
	if err != nil {
		panic(err)
	}
	s.waiting = append(s.waiting, t)
	s.groupOf[t] = g
	return s.collect()
}

func (s *managed) release(g *group) []*group {
	s.allocs[g].Release()
	delete(s.allocs, g)
	return s.collect()
}

func (s *managed) collect() []*group {
	var out []*group
	kept := s.waiting[:0]
	for _, t := range s.waiting {
		select {
		case <-t.Ready():
			g := s.groupOf[t]
			delete(s.groupOf, t)
			s.allocs[g] = t.Allocation()
			out = append(out, g)
		default:
			kept = append(kept, t)
		}
	}
	s.waiting = kept
	return out
}

// firstFit is the peer: waiting groups in arrival order, each on the
// lowest-numbered node with room, any that fits started at once.
type firstFit struct {
	free    []int
	waiting []*group
	node    map[*group]int
}

func newFirstFit(cluster workers.Declared) *firstFit {
	f := &firstFit{free: make([]int, cluster.Nodes), node: map[*group]int{}}
	for i := range f.free {
		f.free[i] = cluster.GPUs
	}
	return f
}

func (f *firstFit) arrive(g *group) []*group {
	f.waiting = append(f.waiting, g)
	return f.place()
}

func (f *firstFit) release(g *group) []*group {
	f.free[f.node[g]] += g.gpus
	delete(f.node, g)
	return f.place()
}

func (f *firstFit) place() []*group {
	var out []*group
	kept := f.waiting[:0]
	for _, g := range f.waiting {
		i := slices.IndexFunc(f.free, func(free int) bool { return free >= g.gpus })
		if i < 0 {
			kept = append(kept, g)
			continue
		}
		f.free[i] -= g.gpus
		f.node[g] = i
		out = append(out, g)
	}
	f.waiting = kept
	return out
}
