package trainer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/gotune/gotune/allreduce"
)

// builtinModels maps a model name to the function that builds its training
// function over a loaded data set.
var builtinModels = map[string]func(*prepared) TrainFunc{
	"mlp": trainMLP,
}

// Models lists the built-in model names, sorted.
func Models() []string {
	names := make([]string, 0, len(builtinModels))
	for name := range builtinModels {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// splitSeed fixes the train/validation split of a data set across every
// trial of every sweep, so trials are compared on the same rows.
const splitSeed = 0

// prepared is a data set split and standardised once per sweep and shared,
// read-only, by every trial.
type prepared struct {
	data       *Dataset
	train, val []int
	mean, std  []float64
}

// Builtin loads cfg's data set and returns the training function of cfg's
// built-in model. The data set is read once; every trial shares it.
func Builtin(cfg Config) (TrainFunc, error) {
	build, ok := builtinModels[cfg.Model]
	if !ok {
		return nil, fmt.Errorf("unknown built-in model %q", cfg.Model)
	}
	label := cfg.Label
	if label == "" {
		label = "label"
	}
	data, err := LoadCSV(cfg.Dataset, label)
	if err != nil {
		return nil, err
	}
	frac := cfg.ValFraction
	if frac == 0 {
		frac = 0.2
	}
	p := &prepared{data: data}
	p.train, p.val = data.Split(frac, splitSeed)
	if len(p.train) == 0 || len(p.val) == 0 {
		return nil, fmt.Errorf("dataset %s: %d rows are too few to split %g for validation", cfg.Dataset, data.Rows(), frac)
	}
	p.mean, p.std = data.Standardize(p.train)
	return build(p), nil
}

// loadBatch writes the standardised features of rows into m.
func (p *prepared) loadBatch(n *network, idx []int) {
	x := n.input(len(idx)).RawMatrix()
	for i, row := range idx {
		dst := x.Data[i*x.Stride : i*x.Stride+x.Cols]
		for j, v := range p.data.Row(row) {
			dst[j] = (v - p.mean[j]) / p.std[j]
		}
	}
}

// shard returns this rank's rows of an epoch: the training rows shuffled by
// a generator every rank seeds alike, padded by wrapping around to a
// multiple of the world size, then every size-th row from rank on (as
// PyTorch's DistributedSampler does), so that every rank runs the same
// number of steps.
func shard(rowsIn []int, seed int64, epoch, rank, size int) []int {
	perm := slices.Clone(rowsIn)
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(epoch)))
	rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
	for i := 0; len(perm)%size != 0; i++ {
		perm = append(perm, perm[i])
	}
	out := make([]int, 0, len(perm)/size)
	for i := rank; i < len(perm); i += size {
		out = append(out, perm[i])
	}
	return out
}

// trainMLP trains a classifier with data-parallel SGD: every rank holds the
// whole network, computes the gradient of its share of each global batch,
// and the ranks average gradients before every step, so all ranks keep
// identical weights. It reports epoch, train_loss, val_loss and val_acc
// after every epoch.
func trainMLP(p *prepared) TrainFunc {
	return func(ctx context.Context, w *Worker) error {
		hp, err := readMLPParams(w)
		if err != nil {
			return err
		}
		rank, size := w.Rank(), w.WorldSize()
		comm := w.Comm()
		sizes := []int{p.data.Cols}
		for range hp.layers {
			sizes = append(sizes, hp.hidden)
		}
		sizes = append(sizes, len(p.data.Classes))
		valRows := shard(p.val, w.Seed(), 0, rank, size)
		net := newNetwork(sizes, hp.activation, hp.dropout, max(hp.batchSize, len(valRows)),
			rand.New(rand.NewPCG(uint64(w.Seed()), 0)))
		opt := &sgd{lr: hp.lr, momentum: hp.momentum, weightDecay: hp.decay}
		dropRNG := rand.New(rand.NewPCG(uint64(w.Seed()), uint64(1+rank)))
		classes := make([]int, net.maxBatch)
		stats := make([]float64, 4)

		for epoch := 1; epoch <= hp.epochs; epoch++ {
			mine := shard(p.train, w.Seed(), epoch, rank, size)
			var lossSum float64
			for lo := 0; lo < len(mine); lo += hp.batchSize {
				if err := ctx.Err(); err != nil {
					return err
				}
				batch := mine[lo:min(lo+hp.batchSize, len(mine))]
				p.loadBatch(net, batch)
				for i, row := range batch {
					classes[i] = p.data.Class[row]
				}
				logits := net.forward(len(batch), true, dropRNG)
				l, _ := net.softmaxCrossEntropy(logits, classes[:len(batch)])
				lossSum += l
				net.backward(len(batch), true)
				if err := comm.AllReduceFloat64(ctx, net.grads, allreduce.Mean); err != nil {
					return err
				}
				opt.step(net.params, net.grads)
			}

			// Validation: each rank scores its share of the validation
			// rows; padding rows are scored twice, so count exactly.
			own := valRows
			if pad := len(valRows)*size - len(p.val); pad > 0 && rank >= size-pad {
				own = valRows[:len(valRows)-1]
			}
			var valLoss float64
			var correct int
			if len(own) > 0 {
				p.loadBatch(net, own)
				for i, row := range own {
					classes[i] = p.data.Class[row]
				}
				logits := net.forward(len(own), false, nil)
				valLoss, correct = net.softmaxCrossEntropy(logits, classes[:len(own)])
			}
			stats[0], stats[1], stats[2], stats[3] = lossSum, float64(len(mine)), valLoss, float64(correct)
			if err := comm.AllReduceFloat64(ctx, stats, allreduce.Sum); err != nil {
				return err
			}
			n := float64(len(p.val))
			err := w.Report(ctx, map[string]float64{
				"epoch":      float64(epoch),
				"train_loss": stats[0] / stats[1],
				"val_loss":   stats[2] / n,
				"val_acc":    stats[3] / n,
			})
			if err != nil {
				return err
			}
		}
		return nil
	}
}
