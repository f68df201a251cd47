package tuner

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/trainer"
)

// EventConfigNotice is the kind of an experiment event that says what a
// legal but surprising setting will do (see Config.Notices).
const EventConfigNotice = "config_notice"

// Notices says what legal but surprising combinations of settings will do,
// one sentence each: trials that all run one configuration, parameters a
// command never passes on. None when the settings hold no surprise.
// c is the configuration as given (New's), before its defaults.
func (c Config) Notices() []string {
	notices := append(c.modeNotices(), c.samplesNotices()...)
	return append(notices, c.withDefaults().searchNotices()...)
}

// samplesNotices says, when search.num_samples is not set and the space
// has a parameter that varies outside a grid, that one configuration is
// drawn (as Ray Tune's num_samples defaults to 1): a sweep file that
// forgets it runs one trial.
func (c Config) samplesNotices() []string {
	space := c.Search.Space
	if c.Search.NumSamples != 0 || space == nil || len(c.Search.PointsToEvaluate) > 0 || !varies(space.WithoutGrid()) {
		return nil
	}
	what := "one trial runs"
	if space.GridSize() > 1 {
		what = fmt.Sprintf("each of the %d grid cells runs once", space.GridSize())
	}
	return []string{fmt.Sprintf("search.num_samples is not set, so %s, with one configuration drawn from [search.space]: set num_samples to the number of configurations to try", what)}
}

// searchNotices are Notices' for the search: trials that all run one
// configuration, parameters a command never passes on.
func (c Config) searchNotices() []string {
	n := c.Search.NumSamples
	space := c.Search.Space
	if n < 2 || space == nil || len(c.Search.PointsToEvaluate) > 0 {
		return nil
	}
	if space.Len() == 0 {
		return []string{fmt.Sprintf("[search.space] is empty: the %d trials (search.num_samples) all run the same configuration, each with its own seed", n)}
	}
	if space.GridSize() > 1 && !varies(space.WithoutGrid()) {
		return []string{fmt.Sprintf("search.num_samples = %d with no parameter but the grid's: each of the %d grid cells runs %d times with the same configuration, each with its own seed (num_samples = 1 runs each once)", n, space.GridSize(), n)}
	}
	return c.unpassedNotice()
}

// modeNotices says, of each objective whose name reads like a metric
// to maximise (an accuracy, an AUC, a reward) or to minimise (a loss, an
// error, a perplexity), when its mode, given or the default "min", goes
// the other way: the sweep would look for its worst trials.
func (c Config) modeNotices() []string {
	o := c.Objective
	metrics, modes := o.Metrics, o.Modes
	if len(metrics) == 0 {
		metrics, modes = []string{o.Metric}, []string{o.Mode}
	}
	var notices []string
	for i, metric := range metrics {
		mode := ""
		if i < len(modes) {
			mode = modes[i]
		}
		want := modeByName(metric)
		switch {
		case want == "" || want == mode || mode == "" && want == "min":
		case mode == "":
			notices = append(notices, fmt.Sprintf("objective %s reads like a metric to maximise, but objective.mode defaults to \"min\": the sweep looks for the trials with the lowest %s (set mode = \"max\" if higher is better)", metric, metric))
		default:
			notices = append(notices, fmt.Sprintf("objective %s reads like a metric to %s, but objective.mode is %q: the sweep looks for the trials with the %s %s (set mode = %q if that is not what you want)",
				metric, modeWords[want].verb, mode, modeWords[mode].best, metric, want))
		}
	}
	return notices
}

// modeWords say what a mode does: its verb, and the values it looks for.
var modeWords = map[string]struct{ verb, best string }{
	"min": {"minimise", "lowest"},
	"max": {"maximise", "highest"},
}

// metricWords are the words of a metric's name that say which way it
// goes: "max" for one to maximise, "min" for one to minimise.
var metricWords = map[string]string{
	"acc": "max", "accuracy": "max", "auc": "max", "auroc": "max", "f1": "max", "precision": "max",
	"recall": "max", "reward": "max", "bleu": "max", "iou": "max", "map": "max", "correct": "max",
	"loss": "min", "error": "min", "err": "min", "mse": "min", "rmse": "min", "mae": "min",
	"nll": "min", "perplexity": "min", "ppl": "min", "regret": "min", "wer": "min",
}

// modeByName is the mode that metric's name says, by its words (split at
// anything but letters and digits, in any case): "max" for val_acc, "min"
// for test/loss, "" when no word says or the words disagree.
func modeByName(metric string) string {
	mode := ""
	for _, word := range strings.FieldsFunc(strings.ToLower(metric), func(r rune) bool {
		return !('a' <= r && r <= 'z' || '0' <= r && r <= '9')
	}) {
		switch w := metricWords[word]; {
		case w == "":
		case mode == "" || mode == w:
			mode = w
		default:
			return ""
		}
	}
	return mode
}

// unpassedNotice says, for a command that names some of the parameters
// that vary in none of its placeholders, when its script never mentions
// gotune (GOTUNE_CONFIG, import gotune) and nor do the files of its kind
// beside it, that those parameters' values make no difference to what
// trains. None for a script not found or not text.
func (c Config) unpassedNotice() []string {
	tc := c.Trainer
	if tc.Command == nil {
		return nil
	}
	named := trainer.Placeholders(append(slices.Clone(tc.Command), tc.Workdir))
	var unpassed []string
	for _, p := range c.Search.Space.Params() {
		if takesValues(p) && !slices.Contains(named, p.Name) {
			unpassed = append(unpassed, p.Name)
		}
	}
	script := trainer.CommandFile(tc.Command, tc.PathBase)
	if len(unpassed) == 0 || script == "" || mentionsGotune(script) {
		return nil
	}
	example := fmt.Sprintf("--%s={%s}", unpassed[0], unpassed[0])
	if len(named) == 0 {
		return []string{fmt.Sprintf("trainer.command passes on none of the searched parameters (%s), and %s never mentions GOTUNE_CONFIG: every trial would train the same model. Name them in the command (%q) or read GOTUNE_CONFIG in the script",
			strings.Join(unpassed, ", "), filepath.Base(script), example)}
	}
	return []string{fmt.Sprintf("trainer.command does not pass on %s (it passes %s), and %s never mentions GOTUNE_CONFIG: their values make no difference. Name them in the command (%q) or read GOTUNE_CONFIG in the script",
		strings.Join(unpassed, ", "), strings.Join(named, ", "), filepath.Base(script), example)}
}

// mentionsGotune reports whether script, or a file of its kind beside it
// (a module it may import), mentions gotune in any case, or is no text
// gotune can read: either way it may read its parameters itself.
func mentionsGotune(script string) bool {
	files := []string{script}
	if ext := filepath.Ext(script); ext != "" {
		if beside, _ := filepath.Glob(filepath.Join(filepath.Dir(script), "*"+ext)); len(beside) <= 100 {
			files = beside
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil || len(b) > 1<<20 || bytes.IndexByte(b, 0) >= 0 || bytes.Contains(bytes.ToLower(b), []byte("gotune")) {
			return true
		}
	}
	return false
}

// varies reports whether a parameter of space can take more than one
// value.
func varies(space *searchspace.Space) bool {
	return slices.ContainsFunc(space.Params(), takesValues)
}

// takesValues reports whether p can take more than one value.
func takesValues(p searchspace.Param) bool {
	switch d := p.Domain.(type) {
	case searchspace.Constant:
		return false
	case searchspace.Choice:
		return len(d.Values) >= 2
	}
	return true
}

// tellNotices records each of the config's notices as an experiment event
// and tells a NoticeObserver.
func (t *Tuner) tellNotices(ctx context.Context, expID int64) error {
	for _, msg := range append(t.notices, t.sharedGPUNotice()...) {
		if err := t.announce(ctx, expID, EventConfigNotice, msg, nil); err != nil {
			return err
		}
	}
	return nil
}

// sharedGPUNotice says, for a command whose group's workers must share GPUs
// on the manager's nodes, that PyTorch's NCCL backend refuses that, and
// how to avoid it. None when each worker has a device of its own, and for
// workers in Go, whose collectives need no device of their own.
func (t *Tuner) sharedGPUNotice() []string {
	if t.cfg.Trainer.Command == nil {
		return nil
	}
	req := t.groupRequest(0)
	shared := t.manager.SharedDevices(req)
	if shared == 0 {
		return nil
	}
	return []string{fmt.Sprintf("trainer.scaling.gpus_per_worker = %g with %d workers: %d of a trial's workers share a GPU with another of them, as there are too few GPUs for a device each; PyTorch's NCCL backend refuses two ranks on one device (\"Duplicate GPU detected\"), so such a script fails: set gpus_per_worker = 1, use fewer workers, or the gloo backend", req.Per.GPUs, req.Workers, shared)}
}
