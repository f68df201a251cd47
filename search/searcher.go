package search

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"

	"github.com/gotune/gotune/searchspace"
)

// Searcher chooses the configuration of each new trial and learns from the
// trials' results. The built-in searchers (random, grid, TPE, BOHB,
// NSGA-II, CMA-ES and the wrappers Points and Limiter) implement it;
// implement it yourself to plug your own search into the tuner with
// tuner.WithSearcher.
//
// The tuner calls a Searcher from one goroutine, never concurrently, so an
// implementation needs no locking. For each trial the calls come in this
// order: one Suggest that returns a configuration; then an OnResult for each
// of the trial's reports that carries the objective; then exactly one
// OnTrialEnd. Calls for different trials interleave when trials run side by
// side. When the experiment is interrupted (Fit's context ends), running
// trials get no OnTrialEnd.
//
// Scores are always lower-is-better: the tuner negates the metric of a
// "max" objective before a searcher sees it.
//
// Pending trials: a trial is pending (running, or paused by the
// scheduler) from the Suggest that returned its configuration, or the
// Replay that restored it, until its OnTrialEnd. With room for several
// trials at once (max_concurrent, or the resources), the tuner asks for
// the next configuration while earlier ones are pending, a batch at a
// time when trials start together. A searcher sees its pending trials
// by keeping the configurations its Suggest returned (and Replay was
// told) and dropping each at OnTrialEnd; it should let them shape the
// next suggestion, or it will suggest the same region, even the same
// configuration, for every slot. TPE counts them as if they had the
// worst score (Optuna's constant liar), and in a finite space bars their
// configurations instead (see TPE); return ErrWait to suggest only
// after trials end, or bound the pending trials with a Limiter.
//
// When an interrupted experiment is resumed, a new searcher is told the
// recorded trials first (see Replayer, which also says what a searcher
// must do to continue as if it had never been interrupted).
//
// A Searcher decides; it does no I/O of the tuner's. That keeps it testable
// by feeding it events, as the built-in searchers' tests do.
type Searcher interface {
	// Suggest returns the configuration of a new trial, numbered from 1 in
	// the order trials start. The map holds a value for every parameter the
	// training function reads (float64, int64, string or bool); the tuner
	// records it as given and does not modify it.
	//
	// Return ErrWait to start no trial now: the tuner asks again, with the
	// same trial number, after the next result or trial end, and fails the
	// experiment if no trial is running to produce one. Return ErrExhausted
	// when the search has no more configurations: the tuner starts no more
	// trials and ends the experiment once the running ones end. Any other
	// error aborts the experiment.
	Suggest(trial int) (map[string]any, error)

	// OnResult is told each intermediate result of a running trial that
	// carries the objective, in report order, after the result is committed
	// to the database and before the scheduler decides on it.
	OnResult(trial int, obs Observation)

	// OnTrialEnd is told how a trial ended. A trial the scheduler stopped
	// early ends with TrialStopped and its last result, which a searcher
	// should count as the trial's value, as Optuna counts pruned trials.
	OnTrialEnd(trial int, end TrialEnd)
}

// ErrWait is returned by Suggest to start no trial until a running trial
// reports or ends.
var ErrWait = errors.New("searcher: wait for a running trial")

// ErrExhausted is returned by Suggest when the search has no more
// configurations to try.
var ErrExhausted = errors.New("searcher: no more configurations")

// Observation is one result of a trial, as a searcher sees it.
type Observation struct {
	// Step is the trial's progress when it reported: the value of the
	// scheduler's time attribute (training_iteration, the number of reports
	// so far, by default).
	Step float64
	// Score is the objective, lower is better.
	Score float64
	// Metrics is everything the trial reported. It must not be modified.
	Metrics map[string]float64
}

// TrialEnd is how a trial ended, as a searcher sees it.
type TrialEnd struct {
	// Status says whether the trial ran to its end, was stopped early by
	// the scheduler, or failed.
	Status EndStatus
	// Last is the trial's last result that carried the objective, or nil
	// when it reported none.
	Last *Observation
}

// EndStatus is how a trial ended.
type EndStatus int

const (
	// TrialCompleted means the training function returned without error.
	TrialCompleted EndStatus = iota + 1
	// TrialStopped means the scheduler stopped the trial early. Its last
	// result counts as its value.
	TrialStopped
	// TrialFailed means the training function failed. Searchers should not
	// learn from its scores, which may be partial.
	TrialFailed
)

func (s EndStatus) String() string {
	switch s {
	case TrialCompleted:
		return "completed"
	case TrialStopped:
		return "stopped"
	case TrialFailed:
		return "failed"
	}
	return "unknown"
}

// value returns the score a searcher learns from a trial's end: the last
// score of a completed or stopped trial, nothing for a failed one.
func (e TrialEnd) value() (float64, bool) {
	if e.Status == TrialFailed || e.Last == nil {
		return 0, false
	}
	return e.Last.Score, true
}

// RandomSearch samples every configuration independently from the space.
// The same seed yields the same sequence of configurations. It learns
// nothing from results. Grid parameters are drawn like choices; wrap it in
// a GridSearch to expand them instead.
//
// In a finite space (every parameter discrete) it suggests no
// configuration twice, unless made with RandomAllowRepeats: a draw that
// was suggested before is replaced by one drawn from those not yet
// suggested, and once every configuration was suggested Suggest returns
// ErrExhausted.
type RandomSearch struct {
	space *searchspace.Space
	rng   *rand.Rand
	// suggested holds the configurations suggested so far, in a finite
	// space that allows no repeats; nil otherwise.
	suggested *configSet
}

var _ Searcher = (*RandomSearch)(nil)

// RandomOption customises a RandomSearch.
type RandomOption func(*RandomSearch)

// RandomAllowRepeats lets a random search suggest a configuration of a
// finite space again, for a noisy objective where a repeat measures
// something new.
func RandomAllowRepeats() RandomOption { return func(s *RandomSearch) { s.suggested = nil } }

// NewRandomSearch returns a random searcher over space seeded with seed.
func NewRandomSearch(space *searchspace.Space, seed int64, opts ...RandomOption) *RandomSearch {
	s := &RandomSearch{space: space, rng: newRand(seed), suggested: newConfigSet(space)}
	for _, o := range opts {
		o(s)
	}
	return s
}

// newRand is the generator a random search draws its whole sequence from.
func newRand(seed int64) *rand.Rand { return rand.New(rand.NewPCG(uint64(seed), 0x7e57)) }

// TrialRand returns a generator for trial's draws under seed: a ChaCha8
// stream keyed by both, so that different trials (and seeds) draw
// independent streams and trial n draws the same values however many
// suggestions came before it. TPE draws from it; a custom searcher that
// draws each suggestion from TrialRand(seed, trial) needs nothing
// re-drawn to resume exactly (see Replayer).
func TrialRand(seed int64, trial int) *rand.Rand {
	var key [32]byte
	copy(key[:16], "gotune trial rng")
	binary.LittleEndian.PutUint64(key[16:], uint64(seed))
	binary.LittleEndian.PutUint64(key[24:], uint64(trial))
	return rand.New(rand.NewChaCha8(key))
}

// Suggest implements Searcher.
func (s *RandomSearch) Suggest(int) (map[string]any, error) {
	cfg := s.space.Sample(s.rng)
	if s.suggested == nil {
		return cfg, nil
	}
	if s.suggested.has(cfg) {
		var ok bool
		if cfg, ok = s.suggested.unseen(s.rng); !ok {
			return nil, ErrExhausted
		}
	}
	s.suggested.add(cfg)
	return cfg, nil
}

// OnResult implements Searcher; random search learns nothing.
func (s *RandomSearch) OnResult(int, Observation) {}

// OnTrialEnd implements Searcher; random search learns nothing.
func (s *RandomSearch) OnTrialEnd(int, TrialEnd) {}
