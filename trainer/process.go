package trainer

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/gotune/gotune/workers"
)

// registry holds the functions process workers can run, by name.
var registry struct {
	sync.RWMutex
	funcs map[string]TrainFunc
}

// Register makes f runnable in worker processes as name (see Spec.Process).
// Call it from an init function, or in main before WorkerMain: the binary
// that launches the workers re-executes itself for each of them, and the
// function must be registered in both roles. It panics when name is empty
// or already taken.
func Register(name string, f TrainFunc) {
	if name == "" || f == nil {
		panic("trainer: Register needs a name and a function")
	}
	registry.Lock()
	defer registry.Unlock()
	if registry.funcs == nil {
		registry.funcs = map[string]TrainFunc{}
	}
	if _, ok := registry.funcs[name]; ok {
		panic(fmt.Sprintf("trainer: %q is registered twice", name))
	}
	registry.funcs[name] = f
}

func lookupRegistered(name string) TrainFunc {
	registry.RLock()
	defer registry.RUnlock()
	return registry.funcs[name]
}

// The control protocol between a process worker and its launcher: one JSON
// object per line each way over the control stream. The worker says hello
// once it runs as a worker, sends each report and waits for its verdict,
// and says done with its error before it exits.
type ctlMsg struct {
	Hello  bool       `json:"hello,omitempty"`
	Report *ctlReport `json:"report,omitempty"`
	Done   *ctlDone   `json:"done,omitempty"`
	// DiskFull: the worker waits for space (Error says why), or writes
	// again (Error is empty).
	DiskFull *ctlDiskFull `json:"disk_full,omitempty"`
}

type ctlDiskFull struct {
	Error string `json:"error,omitempty"`
}

type ctlReport struct {
	Metrics    map[string]float64 `json:"metrics"`
	Checkpoint string             `json:"checkpoint,omitempty"`
}

type ctlDone struct {
	Error     string `json:"error,omitempty"`
	Permanent bool   `json:"permanent,omitempty"`
}

// ctlVerdict answers a report: go on (zero value), stop, or fail with Error.
type ctlVerdict struct {
	Stop      bool   `json:"stop,omitempty"`
	Error     string `json:"error,omitempty"`
	Permanent bool   `json:"permanent,omitempty"`
}

// processKind runs every worker as a child process of this binary that
// runs a registered function; reports are gathered across ranks as for
// goroutine workers.
type processKind struct{ name string }

// ctlState is what the launcher learned from one worker's control stream.
type ctlState struct {
	hello  bool
	done   *ctlDone
	closed chan struct{} // the stream has ended; hello and done are final
}

func (k processKind) runAttempt(a *attempt) {
	n := a.size()
	pg := newProcGroup(a)
	exe, err := os.Executable()
	if err != nil {
		a.fail(Permanent(fmt.Errorf("find this program to start process workers: %w", err)))
		return
	}
	ge, err := a.newGroupEnv()
	if err != nil {
		a.fail(err)
		return
	}
	defer ge.closeRdv()
	g := newGather(n, a.deliver, a.beat)
	var inflight sync.WaitGroup // reports waiting in the gather
	places := placeRanks(a.slots, a.r.spec.Scaling.GPUVisibility)
	startAll(n, func(rank int) {
		dir, err := a.checkpointDir(rank)
		if err != nil {
			a.fail(err)
			return
		}
		spec := workers.LaunchSpec{
			Args:        []string{exe},
			Env:         append(a.env(ge, rank, places[rank], dir), envWorkerFunc+"="+k.name),
			LogPath:     a.logPath(rank),
			LogMaxBytes: a.r.spec.LogMaxBytes,
			LogKeep:     a.r.spec.LogKeep,
			Control:     true,
			Self:        true,
		}
		a.launchFolders(&spec, dir)
		st := &ctlState{closed: make(chan struct{})}
		hooks := procHooks{
			exited: func(p *workers.Process) error {
				<-st.closed
				return st.explain(p)
			},
			finished: func() { g.finish(rank) },
		}
		if p, err := pg.start(rank, spec, hooks); err == nil {
			go serveControl(a, g, rank, p, st, &inflight)
		}
	})
	a.workers.flush(a.ctx)
	pg.wait()
	inflight.Wait()
	a.finish(attemptEnd{kind: endCompleted})
}

// serveControl reads rank's control stream until the process is gone.
// Reports are answered from goroutines of their own (counted by inflight),
// so the stream is read to its end even while a report waits for the
// other ranks.
func serveControl(a *attempt, g *gather, rank int, p *workers.Process, st *ctlState, inflight *sync.WaitGroup) {
	defer close(st.closed)
	ctl := p.Control()
	var wmu sync.Mutex
	enc := json.NewEncoder(ctl)
	dec := json.NewDecoder(bufio.NewReader(ctl))
	for {
		var m ctlMsg
		if err := dec.Decode(&m); err != nil {
			return
		}
		switch {
		case m.Hello:
			st.hello = true
		case m.Report != nil:
			rep := m.Report
			refused := false
			if rep.Checkpoint != "" {
				// Before the next message: a remote process's folders
				// stay until its control stream is read to the end.
				dir, ref, err := a.takeOver(rank, p, rep.Checkpoint)
				if err != nil {
					a.fail(fmt.Errorf("worker %d: take over its checkpoint: %w", rank, err))
					continue
				}
				rep.Checkpoint, refused = dir, ref
			}
			inflight.Add(1)
			go func() {
				defer inflight.Done()
				err := g.report(a.ctx, rank, rep.Metrics, rep.Checkpoint, refused)
				var v ctlVerdict
				switch {
				case err == nil:
				case errors.Is(err, context.Canceled):
					v.Stop = true
				default:
					v.Error, v.Permanent = err.Error(), IsPermanent(err)
				}
				wmu.Lock()
				enc.Encode(v) // fails only when the worker is gone
				wmu.Unlock()
			}()
		case m.Done != nil:
			st.done = m.Done
		case m.DiskFull != nil:
			var err error
			if m.DiskFull.Error != "" {
				err = errors.New(workers.Printable(m.DiskFull.Error, workers.MaxPeerError, true))
			}
			a.diskFull(err)
		}
	}
}

// explain returns the failure a worker process reported for itself, or
// nil to judge it by its exit status.
func (st *ctlState) explain(p *workers.Process) error {
	if st.done != nil && st.done.Error != "" {
		err := errors.New(st.done.Error)
		if st.done.Permanent {
			err = Permanent(err)
		}
		return err
	}
	var ee *workers.ExitError
	if !st.hello && errors.As(p.Err(), &ee) && ee.Code >= 0 {
		// It exited on its own without ever running as a worker.
		return Permanent(fmt.Errorf("process %d %v without running as a worker: the program's main must call trainer.WorkerMain() before anything else", p.Pid(), p.Err()))
	}
	if !st.hello && p.Err() == nil {
		return Permanent(fmt.Errorf("process %d exited without running as a worker: the program's main must call trainer.WorkerMain() before anything else", p.Pid()))
	}
	return nil
}
