package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gotune/gotune/dashboard"
	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/tuner"
)

// observers tells each of its observers about a sweep's progress, in
// order; those that are tuner.EventObservers hear of restarts too, and
// tuner.NoticeObservers the run's notices.
type observers []tuner.Observer

func (os observers) OnReport(trial int, r trainer.Result) {
	for _, o := range os {
		o.OnReport(trial, r)
	}
}

func (os observers) OnTrialEnd(trial int, status string, err error) {
	for _, o := range os {
		o.OnTrialEnd(trial, status, err)
	}
}

func (os observers) OnNotice(msg string) {
	for _, o := range os {
		if no, ok := o.(tuner.NoticeObserver); ok {
			no.OnNotice(msg)
		}
	}
}

func (os observers) OnEvent(trial int, e trainer.Event) {
	for _, o := range os {
		if eo, ok := o.(tuner.EventObserver); ok {
			eo.OnEvent(trial, e)
		}
	}
}

func (os observers) OnDiskFull(err error) {
	for _, o := range os {
		if do, ok := o.(tuner.DiskObserver); ok {
			do.OnDiskFull(err)
		}
	}
}

// diskNotice says on w (stderr) when the sweep pauses for a full disk and
// when it goes on.
type diskNotice struct{ w io.Writer }

func (diskNotice) OnReport(int, trainer.Result)  {}
func (diskNotice) OnTrialEnd(int, string, error) {}

func (n diskNotice) OnDiskFull(err error) {
	for _, line := range diskFullLines(err) {
		fmt.Fprintln(n.w, line)
	}
}

// diskFullLines is what gotune run says when the disk fills (err) and
// when there is space again (nil).
func diskFullLines(err error) []string {
	if err == nil {
		return []string{"gotune: there is space again: the sweep goes on"}
	}
	return []string{
		"gotune: the disk is full: the sweep is paused, and no trial fails for it",
		"gotune: " + firstLine(err.Error()),
		"gotune: free some space and the sweep goes on by itself; or stop it (Ctrl-C) and run the same command again later: nothing committed is lost",
	}
}

// openReader opens a read-only handle on the sweep's results database for
// the live view and the dashboard, first creating the database (and
// migrating it) if needed, as the sweep would.
func openReader(path string) (*storage.DB, error) {
	db, err := storage.Open(path)
	if err != nil {
		return nil, err
	}
	if err := db.Close(); err != nil {
		return nil, err
	}
	return storage.OpenReadOnly(path)
}

// startDashboard serves the dashboard over ro while the sweep runs, when
// --dashboard asks for it, and returns what stops it.
func startDashboard(ctx context.Context, c *cli.Context, ro *storage.DB, t *tuner.Tuner) (stop func(), err error) {
	addr := c.String("dashboard")
	if addr == "" {
		return func() {}, nil
	}
	l, err := dashboard.Listen(addr)
	if err != nil {
		return nil, badInput(fmt.Errorf("--dashboard: %w", err))
	}
	fmt.Fprintf(c.App.Writer, "dashboard at http://%s/ while the sweep runs (afterwards: gotune dashboard --db %s)\n", l.Addr(), ro.Path())
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := dashboard.Serve(ctx, l, dashboard.New(ro, dashboard.WithUsage(t.Manager().Usage))); err != nil {
			fmt.Fprintln(c.App.ErrWriter, "warning: dashboard:", err)
		}
	}()
	return func() { cancel(); <-done }, nil
}

// sweepSnapshot reads a frame of the live view of t's sweep from ro.
func sweepSnapshot(ctx context.Context, ro *storage.DB, t *tuner.Tuner) liveSnapshot {
	cfg := t.Config()
	usage := t.Manager().Usage()
	s := liveSnapshot{Experiment: cfg.Name, Metric: cfg.Objective.Metric, Mode: cfg.Objective.Mode,
		NumSamples: cfg.Search.NumSamples, Usage: &usage}
	r, err := readLive(ctx, ro, cfg.Name, cfg.Search.NumSamples, time.Now())
	switch {
	case errors.Is(err, storage.ErrNotFound): // the sweep has not created its experiment yet
	case err != nil:
		s.Err = err.Error()
	default:
		s.Counts, s.Top, s.Trials = r.counts, r.top, r.trials
		s.ETA, s.HasETA = estimateETA(r.times)
	}
	return s
}
