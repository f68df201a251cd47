package tuner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gotune/gotune/search"
	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
)

// eventWarmStart is the experiment event that records which trials of
// which experiment the searcher learnt from; its data is a warmStartData.
const eventWarmStart = "warm_start"

// warmStartData is the data of a warm_start event.
type warmStartData struct {
	Experiment string `json:"experiment"`
	// Trials are the numbers of the trials the searcher learnt from.
	Trials []int `json:"trials"`
	// Skipped counts the trials left out, by reason.
	Skipped map[string]int `json:"skipped,omitempty"`
	// Ignored names the parameters of those trials this space lacks.
	Ignored []string `json:"ignored,omitempty"`
}

// checkWarmStart fails when [search] warm_start names an experiment the
// database does not have, before a new experiment is created.
func (t *Tuner) checkWarmStart(ctx context.Context) error {
	name := t.cfg.Search.WarmStart
	if name == "" {
		return nil
	}
	if _, err := t.db.Experiment(ctx, name); errors.Is(err, storage.ErrNotFound) {
		return fieldErr("search.warm_start", "%s has no experiment %q to learn from", t.db.Path(), name)
	} else if err != nil {
		return err
	}
	return nil
}

// warmStart feeds the searcher the trials of the experiment [search]
// warm_start names. A new experiment takes that experiment's finished
// trials whose configurations fit this space and records which in a
// warm_start event, telling the observer what it learnt from and what it
// skipped; a resumed one (resumed set) takes the trials the event names,
// so that its searcher learns what the first run's did.
func (t *Tuner) warmStart(ctx context.Context, exp *storage.Experiment, resumed bool) error {
	name := t.cfg.Search.WarmStart
	if name == "" {
		return nil
	}
	var recorded *warmStartData
	if resumed {
		events, err := t.db.Events(ctx, t.cfg.Name, 0)
		if err != nil {
			return err
		}
		for _, ev := range events {
			if ev.Kind == eventWarmStart && ev.Trial == 0 {
				recorded = &warmStartData{}
				if err := json.Unmarshal(ev.Data, recorded); err != nil {
					return fmt.Errorf("warm start: read the recorded %s event: %w", eventWarmStart, err)
				}
			}
		}
	}
	priors, data, err := t.priorTrials(ctx, name)
	if err != nil {
		return err
	}
	if recorded != nil {
		byNumber := map[int]search.PriorTrial{}
		for _, p := range priors {
			byNumber[p.Number] = p
		}
		priors = priors[:0]
		for _, n := range recorded.Trials {
			p, ok := byNumber[n]
			if !ok {
				return fmt.Errorf("warm start: experiment %q no longer has trial %d as the first run learnt from it", name, n)
			}
			priors = append(priors, p)
		}
	} else {
		msg := data.summary()
		if err := t.announce(ctx, exp.ID, eventWarmStart, msg, data); err != nil {
			return err
		}
	}
	if err := search.WarmStart(t.searcher, priors); err != nil {
		return &ConfigError{Key: "search.warm_start", Err: err}
	}
	return nil
}

// NoticeObserver is an Observer that also wants to hear the run's
// notices, such as which trials of another experiment the searcher
// learnt from. Its method is called from the goroutine that runs Fit.
type NoticeObserver interface {
	Observer
	OnNotice(msg string)
}

// notify tells msg to the observer, when it is a NoticeObserver.
func (t *Tuner) notify(msg string) {
	if o, ok := t.observer.(NoticeObserver); ok {
		o.OnNotice(msg)
	}
}

// announce records msg as an event of kind of experiment expID, with
// data, and tells it to the observer (notify).
func (t *Tuner) announce(ctx context.Context, expID int64, kind, msg string, data any) error {
	if err := t.db.AddEvent(ctx, expID, 0, kind, msg, data); err != nil {
		return err
	}
	t.notify(msg)
	return nil
}

// priorTrials reads the trials of experiment name that the searcher can
// learn from, scored by this experiment's objective, and says which it
// skipped and why.
func (t *Tuner) priorTrials(ctx context.Context, name string) ([]search.PriorTrial, *warmStartData, error) {
	trials, err := t.db.Trials(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	last := map[int]*search.Observation{}
	err = t.db.EachReport(ctx, name, func(trial int, r storage.Report) error {
		_, score, ok := t.score(r.Metrics)
		if !ok {
			return nil
		}
		step, _ := t.progress(trainer.Result{Iteration: r.Iteration, Metrics: r.Metrics})
		last[trial] = &search.Observation{Step: step, Score: score, Metrics: r.Metrics}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	space := t.cfg.Search.Space
	data := &warmStartData{Experiment: name, Trials: []int{}, Skipped: map[string]int{}}
	ignored := map[string]bool{}
	var out []search.PriorTrial
	for _, tr := range trials {
		var status search.EndStatus
		switch tr.Status {
		case storage.TrialTerminated:
			status = search.TrialCompleted
		case storage.TrialStopped:
			status = search.TrialStopped
		case storage.TrialError:
			data.Skipped["failed"]++
			continue
		default:
			data.Skipped["unfinished"]++
			continue
		}
		obs := last[tr.Number]
		if obs == nil {
			data.Skipped["that never reported "+t.cfg.Objective.Metric]++
			continue
		}
		cfg, reason := fitConfig(space, tr.Params)
		if reason != "" {
			data.Skipped[reason]++
			continue
		}
		for k := range tr.Params {
			if space.Domain(k) == nil {
				ignored[k] = true
			}
		}
		out = append(out, search.PriorTrial{Number: tr.Number, Config: cfg, End: search.TrialEnd{Status: status, Last: obs}})
		data.Trials = append(data.Trials, tr.Number)
	}
	data.Ignored = sortedKeys(ignored)
	return out, data, nil
}

// fitConfig gives a recorded configuration the types of space's domains,
// or says why it does not fit the space: a parameter it lacks or a value
// outside its domain.
//
// A conditional parameter is present where its condition holds in the
// configuration; a value recorded where it does not is dropped.
func fitConfig(space *searchspace.Space, params map[string]any) (map[string]any, string) {
	cfg := map[string]any{}
	for _, p := range space.Params() {
		v, ok := params[p.Name]
		if !ok {
			continue
		}
		v, err := searchspace.Member(p.Domain, v)
		if err != nil {
			return nil, fmt.Sprintf("%s outside %s", p.Name, p.Domain)
		}
		cfg[p.Name] = v
	}
	space.Prune(cfg)
	for _, p := range space.Params() {
		if _, ok := cfg[p.Name]; !ok && (p.When == nil || p.When.Holds(cfg)) {
			return nil, "without a value for " + p.Name
		}
	}
	return cfg, ""
}

// summary says in one line what the searcher learnt from and what it skipped.
func (d *warmStartData) summary() string {
	total := len(d.Trials)
	for _, n := range d.Skipped {
		total += n
	}
	var b strings.Builder
	fmt.Fprintf(&b, "warm start: the searcher learnt from %d of the %d trials of %q", len(d.Trials), total, d.Experiment)
	if len(d.Skipped) > 0 {
		reasons := sortedKeys(d.Skipped)
		parts := make([]string, len(reasons))
		for i, r := range reasons {
			parts[i] = fmt.Sprintf("%d %s", d.Skipped[r], r)
		}
		b.WriteString("; skipped " + strings.Join(parts, ", "))
	}
	if len(d.Ignored) > 0 {
		b.WriteString("; ignored their parameters this space lacks: " + strings.Join(d.Ignored, ", "))
	}
	return b.String()
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
