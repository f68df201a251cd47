package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/gotune/gotune/search"
	"github.com/gotune/gotune/storage"
)

func TestCustomSearcherTunes(t *testing.T) {
	res, err := run(context.Background(), filepath.Join(t.TempDir(), "gotune.db"), 30)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(res.Trials); n < 5 || n > 30 {
		t.Errorf("%d trials, want between the 4 random ones and the cap of 30", n)
	}
	// The noise on y has variance 0.01, the floor of the validation loss.
	if res.Best == nil || *res.Best.BestMetric > 0.02 {
		t.Errorf("best trial %+v, want a loss below 0.02", res.Best)
	}
	for _, tr := range res.Trials {
		if tr.Status == storage.TrialRunning {
			t.Errorf("trial %d still RUNNING after Fit", tr.Number)
		}
	}
}

// TestCustomSearcherIsDeterministic runs the example twice: the same
// trials, with the same configurations and losses.
func TestCustomSearcherIsDeterministic(t *testing.T) {
	var runs [2][]string
	for i := range runs {
		res, err := run(context.Background(), filepath.Join(t.TempDir(), "gotune.db"), 30)
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range res.Trials {
			row := fmt.Sprintf("%d %s %v", tr.Number, tr.Status, tr.Params)
			if tr.BestMetric != nil {
				row += fmt.Sprint(" ", *tr.BestMetric)
			}
			runs[i] = append(runs[i], row)
		}
	}
	if !reflect.DeepEqual(runs[0], runs[1]) {
		t.Errorf("two runs differ:\n%v\n%v", runs[0], runs[1])
	}
}

// TestLocalSearchResumes replays the first k trials of a search with two
// trials at a time into a new LocalSearch, as a resumed experiment does
// (Replay where the searcher has it, else Suggest with its answer
// discarded; then each ended trial's result and end), for every k, and
// checks that it goes on with the very configurations the undisturbed
// search suggests.
func TestLocalSearchResumes(t *testing.T) {
	loss := func(cfg map[string]any) float64 {
		return math.Pow(math.Log10(cfg["lr"].(float64))+1.5, 2) + math.Pow(cfg["momentum"].(float64)-0.8, 2)
	}
	end := func(s *LocalSearch, trial int, cfg map[string]any) {
		obs := search.Observation{Step: 15, Score: loss(cfg)}
		s.OnResult(trial, obs)
		s.OnTrialEnd(trial, search.TrialEnd{Status: search.TrialCompleted, Last: &obs})
	}
	// play suggests trial n, then ends trial n-1, until the search ends or
	// n reaches 60, and returns the configurations by trial.
	play := func(s *LocalSearch, n int, cfgs map[int]map[string]any) map[int]map[string]any {
		for ; n <= 60; n++ {
			cfg, err := s.Suggest(n)
			if errors.Is(err, search.ErrExhausted) {
				break
			}
			if err != nil {
				t.Fatalf("suggest trial %d: %v", n, err)
			}
			cfgs[n] = cfg
			end(s, n-1, cfgs[n-1])
		}
		return cfgs
	}
	s := NewLocalSearch(1, 4)
	cfg, err := s.Suggest(1)
	if err != nil {
		t.Fatal(err)
	}
	want := play(s, 2, map[int]map[string]any{1: cfg})
	if len(want) < 10 {
		t.Fatalf("the search ended after %d trials, want a longer one to interrupt", len(want))
	}
	for k := 1; k < len(want); k++ {
		resumed := NewLocalSearch(1, 4)
		got := map[int]map[string]any{}
		for i := 1; i <= k; i++ {
			got[i] = want[i]
			if r, ok := any(resumed).(search.Replayer); ok {
				err = r.Replay(i, want[i])
			} else {
				_, err = resumed.Suggest(i)
			}
			if err != nil {
				t.Fatalf("replay trial %d: %v", i, err)
			}
			if i < k { // trial k was running when the search was interrupted
				end(resumed, i, want[i])
			}
		}
		play(resumed, k+1, got)
		if !reflect.DeepEqual(got, want) {
			for i := k + 1; i <= max(len(got), len(want)); i++ {
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Errorf("resumed after trial %d: trial %d is %v, %v undisturbed", k, i, got[i], want[i])
					break
				}
			}
		}
	}
}
