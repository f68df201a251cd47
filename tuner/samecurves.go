package tuner

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/storage"
)

// sameCurveTrials is how many trials, the first of the run to complete
// with a curve that moves, watchCurves compares.
const sameCurveTrials = 3

// EventSameCurves is the experiment event recorded when the first trials
// to complete, with different hyperparameters, reported the same values
// of the objective at every step (see watchCurves).
const EventSameCurves = "same_curves"

// curveWatch follows the objective's values of the trials that run until
// watchCurves has compared the first sameCurveTrials that completed.
type curveWatch struct {
	curves   map[int][]float64 // by trial: the objective's value at each report
	complete []int             // the trials compared so far, by number
	configs  []map[string]any  // their configurations
	done     bool
}

// addToCurve adds value, the objective in trial's latest report, to its
// curve while the comparison is to come.
func (l *loop) addToCurve(trial int, value float64) {
	w := &l.curves
	if w.done {
		return
	}
	if w.curves == nil {
		w.curves = map[int][]float64{}
	}
	w.curves[trial] = append(w.curves[trial], value)
}

// watchCurves compares the first sameCurveTrials trials to complete
// (TERMINATED) with at least two different values of the objective: when
// their hyperparameters differ but their curves are the same, value for
// value, the command most likely never passes the hyperparameters on (no
// placeholder in trainer.command, no GOTUNE_CONFIG read) and every trial
// trains the same model with the same seed. The run goes on, but says so,
// as an EventSameCurves, once: a silent sweep of identical trials would
// look like a search that found nothing.
func (l *loop) watchCurves(ctx context.Context, tr *trialRun, status string) {
	w := &l.curves
	if w.done {
		return
	}
	curve := w.curves[tr.number]
	if status != storage.TrialTerminated || len(curve) < 2 || slices.Min(curve) == slices.Max(curve) {
		delete(w.curves, tr.number)
		return
	}
	w.complete = append(w.complete, tr.number)
	w.configs = append(w.configs, tr.config)
	if len(w.complete) < sameCurveTrials {
		return
	}
	w.done = true
	first := w.curves[w.complete[0]]
	for i, n := range w.complete[1:] {
		if !slices.Equal(w.curves[n], first) || slices.ContainsFunc(w.configs[:i+1], func(c map[string]any) bool {
			return reflect.DeepEqual(c, w.configs[i+1])
		}) {
			w.curves, w.configs = nil, nil
			return
		}
	}
	w.curves, w.configs = nil, nil
	trials := slices.Sorted(slices.Values(w.complete))
	l.record(l.t.announce(ctx, l.exp.ID, EventSameCurves, l.sameCurvesMessage(trials, first), map[string]any{"trials": trials}))
}

// sameCurvesMessage says that trials (in order), with different hyperparameters,
// reported the same curve of the objective, and what to check.
func (l *loop) sameCurvesMessage(trials []int, curve []float64) string {
	names := make([]string, len(trials))
	for i, n := range trials {
		names[i] = fmt.Sprint(n)
	}
	values := fmt.Sprintf("%.4g, %.4g", curve[0], curve[1])
	if len(curve) > 2 {
		values += fmt.Sprintf(", … %.4g", curve[len(curve)-1])
	}
	check := "the training may not read them"
	if l.t.cfg.Trainer.Command != nil {
		check = "the command may not pass them on: name them in trainer.command"
		if name := variedParam(l.t.cfg.Search.Space); name != "" {
			check += " ({" + name + "})"
		}
		check += " or read GOTUNE_CONFIG in the script"
	}
	return fmt.Sprintf("trials %s reported the same %s at every step (%s) though their hyperparameters differ: %s",
		strings.Join(names[:len(names)-1], ", ")+" and "+names[len(names)-1], l.t.cfg.Objective.Metric, values, check)
}

// variedParam names the first parameter of space that can take more than
// one value; "" when none can.
func variedParam(space *searchspace.Space) string {
	if space == nil {
		return ""
	}
	if i := slices.IndexFunc(space.Params(), takesValues); i >= 0 {
		return space.Params()[i].Name
	}
	return ""
}
