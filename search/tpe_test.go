package search

import (
	"cmp"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gotune/gotune/searchspace"
)

// TestTPERepeats checks that a seed gives the same sequence, random
// startup trials and modelled ones alike, also when trials overlap (with
// results arriving in the same order), and that another seed does not.
func TestTPERepeats(t *testing.T) {
	space := mixedSpace(t)
	one := func(seed int64) []map[string]any {
		s := mustTPE(t, space, seed)
		return drive(t, s, TPEStartupTrials+40, score)
	}
	// Three trials at a time: each ends after the next two start.
	overlapping := func(seed int64) []map[string]any {
		s := mustTPE(t, space, seed)
		var cfgs []map[string]any
		for trial := 1; trial <= TPEStartupTrials+40; trial++ {
			cfg, err := s.Suggest(trial)
			if err != nil {
				t.Fatal(err)
			}
			cfgs = append(cfgs, cfg)
			if trial > 2 {
				obs := Observation{Step: 1, Score: score(cfgs[trial-3])}
				s.OnTrialEnd(trial-2, TrialEnd{Status: TrialCompleted, Last: &obs})
			}
		}
		return cfgs
	}
	a, b, c := one(11), one(11), one(12)
	if !reflect.DeepEqual(a, b) {
		t.Error("the same seed gave different sequences")
	}
	if reflect.DeepEqual(a[TPEStartupTrials:], c[TPEStartupTrials:]) {
		t.Error("seeds 11 and 12 gave the same modelled configurations")
	}
	if !reflect.DeepEqual(overlapping(5), overlapping(5)) {
		t.Error("the same seed gave different sequences with overlapping trials")
	}
	checkConfigs(t, space, a)
}

// TestTPEStaysInDomain runs TPE long on every domain, with narrow and
// wide ranges, scores that pull towards the bounds, and checks every
// suggestion is a value of its domain.
func TestTPEStaysInDomain(t *testing.T) {
	space := mustSpace(t,
		searchspace.Param{Name: "u", Domain: searchspace.Uniform{Low: -1, High: 1}},
		searchspace.Param{Name: "lu", Domain: searchspace.LogUniform{Low: 1e-8, High: 1e-7}},
		searchspace.Param{Name: "q", Domain: searchspace.QUniform{Low: 0, High: 1, Q: 0.3}},
		searchspace.Param{Name: "ql", Domain: searchspace.QLogUniform{Low: 1, High: 1000, Q: 7}},
		searchspace.Param{Name: "i", Domain: searchspace.RandInt{Low: -3, High: -1}},
		searchspace.Param{Name: "li", Domain: searchspace.LogRandInt{Low: 1, High: 3}},
		searchspace.Param{Name: "c", Domain: searchspace.Choice{Values: []any{true, false}}},
		searchspace.Param{Name: "g", Domain: searchspace.Grid{Values: []any{1.5, 2.5, 3.5}}},
	)
	for _, pull := range []float64{-1, 1} {
		s := mustTPE(t, space, 3)
		checkConfigs(t, space, drive(t, s, 150, func(cfg map[string]any) float64 {
			v := pull * (cfg["u"].(float64) + cfg["q"].(float64) + cfg["ql"].(float64)/1000 +
				float64(cfg["i"].(int64)+cfg["li"].(int64)) + cfg["g"].(float64) + math.Log(cfg["lu"].(float64)))
			if cfg["c"] == true {
				v -= pull
			}
			return v
		}))
	}
}

// TestTPEHistory checks what TPE learns from each way a trial can end.
func TestTPEHistory(t *testing.T) {
	space := mustSpace(t,
		searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: 0, High: 1}},
		searchspace.Param{Name: "n", Domain: searchspace.RandInt{Low: 0, High: 100}},
	)
	s := mustTPE(t, space, 1)
	for i, tt := range []struct {
		end     TrialEnd
		counted bool
		rank    [2]float64
	}{
		{TrialEnd{Status: TrialCompleted, Last: &Observation{Step: 9, Score: 0.5}}, true, [2]float64{math.Inf(-1), 0.5}},
		{TrialEnd{Status: TrialStopped, Last: &Observation{Step: 3, Score: 0.7}}, true, [2]float64{-3, 0.7}},
		{TrialEnd{Status: TrialStopped, Last: &Observation{Step: 2, Score: math.NaN()}}, true, [2]float64{-2, math.Inf(1)}},
		{TrialEnd{Status: TrialStopped}, true, [2]float64{1, 0}},
		{TrialEnd{Status: TrialFailed, Last: &Observation{Step: 2, Score: 0.1}}, false, [2]float64{}},
		{TrialEnd{Status: TrialCompleted}, false, [2]float64{}},
		{TrialEnd{Status: TrialCompleted, Last: &Observation{Step: 9, Score: math.NaN()}}, false, [2]float64{}},
	} {
		trial := i + 1
		cfg, err := s.Suggest(trial)
		if err != nil {
			t.Fatal(err)
		}
		before := len(s.h.trial)
		s.OnTrialEnd(trial, tt.end)
		if got := len(s.h.trial) - before; got != map[bool]int{true: 1, false: 0}[tt.counted] {
			t.Errorf("trial %d (%v): %d observations added, want counted=%v", trial, tt.end.Status, got, tt.counted)
			continue
		}
		if !tt.counted {
			continue
		}
		id := len(s.h.trial) - 1
		if s.h.trial[id] != trial || s.h.rank[id] != tt.rank {
			t.Errorf("trial %d: recorded as trial %d rank %v, want rank %v", trial, s.h.trial[id], s.h.rank[id], tt.rank)
		}
		// Parameters are in name order: n, then x.
		if s.h.cols[0][id] != float64(cfg["n"].(int64)) || s.h.cols[1][id] != cfg["x"].(float64) {
			t.Errorf("trial %d: recorded values %v, %v for %v", trial, s.h.cols[0][id], s.h.cols[1][id], cfg)
		}
	}
	if len(s.pending) != 0 {
		t.Errorf("%d trials still pending after every trial ended", len(s.pending))
	}
	// A trial TPE never suggested is ignored.
	s.OnTrialEnd(99, TrialEnd{Status: TrialCompleted, Last: &Observation{Score: 1}})
	if len(s.h.trial) != 4 {
		t.Errorf("history holds %d trials, want 4", len(s.h.trial))
	}
}

// TestTPEHistoryOrders checks the orders the history keeps as trials
// end out of order: by trial number, and the 26 best by rank, against
// sorting the whole history.
func TestTPEHistoryOrders(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	h := tpeHistory{cols: make([][]float64, 2)}
	trials := r.Perm(300)
	for _, trial := range trials {
		var end TrialEnd
		switch trial % 4 {
		case 0:
			end = TrialEnd{Status: TrialStopped, Last: &Observation{Step: float64(r.IntN(3)), Score: float64(r.IntN(5))}}
		default:
			end = TrialEnd{Status: TrialCompleted, Last: &Observation{Score: float64(r.IntN(40))}}
		}
		rk, _ := tpeRank(end)
		h.add(trial, rk, []float64{float64(r.IntN(20)), r.Float64()})
	}
	ids := make([]int32, len(trials))
	for i := range ids {
		ids[i] = int32(i)
	}
	byTrial := slices.SortedFunc(slices.Values(ids), func(a, b int32) int { return cmp.Compare(h.trial[a], h.trial[b]) })
	if !slices.Equal(h.byTrial, byTrial) {
		t.Error("byTrial is not in trial order")
	}
	best := slices.SortedStableFunc(slices.Values(byTrial), func(a, b int32) int {
		ra, rb := h.rank[a], h.rank[b]
		return cmp.Or(cmp.Compare(ra[0], rb[0]), cmp.Compare(ra[1], rb[1]))
	})[:tpeMaxBelow+1]
	if !slices.Equal(h.best, best) {
		t.Errorf("best %v, want %v", h.best, best)
	}
}

// TestTPEReplay checks that replayed trials build the same history as
// the trials TPE suggested itself, from configurations read back as the
// database returns them, and that a replayed trial still running joins
// the history when it ends.
func TestTPEReplay(t *testing.T) {
	space := mixedSpace(t)
	live := mustTPE(t, space, 4)
	cfgs := drive(t, live, 30, score)

	resumed := mustTPE(t, space, 4)
	for i, cfg := range cfgs {
		b, _ := json.Marshal(cfg)
		var recorded map[string]any
		if err := json.Unmarshal(b, &recorded); err != nil {
			t.Fatal(err)
		}
		trial := i + 1
		if err := resumed.Replay(trial, RestoreTypes(space, recorded)); err != nil {
			t.Fatalf("replay trial %d: %v", trial, err)
		}
		if trial == 30 {
			break // still running when the experiment was interrupted
		}
		obs := Observation{Step: 1, Score: score(cfg)}
		resumed.OnResult(trial, obs)
		resumed.OnTrialEnd(trial, TrialEnd{Status: TrialCompleted, Last: &obs})
	}
	if len(resumed.h.trial) != 29 || len(resumed.pending) != 1 {
		t.Fatalf("after the replay: %d trials in the history and %d running, want 29 and 1", len(resumed.h.trial), len(resumed.pending))
	}
	obs := Observation{Step: 1, Score: score(cfgs[29])}
	resumed.OnTrialEnd(30, TrialEnd{Status: TrialCompleted, Last: &obs})
	if !reflect.DeepEqual(resumed.h, live.h) {
		t.Error("the replayed history differs from the live one")
	}
	cfg, err := resumed.Suggest(31)
	if err != nil {
		t.Fatal(err)
	}
	checkConfigs(t, space, []map[string]any{cfg})
}

func TestTPEReplayRefusesForeignConfigurations(t *testing.T) {
	space := mixedSpace(t)
	s := mustTPE(t, space, 1)
	good := space.Sample(rand.New(rand.NewPCG(1, 1)))
	with := func(k string, v any) map[string]any {
		cfg := maps(good)
		if v == nil {
			delete(cfg, k)
		} else {
			cfg[k] = v
		}
		return cfg
	}
	for _, tt := range []struct {
		name string
		cfg  map[string]any
		msg  string
	}{
		{"missing value", with("lr", nil), "no value for lr"},
		{"not a choice", with("act", "sigmoid"), "act = sigmoid (string) is not a value of"},
		{"wrong type", with("layers", 2.0), "layers = 2 (float64) is not a value of"},
		{"log of zero", with("lr", 0.0), "lr = 0 (float64) is not a value of"},
	} {
		if err := s.Replay(1, tt.cfg); err == nil || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: got %v, want an error containing %q", tt.name, err, tt.msg)
		}
	}
	// A closed bound, as a scheduler's perturbation may reach, is clamped.
	if err := s.Replay(2, with("dropout", 0.5)); err != nil {
		t.Errorf("dropout at its high bound: %v", err)
	}
	if x := s.pending[2]; len(x) == 0 {
		t.Error("the replayed trial is not running")
	}
}

func maps(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// TestTPELearns checks that TPE's suggestions concentrate where the score
// is low, more than random search's do.
func TestTPELearns(t *testing.T) {
	space := mustSpace(t,
		searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: 0, High: 1}},
		searchspace.Param{Name: "c", Domain: searchspace.Choice{Values: []any{"a", "b", "c", "d"}}},
	)
	f := func(cfg map[string]any) float64 {
		v := math.Abs(cfg["x"].(float64) - 0.3)
		if cfg["c"] != "b" {
			v += 0.5
		}
		return v
	}
	// The median score of trials 61..100, over 5 runs.
	lateMedian := func(s Searcher) float64 {
		var late []float64
		for _, cfg := range drive(t, s, 100, f)[60:] {
			late = append(late, f(cfg))
		}
		sort.Float64s(late)
		return late[len(late)/2]
	}
	var tpeMed, randMed []float64
	for seed := range int64(5) {
		s := mustTPE(t, space, seed)
		tpeMed = append(tpeMed, lateMedian(s))
		randMed = append(randMed, lateMedian(NewRandomSearch(space, seed)))
	}
	sort.Float64s(tpeMed)
	sort.Float64s(randMed)
	t.Logf("median late score over 5 runs: TPE %.3f, random %.3f", tpeMed[2], randMed[2])
	// Random search's median is about 0.5 + 0.25; TPE's should be well below.
	if tpeMed[2] > 0.3 || tpeMed[2] > randMed[2]/2 {
		t.Errorf("median late score: TPE %.3f, random %.3f; want TPE below 0.3 and half of random's", tpeMed[2], randMed[2])
	}
}

// overheadSpace is the space of bench/search's overhead figure: lr
// log-uniform, width a choice of 4, dropout uniform.
func overheadSpace(tb testing.TB) *searchspace.Space {
	return mustSpace(tb,
		searchspace.Param{Name: "lr", Domain: searchspace.LogUniform{Low: 1e-4, High: 1e-1}},
		searchspace.Param{Name: "width", Domain: searchspace.Choice{Values: []any{int64(32), int64(64), int64(128), int64(256)}}},
		searchspace.Param{Name: "dropout", Domain: searchspace.Uniform{Low: 0, High: 0.5}},
	)
}

// overheadScore is the suggestion benchmarks' objective on overheadSpace,
// least at lr 0.01, width 128 and dropout 0.2.
func overheadScore(cfg map[string]any) float64 {
	penalty := map[int64]float64{32: 0.12, 64: 0.05, 128: 0, 256: 0.02}
	return 0.05 + 0.15*math.Pow(math.Log10(cfg["lr"].(float64))+2, 2) +
		math.Pow(cfg["dropout"].(float64)-0.2, 2) + penalty[cfg["width"].(int64)]
}

// tpeWithHistory returns a TPE on overheadSpace after n random trials
// completed with their overheadScore.
func tpeWithHistory(b *testing.B, n int) *TPE {
	space := overheadSpace(b)
	s, err := NewTPE(space, 0)
	if err != nil {
		b.Fatal(err)
	}
	replayRandom(b, s, space, n, func(trial int, cfg map[string]any) {
		s.OnTrialEnd(trial, TrialEnd{Status: TrialCompleted, Last: &Observation{Step: 1, Score: overheadScore(cfg)}})
	})
	return s
}

// replayRandom replays trials 1 to n of a random search of space into s,
// then hands each to ran, which tells s how it ran.
func replayRandom(b *testing.B, s Replayer, space *searchspace.Space, n int, ran func(trial int, cfg map[string]any)) {
	random := NewRandomSearch(space, 0)
	for trial := 1; trial <= n; trial++ {
		cfg, err := random.Suggest(trial)
		if err == nil {
			err = s.Replay(trial, cfg)
		}
		if err != nil {
			b.Fatal(err)
		}
		ran(trial, cfg)
	}
}

// suggestFailing times suggestions for the trials after the first n,
// each of which then fails: s does not learn from a failed trial, so
// its history stays as it was.
func suggestFailing(b *testing.B, s Searcher, n int) {
	trial := n
	for b.Loop() {
		trial++
		if _, err := s.Suggest(trial); err != nil {
			b.Fatal(err)
		}
		s.OnTrialEnd(trial, TrialEnd{Status: TrialFailed})
	}
}

// BenchmarkTPESuggest times one suggestion after a history of 1,000,
// 5,000 and 50,000 finished trials of random configurations, on the space of the
// overhead figure of bench/search (overheadSpace). Each timed trial then
// fails, which TPE does not learn from, so the history length stays the
// same.
func BenchmarkTPESuggest(b *testing.B) {
	for _, n := range []int{1000, 5000, 50000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			s := tpeWithHistory(b, n)
			suggestFailing(b, s, n)
		})
	}
}

// BenchmarkTPESuggestFinite is BenchmarkTPESuggest on a finite space, 6
// integer parameters of 9 levels each, where half the suggestions weigh
// the best trial's neighbours too (see suggestNeighbour), after a history
// of 1,000 and 5,000 trials.
func BenchmarkTPESuggestFinite(b *testing.B) {
	var params []searchspace.Param
	for i := range 6 {
		params = append(params, searchspace.Param{Name: "p" + strconv.Itoa(i), Domain: searchspace.RandInt{Low: 0, High: 9}})
	}
	space := mustSpace(b, params...)
	score := func(cfg map[string]any) float64 {
		f := 0.0
		for i, p := range params {
			d := float64(cfg[p.Name].(int64) - int64(i))
			f += d * d
		}
		return f
	}
	for _, n := range []int{1000, 5000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			s, err := NewTPE(space, 0)
			if err != nil {
				b.Fatal(err)
			}
			replayRandom(b, s, space, n, func(trial int, cfg map[string]any) {
				s.OnTrialEnd(trial, TrialEnd{Status: TrialCompleted, Last: &Observation{Step: 1, Score: score(cfg)}})
			})
			suggestFailing(b, s, n)
		})
	}
}

// BenchmarkTPESuggestLearning times one suggestion as a sweep makes
// them, each after one more trial has finished: from 1,000 and 5,000
// finished trials on, BenchmarkTPESuggest's space and objective, each
// timed trial completing with its score, so that the history grows by
// one between suggestions (and the good group changes when it improves).
func BenchmarkTPESuggestLearning(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			s := tpeWithHistory(b, n)
			trial := n
			for b.Loop() {
				trial++
				cfg, err := s.Suggest(trial)
				if err != nil {
					b.Fatal(err)
				}
				s.OnTrialEnd(trial, TrialEnd{Status: TrialCompleted, Last: &Observation{Step: 1, Score: overheadScore(cfg)}})
			}
		})
	}
}

// TestTPEImprovements checks the good trials' weights in l: their
// improvements on the best of the others, averaging 1, and even weights
// where improvements do not compare.
func TestTPEImprovements(t *testing.T) {
	completed := func(score float64) TrialEnd {
		return TrialEnd{Status: TrialCompleted, Last: &Observation{Step: 9, Score: score}}
	}
	stopped := TrialEnd{Status: TrialStopped, Last: &Observation{Step: 2, Score: 0}}
	twenty := func(first ...TrialEnd) []TrialEnd {
		ends := slices.Clone(first)
		for k := 0; len(ends) < 20; k++ {
			ends = append(ends, completed(10+float64(k)))
		}
		return ends
	}
	for _, tt := range []struct {
		name string
		ends []TrialEnd
		want []float64 // the weights of the good trials, best first
	}{
		// 20 trials: the good group is the best 2; the threshold is 10.
		{"by improvement", twenty(completed(4), completed(8)), []float64{1.5, 0.5}},
		{"level with the threshold", twenty(completed(6), completed(10)), []float64{8 / (4 + tpeMinImprovement), 2 * tpeMinImprovement / (4 + tpeMinImprovement)}},
		{"a stopped trial next", []TrialEnd{completed(4), completed(8), stopped, stopped, stopped, stopped, stopped, stopped, stopped, stopped, stopped, stopped, stopped, stopped, stopped, stopped, stopped, stopped, stopped, stopped}, []float64{1, 1}},
		{"only stopped trials", slices.Repeat([]TrialEnd{stopped}, 20), []float64{1, 1}},
		{"an infinite score", twenty(completed(math.Inf(-1)), completed(8)), []float64{1, 1}},
		{"an infinite threshold", append(slices.Repeat([]TrialEnd{completed(1)}, 2), slices.Repeat([]TrialEnd{completed(math.Inf(1))}, 18)...), []float64{1, 1}},
		{"improvements too large to add", twenty(completed(-math.MaxFloat64), completed(-math.MaxFloat64)), []float64{1, 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := mustTPE(t, mustSpace(t, searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: 0, High: 1}}), 1)
			for i, end := range tt.ends {
				if _, err := s.Suggest(i + 1); err != nil {
					t.Fatal(err)
				}
				s.OnTrialEnd(i+1, end)
			}
			good := s.h.best[:tpeGamma(len(s.h.trial))]
			got := s.improvements(good)
			if len(got) != len(tt.want) {
				t.Fatalf("%d weights, want %d", len(got), len(tt.want))
			}
			for i := range got {
				if !closeTo(got[i], tt.want[i], 1e-12) {
					t.Errorf("weights %v, want %v", got, tt.want)
					break
				}
			}
		})
	}
}

// TestTPEWindow: past tpeWindow other trials, g is fitted to the newest
// tpeWindow of them by trial number (the good ones left out), so that a
// suggestion costs the same however long the history.
func TestTPEWindow(t *testing.T) {
	space := mustSpace(t, searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: 0, High: 1}})
	s := mustTPE(t, space, 0)
	const n = 3 * tpeWindow
	for trial := 1; trial <= n; trial++ {
		if err := s.Replay(trial, map[string]any{"x": float64(trial) / (n + 1)}); err != nil {
			t.Fatal(err)
		}
		// The first 25 are the best.
		s.OnTrialEnd(trial, TrialEnd{Status: TrialCompleted, Last: &Observation{Step: 1, Score: float64(trial)}})
	}
	if _, err := s.Suggest(n + 1); err != nil {
		t.Fatal(err)
	}
	if len(s.ids) != tpeWindow {
		t.Fatalf("g fitted to %d trials, want %d", len(s.ids), tpeWindow)
	}
	for k, id := range s.ids {
		if want := n - tpeWindow + 1 + k; s.h.trial[id] != want {
			t.Fatalf("g's trial %d is trial %d, want %d (the newest, in order)", k, s.h.trial[id], want)
		}
	}
}

// TestTPEConditionalSpace drives TPE over a tree: m matters only with
// c = "b", where the optimum is; n only with c = "a". Having learnt, TPE
// suggests mostly c = "b" with m near its optimum, and every
// configuration has exactly the parameters its conditions allow.
func TestTPEConditionalSpace(t *testing.T) {
	space := mustSpace(t,
		searchspace.Param{Name: "c", Domain: searchspace.Choice{Values: []any{"a", "b", "c"}}},
		searchspace.Param{Name: "m", Domain: searchspace.Uniform{Low: 0, High: 1}, When: &searchspace.Condition{Param: "c", Op: "==", Values: []any{"b"}}},
		searchspace.Param{Name: "n", Domain: searchspace.RandInt{Low: 0, High: 10}, When: &searchspace.Condition{Param: "c", Op: "!=", Values: []any{"b", "c"}}},
		searchspace.Param{Name: "x", Domain: searchspace.Uniform{Low: -1, High: 1}},
	)
	score := func(cfg map[string]any) float64 {
		x := cfg["x"].(float64)
		switch cfg["c"] {
		case "b":
			return math.Pow(cfg["m"].(float64)-0.7, 2) + 0.1*x*x
		case "a":
			return 0.5 + 0.01*float64(cfg["n"].(int64)) + 0.1*x*x
		}
		return 1 + 0.1*x*x
	}
	tpe := mustTPE(t, space, 1)
	const trials = 60
	b, near := 0, 0
	for n := 1; n <= trials; n++ {
		cfg, err := tpe.Suggest(n)
		if err != nil {
			t.Fatal(err)
		}
		_, hasM := cfg["m"]
		_, hasN := cfg["n"]
		if hasM != (cfg["c"] == "b") || hasN != (cfg["c"] == "a") {
			t.Fatalf("trial %d: %v", n, cfg)
		}
		s := score(cfg)
		tpe.OnTrialEnd(n, TrialEnd{Status: TrialCompleted, Last: &Observation{Score: s}})
		if n > trials/2 && cfg["c"] == "b" {
			b++
			if math.Abs(cfg["m"].(float64)-0.7) < 0.15 {
				near++
			}
		}
	}
	if b < trials/2*2/3 || near < b/2 {
		t.Errorf("of the last %d trials, %d chose c = b (want at least 2/3) and %d of those had m within 0.15 of 0.7 (want half)", trials/2, b, near)
	}
}

// mustTPE is NewTPE for a test, which ends at its error.
func mustTPE(t testing.TB, space *searchspace.Space, seed int64, opts ...TPEOption) *TPE {
	t.Helper()
	s, err := NewTPE(space, seed, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
