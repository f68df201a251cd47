package tuner

import (
	"context"
	"strings"
	"testing"

	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/storage"
)

// Settings that make every trial (or every grid cell's trials) run one
// configuration are said, and only those.
func TestConfigNotices(t *testing.T) {
	lr := searchspace.Param{Name: "lr", Domain: searchspace.Uniform{Low: 0, High: 1}}
	grid := searchspace.Param{Name: "batch", Domain: searchspace.Grid{Values: []any{int64(32), int64(64)}}}
	epochs := searchspace.Param{Name: "epochs", Domain: searchspace.Constant{Value: int64(3)}}
	one := searchspace.Param{Name: "opt", Domain: searchspace.Choice{Values: []any{"sgd"}}}
	for _, tc := range []struct {
		name    string
		samples int
		params  []searchspace.Param
		want    string
	}{
		{"empty space", 4, nil, "[search.space] is empty: the 4 trials"},
		{"empty space, one sample", 1, nil, ""},
		{"grid alone", 4, []searchspace.Param{grid}, "each of the 2 grid cells runs 4 times"},
		{"grid and constants", 2, []searchspace.Param{grid, epochs, one}, "each of the 2 grid cells runs 2 times"},
		{"grid once", 1, []searchspace.Param{grid}, ""},
		{"grid and a random parameter", 4, []searchspace.Param{grid, lr}, ""},
		{"random parameter", 4, []searchspace.Param{lr}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			space, err := searchspace.New(tc.params...)
			if err != nil {
				t.Fatal(err)
			}
			cfg := testConfig(t, tc.samples)
			cfg.Search.Space = space
			got := strings.Join(cfg.Notices(), "\n")
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("notices %q, want one that says %q", got, tc.want)
			}
		})
	}
}

// A run records its notices as experiment events.
func TestFitRecordsConfigNotices(t *testing.T) {
	cfg := testConfig(t, 2)
	cfg.Search.Space = &searchspace.Space{}
	tu, err := New(cfg, WithTrainFunc(quadratic))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tu.Fit(context.Background()); err != nil {
		t.Fatal(err)
	}
	db, err := storage.OpenReadOnly(cfg.Storage)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	evs, err := db.Events(context.Background(), cfg.Name, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Kind == EventConfigNotice && strings.Contains(e.Message, "[search.space] is empty") {
			return
		}
	}
	t.Errorf("no config_notice event among %v", evs)
}
