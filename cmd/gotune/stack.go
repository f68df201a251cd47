package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gotune/gotune/tuner"
)

func stackCommand(dbFlag cli.Flag) *cli.Command {
	return &cli.Command{
		Name:  "stack",
		Usage: "print the current stack of every worker of a running trial",
		Description: "Asks the run of the sweep, through its control socket beside the database, on this machine.\n" +
			"Go workers: every goroutine. Python workers: every thread's Python stack (dumped by gotune.py,\n" +
			"or read by gdb when the interpreter has its gdb extension). Other commands: gdb's native\n" +
			"backtrace, or without gdb each thread's state and wait channel from /proc.",
		ArgsUsage: "EXPERIMENT TRIAL",
		Flags: []cli.Flag{dbFlag,
			&cli.IntFlag{Name: "rank", Value: -1, Usage: "only the worker of this `RANK`"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object"}},
		Action: func(c *cli.Context) error {
			name, number, err := trialArgs(c)
			if err != nil {
				return err
			}
			db, err := openResults(c.String("db"))
			if err != nil {
				return err
			}
			_, err = db.Trial(c.Context, name, number)
			db.Close()
			if err != nil {
				return lookupError(err)
			}
			ctx, cancel := context.WithTimeout(c.Context, 30*time.Second)
			defer cancel()
			reply, err := tuner.TrialStacks(ctx, c.String("db"), name, number, c.Int("rank"))
			if errors.Is(err, tuner.ErrNoSuchRank) {
				return badInput(err)
			}
			if errors.Is(err, tuner.ErrNotLive) {
				return fmt.Errorf("%w (run gotune stack on the machine that runs the sweep)", err)
			}
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return writeJSON(c.App.Writer, reply)
			}
			printStacks(c.App.Writer, reply)
			return nil
		},
	}
}

// printStacks writes each worker's stack under a header line that says
// where it runs and how the stack was taken.
func printStacks(w io.Writer, r *tuner.StacksReply) {
	for i, s := range r.Stacks {
		if i > 0 {
			fmt.Fprintln(w)
		}
		where := s.Node
		if where == "" {
			where = "this node"
		}
		pid := "in the tuner's process"
		if s.PID != 0 {
			pid = fmt.Sprintf("pid %d", s.PID)
		}
		if s.Error != "" {
			fmt.Fprintf(w, "=== trial %d, rank %d (%s): no stack: %s\n", r.Trial, s.Rank, where, s.Error)
			continue
		}
		fmt.Fprintf(w, "=== trial %d, rank %d (%s, %s), by %s\n%s", r.Trial, s.Rank, where, pid, s.Method, s.Text)
	}
}
