package trainer

import (
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// gemm is gonum's pure-Go BLAS. Its matrix products skip zero elements of
// the left operand, which pays off here: ReLU outputs are about half zeros.
var gemm gonum.Implementation

// network is a stack of fully connected layers (the built-in models: an mlp,
// or a single layer for logreg and linreg) whose weights and gradients each
// live in one flat slice, so that a whole gradient is averaged across the
// group in a single collective. Layer l maps sizes[l] inputs to sizes[l+1]
// outputs; hidden layers apply the activation, then dropout; the last layer
// is linear. All scratch memory is allocated up front: a training step
// allocates nothing.
type network struct {
	sizes   []int
	tanh    bool // the activation: tanh, otherwise ReLU
	dropout float64

	params, grads []float64
	// w[l] (sizes[l]×sizes[l+1], row-major) and b[l] are views into params;
	// gw and gb the same views into grads.
	w, b, gw, gb [][]float64
	// wt[l] is scratch for w[l] transposed (sizes[l+1]×sizes[l]), for
	// the backward pass of layers past the first.
	wt [][]float64

	// Per-batch scratch for up to maxBatch rows, row-major: acts[l] is the
	// input of layer l (acts[0] the batch itself), masks[l] the dropout
	// mask applied to acts[l], deltas[l] the loss gradient at acts[l].
	maxBatch int
	acts     [][]float64
	masks    [][]float64
	deltas   [][]float64
}

// newNetwork initialises weights as PyTorch's nn.Linear does: uniform in
// ±1/sqrt(fan_in), weights and biases alike, drawn from rng in layer order.
func newNetwork(sizes []int, tanh bool, dropout float64, maxBatch int, rng *rand.Rand) *network {
	n := &network{sizes: sizes, tanh: tanh, dropout: dropout, maxBatch: maxBatch}
	total := 0
	for l := range len(sizes) - 1 {
		total += sizes[l]*sizes[l+1] + sizes[l+1]
	}
	n.params = make([]float64, total)
	n.grads = make([]float64, total)
	off := 0
	for l := range len(sizes) - 1 {
		in, out := sizes[l], sizes[l+1]
		n.w = append(n.w, n.params[off:off+in*out])
		n.gw = append(n.gw, n.grads[off:off+in*out])
		off += in * out
		n.b = append(n.b, n.params[off:off+out])
		n.gb = append(n.gb, n.grads[off:off+out])
		off += out
		var wt []float64
		if l > 0 {
			wt = make([]float64, in*out)
		}
		n.wt = append(n.wt, wt)
		bound := 1 / math.Sqrt(float64(in))
		for _, p := range [][]float64{n.w[l], n.b[l]} {
			for i := range p {
				p[i] = (2*rng.Float64() - 1) * bound
			}
		}
	}
	for _, s := range sizes {
		n.acts = append(n.acts, make([]float64, maxBatch*s))
		n.deltas = append(n.deltas, make([]float64, maxBatch*s))
		n.masks = append(n.masks, make([]float64, maxBatch*s))
	}
	return n
}

func (n *network) layers() int { return len(n.sizes) - 1 }

// outputs is the width of the last layer.
func (n *network) outputs() int { return n.sizes[len(n.sizes)-1] }

// input returns the slice a batch of r rows is written into, row-major.
func (n *network) input(r int) []float64 { return n.acts[0][:r*n.sizes[0]] }

// forward computes the outputs of the batch in n.input(r). With train set,
// dropout masks are drawn from rng; otherwise rng may be nil. It returns the
// r×outputs() output, row-major.
func (n *network) forward(r int, train bool, rng *rand.Rand) []float64 {
	for l := range n.layers() {
		in, out := n.sizes[l], n.sizes[l+1]
		x := n.acts[l][:r*in]
		y := n.acts[l+1][:r*out]
		gemm.Dgemm(blas.NoTrans, blas.NoTrans, r, out, in, 1, x, in, n.w[l], out, 0, y, out)
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
					row[j] = math.Tanh(row[j] + b)
				}
			default:
				for j, b := range bias {
					row[j] = max(row[j]+b, 0)
				}
			}
		}
		if !last && train && n.dropout > 0 {
			keep := 1 - n.dropout
			mask := n.masks[l+1][:len(y)]
			for i := range mask {
				if rng.Float64() < keep {
					mask[i] = 1 / keep
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
func (n *network) outputDelta(r int) []float64 { return n.deltas[n.layers()][:r*n.outputs()] }

// backward fills n.grads with the loss gradient, given the gradient with
// respect to the outputs in n.outputDelta(r) and the activations of the
// forward pass of the same batch. With train set, the dropout masks of that
// pass are applied.
func (n *network) backward(r int, train bool) {
	dropped := train && n.dropout > 0
	for l := n.layers() - 1; l >= 0; l-- {
		in, out := n.sizes[l], n.sizes[l+1]
		delta := n.deltas[l+1][:r*out]
		x := n.acts[l][:r*in]
		// gw = xᵀ·delta; gb = column sums of delta.
		gemm.Dgemm(blas.Trans, blas.NoTrans, in, out, r, 1, x, in, delta, out, 0, n.gw[l], out)
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
		gemm.Dgemm(blas.NoTrans, blas.NoTrans, r, in, out, 1, delta, out, wt, in, 0, prev, in)
		mask := n.masks[l][:r*in]
		switch {
		case n.tanh:
			for i, a := range x {
				m := 1.0
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
func softmaxCrossEntropy(logits, delta []float64, k int, classes []int) (lossSum float64, correct int) {
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
			e := math.Exp(v - maxv)
			drow[j] = e
			sum += e
		}
		lossSum += math.Log(sum) - (lrow[y] - maxv)
		scale := inv / sum
		for j := range drow {
			drow[j] *= scale
		}
		drow[y] -= inv
	}
	return lossSum, correct
}

// squaredError scores predictions of r rows (one column) against targets:
// it writes the gradient of the mean squared error, 2(pred − target)/r,
// into delta and returns the sum of squared errors.
func squaredError(pred, delta, targets []float64) (sse float64) {
	scale := 2 / float64(len(targets))
	for i, y := range targets {
		e := pred[i] - y
		sse += e * e
		delta[i] = scale * e
	}
	return sse
}
