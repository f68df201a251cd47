package search

import (
	"slices"

	"github.com/gotune/gotune/schedulers"
	"github.com/gotune/gotune/searchspace"
)

// BOHB is the searcher of Falkner et al., "BOHB: Robust and Efficient
// Hyperparameter Optimization at Scale" (ICML 2018), to run under a
// HyperBand scheduler: HyperBand decides how long each trial runs, and
// BOHB chooses each new trial's configuration with TPE fitted to the
// results at the largest budget that has enough of them.
//
// The budgets are the times (values of the scheduler's time attribute)
// at which HyperBand judges trials, ascending (see
// schedulers.Config.HyperBandBudgets). A trial's result at a budget is its
// first result whose time reaches it (schedulers.Reached); a non-finite
// one (a diverged trial) counts as the worst (schedulers.WorstIfDiverged).
// For each suggestion BOHB takes the largest budget with at least
// TPEStartupTrials results and fits a TPE (multivariate,
// improvement-weighted, with the pending trials in g as TPE has them:
// constant liars in a continuous space, weightless in a finite one; see
// TPE) to them, each result standing for a trial that completed with it,
// and the trials still running without one there as pending. While no
// budget has enough results, it draws at random, as TPE does at its
// start. Ray Tune pairs its TuneBOHB searcher with HyperBandForBOHB the
// same way; Falkner et al. use d+1 results for d parameters, where BOHB
// waits for TPE's start-up count.
//
// As Falkner et al.'s does, BOHB draws TPE's candidates from l with
// every numeric kernel bohbBandwidthFactor times as wide, and scores them
// with l and g as fitted: the candidates spread beyond the good trials,
// and the model still picks among them. Without it, TPE's kernels narrow
// around the configurations it retrains: on bench/curves (see the
// README) BOHB trained about 70 distinct configurations of 400 trials,
// hardly a new one after half the epochs, and reached the table's best
// in a third of the runs.
//
// Trial n draws from TrialRand(seed, n), so a resumed experiment (see
// Replayer) continues as an undisturbed one does when trials run one at a
// time. The TPE is built from the whole history only when the model
// budget changes (or a trial's number or configuration is used again, or
// a trial it learnt from fails); otherwise each result, end and
// suggestion updates it, so a suggestion costs what TPE's own does
// instead of replaying every trial.
type BOHB struct {
	space   *searchspace.Space
	seed    int64
	budgets []float64
	opts    []TPEOption
	// configs holds every trial's configuration, by trial number; order
	// lists the trial numbers as they were suggested or replayed.
	configs map[int]map[string]any
	order   []int
	// results[b] holds each trial's score at budgets[b].
	results []map[int]float64
	// ended holds the trials that have ended.
	ended map[int]bool
	// tpe is the model as model would build it for budgets[fitted], kept
	// in step with each event; nil when it must be built afresh.
	tpe    *TPE
	fitted int
}

// bohbBandwidthFactor is how many times wider than l's kernels BOHB's
// candidates are drawn: Falkner et al.'s bandwidth_factor, 3 in their
// implementation. On bench/curves' seeds 21 to 620, 6 reached the table's
// best by the end of the epochs in more runs than 3 or 4, and as many by
// half of them.
const bohbBandwidthFactor = 6

var (
	_ Searcher = (*BOHB)(nil)
	_ Replayer = (*BOHB)(nil)
)

// NewBOHB returns a BOHB searcher over space, seeded with seed, fitting
// its model at budgets (positive, ascending). opts customise the TPE it
// fits at each suggestion. It fails, with a *ConfigError, where NewTPE
// would, or on budgets that are empty or not ascending.
func NewBOHB(space *searchspace.Space, seed int64, budgets []float64, opts ...TPEOption) (*BOHB, error) {
	if len(budgets) == 0 || !slices.IsSorted(budgets) || budgets[0] <= 0 {
		return nil, fieldErr("scheduler", "bohb needs HyperBand's budgets, positive and ascending, got %v", budgets)
	}
	if _, err := NewTPE(space, seed, opts...); err != nil {
		return nil, err
	}
	b := &BOHB{space: space, seed: seed, budgets: slices.Clone(budgets),
		opts:    append(slices.Clone(opts), tpeWidenDraws(bohbBandwidthFactor)),
		configs: map[int]map[string]any{}, results: make([]map[int]float64, len(budgets)), ended: map[int]bool{}}
	for i := range b.results {
		b.results[i] = map[int]float64{}
	}
	return b, nil
}

// Budget returns the budget the next suggestion's model is fitted at, and
// false when no budget has TPEStartupTrials results yet (the suggestion is
// then random).
func (b *BOHB) Budget() (float64, bool) {
	i := b.modelBudget()
	if i < 0 {
		return 0, false
	}
	return b.budgets[i], true
}

// modelBudget is the index of the largest budget with TPEStartupTrials
// results, or −1.
func (b *BOHB) modelBudget() int {
	for i := len(b.budgets) - 1; i >= 0; i-- {
		if len(b.results[i]) >= TPEStartupTrials {
			return i
		}
	}
	return -1
}

// Suggest implements Searcher: the suggestion of a TPE fitted to the
// results at the model budget (see BOHB).
func (b *BOHB) Suggest(trial int) (map[string]any, error) {
	if at := b.modelBudget(); b.tpe == nil || b.fitted != at {
		tpe, err := b.model(at)
		if err != nil {
			return nil, err
		}
		b.tpe, b.fitted = tpe, at
	}
	cfg, err := b.tpe.Suggest(trial)
	if err != nil {
		return nil, err
	}
	b.add(trial, cfg)
	return cfg, nil
}

// model builds the TPE fitted at budgets[at] (none for −1): every trial
// is replayed to it, so that its configuration counts as suggested; one
// with a result at the budget ends with it; one still running without a
// result there stays pending; the others end without teaching it.
func (b *BOHB) model(at int) (*TPE, error) {
	tpe, err := NewTPE(b.space, b.seed, b.opts...)
	if err != nil {
		return nil, err
	}
	for _, trial := range b.order {
		if err := tpe.Replay(trial, b.configs[trial]); err != nil {
			return nil, err
		}
		if at >= 0 {
			if score, ok := b.results[at][trial]; ok {
				tpe.OnTrialEnd(trial, TrialEnd{Status: TrialCompleted, Last: &Observation{Step: b.budgets[at], Score: score}})
				continue
			}
		}
		if b.ended[trial] {
			tpe.OnTrialEnd(trial, TrialEnd{Status: TrialFailed})
		}
	}
	return tpe, nil
}

// add records trial's configuration, and replays it to the model, as
// model does: a configuration in model space exactly as a replayed one.
// A number used again makes the model stale.
func (b *BOHB) add(trial int, cfg map[string]any) {
	if _, ok := b.configs[trial]; ok {
		b.tpe = nil
	} else {
		b.order = append(b.order, trial)
	}
	b.configs[trial] = cfg
	if b.tpe != nil {
		if err := b.tpe.Replay(trial, cfg); err != nil {
			b.tpe = nil // model reports the error
		}
	}
}

// OnResult implements Searcher: the result is the trial's result at each
// budget its time reaches first.
func (b *BOHB) OnResult(trial int, obs Observation) {
	if _, ok := b.configs[trial]; !ok {
		return
	}
	score := schedulers.WorstIfDiverged(obs.Score)
	for i, budget := range b.budgets {
		if !schedulers.Reached(obs.Step, budget) {
			break
		}
		if _, ok := b.results[i][trial]; ok {
			continue
		}
		b.results[i][trial] = score
		if b.tpe != nil && i == b.fitted {
			if b.ended[trial] {
				// The model failed it when it ended without a result.
				b.tpe = nil
			} else {
				b.tpe.OnTrialEnd(trial, TrialEnd{Status: TrialCompleted, Last: &Observation{Step: budget, Score: score}})
			}
		}
	}
}

// OnTrialEnd implements Searcher. A failed trial's results are
// forgotten, as TPE learns nothing from a failed trial.
func (b *BOHB) OnTrialEnd(trial int, end TrialEnd) {
	if _, ok := b.configs[trial]; !ok {
		return
	}
	b.ended[trial] = true
	learnt := false
	if b.tpe != nil && b.fitted >= 0 {
		_, learnt = b.results[b.fitted][trial]
	}
	if end.Status == TrialFailed {
		for _, r := range b.results {
			delete(r, trial)
		}
		if learnt {
			// The model cannot forget what it learnt.
			b.tpe = nil
		}
	}
	if b.tpe != nil && !learnt {
		b.tpe.OnTrialEnd(trial, TrialEnd{Status: TrialFailed})
	}
}

// Replay implements Replayer: the trial counts as running with config.
// Each trial draws from a generator of its own, so nothing is re-drawn.
func (b *BOHB) Replay(trial int, config map[string]any) error {
	b.add(trial, config)
	return nil
}
