// Package schedulers owns trial scheduling decisions: after every result a
// scheduler says whether the trial continues, stops early or pauses, and which
// paused trial runs next. The decisions are pure functions of the results
// seen so far; schedulers do no I/O and start no goroutines, so a decision
// sequence is tested by feeding results.
//
// The package implements FIFO (never stops a trial early). Users plug their own
// scheduler into the tuner by implementing Scheduler.
package schedulers
