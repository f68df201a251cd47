// Package schedulers owns trial scheduling decisions: after every result a
// scheduler says whether the trial continues, stops early, pauses (to be
// resumed from its checkpoint later) or restarts from another trial's
// checkpoint with a new configuration, and which paused trial runs next.
//
// Schedulers are pure state machines in the manner of Determined's
// searcher: events in (a trial added, a result, a trial ended, room to run
// one more), decisions out, no I/O and no goroutines. Their state snapshots
// to JSON, random generator included (Snapshotter), so an interrupted
// experiment resumes with the same decisions. Scores arrive lower-is-better;
// the tuner negates a "max" metric once, at the boundary, and the
// schedulers turn values back only to explain a decision to the user.
//
// Built in, chosen by Config.Kind and built by New: FIFO; ASHA in its
// "stop" and "promote" modes (Li et al., MLSys 2020); synchronous
// HyperBand (Li et al., JMLR 2018); the median stopping rule (Golovin et
// al., KDD 2017); Population Based Training (Jaderberg et al., 2017).
// Users plug in their own by implementing Scheduler. Package sim plays the
// trial side of any scheduler on a simulated clock.
//
// Of gotune's packages it imports only searchspace (PBT's perturbations)
// and pareto (the rung fronts of several objectives); never storage,
// trainer or tuner, whose I/O would break the replay, nor search, which
// imports it (BOHB reads HyperBand's budgets).
package schedulers
