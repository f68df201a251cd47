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
			sizes := []int{3, 5, 4, out}
			net := newNetwork[float64](sizes, tanh, 0, 3)
			net.setParams(initParams(sizes, newRand(1)))
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
		net := newNetwork[float64]([]int{4, 6, 2}, tanh, 0.5, 2)
		net.setParams(initParams(net.sizes, newRand(3)))
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

// TestFloat32MatchesFloat64 checks the float32 network against the float64
// one on the same parameters and batch.
func TestFloat32MatchesFloat64(t *testing.T) {
	sizes := []int{5, 7, 7, 3}
	params := initParams(sizes, newRand(4))
	n32, n64 := newNetwork[float32](sizes, true, 0, 4), newNetwork[float64](sizes, true, 0, 4)
	n32.setParams(params)
	n64.setParams(params)
	rng := newRand(5)
	for i := range n64.input(4) {
		v := rng.NormFloat64()
		n64.input(4)[i], n32.input(4)[i] = v, float32(v)
	}
	classes := []int{0, 2, 1, 2}
	l32, c32 := softmaxCrossEntropy(n32.forward(4, false, nil), n32.outputDelta(4), 3, classes)
	l64, c64 := softmaxCrossEntropy(n64.forward(4, false, nil), n64.outputDelta(4), 3, classes)
	if math.Abs(l32-l64) > 1e-5*l64 || c32 != c64 {
		t.Errorf("loss %v (%d right) in float32, %v (%d right) in float64", l32, c32, l64, c64)
	}
	n32.backward(4, false)
	n64.backward(4, false)
	g32, g64 := make([]float64, len(params)), make([]float64, len(params))
	n32.gradsTo(g32)
	n64.gradsTo(g64)
	for i := range g64 {
		if math.Abs(g32[i]-g64[i]) > 1e-5*max(1, math.Abs(g64[i])) {
			t.Errorf("gradient %d: %g in float32, %g in float64", i, g32[i], g64[i])
		}
	}
}

// TestStepAllocatesNothing guards the hot path: a training step of the
// built-in models must not allocate.
func TestStepAllocatesNothing(t *testing.T) {
	p := &prepared{kind: builtinModels["mlp"], data: &Dataset{Cols: 4, Class: []int{0, 1, 2, 1}}, x: make([]float64, 16)}
	p.data.Classes = []string{"a", "b", "c"}
	t.Run("float32", func(t *testing.T) { stepAllocs[float32](t, p) })
	t.Run("float64", func(t *testing.T) { stepAllocs[float64](t, p) })
}

func stepAllocs[T float](t *testing.T, p *prepared) {
	sizes := []int{4, 8, 3}
	params := initParams(sizes, newRand(1))
	grads := make([]float64, len(params))
	net := newNetwork[T](sizes, false, 0.1, 4)
	s := &stepper[T]{p: p, net: net, labels: make([]int, 4), targets: make([]float64, 4)}
	opt := newOptimizer(optimParams{name: "adam", lr: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8}, len(params))
	rng := newRand(2)
	rows := []int{0, 1, 2, 3}
	if n := testing.AllocsPerRun(20, func() {
		net.setParams(params)
		s.run(rows, true, rng)
		net.backward(len(rows), true)
		net.gradsTo(grads)
		opt.step(params, grads)
	}); n != 0 {
		t.Errorf("a training step allocates %v times", n)
	}
}

// BenchmarkStep times one training step of the benchmark's network
// (64→128→10, batch 64, SGD with momentum) on one worker, without the
// allreduce, in both precisions.
func BenchmarkStep(b *testing.B) {
	p, err := prepare(Config{Model: "mlp", Dataset: digits, Split: digitsSplit})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("float32", func(b *testing.B) { benchStep[float32](b, p) })
	b.Run("float64", func(b *testing.B) { benchStep[float64](b, p) })
}

func benchStep[T float](b *testing.B, p *prepared) {
	sizes := []int{64, 128, 10}
	params := initParams(sizes, newRand(1))
	grads := make([]float64, len(params))
	net := newNetwork[T](sizes, false, 0, 64)
	s := &stepper[T]{p: p, net: net, labels: make([]int, 64), targets: make([]float64, 64)}
	opt := newOptimizer(optimParams{name: "sgd", lr: 0.05, momentum: 0.9}, len(params))
	for i := 0; b.Loop(); i++ {
		lo := i * 64 % (len(p.train) - 64)
		net.setParams(params)
		s.run(p.train[lo:lo+64], true, nil)
		net.backward(64, true)
		net.gradsTo(grads)
		opt.step(params, grads)
	}
	b.ReportMetric(float64(64*b.N)/b.Elapsed().Seconds(), "samples/s")
}
