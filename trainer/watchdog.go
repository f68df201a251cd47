package trainer

import (
	"sync"
	"time"
)

// watchdog calls hung when an attempt's workers stay silent for timeout;
// hung returns when it found a later sign of life, to count from then on,
// or the zero time when the workers are hung.
//
// It counts silence only while this process runs. A process stopped with
// SIGSTOP (or a machine asleep, where the clock stops too) reads nothing
// of its workers' output meanwhile, yet on waking the clock has moved on:
// that time is not the workers' silence. The watchdog ticks every few
// hundred milliseconds; a tick that comes much later than due shows that
// the process did not run in between, and the gap is left out of the
// silence. So a worker gets the whole timeout, counted from the moment the
// process woke, to be heard again.
type watchdog struct {
	timeout time.Duration
	period  time.Duration
	hung    func() time.Time
	stop    chan struct{}

	mu       sync.Mutex
	last     time.Time     // the latest beat
	lastTick time.Time     // the latest tick
	asleep   time.Duration // how long the process did not run since last
	held     bool
	stopped  bool
}

// stallSlack is how much later than due a tick may come before the delay
// counts as time the process did not run. A shorter delay is the
// scheduler's; a longer one given to the workers only makes the watchdog
// slower to blame them.
const stallSlack = 100 * time.Millisecond

// startWatchdog starts a watchdog that calls hung, from its own goroutine,
// when no beat came for timeout (timeout > 0), until hung says the workers
// are hung.
func startWatchdog(timeout time.Duration, hung func() time.Time) *watchdog {
	now := time.Now()
	w := &watchdog{
		timeout:  timeout,
		period:   min(max(timeout/8, 10*time.Millisecond), 500*time.Millisecond),
		hung:     hung,
		stop:     make(chan struct{}),
		last:     now,
		lastTick: now,
	}
	go w.run()
	return w
}

func (w *watchdog) run() {
	t := time.NewTicker(w.period)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		if w.check(time.Now()) {
			alive := w.hung()
			if alive.IsZero() {
				return
			}
			w.sawLife(alive)
		}
	}
}

// check accounts for a tick at now and reports whether the workers have
// been silent for the timeout.
func (w *watchdog) check(now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if gap := now.Sub(w.lastTick); gap > w.period+stallSlack {
		w.asleep += gap - w.period
	}
	w.lastTick = now
	silent := now.Sub(w.last)
	w.asleep = min(w.asleep, silent)
	return !w.stopped && !w.held && silent-w.asleep >= w.timeout
}

// beat restarts the count: a worker was heard.
func (w *watchdog) beat() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last, w.asleep = time.Now(), 0
}

// sawLife restarts the count from a sign of life at t that was no beat.
func (w *watchdog) sawLife(t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t.After(w.last) {
		w.last, w.asleep = t, 0
	}
}

// hold stops the count while on (the sink decides on a report); turning
// it off restarts it.
func (w *watchdog) hold(on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.held = on
	if !on {
		w.last, w.asleep = time.Now(), 0
	}
}

// close stops the watchdog for good. It may be called more than once.
func (w *watchdog) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.stopped = true
		close(w.stop)
	}
}
