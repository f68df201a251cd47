package trainer

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/gotune/gotune/allreduce"
)

// modelKind describes a built-in model.
type modelKind struct {
	// regression models predict the numeric label with a squared loss; the
	// others are classifiers trained with softmax cross-entropy.
	regression bool
	// hidden models have hidden layers: they read hidden, layers,
	// activation and dropout.
	hidden bool
}

// builtinModels are the models a sweep file names with `model = ...`.
var builtinModels = map[string]modelKind{
	// mlp is a multi-layer perceptron classifier.
	"mlp": {hidden: true},
	// logreg is multinomial logistic regression: one linear layer and a
	// softmax over the classes.
	"logreg": {},
	// linreg is least-squares linear regression on a numeric label.
	"linreg": {regression: true},
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

// splitSeed fixes the random train/validation split of a data set across
// every trial of every sweep, so trials are compared on the same rows.
const splitSeed = 0

// Random streams of a trial, all drawn from PCG generators seeded with the
// trial's seed: weights are initialised from stream initStream, epoch e
// (from 1) shuffles with stream e, and dropout masks of rank r in epoch e
// come from stream e<<20|r of the seed xor dropoutSalt. Each epoch's
// streams start afresh, so a run resumed at an epoch boundary draws exactly
// what an uninterrupted run draws.
const (
	initStream  = 0
	dropoutSalt = 0x9e3779b97f4a7c15
)

// prepared is a data set loaded, split and scaled once per sweep and shared,
// read-only, by every trial.
type prepared struct {
	model string
	kind  modelKind
	data  *Dataset
	// x holds every row's scaled features, row-major.
	x          []float64
	train, val []int
	// Regression only: y holds every row's target standardised with the
	// training rows' mean and deviation yScale, so the squared errors of
	// the network are yScale² times those in the label's units. valSST is
	// the total sum of squares of the validation targets around their mean
	// (in the label's units), for R².
	y      []float64
	yScale float64
	valSST float64
}

// Builtin loads cfg's data set and returns the training function of cfg's
// built-in model. The data set is read, split and scaled once; every trial
// shares it. An error names the file and line at fault.
func Builtin(cfg Config) (TrainFunc, error) {
	p, err := prepare(cfg)
	if err != nil {
		return nil, err
	}
	return p.trainFunc, nil
}

// prepare loads, splits and scales cfg's data set for cfg's model.
func prepare(cfg Config) (*prepared, error) {
	kind, ok := builtinModels[cfg.Model]
	if !ok {
		return nil, fmt.Errorf("unknown built-in model %q (have %s)", cfg.Model, strings.Join(Models(), ", "))
	}
	label := cfg.Label
	if label == "" {
		label = "label"
	}
	data, err := LoadCSV(cfg.Path(cfg.Dataset), label, cfg.Features...)
	if err != nil {
		return nil, cfg.pathError(cfg.Dataset, err)
	}
	p := &prepared{model: cfg.Model, kind: kind, data: data}
	if cfg.Split != "" {
		if p.train, p.val, err = LoadSplit(cfg.Path(cfg.Split), data.Rows()); err != nil {
			return nil, cfg.pathError(cfg.Split, err)
		}
	} else {
		frac := cfg.ValFraction
		if frac == 0 {
			frac = 0.2
		}
		p.train, p.val = data.Split(frac, splitSeed)
	}
	if len(p.train) == 0 || len(p.val) == 0 {
		return nil, fmt.Errorf("dataset %s: %d training and %d validation rows: both need at least one", cfg.Dataset, len(p.train), len(p.val))
	}
	scale := cfg.Scale
	if scale == "" {
		scale = "standard"
	}
	shift, factor, err := data.Scaling(scale, p.train)
	if err != nil {
		return nil, err
	}
	p.x = make([]float64, len(data.Features))
	for i, v := range data.Features {
		j := i % data.Cols
		p.x[i] = (v - shift[j]) * factor[j]
	}
	if kind.regression {
		if err := data.TargetsErr(); err != nil {
			return nil, fmt.Errorf("model %s needs a numeric label: %w", cfg.Model, err)
		}
		p.standardiseTargets()
	} else if len(data.Classes) < 2 {
		return nil, fmt.Errorf("dataset %s: the label %q has the single value %q; a classifier needs two classes or more", cfg.Dataset, label, data.Classes[0])
	}
	return p, nil
}

func (p *prepared) standardiseTargets() {
	t := p.data.Targets
	mean, ss := meanSS(t, p.train)
	p.yScale = math.Sqrt(ss / float64(len(p.train)))
	if p.yScale == 0 {
		p.yScale = 1
	}
	p.y = make([]float64, len(t))
	for i, v := range t {
		p.y[i] = (v - mean) / p.yScale
	}
	_, p.valSST = meanSS(t, p.val)
}

// meanSS returns the mean of values[rows] and their sum of squared
// deviations from it.
func meanSS(values []float64, rows []int) (mean, ss float64) {
	for _, i := range rows {
		mean += values[i]
	}
	mean /= float64(len(rows))
	for _, i := range rows {
		d := values[i] - mean
		ss += d * d
	}
	return mean, ss
}

// shard returns this rank's rows of an epoch: the training rows shuffled by
// a generator every rank seeds alike, padded by wrapping around to a
// multiple of the world size, then every size-th row from rank on (as
// PyTorch's DistributedSampler does), so that every rank runs the same
// number of steps on batches of the same size.
func shard(rowsIn []int, seed int64, epoch, rank, size int) []int {
	perm := slices.Clone(rowsIn)
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(epoch)))
	rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
	for i := 0; len(perm)%size != 0; i++ {
		perm = append(perm, perm[i%len(rowsIn)])
	}
	out := make([]int, 0, len(perm)/size)
	for i := rank; i < len(perm); i += size {
		out = append(out, perm[i])
	}
	return out
}

// hyperparams are what a built-in model reads from a trial's configuration.
type hyperparams struct {
	batchSize, epochs, checkpointEvery int
	float64                            bool // the precision: float64, otherwise float32
	hidden, layers                     int
	tanh                               bool
	dropout                            float64
	optim                              optimParams
}

func readHyperparams(w *Worker, kind modelKind) (hyperparams, error) {
	hp := hyperparams{
		batchSize:       w.Int("batch_size", 32),
		epochs:          w.Int("epochs", 10),
		checkpointEvery: w.Int("checkpoint_every", 1),
	}
	precision := w.String("precision", "float32")
	hp.float64 = precision == "float64"
	var err error
	if hp.optim, err = readOptimParams(w); err != nil {
		return hp, err
	}
	switch {
	case precision != "float32" && precision != "float64":
		return hp, fmt.Errorf("precision must be \"float32\" or \"float64\", got %q", precision)
	case hp.batchSize < 1:
		return hp, fmt.Errorf("batch_size must be at least 1, got %d", hp.batchSize)
	case hp.epochs < 1:
		return hp, fmt.Errorf("epochs must be at least 1, got %d", hp.epochs)
	case hp.checkpointEvery < 0:
		return hp, fmt.Errorf("checkpoint_every must not be negative, got %d", hp.checkpointEvery)
	}
	if !kind.hidden {
		return hp, nil
	}
	hp.hidden = w.Int("hidden", 64)
	hp.layers = w.Int("layers", 1)
	activation := w.String("activation", "relu")
	hp.tanh = activation == "tanh"
	hp.dropout = w.Float("dropout", 0)
	switch {
	case hp.hidden < 1:
		return hp, fmt.Errorf("hidden must be at least 1, got %d", hp.hidden)
	case hp.layers < 0:
		return hp, fmt.Errorf("layers must not be negative, got %d", hp.layers)
	case activation != "relu" && activation != "tanh":
		return hp, fmt.Errorf("activation must be \"relu\" or \"tanh\", got %q", activation)
	case hp.dropout < 0 || hp.dropout >= 1:
		return hp, fmt.Errorf("dropout must be in [0, 1), got %g", hp.dropout)
	}
	return hp, nil
}

// layerSizes is the network's shape: the features, the hidden layers, then
// one output per class (one output for regression).
func (p *prepared) layerSizes(hp hyperparams) []int {
	sizes := []int{p.data.Cols}
	for range hp.layers {
		sizes = append(sizes, hp.hidden)
	}
	if p.kind.regression {
		return append(sizes, 1)
	}
	return append(sizes, len(p.data.Classes))
}

// trainFunc trains the model with data-parallel minibatch descent: every
// rank holds the whole network, computes the gradient of its share of each
// global batch, and the ranks average gradients with one allreduce before
// every step, so all ranks keep identical weights. After every epoch it
// reports the epoch and its metrics, with rank 0's checkpoint every
// checkpoint_every epochs and after the last; it resumes from the
// checkpoint in w.ResumeDir at the next epoch.
func (p *prepared) trainFunc(ctx context.Context, w *Worker) error {
	hp, err := readHyperparams(w, p.kind)
	if err != nil {
		return err
	}
	if hp.float64 {
		return train[float64](ctx, w, p, hp)
	}
	return train[float32](ctx, w, p, hp)
}

// train is trainFunc with the network computing in precision T. The
// parameters, the averaged gradient and the optimizer's state are float64
// whatever T is (the master copy that checkpoints hold); the network
// computes with the parameters rounded to T.
func train[T float](ctx context.Context, w *Worker, p *prepared, hp hyperparams) error {
	rank, size, seed := w.Rank(), w.WorldSize(), w.Seed()
	comm := w.Comm()
	sizes := p.layerSizes(hp)
	params := initParams(sizes, rand.New(rand.NewPCG(uint64(seed), initStream)))
	grads := make([]float64, len(params))
	opt := newOptimizer(hp.optim, len(params))
	first := 1
	if dir := w.ResumeDir(); dir != "" {
		done, err := loadCheckpoint(dir, p.model, hp.optim.name, sizes, params, opt)
		if err != nil {
			return err
		}
		first = done + 1
	}
	net := newNetwork[T](sizes, hp.tanh, hp.dropout, hp.batchSize)
	net.setParams(params)

	s := &stepper[T]{p: p, net: net, labels: make([]int, hp.batchSize), targets: make([]float64, hp.batchSize)}
	dropSrc := rand.NewPCG(0, 0)
	dropRNG := rand.New(dropSrc)
	// Each rank scores a contiguous share of the validation rows.
	val := p.val[rank*len(p.val)/size : (rank+1)*len(p.val)/size]
	var stats [4]float64
	for epoch := first; epoch <= hp.epochs; epoch++ {
		mine := shard(p.train, seed, epoch, rank, size)
		dropSrc.Seed(uint64(seed)^dropoutSalt, uint64(epoch)<<20|uint64(rank))
		var trainLoss float64
		for lo := 0; lo < len(mine); lo += hp.batchSize {
			if err := ctx.Err(); err != nil {
				return err
			}
			batch := mine[lo:min(lo+hp.batchSize, len(mine))]
			loss, _ := s.run(batch, true, dropRNG)
			trainLoss += loss
			net.backward(len(batch), true)
			net.gradsTo(grads)
			if err := comm.AllReduceFloat64(ctx, grads, allreduce.Mean); err != nil {
				return err
			}
			opt.step(params, grads)
			net.setParams(params)
		}

		var valLoss, valCorrect float64
		for lo := 0; lo < len(val); lo += hp.batchSize {
			loss, correct := s.run(val[lo:min(lo+hp.batchSize, len(val))], false, nil)
			valLoss += loss
			valCorrect += float64(correct)
		}
		stats = [4]float64{trainLoss, float64(len(mine)), valLoss, valCorrect}
		if err := comm.AllReduceFloat64(ctx, stats[:], allreduce.Sum); err != nil {
			return err
		}

		var opts []ReportOption
		if rank == 0 && hp.checkpointEvery > 0 && (epoch%hp.checkpointEvery == 0 || epoch == hp.epochs) {
			dir, err := w.CheckpointDir()
			if err != nil {
				return err
			}
			save := func() error { return saveCheckpoint(dir, p.model, hp.optim.name, epoch, sizes, params, opt) }
			if err := w.WaitForSpace(ctx, save); err != nil {
				return err
			}
			opts = append(opts, WithCheckpoint(dir))
		}
		if err := w.Report(ctx, p.metrics(epoch, stats), opts...); err != nil {
			return err
		}
	}
	return nil
}

// stepper runs the network forward over batches of rows and scores them.
type stepper[T float] struct {
	p       *prepared
	net     *network[T]
	labels  []int
	targets []float64
}

// run loads rows into the network, runs it forward (with dropout when
// training) and scores the outputs, leaving the loss gradient for backward.
// It returns the summed loss of the rows (squared errors in standardised
// units for regression) and, for a classifier, how many it got right.
func (s *stepper[T]) run(rows []int, train bool, rng *rand.Rand) (loss float64, correct int) {
	p, net := s.p, s.net
	cols := p.data.Cols
	x := net.input(len(rows))
	for i, row := range rows {
		dst := x[i*cols : (i+1)*cols]
		for j, v := range p.x[row*cols : (row+1)*cols] {
			dst[j] = T(v)
		}
	}
	out := net.forward(len(rows), train, rng)
	if p.kind.regression {
		t := s.targets[:len(rows)]
		for i, row := range rows {
			t[i] = p.y[row]
		}
		return squaredError(out, net.outputDelta(len(rows)), t), 0
	}
	labels := s.labels[:len(rows)]
	for i, row := range rows {
		labels[i] = p.data.Class[row]
	}
	return softmaxCrossEntropy(out, net.outputDelta(len(rows)), net.outputs(), labels)
}

// metrics turns an epoch's summed statistics (training loss, training
// rows, validation loss, correct validation rows) into its report:
// epoch, train_loss and val_loss (the mean cross-entropy, or for
// regression the mean squared error in the label's units), then val_acc for
// a classifier, or val_rmse and val_r2 (the coefficient of determination,
// left out when the validation targets are all equal) for regression.
func (p *prepared) metrics(epoch int, stats [4]float64) map[string]float64 {
	nVal := float64(len(p.val))
	m := map[string]float64{"epoch": float64(epoch)}
	if !p.kind.regression {
		m["train_loss"] = stats[0] / stats[1]
		m["val_loss"] = stats[2] / nVal
		m["val_acc"] = stats[3] / nVal
		return m
	}
	unit := p.yScale * p.yScale
	m["train_loss"] = unit * stats[0] / stats[1]
	m["val_loss"] = unit * stats[2] / nVal
	m["val_rmse"] = math.Sqrt(m["val_loss"])
	if p.valSST > 0 {
		m["val_r2"] = 1 - unit*stats[2]/p.valSST
	}
	return m
}
