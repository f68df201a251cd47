package schedulers

import (
	"math"
	"strings"
	"testing"
)

// ev is one event fed to a scheduler and what it must answer. A result
// (the default) checks the decision; add, end and next are the other
// events. Zero-valued expectations are checked too, except reason, which
// is matched as a substring when given.
type ev struct {
	kind   string // "" (a result), "add", "end", "fail" or "next"
	trial  int
	time   float64
	score  float64
	ckpt   bool
	want   Action
	rung   float64
	cutoff float64 // checked when hasCut
	hasCut bool
	reason string
	// next only: the capacity, and whether an order is expected.
	canResume, noMore bool
	none              bool
}

func res(trial int, time, score float64, want Action) ev {
	return ev{trial: trial, time: time, score: score, want: want}
}

func (e ev) at(rung float64) ev { e.rung = rung; return e }
func (e ev) cut(c float64) ev   { e.cutoff, e.hasCut = c, true; return e }
func (e ev) why(s string) ev    { e.reason = s; return e }
func (e ev) checkpointed() ev   { e.ckpt = true; return e }
func add(trial int) ev          { return ev{kind: "add", trial: trial} }
func end(trial int) ev          { return ev{kind: "end", trial: trial} }

// fail ends trial as failed: OnTrialFailed, where the scheduler has it,
// then OnTrialEnd, as the tuner calls them.
func fail(trial int) ev { return ev{kind: "fail", trial: trial} }
func next(canResume, more bool) ev {
	return ev{kind: "next", canResume: canResume, noMore: !more, none: true}
}
func order(trial int, want Action, canResume, more bool) ev {
	return ev{kind: "next", trial: trial, want: want, canResume: canResume, noMore: !more}
}

// play feeds events to s and checks every answer.
func play(t *testing.T, s Scheduler, events []ev) {
	t.Helper()
	for i, e := range events {
		switch e.kind {
		case "add":
			s.OnTrialAdd(e.trial, map[string]any{})
		case "end":
			s.OnTrialEnd(e.trial)
		case "fail":
			if f, ok := s.(FailureObserver); ok {
				f.OnTrialFailed(e.trial)
			}
			s.OnTrialEnd(e.trial)
		case "next":
			o, ok := s.Next(Capacity{CanResume: e.canResume, MoreTrials: !e.noMore})
			if e.none {
				if ok {
					t.Fatalf("event %d: Next: got order %s for trial %d (%s), want none", i, o.Action, o.Trial, o.Reason)
				}
				continue
			}
			if !ok || o.Trial != e.trial || o.Action != e.want {
				t.Fatalf("event %d: Next: got %v %s for trial %d (%s), want %s for trial %d", i, ok, o.Action, o.Trial, o.Reason, e.want, e.trial)
			}
			check(t, i, o.Decision, e)
		default:
			d := s.OnResult(Result{Trial: e.trial, Time: e.time, Score: e.score, Checkpoint: e.ckpt})
			if d.Action != e.want {
				t.Fatalf("event %d: trial %d at %g scoring %g: got %s (%s), want %s", i, e.trial, e.time, e.score, d.Action, d.Reason, e.want)
			}
			check(t, i, d, e)
		}
	}
}

func check(t *testing.T, i int, d Decision, e ev) {
	t.Helper()
	if d.Rung != e.rung {
		t.Errorf("event %d: rung: got %g, want %g (%s)", i, d.Rung, e.rung, d.Reason)
	}
	if d.HasCutoff != e.hasCut || (e.hasCut && math.Abs(d.Cutoff-e.cutoff) > 1e-12) {
		t.Errorf("event %d: cutoff: got %g (set %v), want %g (set %v) (%s)", i, d.Cutoff, d.HasCutoff, e.cutoff, e.hasCut, d.Reason)
	}
	if !strings.Contains(d.Reason, e.reason) {
		t.Errorf("event %d: reason %q does not contain %q", i, d.Reason, e.reason)
	}
	if d.Action != Continue && d.Reason == "" {
		t.Errorf("event %d: %s without a reason", i, d.Action)
	}
}

// mustNew builds a scheduler or fails the test.
func mustNew(t *testing.T, c Config, env Env) Scheduler {
	t.Helper()
	s, err := New(c, env)
	if err != nil {
		t.Fatalf("New(%+v): %v", c, err)
	}
	return s
}
