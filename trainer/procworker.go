package trainer

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gotune/gotune/workers"
)

// WorkerMain turns this process into a process worker when a group of
// process workers started it (see Spec.Process): it runs the registered
// function and exits. Otherwise it returns at once. Call it at the very
// start of main (or of TestMain), after the functions are registered:
//
//	func main() {
//		trainer.WorkerMain()
//		...
//	}
func WorkerMain() {
	name, ok := os.LookupEnv(envWorkerFunc)
	if !ok {
		return
	}
	os.Unsetenv(envWorkerFunc) // not for the worker's own children
	os.Exit(serveWorker(name))
}

// serveWorker runs the function registered as name as this process's
// worker and returns the exit status.
func serveWorker(name string) int {
	ctl := os.NewFile(workers.ControlFD, "gotune-control")
	if ctl == nil {
		fmt.Fprintln(os.Stderr, "gotune: started as a worker without a control stream")
		return 2
	}
	syscall.CloseOnExec(workers.ControlFD)
	c := &ctlConn{enc: json.NewEncoder(ctl), verdicts: make(chan ctlVerdict, 1)}
	if err := c.send(ctlMsg{Hello: true}); err != nil {
		fmt.Fprintln(os.Stderr, "gotune: worker control stream:", err)
		return 2
	}
	go c.readVerdicts(ctl)
	if err := workers.InstallStackDump(os.Getenv("GOTUNE_CHECKPOINT_DIR")); err != nil {
		fmt.Fprintln(os.Stderr, "gotune: no stacks on demand:", err)
	}

	train := lookupRegistered(name)
	if train == nil {
		return c.done(Permanent(fmt.Errorf("no function is registered as %q in %s", name, os.Args[0])))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	caught := make(chan os.Signal, 1)
	go func() {
		caught <- <-sigs
		cancel()
	}()
	w, err := workerFromEnv(ctx)
	if err != nil {
		return c.done(Permanent(err))
	}
	w.report = c.reporter(cancel)
	w.diskFull = func(err error) {
		m := &ctlDiskFull{}
		if err != nil {
			m.Error = err.Error()
		}
		c.send(ctlMsg{DiskFull: m})
	}
	err = runWorker(ctx, train, w)
	w.comm.Close()
	if ctx.Err() != nil {
		// Stopped by the launcher: whatever the function returned is a
		// consequence of the stop.
		err = nil
	}
	var sig os.Signal
	select {
	case sig = <-caught:
	default:
		if err != nil {
			// A signal that ends the whole group (a batch system ending the
			// job) reaches this process about when its peers' deaths break
			// its collectives: the failure is the signal's.
			select {
			case sig = <-caught:
			case <-time.After(signalSettle):
			}
		}
	}
	if sig != nil {
		// Stopped by a signal, which may not be the launcher's: die of it,
		// so that an early end is never taken for a finished run.
		c.done(nil)
		signal.Reset(sig)
		syscall.Kill(os.Getpid(), sig.(syscall.Signal))
		time.Sleep(time.Second)
		return 1
	}
	return c.done(err)
}

// signalSettle is how long a failed process worker waits for a signal that
// would explain its failure.
const signalSettle = 250 * time.Millisecond

// ctlConn is a process worker's end of the control stream.
type ctlConn struct {
	wmu      sync.Mutex
	enc      *json.Encoder
	rmu      sync.Mutex // one report at a time
	verdicts chan ctlVerdict
}

func (c *ctlConn) send(m ctlMsg) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.enc.Encode(m)
}

func (c *ctlConn) readVerdicts(ctl *os.File) {
	defer close(c.verdicts)
	dec := json.NewDecoder(bufio.NewReader(ctl))
	for {
		var v ctlVerdict
		if err := dec.Decode(&v); err != nil {
			return
		}
		c.verdicts <- v
	}
}

// done tells the launcher how the function ended and returns the exit status.
func (c *ctlConn) done(err error) int {
	d := &ctlDone{}
	if err != nil {
		d.Error, d.Permanent = err.Error(), IsPermanent(err)
	}
	c.send(ctlMsg{Done: d})
	if err != nil {
		fmt.Fprintln(os.Stderr, "gotune: worker failed:", err)
		return 1
	}
	return 0
}

// reporter is Worker.report for a process worker: it sends the report and
// waits for the launcher's verdict, which comes once every rank has
// reported and the tuner has decided. A stop cancels the worker's context.
func (c *ctlConn) reporter(stop context.CancelFunc) func(context.Context, int, map[string]float64, string) error {
	return func(ctx context.Context, _ int, metrics map[string]float64, checkpoint string) error {
		c.rmu.Lock()
		defer c.rmu.Unlock()
		if err := c.send(ctlMsg{Report: &ctlReport{Metrics: metrics, Checkpoint: checkpoint}}); err != nil {
			return fmt.Errorf("report: the launcher is gone: %w", err)
		}
		v, ok := <-c.verdicts
		switch {
		case !ok:
			return errors.New("report: the launcher is gone")
		case v.Stop:
			stop()
			return ctx.Err()
		case v.Error != "":
			err := errors.New(v.Error)
			if v.Permanent {
				err = Permanent(err)
			}
			return err
		}
		return ctx.Err()
	}
}

// workerFromEnv builds a process worker's Worker from the environment its
// launcher set.
func workerFromEnv(ctx context.Context) (*Worker, error) {
	var errs []error
	num := func(key string) int {
		v, err := strconv.Atoi(os.Getenv(key))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
		}
		return v
	}
	trial, rank, size, localRank := num(EnvTrialID), num(EnvWorldRank), num(EnvWorldSize), num(EnvLocalRank)
	seed, err := strconv.ParseInt(os.Getenv(EnvSeed), 10, 64)
	if err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", EnvSeed, err))
	}
	config, err := decodeConfig(os.Getenv(EnvConfig))
	if err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", EnvConfig, err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("worker environment: %w", err)
	}
	host := os.Getenv(EnvHost)
	if host == "" {
		host = "127.0.0.1"
	}
	comm, err := processComm(ctx, joinSpec{
		rendezvous: os.Getenv(EnvRendezvous), group: os.Getenv(EnvGroup),
		rank: rank, size: size, host: host, timeout: joinTimeout,
	})
	if err != nil {
		return nil, err
	}
	return &Worker{
		experiment: os.Getenv(EnvExperiment),
		trial:      trial,
		rank:       rank,
		localRank:  localRank,
		seed:       seed,
		config:     config,
		comm:       comm,
		scratchDir: os.Getenv(EnvCheckpointDir),
		resumeDir:  os.Getenv(EnvResumeDir),
	}, nil
}

// decodeConfig decodes GOTUNE_CONFIG into the types a trial's
// configuration holds: a number with a fraction or an exponent becomes a
// float64, any other number an int64. (A float with an integral value, such
// as 3.0, arrives as int64 3; the typed getters accept either.)
func decodeConfig(s string) (map[string]any, error) {
	if s == "" {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var raw map[string]any
	if err := dec.Decode(&raw); err != nil {
		return nil, err
	}
	for k, v := range raw {
		n, ok := v.(json.Number)
		if !ok {
			continue
		}
		if i, err := n.Int64(); err == nil && !strings.ContainsAny(string(n), ".eE") {
			raw[k] = i
			continue
		}
		f, err := n.Float64()
		if err != nil {
			return nil, fmt.Errorf("%q: %w", k, err)
		}
		raw[k] = f
	}
	return raw, nil
}
