package search

import (
	"cmp"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/gotune/gotune/searchspace"
)

func TestTPEParamNeighbours(t *testing.T) {
	for _, tt := range []struct {
		name   string
		domain searchspace.Domain
		x      float64
		want   []float64
	}{
		{"randint, lowest", searchspace.RandInt{Low: 0, High: 5}, 0, []float64{1}},
		{"randint, inside", searchspace.RandInt{Low: 0, High: 5}, 2, []float64{1, 3}},
		{"randint, highest", searchspace.RandInt{Low: 0, High: 5}, 4, []float64{3}},
		{"randint of 64 values", searchspace.RandInt{Low: 0, High: 64}, 10, []float64{9, 11}},
		{"randint of 65 values", searchspace.RandInt{Low: 0, High: 65}, 10, nil},
		{"quniform", searchspace.QUniform{Low: 0, High: 1, Q: 0.25}, 0.5, []float64{0.25, 0.75}},
		{"choice", searchspace.Choice{Values: []any{"a", "b", "c"}}, 1, []float64{0, 2}},
		{"uniform", searchspace.Uniform{Low: 0, High: 1}, 0.5, nil},
		{"lograndint", searchspace.LogRandInt{Low: 1, High: 100}, 2, nil},
	} {
		p, err := newTPEParam(searchspace.Param{Name: "p", Domain: tt.domain})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.neighbours(tt.x); !slices.Equal(got, tt.want) {
			t.Errorf("%s: neighbours(%v) = %v, want %v", tt.name, tt.x, got, tt.want)
		}
	}
}

// fixedSource makes a rand.Rand whose Float64 is always its value over
// 2⁵³ (math/rand/v2 takes the low 53 bits).
type fixedSource uint64

func (s fixedSource) Uint64() uint64 { return uint64(s) }

// A trial that draws the neighbour move gets an untried neighbour of
// the best trial, or of the next good trial once the best one's were all
// tried, or then of a running trial next to a good one, or then of one
// of the best trials far from the best one; one that does not, BOHB,
// and a history whose good and far trials' neighbours were all tried
// keep the draw.
func TestTPESuggestNeighbour(t *testing.T) {
	space := mustSpace(t,
		searchspace.Param{Name: "a", Domain: searchspace.RandInt{Low: 0, High: 31}},
		searchspace.Param{Name: "b", Domain: searchspace.Choice{Values: []any{"x", "y", "z"}}},
	)
	score := func(cfg map[string]any) float64 {
		d := float64(cfg["a"].(int64) - 15)
		return d*d + map[any]float64{"x": 2, "y": 0, "z": 5}[cfg["b"]]
	}
	// history gives a TPE n finished trials and returns their
	// configurations best first, as TPE ranks them (ties by trial).
	history := func(n int, opts ...TPEOption) (*TPE, []map[string]any) {
		s := mustTPE(t, space, 5, opts...)
		ranked := drive(t, s, n, score)
		slices.SortStableFunc(ranked, func(a, b map[string]any) int { return cmp.Compare(score(a), score(b)) })
		return s, ranked
	}
	// untried lists cfg's neighbours that s did not suggest.
	untried := func(s *TPE, cfg map[string]any) []map[string]any {
		var out []map[string]any
		for _, v := range []int64{-1, 1} {
			if a := cfg["a"].(int64) + v; a >= 0 && a < 31 {
				out = append(out, map[string]any{"a": a, "b": cfg["b"]})
			}
		}
		for _, b := range []any{"x", "y", "z"} {
			if b != cfg["b"] {
				out = append(out, map[string]any{"a": cfg["a"], "b": b})
			}
		}
		return slices.DeleteFunc(out, s.suggested.has)
	}
	isUntriedNeighbour := func(s *TPE, got, of map[string]any) bool {
		return slices.ContainsFunc(untried(s, of), func(n map[string]any) bool { return reflect.DeepEqual(n, got) })
	}
	tryAllNeighbours := func(s *TPE, cfgs ...map[string]any) {
		for _, cfg := range cfgs {
			for _, n := range untried(s, cfg) {
				s.suggested.add(n)
			}
		}
	}
	// farTrials returns the first n of the trials after the best in
	// ranked that differ from it in both parameters (see farFrom).
	farTrials := func(ranked []map[string]any, n int) []map[string]any {
		var out []map[string]any
		for _, cfg := range ranked[1:] {
			if len(out) < n && cfg["a"] != ranked[0]["a"] && cfg["b"] != ranked[0]["b"] {
				out = append(out, cfg)
			}
		}
		return out
	}
	// draw fits TPE and returns its own draw for the next trial and
	// what suggestNeighbour makes of it with r.
	draw := func(s *TPE, r *rand.Rand) (drawn, got map[string]any) {
		cfg, xs := map[string]any{}, make([]float64, 2)
		s.suggestJoint(rand.New(fixedSource(7)), cfg, xs)
		drawn = maps(cfg)
		s.suggestNeighbour(r, cfg, xs)
		return drawn, cfg
	}
	move, stay := rand.New(fixedSource(0)), rand.New(fixedSource(1<<52))

	// After 10 trials the best one is the only good one.
	s, ranked := history(TPEStartupTrials)
	if _, got := draw(s, move); !isUntriedNeighbour(s, got, ranked[0]) {
		t.Errorf("with the move drawn: %v, want an untried neighbour of the best trial %v", got, ranked[0])
	}
	if drawn, got := draw(s, stay); !reflect.DeepEqual(drawn, got) {
		t.Errorf("without the move drawn: %v, want TPE's own draw %v", got, drawn)
	}
	tryAllNeighbours(s, ranked[0])
	far := farTrials(ranked, 1)
	if len(far) == 0 || len(untried(s, far[0])) == 0 {
		t.Fatalf("no trial far from the best %v with an untried neighbour to test with", ranked[0])
	}
	if _, got := draw(s, move); !isUntriedNeighbour(s, got, far[0]) {
		t.Errorf("every neighbour of the only good trial tried: %v, want an untried neighbour of the best trial far from it %v", got, far[0])
	}
	tryAllNeighbours(s, far...)
	if drawn, got := draw(s, move); !reflect.DeepEqual(drawn, got) {
		t.Errorf("every neighbour of the good trial and of the far one tried: %v, want TPE's own draw %v", got, drawn)
	}
	bohb, _ := history(TPEStartupTrials, tpeWidenDraws(bohbBandwidthFactor))
	if drawn, got := draw(bohb, move); !reflect.DeepEqual(drawn, got) {
		t.Errorf("BOHB's TPE: %v, want its own draw %v", got, drawn)
	}

	// After 20 trials the best two are good: once the best one's
	// neighbours were all tried, the second one's come next.
	s, ranked = history(2 * TPEStartupTrials)
	if n := tpeGamma(len(s.h.trial)); n != 2 {
		t.Fatalf("%d good trials, want 2", n)
	}
	tryAllNeighbours(s, ranked[0])
	if len(untried(s, ranked[1])) == 0 {
		t.Fatalf("the second best trial %v has no untried neighbour to test with", ranked[1])
	}
	if _, got := draw(s, move); !isUntriedNeighbour(s, got, ranked[1]) {
		t.Errorf("the best trial's neighbours tried: %v, want an untried neighbour of the second best %v", got, ranked[1])
	}
	tryAllNeighbours(s, ranked[1])
	far = farTrials(ranked, 2)
	if _, got := draw(s, move); !slices.ContainsFunc(far, func(f map[string]any) bool { return isUntriedNeighbour(s, got, f) }) {
		t.Errorf("every neighbour of both good trials tried: %v, want an untried neighbour of one of the best two trials far from the best %v", got, far)
	}
	tryAllNeighbours(s, far...)
	if drawn, got := draw(s, move); !reflect.DeepEqual(drawn, got) {
		t.Errorf("every neighbour of both good trials and of the best two far ones tried: %v, want TPE's own draw %v", got, drawn)
	}

	// Once every good and far trial's neighbours were tried, a running
	// trial next to a good one is searched around in turn; one next to no
	// good trial is not.
	s, ranked = history(2 * TPEStartupTrials)
	running := untried(s, ranked[1])[0]
	if err := s.Replay(len(s.h.trial)+1, running); err != nil {
		t.Fatal(err)
	}
	tryAllNeighbours(s, ranked[0], ranked[1])
	if len(untried(s, running)) == 0 {
		t.Fatalf("the running trial %v has no untried neighbour to test with", running)
	}
	far = farTrials(ranked, 2)
	if _, got := draw(s, move); !slices.ContainsFunc(far, func(f map[string]any) bool { return isUntriedNeighbour(s, got, f) }) {
		t.Errorf("both good trials' neighbours tried, %v running: %v, want an untried neighbour of one of the best two trials far from the best %v first", running, got, far)
	}
	tryAllNeighbours(s, far...)
	if _, got := draw(s, move); !isUntriedNeighbour(s, got, running) {
		t.Errorf("the good and far trials' neighbours tried: %v, want an untried neighbour of the running trial %v next to the second best", got, running)
	}
	s, ranked = history(2 * TPEStartupTrials)
	var apart map[string]any
	for a := range int64(31) {
		for _, b := range []any{"x", "y", "z"} {
			cfg := map[string]any{"a": a, "b": b}
			if apart == nil && !s.suggested.has(cfg) && !isUntriedNeighbour(s, cfg, ranked[0]) && !isUntriedNeighbour(s, cfg, ranked[1]) {
				apart = cfg
			}
		}
	}
	if err := s.Replay(len(s.h.trial)+1, apart); err != nil {
		t.Fatal(err)
	}
	tryAllNeighbours(s, ranked[0], ranked[1])
	tryAllNeighbours(s, farTrials(ranked, 2)...)
	if drawn, got := draw(s, move); !reflect.DeepEqual(drawn, got) {
		t.Errorf("the good and far trials' neighbours tried, %v running: %v, want TPE's own draw %v", apart, got, drawn)
	}

	// While trials run, at most half as many as have finished, every
	// suggestion searches around the good trials; with more running,
	// half of them.
	s, ranked = history(TPEStartupTrials)
	suggest := func(n int) {
		for range n {
			if _, err := s.Suggest(len(s.h.trial) + len(s.pending) + 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	suggest(1)
	if _, got := draw(s, stay); !isUntriedNeighbour(s, got, ranked[0]) {
		t.Errorf("1 running of %d finished: %v, want an untried neighbour of the best trial %v", len(s.h.trial), got, ranked[0])
	}
	suggest(TPEStartupTrials/2 - len(s.pending) + 1)
	if drawn, got := draw(s, stay); !reflect.DeepEqual(drawn, got) {
		t.Errorf("%d running of %d finished: %v, want TPE's own draw %v", len(s.pending), len(s.h.trial), got, drawn)
	}
}

// Of the good trials, those far from the best one (different in more
// than three quarters of the parameters) are searched around before
// those near it: a local search in another basin comes before a second
// one in the best trial's.
func TestTPESearchesFarGoodTrialsFirst(t *testing.T) {
	space := mustSpace(t,
		searchspace.Param{Name: "a", Domain: searchspace.RandInt{Low: 0, High: 31}},
		searchspace.Param{Name: "b", Domain: searchspace.Choice{Values: []any{"x", "y", "z"}}},
	)
	s := mustTPE(t, space, 5)
	// 30 finished trials make 3 good ones: the best, one a step from it
	// (same b) and one far from it (a and b both differ).
	best := map[string]any{"a": int64(15), "b": "y"}
	near := map[string]any{"a": int64(16), "b": "y"}
	far := map[string]any{"a": int64(3), "b": "z"}
	history := []map[string]any{best, near, far}
	// The worse 27, none a neighbour of the three.
	for _, b := range []string{"x", "z"} {
		for a := int64(20); a <= 30; a++ {
			history = append(history, map[string]any{"a": a, "b": b})
		}
	}
	for a := int64(7); a <= 11; a++ {
		history = append(history, map[string]any{"a": a, "b": "x"})
	}
	finishRanked(t, s, history)
	if n := tpeGamma(len(s.h.trial)); n != 3 {
		t.Fatalf("%d good trials, want 3", n)
	}
	neighbourOf := func(got, of map[string]any) bool {
		da := got["a"].(int64) - of["a"].(int64)
		return da == 0 && got["b"] != of["b"] || (da == 1 || da == -1) && got["b"] == of["b"]
	}
	// best has 4 neighbours (a 14 and 16, b x and z); near, one of them,
	// is tried.
	for range 3 {
		if got := nextMove(s); !neighbourOf(got, best) {
			t.Fatalf("%v, want a neighbour of the best trial %v first", got, best)
		}
	}
	if got := nextMove(s); !neighbourOf(got, far) {
		t.Errorf("the best trial's neighbours tried: %v, want a neighbour of the good trial far from it %v before one of %v near it", got, far, near)
	}
}

// The best trial, a step from the one it improved on, q, moves at once
// by the other steps that improved on q, all of them first, then the
// best ones but the last, before a neighbour of its own is tried.
func TestTPEPatternMove(t *testing.T) {
	var params []searchspace.Param
	for _, name := range []string{"a", "b", "c", "d"} {
		params = append(params, searchspace.Param{Name: name, Domain: searchspace.RandInt{Low: 0, High: 9}})
	}
	s := mustTPE(t, mustSpace(t, params...), 5)
	cell := func(a, b, c, d int64) map[string]any { return map[string]any{"a": a, "b": b, "c": c, "d": d} }
	best := cell(5, 4, 4, 4)
	// Best first: the best trial, q's improving steps in b, c (twice:
	// the better one counts) and d, then q, which stepped to the best in
	// a.
	history := []map[string]any{best, cell(4, 5, 4, 4), cell(4, 4, 5, 4), cell(4, 4, 3, 4), cell(4, 4, 4, 3), cell(4, 4, 4, 4)}
	// The worse 27, none a step from those.
	for a := range int64(9) {
		for _, d := range []int64{0, 1, 8} {
			history = append(history, cell(a, 8, 8, d))
		}
	}
	finishRanked(t, s, history)
	for _, want := range []map[string]any{cell(5, 5, 5, 3), cell(5, 5, 5, 4)} {
		if got := nextMove(s); !reflect.DeepEqual(got, want) {
			t.Errorf("%v, want the pattern move %v", got, want)
		}
	}
	got := nextMove(s)
	differ := 0
	for _, p := range params {
		if got[p.Name] != best[p.Name] {
			differ++
		}
	}
	if differ != 1 {
		t.Errorf("the pattern moves tried: %v, want a neighbour of the best trial %v", got, best)
	}
}

// finishRanked has s run the configurations of history as trials 1, 2,
// …, each completed with its index as its score: the first is the best.
func finishRanked(t *testing.T, s *TPE, history []map[string]any) {
	t.Helper()
	for i, cfg := range history {
		trial := i + 1
		if err := s.Replay(trial, cfg); err != nil {
			t.Fatal(err)
		}
		obs := Observation{Step: 1, Score: float64(i)}
		s.OnTrialEnd(trial, TrialEnd{Status: TrialCompleted, Last: &obs})
	}
}

// nextMove returns s's next suggestion with the neighbour move drawn
// (see suggestNeighbour), and marks it suggested.
func nextMove(s *TPE) map[string]any {
	cfg, xs := map[string]any{}, make([]float64, len(s.params))
	s.suggestJoint(rand.New(fixedSource(7)), cfg, xs)
	s.suggestNeighbour(rand.New(fixedSource(0)), cfg, xs)
	s.suggested.add(cfg)
	return cfg
}

// On 4-D Rosenbrock over 9 levels of each parameter in [−2, 2] (6,561
// cells), run one trial at a time, TPE reaches the optimum (every
// parameter at 1) within 100 trials on 5 of 10 seeds by searching around
// its best trial; with its draws from l alone it reached it on none.
func TestTPEReachesAGridsOptimum(t *testing.T) {
	var params []searchspace.Param
	for _, name := range []string{"a", "b", "c", "d"} {
		params = append(params, searchspace.Param{Name: name, Domain: searchspace.RandInt{Low: 0, High: 9}})
	}
	space := mustSpace(t, params...)
	score := func(cfg map[string]any) float64 {
		var x []float64
		for _, p := range params {
			x = append(x, -2+float64(cfg[p.Name].(int64))/2)
		}
		f := 0.0
		for i := range len(x) - 1 {
			f += 100*(x[i+1]-x[i]*x[i])*(x[i+1]-x[i]*x[i]) + (1-x[i])*(1-x[i])
		}
		return f
	}
	reached := 0
	const seeds = 10
	for seed := range int64(seeds) {
		s := mustTPE(t, space, seed)
		if slices.ContainsFunc(drive(t, s, 100, score), func(cfg map[string]any) bool { return score(cfg) == 0 }) {
			reached++
		}
	}
	if reached < 3 {
		t.Errorf("%d of %d seeds reached the optimum within 100 trials, want at least 3", reached, seeds)
	}
}

// A TPE resumed from a finite space's recorded trials goes on with the
// suggestions, neighbour moves included, that the uninterrupted one made.
func TestTPEResumesItsNeighbourMoves(t *testing.T) {
	space := mustSpace(t,
		searchspace.Param{Name: "a", Domain: searchspace.RandInt{Low: 0, High: 12}},
		searchspace.Param{Name: "b", Domain: searchspace.RandInt{Low: 0, High: 12}},
		searchspace.Param{Name: "c", Domain: searchspace.Choice{Values: []any{"x", "y", "z"}}},
	)
	score := func(cfg map[string]any) float64 {
		a, b := float64(cfg["a"].(int64))-8, float64(cfg["b"].(int64))-3
		if cfg["c"] != "z" {
			a += 2
		}
		return a*a + b*b
	}
	live := mustTPE(t, space, 9)
	want := drive(t, live, 60, score)
	resumed := mustTPE(t, space, 9)
	for i, cfg := range want[:30] {
		if err := resumed.Replay(i+1, cfg); err != nil {
			t.Fatal(err)
		}
		resumed.OnTrialEnd(i+1, TrialEnd{Status: TrialCompleted, Last: &Observation{Step: 1, Score: score(cfg)}})
	}
	for trial := 31; trial <= 60; trial++ {
		cfg, err := resumed.Suggest(trial)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(cfg, want[trial-1]) {
			t.Fatalf("resumed at trial 31, trial %d is %v, want %v", trial, cfg, want[trial-1])
		}
		resumed.OnTrialEnd(trial, TrialEnd{Status: TrialCompleted, Last: &Observation{Step: 1, Score: score(cfg)}})
	}
}
