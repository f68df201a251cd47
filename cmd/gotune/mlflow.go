package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gotune/gotune/cmd/gotune/sweepfile"
	"github.com/gotune/gotune/mlflow"
	"github.com/gotune/gotune/trainer"
)

// closeTrackerWithin bounds how long a sweep that ended waits for the
// MLflow server to take what is left; an interrupted one waits less, as
// its user wants it to stop.
const (
	closeTrackerWithin            = 30 * time.Second
	closeInterruptedTrackerWithin = 5 * time.Second
)

// trackerOptions are the background tracker's options; tests shorten them.
var trackerOptions = mlflow.Options{}

func mlflowCommand(dbFlag cli.Flag) *cli.Command {
	return &cli.Command{
		Name:  "mlflow",
		Usage: "send experiments to an MLflow tracking server",
		Subcommands: []*cli.Command{{
			Name:      "sync",
			Usage:     "send what the MLflow server lacks of an experiment (sending again sends nothing twice)",
			ArgsUsage: "EXP",
			Flags: []cli.Flag{dbFlag,
				&cli.StringFlag{Name: "tracking-uri", Usage: "the server's `URL` (default: $MLFLOW_TRACKING_URI)"},
				&cli.StringFlag{Name: "experiment", Usage: "the MLflow experiment's `NAME` (default: $MLFLOW_EXPERIMENT_NAME, else EXP)"},
			},
			Action: mlflowSync,
		}},
	}
}

func mlflowSync(c *cli.Context) error {
	exp, err := oneArg(c, "the experiment")
	if err != nil {
		return err
	}
	s := mlflow.Settings{}.FromEnv()
	if u := c.String("tracking-uri"); u != "" {
		s.TrackingURI = u
	}
	if e := c.String("experiment"); e != "" {
		s.Experiment = e
	}
	if !s.Enabled() {
		return badInput(errors.New("name the MLflow server with --tracking-uri or MLFLOW_TRACKING_URI"))
	}
	if err := mlflow.CheckURI(s.TrackingURI); err != nil {
		return badInput(err)
	}
	path := c.String("db")
	if _, err := os.Stat(path); err != nil {
		return badInput(fmt.Errorf("open results database: %w", err))
	}
	tr, err := mlflow.New(path, exp, s, mlflow.Options{Log: c.App.ErrWriter})
	if err != nil {
		return badInput(err)
	}
	b, err := tr.Sync(c.Context)
	st := tr.Stats()
	if _, cerr := tr.Close(c.Context); err == nil {
		err = cerr
	}
	if err != nil {
		return lookupError(err)
	}
	fmt.Fprintf(c.App.Writer, "mlflow: %s, experiment %q: %d runs created, %d reports sent in %d requests\n",
		tr.URI(), tr.Experiment(), st.Runs, st.Reports, st.Requests)
	if b.Err != nil {
		return &exitError{exitFailed, fmt.Errorf("mlflow: %d reports of %d runs not delivered: %w", b.Reports, b.Runs, b.Err)}
	}
	return nil
}

// startTracking starts logging experiment exp of the database at dbPath to
// the MLflow server that the environment or else the sweep file names; it
// returns nil when neither does.
func startTracking(c *cli.Context, file sweepfile.MLflow, dbPath, exp string) (*mlflow.Tracker, error) {
	s := mlflow.Settings{TrackingURI: file.TrackingURI, Experiment: file.Experiment}.FromEnv()
	if !s.Enabled() {
		return nil, nil
	}
	o := trackerOptions
	o.Log = c.App.ErrWriter
	tr, err := mlflow.New(dbPath, exp, s, o)
	if err != nil {
		return nil, badInput(fmt.Errorf("mlflow: %w", err))
	}
	fmt.Fprintf(c.App.Writer, "logging to MLflow at %s, experiment %q\n", tr.URI(), tr.Experiment())
	tr.Start()
	return tr, nil
}

// finishTracking closes tr once the sweep ended and says what did not
// reach the server and how to send it.
func finishTracking(ctx context.Context, c *cli.Context, tr *mlflow.Tracker, dbPath, exp string) {
	within := closeTrackerWithin
	if ctx.Err() != nil {
		within = closeInterruptedTrackerWithin
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), within)
	defer cancel()
	b, err := tr.Close(ctx)
	if err != nil {
		fmt.Fprintln(c.App.ErrWriter, "warning: mlflow:", err)
	}
	if b.Reports == 0 && b.Runs == 0 {
		return
	}
	why := ""
	if b.Err != nil {
		why = fmt.Sprintf(" (%v)", b.Err)
	}
	fmt.Fprintf(c.App.ErrWriter, "warning: mlflow: %d reports of %d runs were not delivered to %s%s; they are kept in %s: send them later with\n  gotune mlflow sync --db %s --tracking-uri %s --experiment %s %s\n",
		b.Reports, b.Runs, tr.URI(), why, dbPath, shellQuote(dbPath), shellQuote(tr.URI()), shellQuote(tr.Experiment()), shellQuote(exp))
}

// shellQuote quotes s for a POSIX shell when it needs quoting.
func shellQuote(s string) string {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' || r == '/' || r == ':' || r == '=') {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return s
}

// trackerWake wakes the MLflow tracker, once it is set, on every report
// and finished trial; it never blocks the sweep.
type trackerWake struct{ tr **mlflow.Tracker }

func (w trackerWake) OnReport(int, trainer.Result)  { w.wake() }
func (w trackerWake) OnTrialEnd(int, string, error) { w.wake() }

func (w trackerWake) wake() {
	if *w.tr != nil {
		(*w.tr).Wake()
	}
}
