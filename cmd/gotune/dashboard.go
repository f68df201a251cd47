package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/gotune/gotune/dashboard"
)

func dashboardCommand(dbFlag cli.Flag) *cli.Command {
	return &cli.Command{
		Name:  "dashboard",
		Usage: "serve the web UI (and Prometheus metrics at /metrics) over a results database until interrupted",
		Flags: []cli.Flag{dbFlag, addrFlag("addr", dashboard.DefaultAddr)},
		Action: func(c *cli.Context) error {
			if c.NArg() != 0 {
				return badInput(fmt.Errorf("dashboard takes no arguments; got %d", c.NArg()))
			}
			db, err := openResults(c.String("db"))
			if err != nil {
				return err
			}
			defer db.Close()
			l, err := dashboard.Listen(c.String("addr"))
			if err != nil {
				return badInput(err)
			}
			fmt.Fprintf(c.App.Writer, "dashboard of %s at http://%s/ (Ctrl-C to stop)\n", db.Path(), l.Addr())
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			return dashboard.Serve(ctx, l, dashboard.New(db))
		},
	}
}

// addrFlag is a dashboard address flag.
func addrFlag(name, value string) *cli.StringFlag {
	return &cli.StringFlag{Name: name, Value: value,
		Usage: "serve the dashboard at `HOST:PORT`; without a host, on 127.0.0.1 only (0.0.0.0:PORT serves every interface)"}
}
