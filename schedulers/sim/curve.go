package sim

import (
	"math"

	"github.com/gotune/gotune/searchspace"
)

// Curve is a synthetic validation-loss curve over three hyperparameters
// (lr, width, dropout) whose final value is known: 0.05 at lr = 0.01,
// width = 128, dropout = 0.2. Learning speed depends on lr, so early
// values rank trials informatively but not perfectly. Its state is one
// number, the iterations trained, so a trial resumed from the wrong
// checkpoint reports the wrong value.
type Curve struct{}

var _ Model = Curve{}

// CurveBest is the lowest value Curve approaches.
const CurveBest = 0.05

var widthPenalty = map[int64]float64{32: 0.12, 64: 0.05, 128: 0, 256: 0.02}

// CurveValue is the loss after step iterations with the given
// hyperparameters.
func CurveValue(lr float64, width int64, dropout float64, step float64) float64 {
	q := 0.15*math.Pow(math.Log10(lr)+2, 2) + math.Pow(dropout-0.2, 2) + widthPenalty[width]
	final := CurveBest + q
	speed := 0.25 + 0.5*math.Min(1, lr/1e-2)
	return final + (1.5-final)*math.Exp(-speed*step)
}

// CurveSpace is the search space Curve's hyperparameters come from.
func CurveSpace() *searchspace.Space {
	s, err := searchspace.New(
		searchspace.Param{Name: "lr", Domain: searchspace.LogUniform{Low: 1e-4, High: 1e-1}},
		searchspace.Param{Name: "width", Domain: searchspace.Choice{Values: []any{int64(32), int64(64), int64(128), int64(256)}}},
		searchspace.Param{Name: "dropout", Domain: searchspace.Uniform{Low: 0, High: 0.5}},
	)
	if err != nil {
		panic(err) // the domains above are valid
	}
	return s
}

// Init implements Model.
func (Curve) Init(int, map[string]any) []float64 { return []float64{0} }

// Step implements Model.
func (Curve) Step(_ int, config map[string]any, state []float64, _ int) ([]float64, float64) {
	state[0]++
	lr, _ := config["lr"].(float64)
	width, _ := config["width"].(int64)
	dropout, _ := config["dropout"].(float64)
	return state, CurveValue(lr, width, dropout, state[0])
}
