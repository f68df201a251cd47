// Command gotune runs hyperparameter sweeps described in TOML sweep files and
// answers questions about their results.
//
//	gotune run examples/quickstart.toml
//	gotune ls
//	gotune trials quickstart --sort val_acc --limit 5
//	gotune best quickstart --json
//	gotune devices
//	gotune show quickstart 3
//	gotune query "SELECT trial_id, best_metric FROM trials_v"
//	gotune export quickstart --format csv
//	gotune rm quickstart                     # asks first; -y does not
//	gotune dashboard --addr 127.0.0.1:8265
//	gotune run --listen :7070 sweep.toml     # agents may join:
//	gotune agent --head HEAD:7070            # on every other node
//
// Exit codes: 0 success; 1 the sweep ran but every trial failed, a query
// failed, or the run was interrupted or failed otherwise; 2 bad usage or
// bad input (README.md lists every case).
package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime/debug"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/workers"
)

// Exit codes of the CLI contract.
const (
	exitFailed   = 1
	exitBadInput = 2
)

// exitError carries the exit code an error should end the process with.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// badInput marks err as the user's input being at fault (exit code 2).
func badInput(err error) error { return &exitError{exitBadInput, err} }

func main() {
	workers.WardenMain() // when started as the warden of workers, runs it and exits
	trainer.WorkerMain() // when started as a process worker, runs it and exits
	subreap()
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// subreap has the processes of workers whose parent exits adopted by gotune
// rather than by init, so that they are reaped. gotune starts child
// processes only through package workers, as workers.Subreap requires.
func subreap() {
	if err := workers.Subreap(); err != nil {
		fmt.Fprintf(os.Stderr, "gotune: warning: %v: processes a worker leaves behind go to init\n", err)
	}
}

func run(args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	err := app.Run(flagsFirst(app, args))
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "Error:", err)
	var ee *exitError
	var ce cli.ExitCoder
	switch {
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ce):
		// The command line library answers an unknown command so.
		return exitBadInput
	case errors.Is(err, storage.ErrReadOnlyFolder), errors.Is(err, fs.ErrNotExist):
		// A path that cannot be used: the user must choose another one, or
		// create the folder or make it writable.
		return exitBadInput
	}
	return exitFailed
}

func newApp(stdout, stderr io.Writer) *cli.App {
	dbFlag := &cli.StringFlag{Name: "db", Value: "gotune.db", Usage: "the results database `FILE`"}
	usageError := func(_ *cli.Context, err error, _ bool) error { return badInput(err) }
	app := &cli.App{
		Name:            "gotune",
		Usage:           "hyperparameter tuning with distributed training, results in SQLite",
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		OnUsageError:    usageError,
		ExitErrHandler:  func(*cli.Context, error) {}, // main decides the exit code
		Version:         version(),
		// Without a command; with an argument that names none.
		Action: func(c *cli.Context) error {
			switch {
			case c.NArg() == 0:
				return cli.ShowAppHelp(c)
			case c.Args().First() == "help" && c.NArg() == 1:
				return cli.ShowAppHelp(c)
			case c.Args().First() == "help" && c.App.Command(c.Args().Get(1)) != nil:
				return cli.ShowCommandHelp(c, c.Args().Get(1))
			}
			name := c.Args().First()
			if name == "help" {
				name = c.Args().Get(1)
			}
			var names []string
			for _, cmd := range c.App.VisibleCommands() {
				names = append(names, cmd.Name)
			}
			return badInput(fmt.Errorf("%q is not a gotune command; the commands are %s (gotune --help says what each does)",
				name, strings.Join(names, ", ")))
		},
		Commands: []*cli.Command{
			runCommand(),
			lsCommand(dbFlag),
			trialsCommand(dbFlag),
			bestCommand(dbFlag),
			importanceCommand(dbFlag),
			devicesCommand(),
			showCommand(dbFlag),
			stackCommand(dbFlag),
			queryCommand(dbFlag),
			exportCommand(dbFlag),
			rmCommand(dbFlag),
			dashboardCommand(dbFlag),
			agentCommand(),
			mlflowCommand(dbFlag),
		},
	}
	for _, c := range app.Commands {
		c.OnUsageError = usageError
	}
	return app
}

// version is gotune's version as the build records it: the module's
// version, or "devel", and the commit it was built from when known.
func version() string {
	v := "devel"
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if m := info.Main.Version; m != "" && m != "(devel)" {
		v = m
	}
	var commit, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			commit = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = ", modified"
			}
		}
	}
	if len(commit) > 12 {
		commit = commit[:12]
	}
	if commit != "" {
		v += " (commit " + commit + dirty + ")"
	}
	return v + " " + info.GoVersion
}

// oneArg returns the single positional argument a command takes.
func oneArg(c *cli.Context, what string) (string, error) {
	if c.NArg() != 1 {
		return "", badInput(fmt.Errorf("%s takes one argument, %s; got %d", c.Command.Name, what, c.NArg()))
	}
	return c.Args().First(), nil
}
