package trainer

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"runtime/pprof"
	"sync"

	"github.com/gotune/gotune/allreduce"
)

// goroutineKind runs every worker as a goroutine of this process, with
// in-process collectives: the fastest kind, for development and tests. A
// worker that never returns cannot be stopped.
type goroutineKind struct{ train TrainFunc }

func (k goroutineKind) runAttempt(a *attempt) {
	n := a.size()
	for rank, s := range a.slots {
		if s.remote() {
			a.fail(Permanent(fmt.Errorf("worker %d is placed on node %s, but Go training functions run in this process: run them as process workers (Spec.Process) to use other nodes", rank, s.Node)))
			return
		}
	}
	// A rank's scratch folder is made by Worker.CheckpointDir when the
	// function asks for one: a function that never checkpoints costs no
	// folder.
	scratch := make([]string, n)
	for rank := range n {
		scratch[rank] = a.rankScratch(rank)
	}
	comms := allreduce.NewLocal(n)
	g := newGather(n, a.deliver, a.beat)
	// However the attempt ends, break the collectives so that no rank stays
	// blocked in one; the context tells the ranks to return.
	a.onEnd(func(bool) {
		for _, c := range comms {
			c.Close()
		}
	})
	places := placeRanks(a.slots, GPUViewWorker)
	for rank := range n {
		a.workers.start(rank, 0, "")
		a.setProbe(rank, a.goroutineProbe(rank))
	}
	a.workers.flush(a.ctx)
	var wg sync.WaitGroup
	for rank := range n {
		w := &Worker{
			experiment: a.r.spec.Experiment,
			trial:      a.r.spec.Trial,
			rank:       rank,
			localRank:  places[rank].localRank,
			seed:       a.r.spec.Seed,
			config:     a.r.spec.Config,
			comm:       comms[rank],
			scratchDir: scratch[rank],
			resumeDir:  a.resume.dir,
			report: func(ctx context.Context, rank int, metrics map[string]float64, checkpoint string) error {
				refused := false
				if checkpoint != "" {
					dir, err := a.confine(rank, checkpoint)
					if err != nil {
						a.refuse(rank, err)
					}
					checkpoint, refused = dir, err != nil
				}
				return g.report(ctx, rank, metrics, checkpoint, refused)
			},
			diskFull: a.diskFull,
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			pprof.Do(a.ctx, a.workerLabels(rank), func(ctx context.Context) { err = runWorker(ctx, k.train, w) })
			if err != nil {
				if a.fail(fmt.Errorf("worker %d: %w", rank, err)) {
					a.workers.end(rank, WorkerFailed)
				}
				return
			}
			a.workers.end(rank, WorkerExited)
			g.finish(rank)
		}()
	}
	wg.Wait()
	for _, c := range comms {
		c.Close()
	}
	a.finish(attemptEnd{kind: endCompleted})
}

// runWorker runs train, turning a panic into an error. A ConfigError (a
// typed getter's panic) is permanent: a restart would fail the same way.
func runWorker(ctx context.Context, train TrainFunc, w *Worker) (err error) {
	defer func() {
		if p := recover(); p != nil {
			if ce, ok := p.(*ConfigError); ok {
				err = Permanent(ce)
				return
			}
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	err = train(ctx, w)
	var ce *ConfigError
	if errors.As(err, &ce) && !IsPermanent(err) {
		err = Permanent(err)
	}
	return err
}
