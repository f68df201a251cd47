package dashboard

import (
	"net/http"
	"slices"
	"strconv"

	"github.com/gotune/gotune/search"
	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/tuner"
)

// Front is an experiment's objectives and where each of its trials
// stands among them, for the plot of its Pareto front.
type Front struct {
	// Objectives are the experiment's objectives: several when it has
	// several (see storage.SetObjectives), else its one metric.
	Objectives []storage.Objective `json:"objectives"`
	Trials     []FrontTrial        `json:"trials"`
}

// FrontTrial is one trial's objectives as its last report gave them.
type FrontTrial struct {
	Number int    `json:"trial_id"`
	Status string `json:"status"`
	// Values holds each objective the last report carries, by metric.
	Values map[string]storage.Number `json:"values"`
	// Feasible is whether the trial met the experiment's constraints;
	// null when it has none or the trial has not reported.
	Feasible *bool `json:"feasible"`
	// OnFront says the trial is on the Pareto front (storage.ParetoFront).
	OnFront bool `json:"on_front"`
}

// GET /api/experiments/{exp}/front: every trial's objectives and whether
// it is on the Pareto front of the experiment's objectives.
func (s *Server) front(r *http.Request, db *storage.DB) (any, error) {
	ctx, name := r.Context(), r.PathValue("exp")
	e, err := db.Experiment(ctx, name)
	if err != nil {
		return nil, err
	}
	f := Front{Objectives: e.Objectives, Trials: []FrontTrial{}}
	if len(f.Objectives) == 0 {
		f.Objectives = []storage.Objective{{Metric: e.Metric, Mode: e.Mode}}
	}
	onFront := map[int]bool{}
	ft, err := db.ParetoFront(ctx, name)
	if err != nil {
		return nil, err
	}
	for _, t := range ft {
		onFront[t.Number] = true
	}
	last := map[int]map[string]float64{}
	if err := db.EachReport(ctx, name, func(trial int, rep storage.Report) error {
		last[trial] = rep.Metrics
		return nil
	}); err != nil {
		return nil, err
	}
	ts, err := db.QueryTrials(ctx, name, storage.TrialQuery{})
	if err != nil {
		return nil, err
	}
	live := db.RunLive(name)
	for _, t := range ts {
		vs := map[string]storage.Number{}
		for _, o := range f.Objectives {
			if v, ok := last[t.Number][o.Metric]; ok {
				vs[o.Metric] = storage.Number(v)
			}
		}
		f.Trials = append(f.Trials, FrontTrial{Number: t.Number, Status: storage.ShownTrialStatus(t.Status, live), Values: vs, Feasible: t.Feasible, OnFront: onFront[t.Number]})
	}
	return f, nil
}

// ImportanceView is the importance of an experiment's parameters to one
// of its objectives, as search.Importance finds it (PED-ANOVA).
type ImportanceView struct {
	Metric   string  `json:"metric"`
	Mode     string  `json:"mode"`
	Quantile float64 `json:"quantile"`
	// Trials is how many finished, feasible trials were scored.
	Trials int                      `json:"trials"`
	Params []search.ParamImportance `json:"params"`
}

// GET /api/experiments/{exp}/importance[?metric=M&quantile=Q]: the
// parameters' importance to objective M (default: the experiment's first),
// the best Q (default 0.1) of its finished trials against all, as
// `gotune importance` reports it. A 409 says there is not enough to judge
// by yet (fewer than two scored trials).
func (s *Server) importance(r *http.Request, db *storage.DB) (any, error) {
	ctx, name := r.Context(), r.PathValue("exp")
	e, err := db.Experiment(ctx, name)
	if err != nil {
		return nil, err
	}
	v := ImportanceView{Metric: e.Metric, Mode: e.Mode, Quantile: 0.1}
	if m := r.FormValue("metric"); m != "" && m != v.Metric {
		i := slices.IndexFunc(e.Objectives, func(o storage.Objective) bool { return o.Metric == m })
		if i < 0 {
			return nil, badRequest("metric %q is not an objective of %q (it has %s)", m, name, e.Metric)
		}
		v.Metric, v.Mode = m, e.Objectives[i].Mode
	}
	if q := r.FormValue("quantile"); q != "" {
		x, err := strconv.ParseFloat(q, 64)
		if err != nil || !(x > 0 && x < 1) {
			return nil, badRequest("quantile must be a number between 0 and 1, got %q", q)
		}
		v.Quantile = x
	}
	space, err := tuner.RecordedSpace(e.Config)
	if err != nil {
		return nil, &apiError{http.StatusConflict, err}
	}
	scored, err := tuner.ScoredTrials(ctx, db, name, v.Metric, v.Mode)
	if err != nil {
		return nil, err
	}
	v.Trials = len(scored)
	if v.Params, err = search.Importance(space, scored, v.Quantile); err != nil {
		return nil, &apiError{http.StatusConflict, err}
	}
	return v, nil
}
