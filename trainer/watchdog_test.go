package trainer

import (
	"testing"
	"time"
)

// TestWatchdogLeavesOutTimeTheProcessDidNotRun feeds a watchdog ticks: a
// tick far later than due (the process was stopped) does not count as the
// workers' silence, while silence with ticks on time does.
func TestWatchdogLeavesOutTimeTheProcessDidNotRun(t *testing.T) {
	const timeout, period = time.Second, 100 * time.Millisecond
	every := func(from, to int) []int {
		var ms []int
		for at := from; at <= to; at += 100 {
			ms = append(ms, at)
		}
		return ms
	}
	tests := []struct {
		name  string
		ticks []int // milliseconds after the last beat
		hung  int   // the first tick at which the workers count as hung
	}{
		{"silent", every(100, 1500), 1000},
		{"stopped past the timeout", append(every(100, 200), every(5200, 6500)...), 5900},
		{"stopped briefly", append(every(100, 500), every(1300, 2000)...), 1700},
		{"late by the scheduler", append(every(100, 500), every(650, 1400)...), 1050},
	}
	for _, tt := range tests {
		t0 := time.Now()
		w := &watchdog{timeout: timeout, period: period, last: t0, lastTick: t0}
		first := -1
		for _, ms := range tt.ticks {
			if w.check(t0.Add(time.Duration(ms)*time.Millisecond)) && first < 0 {
				first = ms
			}
		}
		if first != tt.hung {
			t.Errorf("%s: hung at %dms, want %dms", tt.name, first, tt.hung)
		}
	}
}
