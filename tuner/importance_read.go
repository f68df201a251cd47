package tuner

import (
	"context"
	"encoding/json"
	"fmt"

	toml "github.com/pelletier/go-toml/v2"

	"github.com/gotune/gotune/search"
	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/storage"
)

// ScoredTrials reads the trials of exp that ran to their end or were
// stopped, are feasible and reported metric in their last report, scored
// lower is better by mode ("min" or "max"), as search.Importance reads them.
func ScoredTrials(ctx context.Context, s *storage.DB, exp, metric, mode string) ([]search.ScoredConfig, error) {
	trials, err := s.QueryTrials(ctx, exp, storage.TrialQuery{Status: []string{storage.TrialTerminated, storage.TrialStopped}, Feasible: true})
	if err != nil {
		return nil, err
	}
	last := map[int]map[string]float64{}
	err = s.EachReport(ctx, exp, func(trial int, r storage.Report) error {
		last[trial] = r.Metrics
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []search.ScoredConfig
	for _, t := range trials {
		v, ok := last[t.Number][metric]
		if !ok {
			continue
		}
		if mode == "max" {
			v = -v
		}
		out = append(out, search.ScoredConfig{Config: t.Params, Score: v})
	}
	return out, nil
}

// RecordedSpace rebuilds an experiment's search space from the
// configuration recorded with it, whose "space" renders each parameter
// in sweep-file syntax.
func RecordedSpace(config json.RawMessage) (*searchspace.Space, error) {
	var rec struct {
		Space map[string]string `json:"space"`
	}
	if err := json.Unmarshal(config, &rec); err != nil {
		return nil, fmt.Errorf("read the recorded search space: %w", err)
	}
	space := &searchspace.Space{}
	for name, text := range rec.Space {
		var doc map[string]any
		if err := toml.Unmarshal([]byte("v = "+text), &doc); err != nil {
			return nil, fmt.Errorf("recorded parameter %s = %s: %w", name, text, err)
		}
		d, when, err := searchspace.ParseConditional(doc["v"])
		if err != nil {
			return nil, fmt.Errorf("recorded parameter %s = %s: %w", name, text, err)
		}
		if err := space.AddParam(searchspace.Param{Name: name, Domain: d, When: when}); err != nil {
			return nil, err
		}
	}
	return space, space.Check()
}
