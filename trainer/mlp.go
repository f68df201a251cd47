package trainer

import (
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/mat"
)

// network is a fully connected network whose weights and gradients each live
// in one flat slice, so that a whole gradient is averaged across the group in
// a single collective. Layer l maps sizes[l] inputs to sizes[l+1] outputs.
type network struct {
	sizes      []int
	activation string
	dropout    float64

	params, grads []float64
	w, gw         []*mat.Dense // views into params and grads
	b, gb         [][]float64

	// Per-batch scratch, sized for the largest batch: acts[l] is the input
	// of layer l (acts[0] the batch itself), masks[l] the dropout mask
	// applied to acts[l+1], deltas[l] the gradient at the output of layer l.
	maxBatch int
	acts     []*mat.Dense
	masks    [][]float64
	deltas   []*mat.Dense
}

// newNetwork initialises weights as PyTorch's nn.Linear does: uniform in
// ±1/sqrt(fan_in), weights and biases alike.
func newNetwork(sizes []int, activation string, dropout float64, maxBatch int, rng *rand.Rand) *network {
	n := &network{sizes: sizes, activation: activation, dropout: dropout, maxBatch: maxBatch}
	total := 0
	for l := 0; l+1 < len(sizes); l++ {
		total += sizes[l]*sizes[l+1] + sizes[l+1]
	}
	n.params = make([]float64, total)
	n.grads = make([]float64, total)
	off := 0
	for l := 0; l+1 < len(sizes); l++ {
		in, out := sizes[l], sizes[l+1]
		bound := 1 / math.Sqrt(float64(in))
		w := n.params[off : off+in*out]
		b := n.params[off+in*out : off+in*out+out]
		for i := range w {
			w[i] = (2*rng.Float64() - 1) * bound
		}
		for i := range b {
			b[i] = (2*rng.Float64() - 1) * bound
		}
		n.w = append(n.w, mat.NewDense(in, out, w))
		n.b = append(n.b, b)
		n.gw = append(n.gw, mat.NewDense(in, out, n.grads[off:off+in*out]))
		n.gb = append(n.gb, n.grads[off+in*out:off+in*out+out])
		off += in*out + out
	}
	for _, s := range sizes {
		n.acts = append(n.acts, mat.NewDense(maxBatch, s, nil))
		n.deltas = append(n.deltas, mat.NewDense(maxBatch, s, nil))
		n.masks = append(n.masks, make([]float64, maxBatch*s))
	}
	return n
}

func (n *network) layers() int { return len(n.sizes) - 1 }

// rows returns the first r rows of m as a matrix sharing its storage.
func rows(m *mat.Dense, r int) *mat.Dense {
	_, c := m.Dims()
	return m.Slice(0, r, 0, c).(*mat.Dense)
}

// input returns the matrix a batch of size r is written into.
func (n *network) input(r int) *mat.Dense { return rows(n.acts[0], r) }

// forward computes the logits of the batch in n.input(r); with train set,
// dropout masks are drawn from rng. It returns the logits.
func (n *network) forward(r int, train bool, rng *rand.Rand) *mat.Dense {
	for l := range n.layers() {
		in := rows(n.acts[l], r)
		out := rows(n.acts[l+1], r)
		out.Mul(in, n.w[l])
		raw := out.RawMatrix()
		last := l == n.layers()-1
		for i := range r {
			row := raw.Data[i*raw.Stride : i*raw.Stride+raw.Cols]
			for j := range row {
				v := row[j] + n.b[l][j]
				if !last {
					v = n.activate(v)
				}
				row[j] = v
			}
		}
		if !last && train && n.dropout > 0 {
			mask := n.masks[l+1][:r*raw.Cols]
			keep := 1 - n.dropout
			for i := range mask {
				if rng.Float64() < keep {
					mask[i] = 1 / keep
				} else {
					mask[i] = 0
				}
			}
			for i := range r {
				row := raw.Data[i*raw.Stride : i*raw.Stride+raw.Cols]
				for j := range row {
					row[j] *= mask[i*raw.Cols+j]
				}
			}
		}
	}
	return rows(n.acts[n.layers()], r)
}

func (n *network) activate(v float64) float64 {
	if n.activation == "tanh" {
		return math.Tanh(v)
	}
	return max(v, 0)
}

// derivative is the activation's derivative expressed through its output a
// (before dropout scaling, which the caller removes).
func (n *network) derivative(a float64) float64 {
	if n.activation == "tanh" {
		return 1 - a*a
	}
	if a > 0 {
		return 1
	}
	return 0
}

// backward fills n.grads with the gradient of the mean loss over the batch,
// given delta, the gradient with respect to the logits, in n.deltas[last].
// With train and dropout, the masks of the forward pass are applied.
func (n *network) backward(r int, train bool) {
	for l := n.layers() - 1; l >= 0; l-- {
		delta := rows(n.deltas[l+1], r)
		in := rows(n.acts[l], r)
		n.gw[l].Mul(in.T(), delta)
		gb := n.gb[l]
		clear(gb)
		raw := delta.RawMatrix()
		for i := range r {
			for j, v := range raw.Data[i*raw.Stride : i*raw.Stride+raw.Cols] {
				gb[j] += v
			}
		}
		if l == 0 {
			break
		}
		prev := rows(n.deltas[l], r)
		prev.Mul(delta, n.w[l].T())
		praw := prev.RawMatrix()
		araw := in.RawMatrix()
		dropped := train && n.dropout > 0
		mask := n.masks[l]
		for i := range r {
			prow := praw.Data[i*praw.Stride : i*praw.Stride+praw.Cols]
			arow := araw.Data[i*araw.Stride : i*araw.Stride+araw.Cols]
			for j := range prow {
				a := arow[j]
				if dropped {
					m := mask[i*praw.Cols+j]
					if m == 0 {
						prow[j] = 0
						continue
					}
					a /= m
					prow[j] *= m
				}
				prow[j] *= n.derivative(a)
			}
		}
	}
}

// softmaxCrossEntropy turns logits into the mean cross-entropy loss against
// classes, writes the loss gradient (softmax − one-hot)/r into n.deltas[last]
// and returns the summed loss and the number of correct predictions.
func (n *network) softmaxCrossEntropy(logits *mat.Dense, classes []int) (lossSum float64, correct int) {
	r := len(classes)
	delta := rows(n.deltas[n.layers()], r)
	lraw, draw := logits.RawMatrix(), delta.RawMatrix()
	for i, y := range classes {
		lrow := lraw.Data[i*lraw.Stride : i*lraw.Stride+lraw.Cols]
		drow := draw.Data[i*draw.Stride : i*draw.Stride+draw.Cols]
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
		for j := range drow {
			drow[j] /= sum * float64(r)
		}
		drow[y] -= 1 / float64(r)
	}
	return lossSum, correct
}

// sgd is stochastic gradient descent with momentum and L2 weight decay, with
// PyTorch's update rule: v ← μv + (g + λp); p ← p − ηv.
type sgd struct {
	lr, momentum, weightDecay float64
	velocity                  []float64
}

func (o *sgd) step(params, grads []float64) {
	if o.velocity == nil {
		o.velocity = make([]float64, len(params))
	}
	for i, g := range grads {
		g += o.weightDecay * params[i]
		v := o.momentum*o.velocity[i] + g
		o.velocity[i] = v
		params[i] -= o.lr * v
	}
}

// mlpParams are the hyperparameters the built-in mlp reads from a trial's config.
type mlpParams struct {
	hidden, layers, batchSize, epochs int
	activation                        string
	dropout, lr, momentum, decay      float64
}

func readMLPParams(w *Worker) (mlpParams, error) {
	p := mlpParams{
		hidden:     w.Int("hidden", 64),
		layers:     w.Int("layers", 1),
		batchSize:  w.Int("batch_size", 32),
		epochs:     w.Int("epochs", 10),
		activation: w.String("activation", "relu"),
		dropout:    w.Float("dropout", 0),
		lr:         w.Float("lr", 0.01),
		momentum:   w.Float("momentum", 0.9),
		decay:      w.Float("weight_decay", 0),
	}
	switch {
	case p.hidden < 1:
		return p, fmt.Errorf("hidden must be at least 1, got %d", p.hidden)
	case p.layers < 0:
		return p, fmt.Errorf("layers must not be negative, got %d", p.layers)
	case p.batchSize < 1:
		return p, fmt.Errorf("batch_size must be at least 1, got %d", p.batchSize)
	case p.epochs < 1:
		return p, fmt.Errorf("epochs must be at least 1, got %d", p.epochs)
	case p.activation != "relu" && p.activation != "tanh":
		return p, fmt.Errorf("activation must be \"relu\" or \"tanh\", got %q", p.activation)
	case p.dropout < 0 || p.dropout >= 1:
		return p, fmt.Errorf("dropout must be in [0, 1), got %g", p.dropout)
	case p.lr <= 0:
		return p, fmt.Errorf("lr must be positive, got %g", p.lr)
	}
	return p, nil
}
