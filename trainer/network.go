package trainer

import (
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// float is the precision a network computes in. float32 is about 1.8 times
// as fast for the products of the built-in models' shapes (gonum's float32
// kernels handle four values per instruction, its float64 ones two).
type float interface{ float32 | float64 }

// blasImpl is gonum's pure-Go BLAS. Its matrix products skip zero elements
// of the left operand, which pays off here: ReLU outputs are about half
// zeros.
var blasImpl gonum.Implementation

// gemm sets c (m×n) to op(a)·op(b), where op transposes when the matching
// flag is set; every matrix is row-major with the given row strides.
func gemm[T float](transA, transB bool, m, n, k int, a []T, lda int, b []T, ldb int, c []T, ldc int) {
	ta, tb := blas.NoTrans, blas.NoTrans
	if transA {
		ta = blas.Trans
	}
	if transB {
		tb = blas.Trans
	}
	switch a := any(a).(type) {
	case []float32:
		blasImpl.Sgemm(ta, tb, m, n, k, 1, a, lda, any(b).([]float32), ldb, 0, any(c).([]float32), ldc)
	case []float64:
		blasImpl.Dgemm(ta, tb, m, n, k, 1, a, lda, any(b).([]float64), ldb, 0, any(c).([]float64), ldc)
	}
}

// paramCount is the number of weights and biases of fully connected layers
// of the given sizes.
func paramCount(sizes []int) int {
	total := 0
	for l := range len(sizes) - 1 {
		total += sizes[l]*sizes[l+1] + sizes[l+1]
	}
	return total
}

// initParams draws the parameters of layers of the given sizes as
// PyTorch's nn.Linear does: uniform in ±1/sqrt(fan_in), weights and biases
// alike, in the layout of network.params.
func initParams(sizes []int, rng *rand.Rand) []float64 {
	params := make([]float64, 0, paramCount(sizes))
	for l := range len(sizes) - 1 {
		in, out := sizes[l], sizes[l+1]
		bound := 1 / math.Sqrt(float64(in))
		for range in*out + out {
			params = append(params, (2*rng.Float64()-1)*bound)
		}
	}
	return params
}

// network is a stack of fully connected layers (the built-in models: an mlp,
// or a single layer for logreg and linreg) whose weights and gradients each
// live in one flat slice, so that a whole gradient is averaged across the
// group in a single collective. Layer l maps sizes[l] inputs to sizes[l+1]
// outputs; hidden layers apply the activation, then dropout; the last layer
// is linear. All scratch memory is allocated up front: a training step
// allocates nothing.
type network[T float] struct {
	sizes   []int
	tanh    bool // the activation: tanh, otherwise ReLU
	dropout float64

	// params holds layer by layer the weights w[l] (sizes[l]×sizes[l+1],
	// row-major) then the biases b[l]; grads has the same layout.
	params, grads []T
	w, b, gw, gb  [][]T // views into params and grads
	// wt[l] is scratch for w[l] transposed (sizes[l+1]×sizes[l]), for
	// the backward pass of layers past the first.
	wt [][]T

	// Per-batch scratch for up to maxBatch rows, row-major: acts[l] is the
	// input of layer l (acts[0] the batch itself), masks[l] the dropout
	// mask applied to acts[l], deltas[l] the loss gradient at acts[l].
	maxBatch int
	acts     [][]T
	masks    [][]T
	deltas   [][]T
}

// newNetwork returns a network with zero parameters: load them with setParams.
func newNetwork[T float](sizes []int, tanh bool, dropout float64, maxBatch int) *network[T] {
	n := &network[T]{sizes: sizes, tanh: tanh, dropout: dropout, maxBatch: maxBatch}
	n.params = make([]T, paramCount(sizes))
	n.grads = make([]T, len(n.params))
	off := 0
	for l := range len(sizes) - 1 {
		in, out := sizes[l], sizes[l+1]
		n.w = append(n.w, n.params[off:off+in*out])
		n.gw = append(n.gw, n.grads[off:off+in*out])
		off += in * out
		n.b = append(n.b, n.params[off:off+out])
		n.gb = append(n.gb, n.grads[off:off+out])
		off += out
		var wt []T
		if l > 0 {
			wt = make([]T, in*out)
		}
		n.wt = append(n.wt, wt)
	}
	for _, s := range sizes {
		n.acts = append(n.acts, make([]T, maxBatch*s))
		n.deltas = append(n.deltas, make([]T, maxBatch*s))
		n.masks = append(n.masks, make([]T, maxBatch*s))
	}
	return n
}

// setParams loads params (in the layout of n.params), rounded to T.
func (n *network[T]) setParams(params []float64) {
	dst := n.params[:len(params)]
	for i, v := range params {
		dst[i] = T(v)
	}
}

// gradsTo writes the gradient into dst, as float64.
func (n *network[T]) gradsTo(dst []float64) {
	dst = dst[:len(n.grads)]
	for i, g := range n.grads {
		dst[i] = float64(g)
	}
}

func (n *network[T]) layers() int { return len(n.sizes) - 1 }

// outputs is the width of the last layer.
func (n *network[T]) outputs() int { return n.sizes[len(n.sizes)-1] }

// input returns the slice a batch of r rows is written into, row-major.
func (n *network[T]) input(r int) []T { return n.acts[0][:r*n.sizes[0]] }

// forward computes the outputs of the batch in n.input(r). With train set,
// dropout masks are drawn from rng; otherwise rng may be nil. It returns the
// r×outputs() output, row-major.
func (n *network[T]) forward(r int, train bool, rng *rand.Rand) []T {
	for l := range n.layers() {
		in, out := n.sizes[l], n.sizes[l+1]
		x := n.acts[l][:r*in]
		y := n.acts[l+1][:r*out]
		gemm(false, false, r, out, in, x, in, n.w[l], out, y, out)
		bias := n.b[l][:out]
		last := l == n.layers()-1
		for i := range r {
			row := y[i*out : i*out+out]
			switch {
			case last:
				for j, b := range bias {
					row[j] += b
				}
			case n.tanh:
				for j, b := range bias {
					row[j] = T(math.Tanh(float64(row[j] + b)))
				}
			default:
				for j, b := range bias {
					row[j] = max(row[j]+b, 0)
				}
			}
		}
		if !last && train && n.dropout > 0 {
			keep := 1 - n.dropout
			scale := T(1 / keep)
			mask := n.masks[l+1][:len(y)]
			for i := range mask {
				if rng.Float64() < keep {
					mask[i] = scale
				} else {
					mask[i] = 0
				}
				y[i] *= mask[i]
			}
		}
	}
	return n.acts[n.layers()][:r*n.outputs()]
}

// outputDelta is where the loss writes its gradient with respect to the
// outputs of a batch of r rows, before calling backward.
func (n *network[T]) outputDelta(r int) []T { return n.deltas[n.layers()][:r*n.outputs()] }

// backward fills n.grads with the loss gradient, given the gradient with
// respect to the outputs in n.outputDelta(r) and the activations of the
// forward pass of the same batch. With train set, the dropout masks of that
// pass are applied.
func (n *network[T]) backward(r int, train bool) {
	dropped := train && n.dropout > 0
	for l := n.layers() - 1; l >= 0; l-- {
		in, out := n.sizes[l], n.sizes[l+1]
		delta := n.deltas[l+1][:r*out]
		x := n.acts[l][:r*in]
		// gw = xᵀ·delta; gb = column sums of delta.
		gemm(true, false, in, out, r, x, in, delta, out, n.gw[l], out)
		gb := n.gb[l][:out]
		clear(gb)
		for i := range r {
			for j, v := range delta[i*out : i*out+out] {
				gb[j] += v
			}
		}
		if l == 0 {
			break
		}
		// The gradient at this layer's input, through the previous
		// layer's dropout and activation: prev = (delta·wᵀ) ⊙ f'(z) ⊙ mask.
		// The product is taken with wᵀ stored row-major: each row of prev
		// is then a sum of a few long rows (the axpy form gonum is fastest
		// at) rather than many dot products as short as out.
		prev := n.deltas[l][:r*in]
		wt := n.wt[l]
		for p := range in {
			for j, v := range n.w[l][p*out : p*out+out] {
				wt[j*in+p] = v
			}
		}
		gemm(false, false, r, in, out, delta, out, wt, in, prev, in)
		mask := n.masks[l][:r*in]
		switch {
		case n.tanh:
			for i, a := range x {
				var m T = 1
				if dropped {
					if m = mask[i]; m == 0 {
						prev[i] = 0
						continue
					}
					a /= m
				}
				prev[i] *= m * (1 - a*a)
			}
		case dropped:
			for i, a := range x {
				if a > 0 {
					prev[i] *= mask[i]
				} else {
					prev[i] = 0
				}
			}
		default:
			for i, a := range x {
				if a <= 0 {
					prev[i] = 0
				}
			}
		}
	}
}

// softmaxCrossEntropy scores the logits of r rows (row-major, k columns)
// against their classes: it writes the gradient of the mean loss over the
// rows, (softmax − one-hot)/r, into delta and returns the summed loss and
// the number of rows whose largest logit is their class.
func softmaxCrossEntropy[T float](logits, delta []T, k int, classes []int) (lossSum float64, correct int) {
	r := len(classes)
	inv := 1 / float64(r)
	for i, y := range classes {
		lrow := logits[i*k : i*k+k]
		drow := delta[i*k : i*k+k]
		best, maxv := 0, lrow[0]
		for j, v := range lrow {
			if v > maxv {
				best, maxv = j, v
			}
		}
		if best == y {
			correct++
		}
		sum := 0.0
		for j, v := range lrow {
			e := math.Exp(float64(v - maxv))
			drow[j] = T(e)
			sum += e
		}
		lossSum += math.Log(sum) - float64(lrow[y]-maxv)
		scale := T(inv / sum)
		for j := range drow {
			drow[j] *= scale
		}
		drow[y] -= T(inv)
	}
	return lossSum, correct
}

// squaredError scores predictions of r rows (one column) against targets:
// it writes the gradient of the mean squared error, 2(pred − target)/r,
// into delta and returns the sum of squared errors.
func squaredError[T float](pred, delta []T, targets []float64) (sse float64) {
	scale := 2 / float64(len(targets))
	for i, y := range targets {
		e := float64(pred[i]) - y
		sse += e * e
		delta[i] = T(scale * e)
	}
	return sse
}
