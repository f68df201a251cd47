package schedulers

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
)

// trialState is where a trial stands as a scheduler sees it.
type trialState int

const (
	running trialState = iota
	paused
	ended
)

// fnum is a float64 that survives JSON although it may be NaN or ±Inf
// (a diverged trial's score): those encode as strings.
type fnum float64

func (f fnum) MarshalJSON() ([]byte, error) {
	x := float64(f)
	switch {
	case math.IsNaN(x):
		return []byte(`"NaN"`), nil
	case math.IsInf(x, 1):
		return []byte(`"+Inf"`), nil
	case math.IsInf(x, -1):
		return []byte(`"-Inf"`), nil
	}
	return strconv.AppendFloat(nil, x, 'g', -1, 64), nil
}

func (f *fnum) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return err
		}
		*f = fnum(x)
		return nil
	}
	var x float64
	if err := json.Unmarshal(b, &x); err != nil {
		return err
	}
	*f = fnum(x)
	return nil
}

// WorstIfDiverged makes a diverged score (NaN or infinite either way; see
// diverged) the worst possible, +Inf, so that it sorts last and never
// beats a cutoff. Scores are lower-is-better. Every scheduler and BOHB
// take a score through it.
func WorstIfDiverged(x float64) float64 {
	if diverged(x) {
		return math.Inf(1)
	}
	return x
}

// diverged reports whether a score is a diverged result: NaN, or
// infinite either way (a loss that overflowed, or an accuracy that did
// in a "max" experiment, whose negated score is −Inf). No finite result
// is worse, nor better: −Inf would otherwise win every comparison, and
// interpolating a cutoff between it and a finite score gives NaN.
// Every scheduler treats such a result as the worst possible: it never
// passes a rung or a comparison, and it is left out of the cutoffs and
// medians other trials are measured against, so it never lifts them.
func diverged(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) }

// quantile is the q-quantile of sorted (ascending) values with linear
// interpolation between neighbours, as numpy's percentile computes it.
func quantile(sorted []float64, q float64) float64 {
	return quantileAt(len(sorted), q, func(i int) float64 { return sorted[i] })
}

// quantileAt is quantile of n values given by rank: at(i) is the i-th
// smallest. It reads at most two of them.
func quantileAt(n int, q float64, at func(int) float64) float64 {
	p := q * float64(n-1)
	lo := int(math.Floor(p))
	frac := p - float64(lo)
	if lo+1 >= n || frac == 0 || at(lo) == at(lo+1) {
		return at(lo)
	}
	return at(lo) + frac*(at(lo+1)-at(lo))
}

// median is the median of values, which it sorts.
func median(values []float64) float64 {
	sort.Float64s(values)
	return quantile(values, 0.5)
}

// seededRand is a random generator whose state snapshots to JSON.
type seededRand struct {
	pcg *rand.PCG
	*rand.Rand
}

func newSeededRand(seed int64, stream uint64) *seededRand {
	pcg := rand.NewPCG(uint64(seed), stream)
	return &seededRand{pcg: pcg, Rand: rand.New(pcg)}
}

func (r *seededRand) MarshalJSON() ([]byte, error) {
	b, err := r.pcg.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return json.Marshal(b)
}

func (r *seededRand) UnmarshalJSON(data []byte) error {
	var b []byte
	if err := json.Unmarshal(data, &b); err != nil {
		return err
	}
	return r.pcg.UnmarshalBinary(b)
}

// restore decodes a snapshot into state, wrapping errors so the caller
// knows which scheduler refused it.
func restore(kind string, data []byte, state any) error {
	if err := json.Unmarshal(data, state); err != nil {
		return fmt.Errorf("restore %s scheduler: %w", kind, err)
	}
	return nil
}

// setCutoff records x as the decision's cutoff when it is a number; the
// cutoff of a rung whose best results all diverged is none.
func (d *Decision) setCutoff(x float64) {
	if !math.IsNaN(x) && !math.IsInf(x, 0) {
		d.Cutoff, d.HasCutoff = x, true
	}
}
