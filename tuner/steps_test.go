package tuner

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
)

// A script that resumes from its own snapshot, as pytorch/examples' DDP
// tutorial does, killed in the middle of an epoch, records every epoch
// once, whether its reports carry the scheduler's time attribute or only
// their epoch.
func TestSnapshotScriptKilledMidEpochRecordsEveryEpochOnce(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	for _, tc := range []struct {
		name     string
		timeAttr string
		flag     string
	}{
		{"epoch only", "", ""},
		{"time_attr reported", "epoch_done", "--report-time-attr"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			space, err := searchspace.New(searchspace.Param{Name: "flag", Domain: searchspace.Constant{Value: tc.flag}})
			if err != nil {
				t.Fatal(err)
			}
			cfg := testConfig(t, 1)
			cfg.Search.Space = space
			cfg.Scheduler.TimeAttr = tc.timeAttr
			cfg.Trainer = trainer.Config{
				Command: []string{"/usr/bin/python3", "testdata/ddp_snapshot.py", "--snapshot={trial_dir}/snapshot.json", "{flag}"},
				Scaling: trainer.ScalingConfig{NumWorkers: 1, CPUsPerWorker: 0.01},
				Failure: trainer.FailureConfig{MaxFailures: 1},
			}
			if tc.flag == "" {
				cfg.Trainer.Command = cfg.Trainer.Command[:3]
			}
			tu, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			res, err := tu.Fit(context.Background())
			if err != nil {
				t.Fatalf("Fit: %v", err)
			}
			if tr := res.Trials[0]; tr.Status != storage.TrialTerminated {
				t.Fatalf("trial 1 ended %s: %s", tr.Status, tr.Error)
			}
			db := openResults(t, cfg)
			reps, err := db.Reports(context.Background(), cfg.Name, 1)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range reps {
				got = append(got, fmt.Sprintf("%d:%g", r.Iteration, r.Metrics["epoch"]))
			}
			if want := "1:0 2:1 3:2 4:3 5:4 6:5 7:6 8:7"; strings.Join(got, " ") != want {
				t.Errorf("reports (iteration:epoch)\n got %s\nwant %s", strings.Join(got, " "), want)
			}
			evs, err := db.Events(context.Background(), cfg.Name, 1)
			if err != nil {
				t.Fatal(err)
			}
			restarted := false
			for _, e := range evs {
				restarted = restarted || e.Kind == storage.EventRestart
				if e.Kind == storage.EventReportsSkipped {
					t.Errorf("a report was skipped: %s", e.Message)
				}
			}
			if !restarted {
				t.Errorf("the script was not killed and restarted: events %v", evs)
			}
		})
	}
}
