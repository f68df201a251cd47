package trainer

import (
	"math"
	"testing"
)

// TestOptimizersMatchPyTorch replays three steps of fixed gradients and
// compares the parameters with what torch.optim (1.13, float64) computes
// for the same settings.
func TestOptimizersMatchPyTorch(t *testing.T) {
	grads := [][]float64{{0.1, -0.2, 0.3}, {0.05, 0.4, -0.1}, {-0.3, 0.2, 0.0}}
	tests := []struct {
		p    optimParams
		want []float64
	}{
		// torch.optim.SGD(lr=0.1, momentum=0.9, weight_decay=0.01)
		{optimParams{name: "sgd", lr: 0.1, momentum: 0.9, weightDecay: 0.01},
			[]float64{0.4906403895, -1.0362307789999998, 1.9265935680000001}},
		// torch.optim.Adam(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
		{optimParams{name: "adam", lr: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.01},
			[]float64{0.4838418871554237, -0.9982976025678195, 1.9813033534298203}},
		// torch.optim.AdamW(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
		{optimParams{name: "adamw", lr: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.1},
			[]float64{0.4826812519662487, -0.9958727715970122, 1.976934103986418}},
	}
	for _, tt := range tests {
		params := []float64{0.5, -1, 2}
		opt := newOptimizer(tt.p, len(params))
		for _, g := range grads {
			opt.step(params, g)
		}
		for i := range params {
			if math.Abs(params[i]-tt.want[i]) > 1e-12 {
				t.Errorf("%s: param %d = %.16g, PyTorch %.16g", tt.p.name, i, params[i], tt.want[i])
			}
		}
		if steps, _ := opt.state(); *steps != 3 {
			t.Errorf("%s: step count %d, want 3", tt.p.name, *steps)
		}
	}
}
