package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/gotune/gotune/cluster"
	"github.com/gotune/gotune/cmd/gotune/sweepfile"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/tuner"
)

// startSlurm makes this run the head of a sweep whose groups run in Slurm
// jobs ([cluster] launcher = "slurm", see cluster.StartSlurm): it returns
// the context the sweep runs under (cancelled with a cause when jobs keep
// failing), the tuner's options and the function that cancels the jobs
// and stops the head.
func startSlurm(ctx context.Context, c *cli.Context, sweep sweepfile.Sweep, cfg tuner.Config) (context.Context, []tuner.Option, func(), error) {
	cl := sweep.Cluster
	for _, f := range []string{"agents", "head-workers", "cert", "key", "ca"} {
		if c.IsSet(f) {
			return nil, nil, nil, badInput(fmt.Errorf("--%s: the sweep's [cluster] launcher = \"slurm\" runs the sweep on the agents of its own Slurm jobs, over TLS of its own", f))
		}
	}
	db := cfg.Storage
	if db == "" {
		db = tuner.DefaultStorage
	}
	scfg := cluster.SlurmConfig{
		Experiment: cfg.Name, Database: db, Group: groupSize(cfg.Trainer.Scaling),
		MaxJobs: cl.MaxJobs, Partition: cl.Partition, Account: cl.Account, Time: cl.Time, SbatchArgs: cl.SbatchArgs,
		Listen: c.String("listen"), Host: cl.Host, Program: cl.Gotune, Shared: cl.Shared,
		Token: c.String("token"), Timeout: c.Duration("agent-timeout"), Programs: cfg.NodePrograms(),
		Logf: logTo(c.App.ErrWriter),
	}
	if c.IsSet("host") {
		scfg.Host = c.String("host")
	}
	if scfg.MaxJobs == 0 {
		scfg.MaxJobs = cfg.Search.MaxConcurrent
	}
	if scfg.MaxJobs == 0 {
		scfg.MaxJobs = max(cfg.Search.NumSamples, 1)
	}
	s, err := cluster.StartSlurm(ctx, scfg)
	var setup *cluster.SetupError
	switch {
	case errors.As(err, &setup):
		return nil, nil, nil, badInput(err)
	case err != nil:
		return nil, nil, nil, err
	}
	return s.Context(), []tuner.Option{tuner.WithCluster(s.Head())}, s.Close, nil
}

// groupSize is the Slurm job's size for one group of s at its largest.
func groupSize(s trainer.ScalingConfig) cluster.GroupSize {
	return cluster.GroupSize{
		Workers: s.Workers(), CPUsPerWorker: s.CPUsPerWorker, MemoryPerWorker: s.MemoryPerWorker,
		GPUsPerWorker: s.GPUsPerWorker, Placement: s.Placement,
	}
}
