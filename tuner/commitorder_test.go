package tuner

import (
	"context"
	"testing"

	"github.com/gotune/gotune/schedulers"
	"github.com/gotune/gotune/storage"
)

// readingBack is a FIFO scheduler that, at every result, reads the
// trial's reports back through a read-only connection of its own, as
// another process would, and checks that the report it is asked about is
// there already.
type readingBack struct {
	schedulers.FIFO
	t    *testing.T
	path string
	db   *storage.DB
	seen map[int]int // results given per trial
}

func (s *readingBack) OnResult(r schedulers.Result) schedulers.Decision {
	if s.db == nil {
		db, err := storage.OpenReadOnly(s.path)
		if err != nil {
			s.t.Errorf("open the database read-only: %v", err)
			return schedulers.Decision{Action: schedulers.Continue}
		}
		s.db = db
	}
	s.seen[r.Trial]++
	n := s.seen[r.Trial]
	reps, err := s.db.Reports(context.Background(), "test", r.Trial)
	switch {
	case err != nil:
		s.t.Errorf("trial %d, result %d: read its reports: %v", r.Trial, n, err)
	case len(reps) != n:
		s.t.Errorf("trial %d, result %d: %d reports committed when the scheduler is asked, want %d", r.Trial, n, len(reps), n)
	case reps[n-1].Metrics["loss"] != r.Metrics["loss"]:
		s.t.Errorf("trial %d, result %d: the last committed report has loss %v, the scheduler's %v", r.Trial, n, reps[n-1].Metrics["loss"], r.Metrics["loss"])
	}
	return schedulers.Decision{Action: schedulers.Continue}
}

// TestReportCommittedBeforeSchedulerDecides: every report a scheduler is
// asked about is committed, and visible to any reader, before it decides,
// so that no decision rests on a result a crash could lose.
func TestReportCommittedBeforeSchedulerDecides(t *testing.T) {
	cfg := testConfig(t, 6)
	sched := &readingBack{t: t, path: cfg.Storage, seen: map[int]int{}}
	defer func() {
		if sched.db != nil {
			sched.db.Close()
		}
	}()
	res := mustFit(t, cfg, WithScheduler(sched)) // quadratic: 5 reports a trial
	for _, tr := range res.Trials {
		if got := sched.seen[tr.Number]; got != 5 {
			t.Errorf("trial %d: the scheduler saw %d results, want 5", tr.Number, got)
		}
	}
}
