package schedulers

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/gotune/gotune/searchspace"
)

// BenchmarkDecisionAtHistory measures one scheduling decision after n
// trials have run, for n = 1k, 10k and 100k: ns/op must not grow with n.
// Each scheduler starts from a snapshot that holds the history (built
// directly, so that setting it up does not cost n decisions) and is
// restored from it every restoreEvery operations, so that the history the
// operations add stays small next to n; a few decisions after each
// restore are not timed. B/trial is the heap a scheduler holding the
// history takes, per trial of it.
func BenchmarkDecisionAtHistory(b *testing.B) {
	for _, kind := range []string{"asha-stop", "asha-promote", "hyperband", "median", "pbt"} {
		for _, n := range []int{1_000, 10_000, 100_000} {
			b.Run(fmt.Sprintf("%s/n=%d", kind, n), func(b *testing.B) {
				h := newHistoryBench(b, kind, n)
				h.restore(b)
				b.ResetTimer()
				for i := range b.N {
					if i > 0 && i%restoreEvery == 0 {
						b.StopTimer()
						h.restore(b)
						b.StartTimer()
					}
					h.op()
				}
				b.StopTimer()
				b.ReportMetric(heapPerTrial(b, kind, n), "B/trial")
			})
		}
	}
}

// BenchmarkMedianContinuousTime measures one decision of the median rule
// on a continuous time attribute (seconds of training, say), where no two
// results share a time, after n trials of history, n = 1k and 10k: each
// trial reported 20 times, a second or so apart, and the decision is a
// new trial's first result past the grace period.
func BenchmarkMedianContinuousTime(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(uint64(n), 11))
			st := medianState{Trials: map[int]*medianTrial{}}
			for id := 1; id <= n; id++ {
				t := &medianTrial{Best: fnum(math.Inf(1)), State: ended}
				time := 0.0
				for range 20 {
					time += 0.5 + rng.Float64()
					score := rng.Float64() / time
					t.Times = append(t.Times, time)
					t.Scores = append(t.Scores, fnum(score))
					t.Best = min(t.Best, fnum(score))
				}
				st.Trials[id] = t
			}
			snapshot, err := json.Marshal(st)
			if err != nil {
				b.Fatal(err)
			}
			s, err := New(Config{Kind: "median", GracePeriod: 1}, Env{})
			if err != nil {
				b.Fatal(err)
			}
			if err := s.(Snapshotter).Restore(snapshot); err != nil {
				b.Fatal(err)
			}
			next := n + 1
			for i := 0; b.Loop(); i++ {
				if i > 0 && i%restoreEvery == 0 {
					b.StopTimer()
					if err := s.(Snapshotter).Restore(snapshot); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				s.OnTrialAdd(next, nil)
				s.OnResult(Result{Trial: next, Time: 1 + 19*rng.Float64(), Score: rng.Float64()})
				s.OnTrialEnd(next)
				next++
			}
		})
	}
}

// heapPerTrial measures the heap a scheduler restored from a history of
// n trials takes, less its snapshot, per trial.
func heapPerTrial(b *testing.B, kind string, n int) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	h := newHistoryBench(b, kind, n)
	h.restore(b)
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := float64(after.HeapAlloc) - float64(before.HeapAlloc) - float64(len(h.snapshot))
	runtime.KeepAlive(h)
	return held / float64(n)
}

// restoreEvery is how many operations run on one restored history.
const restoreEvery = 256

// historyBench is a scheduler with n trials of history and the operation
// timed on it.
type historyBench struct {
	s        Scheduler
	snapshot []byte
	// next is the number of the next new trial; first is the first one
	// after the history.
	next, first int
	rng         *rand.Rand
	// warm runs untimed after each restore.
	warm int
	op   func()
}

func (h *historyBench) restore(b *testing.B) {
	if err := h.s.(Snapshotter).Restore(h.snapshot); err != nil {
		b.Fatal(err)
	}
	h.next = h.first
	h.rng = rand.New(rand.NewPCG(1, 2))
	for range h.warm {
		h.op()
	}
}

func newHistoryBench(b *testing.B, kind string, n int) *historyBench {
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	h := &historyBench{first: n + 1}
	snap := func(st any) []byte {
		data, err := json.Marshal(st)
		if err != nil {
			b.Fatal(err)
		}
		return data
	}
	switch kind {
	case "asha-stop", "asha-promote":
		promote := kind == "asha-promote"
		cfg := Config{Kind: "asha", MaxT: 100, Mode: "stop"}
		env := Env{Checkpoints: promote}
		if promote {
			cfg.Mode = "promote"
		}
		s, err := New(cfg, env)
		if err != nil {
			b.Fatal(err)
		}
		a := s.(*asha)
		st := ashaState{Trials: map[int]*ashaTrial{}, Added: n}
		// Every trial is recorded at rung 0; the best 1/η of a rung went
		// on to the next one, as promotions (or passing the cutoff) had
		// it, and every trial has ended.
		var rungs []*ashaRung
		ids := make([]int, n)
		for i := range ids {
			ids[i] = i + 1
		}
		scores := map[int]float64{}
		for _, id := range ids {
			scores[id] = rng.Float64()
			st.Trials[id] = &ashaTrial{Rung: -1, State: ended}
		}
		for _, proto := range a.st.Brackets[0] {
			rg := &ashaRung{Milestone: proto.Milestone}
			for _, id := range ids {
				rg.Records = append(rg.Records, &ashaRecord{Trial: id, Score: fnum(scores[id] + rng.Float64()*0.1)})
				st.Trials[id].Rung++
			}
			byScore := slices.Clone(rg.Records)
			slices.SortStableFunc(byScore, func(x, y *ashaRecord) int { return cmp.Compare(x.Score, y.Score) })
			keep := len(byScore) / 3
			ids = ids[:0]
			for _, rec := range byScore[:keep] {
				rec.Promoted = promote
				ids = append(ids, rec.Trial)
			}
			slices.Sort(ids)
			rungs = append(rungs, rg)
		}
		st.Brackets = [][]*ashaRung{rungs}
		// The warm-up pays for any index built after a restore.
		h.s, h.snapshot, h.warm = s, snap(st), 1
		times := []float64{1, 3, 9}
		h.op = func() {
			id := h.next
			h.next++
			s.OnTrialAdd(id, nil)
			s.OnResult(Result{Trial: id, Time: times[id%len(times)], Score: h.rng.Float64()})
			if promote {
				if o, ok := s.Next(Capacity{CanResume: true, MoreTrials: true}); ok {
					s.OnTrialEnd(o.Trial)
				}
			}
			s.OnTrialEnd(id)
		}
	case "hyperband":
		s, err := New(Config{Kind: "hyperband", MaxT: 81}, Env{Checkpoints: true})
		if err != nil {
			b.Fatal(err)
		}
		// HyperBand's history is cheap to play: every trial reports at
		// each rung it is kept for and ends at max_t.
		h.s = s
		h.op = func() { h.playHyperBand(s, 1) }
		h.next, h.rng = 1, rng
		h.playHyperBand(s, n)
		data, err := s.(Snapshotter).Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		h.snapshot, h.first = data, h.next
	case "median":
		s, err := New(Config{Kind: "median"}, Env{})
		if err != nil {
			b.Fatal(err)
		}
		// Every trial reported at times 1 to 20 (some stopped early).
		const horizon = 20
		st := medianState{Trials: map[int]*medianTrial{}}
		for id := 1; id <= n; id++ {
			t := &medianTrial{Best: fnum(2)}
			last := 1 + rng.IntN(horizon)
			for time := 1; time <= last; time++ {
				score := rng.Float64() / float64(time)
				t.Times = append(t.Times, float64(time))
				t.Scores = append(t.Scores, fnum(score))
				t.Best = min(t.Best, fnum(score))
			}
			st.Trials[id] = t
		}
		h.s, h.snapshot, h.warm = s, snap(st), 2*horizon
		h.op = func() {
			id := h.next
			h.next++
			s.OnTrialAdd(id, nil)
			s.OnResult(Result{Trial: id, Time: float64(1 + id%horizon), Score: h.rng.Float64()})
			s.OnTrialEnd(id)
		}
	case "pbt":
		space := benchSpace(b)
		s, err := New(Config{Kind: "pbt", PerturbationInterval: 1}, Env{Checkpoints: true, Space: space, Seed: 1})
		if err != nil {
			b.Fatal(err)
		}
		// n trials have ended; a population of 64 runs on.
		const population = 64
		st := pbtState{Trials: map[int]*pbtTrial{}, Rand: newSeededRand(1, 0x9b7)}
		for id := 1; id <= n+population; id++ {
			t := &pbtTrial{Config: space.Sample(rng), State: ended, HasScore: true, Score: fnum(rng.Float64()),
				LastPerturb: 10, HasCkpt: true, CkptTime: 10, CkptScore: fnum(rng.Float64())}
			if id > n {
				t.State = running
			}
			st.Trials[id] = t
		}
		h.s, h.snapshot = s, snap(st)
		var times [population]float64
		h.op = func() {
			k := h.rng.IntN(population)
			if times[k] < 10 {
				times[k] = 10
			}
			times[k]++
			s.OnResult(Result{Trial: n + 1 + k, Time: times[k], Score: h.rng.Float64(), Checkpoint: true})
		}
	default:
		b.Fatalf("unknown kind %q", kind)
	}
	return h
}

// playHyperBand runs count new trials through a HyperBand scheduler: each
// reports at the rungs it is kept for, stopped trials end.
func (h *historyBench) playHyperBand(s Scheduler, count int) {
	hb := s.(*hyperBand)
	live := map[int]bool{}
	report := func(id int) {
		t := hb.st.Trials[id]
		b := hb.st.Brackets[t.Bracket]
		time := hb.c.MaxT
		if b.Rung < len(b.Milestones) {
			time = b.Milestones[b.Rung]
		}
		if d := s.OnResult(Result{Trial: id, Time: time, Score: h.rng.Float64()}); d.Action == Stop {
			s.OnTrialEnd(id)
			delete(live, id)
		}
	}
	for range count {
		id := h.next
		h.next++
		s.OnTrialAdd(id, nil)
		live[id] = true
		report(id)
		for {
			o, ok := s.Next(Capacity{CanResume: true, MoreTrials: true})
			if !ok {
				break
			}
			if o.Action == Stop {
				s.OnTrialEnd(o.Trial)
				delete(live, o.Trial)
				continue
			}
			report(o.Trial)
		}
	}
}

func benchSpace(b *testing.B) *searchspace.Space {
	space, err := searchspace.New(
		searchspace.Param{Name: "lr", Domain: searchspace.LogUniform{Low: 1e-4, High: 1e-1}},
		searchspace.Param{Name: "act", Domain: searchspace.Choice{Values: []any{"relu", "tanh", "gelu"}}},
	)
	if err != nil {
		b.Fatal(err)
	}
	return space
}

// BenchmarkASHASeveralObjectives measures one stop-mode decision of ASHA
// with two or three objectives at a rung that holds n records already.
func BenchmarkASHASeveralObjectives(b *testing.B) {
	for _, m := range []int{2, 3} {
		for _, n := range []int{2_000, 20_000} {
			b.Run(fmt.Sprintf("m=%d/n=%d", m, n), func(b *testing.B) {
				metrics := []string{"a", "b", "c"}[:m]
				modes := []string{"min", "max", "min"}[:m]
				cfg := Config{Kind: "asha", Mode: "stop", MaxT: 100, GracePeriod: 1}
				s, err := New(cfg, Env{Metric: "a", Mode: "min", Metrics: metrics, Modes: modes})
				if err != nil {
					b.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(uint64(n), uint64(m)))
				result := func(trial int) Result {
					ms := map[string]float64{}
					for _, k := range metrics {
						ms[k] = float64(rng.IntN(1000)) / 10
					}
					return Result{Trial: trial, Time: 1, Score: ms["a"], Metrics: ms}
				}
				for i := 1; i <= n; i++ {
					s.OnTrialAdd(i, nil)
					s.OnResult(result(i))
				}
				snapshot, err := s.(Snapshotter).Snapshot()
				if err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for i := range b.N {
					if i > 0 && i%restoreEvery == 0 {
						b.StopTimer()
						if err := s.(Snapshotter).Restore(snapshot); err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
					}
					s.OnTrialAdd(n+1+i, nil)
					s.OnResult(result(n + 1 + i))
				}
			})
		}
	}
}
