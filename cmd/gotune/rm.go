package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/tuner"
)

func rmCommand(dbFlag cli.Flag) *cli.Command {
	return &cli.Command{
		Name:      "rm",
		Usage:     "remove experiments from the database with all their files (checkpoints, logs, trial files), asking first",
		ArgsUsage: "EXPERIMENT...",
		Flags: []cli.Flag{dbFlag,
			&cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "remove without asking"}},
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return badInput(errors.New("rm takes the names of the experiments to remove"))
			}
			path := c.String("db")
			if _, err := os.Stat(path); err != nil {
				return badInput(fmt.Errorf("results database: %w", err))
			}
			db, err := storage.Open(path)
			if err != nil {
				return badInput(err)
			}
			defer db.Close()
			var exps []*storage.Experiment
			for _, name := range c.Args().Slice() {
				e, err := db.Experiment(c.Context, name)
				if err != nil {
					return lookupError(fmt.Errorf("%w in %s", err, path))
				}
				exps = append(exps, e)
			}
			db.ShowLiveStatus(exps...)
			if !c.Bool("yes") {
				ok, err := confirm(c.App.Reader, c.App.ErrWriter, removalQuestion(path, exps))
				if err != nil {
					return err
				}
				if !ok {
					fmt.Fprintln(c.App.ErrWriter, "nothing removed")
					return nil
				}
			}
			for _, e := range exps {
				if err := tuner.RemoveExperiment(c.Context, db, e.Name); err != nil {
					if errors.Is(err, storage.ErrExperimentRunning) {
						return badInput(err)
					}
					return err
				}
				fmt.Fprintf(c.App.Writer, "removed %s\n", e.Name)
			}
			return nil
		},
	}
}

// removalQuestion asks whether to remove exps of the database at path.
func removalQuestion(path string, exps []*storage.Experiment) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Remove from %s, with their checkpoints and files in %s:\n", path, filepath.Join(filepath.Dir(path), "checkpoints"))
	for _, e := range exps {
		fmt.Fprintf(&b, "  %s (%s, %s)\n", e.Name, e.Status, plural(e.Trials, "trial"))
	}
	b.WriteString("[y/N] ")
	return b.String()
}

// confirm asks question on w and reads the answer from r: true for y or
// yes. No answer to read (r at its end) is bad input, since nobody can be
// asked: --yes removes without asking.
func confirm(r io.Reader, w io.Writer, question string) (bool, error) {
	fmt.Fprint(w, question)
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil && (!errors.Is(err, io.EOF) || line == "") {
		if errors.Is(err, io.EOF) || errors.Is(err, fs.ErrClosed) {
			fmt.Fprintln(w)
			return false, badInput(errors.New("no answer on standard input: nothing removed; pass --yes to remove without asking"))
		}
		return false, err
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}
