package cluster_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/gotune/gotune/cluster"
	"github.com/gotune/gotune/tuner"
	"github.com/gotune/gotune/workers"
)

// A head on loopback, an agent that lends it a node of 2 CPUs (here in the
// same program; on another machine, `gotune agent --head ADDR`), and a
// worker process started on the agent's node, whose report lines, exit and
// node come back to the head. A sweep uses the head through
// tuner.WithCluster (see the StartSlurm example).
func Example() {
	quiet := func(string, ...any) {}
	head, err := cluster.ListenHead("127.0.0.1:0", cluster.HeadConfig{
		// No node of its own: the agents bring theirs.
		Manager: workers.NewManager(nil, workers.ManagerConfig{}),
		Token:   "a shared secret", Logf: quiet,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer head.Close()

	ctx, stopAgent := context.WithCancel(context.Background())
	agentDone := make(chan error, 1)
	go func() {
		agentDone <- cluster.RunAgent(ctx, cluster.AgentConfig{
			Head: head.Addr(), Token: "a shared secret",
			Node: workers.Node{Name: "node-a", CPUs: 2}, Logf: quiet,
		})
	}()
	defer func() { stopAgent(); <-agentDone }()
	if err := head.WaitAgents(ctx, 1); err != nil {
		log.Fatal(err)
	}
	node := head.Agents()[0]
	fmt.Printf("%s joined with %g CPUs\n", node.Name, head.Manager().Nodes()[node.Index].CPUs)

	spec := workers.LaunchSpec{
		Args:         []string{"/bin/sh", "-c", `echo '@gotune {"loss": 0.5}'; echo a log line`},
		Env:          os.Environ(),
		ReportPrefix: "@gotune ",
	}
	p, err := head.Launcher(node.Index).Start(spec, func(line string) { fmt.Println("report:", line) })
	if err != nil {
		log.Fatal(err)
	}
	<-p.Done()
	fmt.Printf("ran on %s, exit %v, log %q\n", p.Node(), p.Err(), p.Tail())
	// Output:
	// node-a joined with 2 CPUs
	// report: {"loss": 0.5}
	// ran on node-a, exit <nil>, log ["a log line"]
}

// A sweep whose trial groups run in Slurm jobs, each sized for one group,
// from a login node: StartSlurm returns once a job's agent has joined, the
// sweep runs under its Context (cancelled if jobs keep failing), and Close
// cancels the jobs. The command must run where every job's node finds it.
func ExampleStartSlurm() {
	cfg := tuner.Config{Name: "slurm-example", Storage: "gotune.db"}
	cfg.Search.NumSamples = 8
	cfg.Trainer.Command = []string{"python3", "/shared/train.py", "--lr", "{lr}"}
	// ... the search space, the objective, the scheduler ...

	s, err := cluster.StartSlurm(context.Background(), cluster.SlurmConfig{
		Experiment: cfg.Name, Database: cfg.Storage,
		Group:   cluster.GroupSize{Workers: 1, CPUsPerWorker: 4, GPUsPerWorker: 1},
		MaxJobs: 2, Partition: "gpu", Time: "01:00:00",
		Programs: cfg.NodePrograms(),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	t, err := tuner.New(cfg, tuner.WithCluster(s.Head()))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := t.Fit(s.Context()); err != nil {
		log.Fatal(err)
	}
}
