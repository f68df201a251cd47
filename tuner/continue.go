package tuner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/gotune/gotune/storage"
)

// WithRerunFailed makes Fit run the failed trials (ERROR) of the config's
// experiment again, as Ray Tune's resume_errored does: each restarts from
// its latest checkpoint, or from scratch when it has none, and keeps its
// trial number. The experiment may have ended; it goes on to its end again,
// with any trials it has not started yet.
func WithRerunFailed() Option { return func(t *Tuner) { t.rerunFailed = true } }

// Change is one key of a configuration whose value differs from the one
// an experiment was started with.
type Change struct {
	// Key is the key as a sweep file writes it, such as
	// "search.num_samples" or "search.space.lr".
	Key string
	// Old and New are the values in JSON, a search space's parameters in
	// sweep-file syntax ("(none)" for a key one side lacks).
	Old, New string
}

// ExistsError is Fit's error when the database has an experiment of the
// config's name that a run of the config cannot continue: it has ended
// (Status) and the config adds nothing to it, or it was started with a
// different configuration (Changes). It wraps ErrExperimentExists. Other
// ways on: WithRerunFailed (its failed trials), WithRestart or
// RemoveExperiment (its name), or another name.
type ExistsError struct {
	Name, DB string
	// Status is the experiment's status.
	Status string
	// Failed counts its failed (ERROR) trials, which WithRerunFailed
	// would run again.
	Failed int
	// Changes are the keys that differ, in key order; empty when the
	// configuration is the experiment's own.
	Changes []Change
}

func (e *ExistsError) Unwrap() error { return ErrExperimentExists }

func (e *ExistsError) Error() string {
	if len(e.Changes) == 0 {
		return fmt.Sprintf("%v: experiment %q in %s has already ended (%s), and a larger search.num_samples would add trials to it",
			ErrExperimentExists, e.Name, e.DB, e.Status)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%v: experiment %q in %s was started with a different configuration; these keys differ (stored → now):", ErrExperimentExists, e.Name, e.DB)
	for _, c := range e.Changes {
		fmt.Fprintf(&b, "\n  %s: %s → %s", c.Key, c.Old, c.New)
	}
	b.WriteString("\nto continue it, undo these changes (a larger search.num_samples alone extends it)")
	return b.String()
}

// mayContinue decides whether this run may continue exp, the database's
// experiment of the config's name. A run with the experiment's own
// configuration continues an unfinished experiment, and with
// WithRerunFailed an ended one too; a configuration whose only change is a
// larger search.num_samples extends the experiment, finished or not, and
// is recorded as its configuration from now on. Anything else is an
// *ExistsError.
func (t *Tuner) mayContinue(ctx context.Context, exp *storage.Experiment) error {
	changes, err := t.cfg.changes(exp.Config)
	if err != nil {
		return fmt.Errorf("%w: experiment %q in %s: its recorded configuration cannot be read: %v", ErrExperimentExists, t.cfg.Name, t.db.Path(), err)
	}
	refuse := &ExistsError{Name: t.cfg.Name, DB: t.db.Path(), Status: exp.Status, Changes: changes}
	if len(changes) == 0 {
		if storage.ExperimentEnded(exp.Status) && !t.rerunFailed {
			counts, err := t.db.StatusCounts(ctx, exp.Name)
			if err != nil {
				return err
			}
			refuse.Failed = counts[storage.TrialError]
			return refuse
		}
		return nil
	}
	was, errOld := strconv.Atoi(changes[0].Old)
	if len(changes) > 1 || changes[0].Key != "search.num_samples" || errOld != nil || t.cfg.Search.NumSamples < was {
		return refuse
	}
	cfg, err := json.Marshal(t.cfg.record())
	if err != nil {
		return err
	}
	msg := fmt.Sprintf("search.num_samples raised from %d to %d: the sweep runs %d trials", was, t.cfg.Search.NumSamples, t.cfg.Search.Trials())
	return t.db.ExtendExperiment(ctx, exp.ID, cfg, msg)
}

// changes compares c with the configuration recorded with an experiment
// (Config.record) in the parts a run that continues it must keep (see
// identity), key by key.
func (c Config) changes(recorded json.RawMessage) ([]Change, error) {
	var rec recordedConfig
	if err := json.Unmarshal(recorded, &rec); err != nil {
		return nil, err
	}
	now, err := flatKeys(c.identity(c.spaceRecord()))
	if err != nil {
		return nil, err
	}
	then, err := flatKeys(rec.Config.withDefaults().identity(rec.Space))
	if err != nil {
		return nil, err
	}
	// The space's values are in sweep-file syntax already.
	for _, m := range []map[string]string{now, then} {
		for k, v := range m {
			if strings.HasPrefix(k, "search.space.") {
				var text string
				if json.Unmarshal([]byte(v), &text) == nil {
					m[k] = text
				}
			}
		}
	}
	var keys []string
	for k := range now {
		keys = append(keys, k)
	}
	for k := range then {
		if _, ok := now[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var out []Change
	for _, k := range keys {
		a, inNow := now[k]
		b, inThen := then[k]
		if inNow && inThen && a == b {
			continue
		}
		if !inNow {
			a = "(none)"
		}
		if !inThen {
			b = "(none)"
		}
		out = append(out, Change{Key: k, Old: b, New: a})
	}
	return out, nil
}

// flatKeys encodes v in JSON and returns its leaves by dotted key: objects
// are walked, anything else (arrays included) is a leaf in JSON. Empty
// objects and nulls are left out, so that an absent section and an empty
// one compare equal.
func flatKeys(v any) (map[string]string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var tree any
	if err := json.Unmarshal(b, &tree); err != nil {
		return nil, err
	}
	out := map[string]string{}
	var walk func(prefix string, v any) error
	walk = func(prefix string, v any) error {
		switch v := v.(type) {
		case nil:
			return nil
		case map[string]any:
			for k, sub := range v {
				key := k
				if prefix != "" {
					key = prefix + "." + k
				}
				if err := walk(key, sub); err != nil {
					return err
				}
			}
			return nil
		}
		leaf, err := json.Marshal(v)
		out[prefix] = string(leaf)
		return err
	}
	return out, walk("", tree)
}

// WithRestart makes Fit start the config's experiment over: when the
// database has it, finished or not, Fit first removes it and its files
// as RemoveExperiment does.
func WithRestart() Option { return func(t *Tuner) { t.restart = true } }

// RemoveExperiment deletes experiment name from db, every row recorded of
// it, and its trials' folders (checkpoints, logs and files) in the
// "checkpoints" folder beside the database. It holds the experiment's
// locks meanwhile, so it fails with an error wrapping
// storage.ErrExperimentRunning while a run drives the experiment, and with
// storage.ErrNotFound when db has no such experiment.
func RemoveExperiment(ctx context.Context, db *storage.DB, name string) error {
	t := &Tuner{cfg: Config{Name: name}, db: db}
	lock, err := db.LockExperiment(name)
	if err != nil {
		return err
	}
	defer lock.Release()
	for _, dir := range t.experimentFolders() {
		lock, err := storage.LockFolder(dir)
		if err != nil {
			return err
		}
		defer lock.Release()
	}
	if _, err := db.Experiment(ctx, name); err != nil {
		return err
	}
	return t.removeExperiment(ctx)
}

// removeExperiment deletes the config's experiment and its folders, if the
// database has it. Hold its locks.
func (t *Tuner) removeExperiment(ctx context.Context) error {
	err := t.db.DeleteExperiment(ctx, t.cfg.Name)
	if errors.Is(err, storage.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, dir := range t.experimentFolders() {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("remove the files of experiment %q: %w", t.cfg.Name, err)
		}
	}
	removeStaleControl(storage.ControlPath(t.db.Path(), t.cfg.Name))
	return nil
}
