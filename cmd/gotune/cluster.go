package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gotune/gotune/cluster"
	"github.com/gotune/gotune/cmd/gotune/sweepfile"
	"github.com/gotune/gotune/tuner"
	"github.com/gotune/gotune/workers"
)

// tokenFlag is the cluster's shared secret, for the head and its agents.
func tokenFlag() cli.Flag {
	return &cli.StringFlag{Name: "token", EnvVars: []string{"GOTUNE_TOKEN"},
		Usage: "the cluster's shared secret `T`; better passed in $GOTUNE_TOKEN than on the command line, where other users can see it"}
}

// tlsFlags are the PEM files of the cluster's TLS.
func tlsFlags(role string) []cli.Flag {
	if role == "head" {
		return []cli.Flag{
			&cli.StringFlag{Name: "cert", Usage: "serve agents over TLS with this certificate `FILE` (PEM)"},
			&cli.StringFlag{Name: "key", Usage: "the certificate's private key `FILE` (PEM)"},
			&cli.StringFlag{Name: "ca", Usage: "require agents to present a certificate signed by this CA `FILE` (PEM): mutual TLS"},
		}
	}
	return []cli.Flag{
		&cli.StringFlag{Name: "ca", Usage: "connect over TLS, trusting the head's certificate if this CA `FILE` (PEM) signed it"},
		&cli.BoolFlag{Name: "tls", Usage: "connect over TLS, trusting the system's CAs (implied by --ca and --cert)"},
		&cli.StringFlag{Name: "cert", Usage: "present this certificate `FILE` (PEM) to a head that requires one"},
		&cli.StringFlag{Name: "key", Usage: "the certificate's private key `FILE` (PEM)"},
	}
}

// listenFlags make `gotune run` a head that agents join.
func listenFlags() []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "listen", Usage: "let agents (gotune agent) join the sweep with their nodes at `ADDR` (host:port; port 0 picks one)"},
		tokenFlag(),
		&cli.IntFlag{Name: "agents", Usage: "with --listen: wait for `N` agents to join before the sweep starts"},
		&cli.DurationFlag{Name: "agent-timeout", Value: cluster.DefaultAgentTimeout, Usage: "with --listen: declare an agent's node lost after it has been silent this long"},
		&cli.StringFlag{Name: "host", Usage: "with --listen: the address of this node that agents' workers reach it at (default: the --listen host, else the address agents reach it at)"},
		&cli.BoolFlag{Name: "head-workers", Value: true, Usage: "with --listen: run workers on this node too; --head-workers=false leaves them all to the agents (then give --agents)"},
	}, tlsFlags("head")...)
}

// startCluster starts what runs the sweep's groups beyond this process:
// the Slurm jobs of [cluster] launcher = "slurm" (see startSlurm), or the
// head --listen asks for (see listen). It returns the context the sweep
// runs under, the tuner's options and the function that stops it all.
func startCluster(ctx context.Context, c *cli.Context, sweep sweepfile.Sweep, cfg tuner.Config) (context.Context, []tuner.Option, func(), error) {
	if sweep.Cluster.Slurm() {
		return startSlurm(ctx, c, sweep, cfg)
	}
	opts, stop, err := listen(ctx, c, cfg.Resources, cfg.NodePrograms())
	return ctx, opts, stop, err
}

// listen starts the head --listen asks for, waits for the agents --agents
// asks for, and returns the tuner options that use it and a function that
// stops it; an agent whose node lacks one of programs is refused. Without
// --listen it returns no options.
func listen(ctx context.Context, c *cli.Context, resources workers.Declared, programs []string) ([]tuner.Option, func(), error) {
	addr := c.String("listen")
	if addr == "" {
		for _, f := range []string{"agents", "host", "head-workers", "cert", "key", "ca"} {
			if c.IsSet(f) {
				return nil, nil, badInput(fmt.Errorf("--%s needs --listen", f))
			}
		}
		return nil, func() {}, nil
	}
	token := c.String("token")
	if token == "" {
		return nil, nil, badInput(errors.New("--listen needs a token that agents must give: set GOTUNE_TOKEN (for example to $(openssl rand -hex 16)) or --token"))
	}
	var nodes []workers.Node
	if c.Bool("head-workers") {
		nodes = resources.Inventory()
	} else if c.Int("agents") < 1 {
		return nil, nil, badInput(errors.New("--head-workers=false needs --agents: the sweep cannot start before agents have joined"))
	}
	cfg := cluster.HeadConfig{
		Manager: workers.NewManager(nodes, workers.ManagerConfig{}),
		Token:   token, Timeout: c.Duration("agent-timeout"), Host: c.String("host"),
		Logf: logTo(c.App.ErrWriter), Programs: programs,
	}
	if files := (cluster.TLSFiles{Cert: c.String("cert"), Key: c.String("key"), CA: c.String("ca")}); !files.IsZero() {
		cfg.TLS = &files
	}
	h, err := cluster.ListenHead(addr, cfg)
	if err != nil {
		return nil, nil, badInput(err)
	}
	cfg.Logf("listening for agents on %s", h.Addr())
	if n := c.Int("agents"); n > 0 {
		cfg.Logf("waiting for %d agents to join", n)
		if err := h.WaitAgents(ctx, n); err != nil {
			h.Close()
			return nil, nil, &exitError{exitFailed, err}
		}
	}
	return []tuner.Option{tuner.WithCluster(h)}, func() { h.Close() }, nil
}

// logTo writes timestamped "gotune:" lines to w, one at a time, since
// the head logs from several goroutines.
func logTo(w io.Writer) func(string, ...any) {
	var mu sync.Mutex
	return func(format string, args ...any) {
		line := fmt.Sprintf("%s gotune: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
		mu.Lock()
		defer mu.Unlock()
		io.WriteString(w, line)
	}
}

// defaultAgentStopGrace is an agent's --stop-grace: well within the 30 s
// that batch systems commonly leave between SIGTERM and SIGKILL (Slurm's
// KillWait).
const defaultAgentStopGrace = 20 * time.Second

func agentCommand() *cli.Command {
	return &cli.Command{
		Name:  "agent",
		Usage: "join this node's resources to a running sweep (gotune run --listen)",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "head", Usage: "the head's `ADDR` (host:port), as its --listen says (required)"},
			tokenFlag(),
			&cli.StringFlag{Name: "name", Usage: "this node's `NAME` in the sweep (default: the host name); an agent that rejoins under a lost node's name takes its place"},
			&cli.StringFlag{Name: "host", Usage: "the `ADDR` this node's workers listen on and other nodes reach them at (default: the address this node reaches the head from)"},
			&cli.StringFlag{Name: "resources", Usage: "offer these resources instead of this machine's, as in `cpus=8,gpus=2,memory=32GiB`"},
			&cli.BoolFlag{Name: "shared", Usage: "this node sees the head's files at the same paths (a shared file system): checkpoints are not copied"},
			&cli.StringFlag{Name: "workdir", Usage: "keep the workers' folders under `DIR` (default: a temporary folder)"},
			&cli.DurationFlag{Name: "stop-grace", Value: defaultAgentStopGrace, Usage: "on SIGTERM or SIGINT, give the workers this long to exit after their own SIGTERM, relaying their last output and exits to the head, then SIGKILL them and leave (0: SIGKILL at once)"},
		}, tlsFlags("agent")...),
		Action: func(c *cli.Context) error {
			if c.NArg() != 0 {
				return badInput(fmt.Errorf("agent takes no arguments, got %d", c.NArg()))
			}
			if c.String("head") == "" {
				return badInput(errors.New("agent needs --head ADDR: the address the head listens on (gotune run --listen ADDR)"))
			}
			cfg := cluster.AgentConfig{
				Head: c.String("head"), Token: c.String("token"), Host: c.String("host"),
				Shared: c.Bool("shared"), WorkDir: c.String("workdir"), Logf: logTo(c.App.ErrWriter),
				StopGrace: c.Duration("stop-grace"),
			}
			if cfg.Token == "" {
				return badInput(errors.New("give the head's token in GOTUNE_TOKEN or --token"))
			}
			cfg.Node = workers.Discover()
			if c.IsSet("resources") {
				d, err := workers.ParseDeclared(c.String("resources"))
				if err != nil {
					return badInput(fmt.Errorf("--resources: %w", err))
				}
				if d.Nodes > 1 {
					return badInput(errors.New("--resources: an agent offers one node"))
				}
				cfg.Node = d.Inventory()[0]
			}
			cfg.Node.Name = c.String("name")
			if cfg.Node.Name == "" {
				cfg.Node.Name, _ = os.Hostname()
			}
			if c.Bool("tls") || c.IsSet("ca") || c.IsSet("cert") || c.IsSet("key") {
				cfg.TLS = &cluster.TLSFiles{Cert: c.String("cert"), Key: c.String("key"), CA: c.String("ca")}
			}
			ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
			defer stop()
			err := cluster.RunAgent(ctx, cfg)
			switch {
			case errors.Is(err, cluster.ErrRefused):
				return badInput(err)
			case ctx.Err() != nil:
				return nil // stopped by a signal: its workers are gone
			}
			return err
		},
	}
}
