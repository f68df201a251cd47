package trainer

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// optimizers are the update rules the built-in models offer, by the name
// the "optimizer" hyperparameter takes.
var optimizers = []string{"sgd", "adam", "adamw"}

// optimizer updates parameters from their averaged gradient. Its state is a
// step count and a few vectors as long as the parameters, which a
// checkpoint saves and restores exactly.
type optimizer interface {
	step(params, grads []float64)
	// state returns the step count and the state vectors, in a fixed
	// order, for a checkpoint to write or overwrite.
	state() (steps *int64, vectors [][]float64)
}

// optimParams are the optimizer's hyperparameters.
type optimParams struct {
	name                      string
	lr, momentum, weightDecay float64
	beta1, beta2, eps         float64
}

func readOptimParams(w *Worker) (optimParams, error) {
	p := optimParams{
		name:        w.String("optimizer", "sgd"),
		momentum:    w.Float("momentum", 0.9),
		weightDecay: w.Float("weight_decay", 0),
		beta1:       w.Float("beta1", 0.9),
		beta2:       w.Float("beta2", 0.999),
		eps:         w.Float("eps", 1e-8),
	}
	lr := 0.01
	if p.name != "sgd" {
		lr = 0.001
	}
	p.lr = w.Float("lr", lr)
	switch {
	case !slices.Contains(optimizers, p.name):
		return p, fmt.Errorf("optimizer must be one of %s, got %q", strings.Join(optimizers, ", "), p.name)
	case !(p.lr > 0):
		return p, fmt.Errorf("lr must be positive, got %g", p.lr)
	case p.momentum < 0 || p.momentum >= 1:
		return p, fmt.Errorf("momentum must be in [0, 1), got %g", p.momentum)
	case p.weightDecay < 0:
		return p, fmt.Errorf("weight_decay must not be negative, got %g", p.weightDecay)
	case p.beta1 < 0 || p.beta1 >= 1:
		return p, fmt.Errorf("beta1 must be in [0, 1), got %g", p.beta1)
	case p.beta2 < 0 || p.beta2 >= 1:
		return p, fmt.Errorf("beta2 must be in [0, 1), got %g", p.beta2)
	case !(p.eps > 0):
		return p, fmt.Errorf("eps must be positive, got %g", p.eps)
	}
	return p, nil
}

func newOptimizer(p optimParams, n int) optimizer {
	if p.name == "sgd" {
		return &sgd{lr: p.lr, momentum: p.momentum, weightDecay: p.weightDecay, velocity: make([]float64, n)}
	}
	return &adam{
		lr: p.lr, beta1: p.beta1, beta2: p.beta2, eps: p.eps, weightDecay: p.weightDecay,
		decoupled: p.name == "adamw", m: make([]float64, n), v: make([]float64, n),
	}
}

// sgd is stochastic gradient descent with momentum and L2 weight decay, with
// PyTorch's update rule (torch.optim.SGD, no dampening):
// v ← μv + (g + λp); p ← p − ηv.
type sgd struct {
	lr, momentum, weightDecay float64
	steps                     int64
	velocity                  []float64
}

func (o *sgd) step(params, grads []float64) {
	o.steps++
	v := o.velocity[:len(params)]
	g := grads[:len(params)]
	for i, p := range params {
		vi := o.momentum*v[i] + (g[i] + o.weightDecay*p)
		v[i] = vi
		params[i] = p - o.lr*vi
	}
}

func (o *sgd) state() (*int64, [][]float64) { return &o.steps, [][]float64{o.velocity} }

// adam is Adam (Kingma and Ba, 2015, "Adam: A Method for Stochastic
// Optimization") with PyTorch's formulation of the bias correction
// (torch.optim.Adam). Weight decay is added to the gradient (L2), or with
// decoupled set applied to the parameters directly, as in AdamW
// (Loshchilov and Hutter, 2019, "Decoupled Weight Decay Regularization").
type adam struct {
	lr, beta1, beta2, eps, weightDecay float64
	decoupled                          bool
	steps                              int64
	m, v                               []float64
}

func (o *adam) step(params, grads []float64) {
	o.steps++
	t := float64(o.steps)
	bc1 := 1 - math.Pow(o.beta1, t)
	bc2 := math.Sqrt(1 - math.Pow(o.beta2, t))
	stepSize := o.lr / bc1
	m, v := o.m[:len(params)], o.v[:len(params)]
	g := grads[:len(params)]
	for i, p := range params {
		gi := g[i]
		if o.decoupled {
			p *= 1 - o.lr*o.weightDecay
		} else {
			gi += o.weightDecay * p
		}
		mi := o.beta1*m[i] + (1-o.beta1)*gi
		vi := o.beta2*v[i] + (1-o.beta2)*gi*gi
		m[i], v[i] = mi, vi
		params[i] = p - stepSize*mi/(math.Sqrt(vi)/bc2+o.eps)
	}
}

func (o *adam) state() (*int64, [][]float64) { return &o.steps, [][]float64{o.m, o.v} }
