package trainer

import (
	"math"
	"math/rand/v2"
	"testing"
)

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0)) }

// TestGradientMatchesFiniteDifference checks backpropagation against a
// numerical gradient, for both activations and both losses, on a network
// with two hidden layers.
func TestGradientMatchesFiniteDifference(t *testing.T) {
	x := []float64{0.5, -1, 2, 1.5, 0.2, -0.3, 0, 0.7, -2}
	for _, tanh := range []bool{false, true} {
		for _, regression := range []bool{false, true} {
			out := 3
			if regression {
				out = 1
			}
			net := newNetwork([]int{3, 5, 4, out}, tanh, 0, 3, newRand(1))
			classes, targets := []int{2, 0, 1}, []float64{0.3, -1.2, 2}
			loss := func() float64 {
				copy(net.input(3), x)
				pred := net.forward(3, false, nil)
				if regression {
					return squaredError(pred, net.outputDelta(3), targets) / 3
				}
				l, _ := softmaxCrossEntropy(pred, net.outputDelta(3), out, classes)
				return l / 3
			}
			loss()
			net.backward(3, false)
			analytic := append([]float64(nil), net.grads...)
			const h = 1e-6
			for i := range net.params {
				orig := net.params[i]
				net.params[i] = orig + h
				up := loss()
				net.params[i] = orig - h
				down := loss()
				net.params[i] = orig
				num := (up - down) / (2 * h)
				if math.Abs(num-analytic[i]) > 1e-6*max(1, math.Abs(num)) {
					t.Errorf("tanh=%v regression=%v: d/dparam[%d]: backprop %g, numerical %g", tanh, regression, i, analytic[i], num)
				}
			}
		}
	}
}

// TestDropoutGradient checks that backward applies the forward pass's
// dropout mask: with the mask held fixed, the network is a fixed function
// whose gradient the finite difference measures.
func TestDropoutGradient(t *testing.T) {
	for _, tanh := range []bool{false, true} {
		net := newNetwork([]int{4, 6, 2}, tanh, 0.5, 2, newRand(3))
		x := []float64{0.3, -0.4, 1.1, 0.9, -1, 0.5, 0.25, -0.6}
		classes := []int{1, 0}
		copy(net.input(2), x)
		net.forward(2, true, newRand(9))
		mask := append([]float64(nil), net.masks[1][:12]...)
		zeros := 0
		for _, m := range mask {
			if m == 0 {
				zeros++
			}
		}
		if zeros == 0 || zeros == len(mask) {
			t.Fatalf("mask %v drops all or nothing", mask)
		}
		// The loss with the same mask, recomputed without drawing.
		loss := func() float64 {
			copy(net.input(2), x)
			net.forward(2, false, nil)
			h := net.acts[1][:12]
			for i := range h {
				h[i] *= mask[i]
			}
			y := net.acts[2][:4]
			for i := range 2 {
				for j := range 2 {
					s := net.b[1][j]
					for k := range 6 {
						s += h[i*6+k] * net.w[1][k*2+j]
					}
					y[i*2+j] = s
				}
			}
			l, _ := softmaxCrossEntropy(y, net.outputDelta(2), 2, classes)
			return l / 2
		}
		loss()
		copy(net.masks[1], mask)
		net.backward(2, true)
		analytic := append([]float64(nil), net.grads...)
		const h = 1e-6
		for i := range net.params {
			orig := net.params[i]
			net.params[i] = orig + h
			up := loss()
			net.params[i] = orig - h
			down := loss()
			net.params[i] = orig
			if num := (up - down) / (2 * h); math.Abs(num-analytic[i]) > 1e-6*max(1, math.Abs(num)) {
				t.Errorf("tanh=%v: d/dparam[%d]: backprop %g, numerical %g", tanh, i, analytic[i], num)
			}
		}
	}
}

// TestStepAllocatesNothing guards the hot path: a training step of the
// built-in models must not allocate.
func TestStepAllocatesNothing(t *testing.T) {
	p := &prepared{kind: builtinModels["mlp"], data: &Dataset{Cols: 4, Class: []int{0, 1, 2, 1}}, x: make([]float64, 16)}
	p.data.Classes = []string{"a", "b", "c"}
	net := newNetwork([]int{4, 8, 3}, false, 0.1, 4, newRand(1))
	s := &stepper{p: p, net: net, labels: make([]int, 4), targets: make([]float64, 4)}
	opt := newOptimizer(optimParams{name: "adam", lr: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8}, len(net.params))
	rng := newRand(2)
	rows := []int{0, 1, 2, 3}
	if n := testing.AllocsPerRun(20, func() {
		s.run(rows, true, rng)
		net.backward(len(rows), true)
		opt.step(net.params, net.grads)
	}); n != 0 {
		t.Errorf("a training step allocates %v times", n)
	}
}

// BenchmarkStep times one training step of the benchmark's network
// (64→128→10, batch 64, SGD with momentum) on one worker, without the
// allreduce.
func BenchmarkStep(b *testing.B) {
	for _, scale := range []string{"standard", "minmax"} {
		b.Run(scale, func(b *testing.B) {
			p, err := prepare(Config{Model: "mlp", Dataset: digits, Split: digitsSplit, Scale: scale})
			if err != nil {
				b.Fatal(err)
			}
			net := newNetwork([]int{64, 128, 10}, false, 0, 64, newRand(1))
			s := &stepper{p: p, net: net, labels: make([]int, 64), targets: make([]float64, 64)}
			opt := newOptimizer(optimParams{name: "sgd", lr: 0.05, momentum: 0.9}, len(net.params))
			rows := p.train[:64]
			for b.Loop() {
				s.run(rows, true, nil)
				net.backward(64, true)
				opt.step(net.params, net.grads)
			}
			b.ReportMetric(float64(64*b.N)/b.Elapsed().Seconds(), "samples/s")
		})
	}
}
