package dashboard

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/gotune/gotune/storage"
)

// TestWhileASweepWrites reads every endpoint while another connection,
// holding the experiment's lock as a run does, adds reports to the running
// trial and then finishes it: every answer is complete and consistent, the
// trial shows RUNNING until it finishes, nothing goes backwards, and the
// last answers show everything written.
func TestWhileASweepWrites(t *testing.T) {
	srv, path := fixtureServer(t)
	w, err := storage.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	lock, err := w.LockExperiment("digits")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	tr, err := w.Trial(t.Context(), "digits", 4)
	if err != nil {
		t.Fatal(err)
	}
	const last, batch = 300, 10
	// The writer writes a batch each time a round of reads begins, so that
	// the reads run while it writes.
	tick := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		ctx := context.Background()
		for it := 3; it <= last; it++ {
			if it%batch == 3 {
				<-tick
			}
			loss := 1 / float64(it)
			r := storage.Report{Iteration: it, Time: now.Add(time.Duration(it) * time.Millisecond), Metrics: map[string]float64{"val_loss": loss, "epoch": float64(it)}}
			if err := w.AddReport(ctx, tr.ID(), r, &loss); err != nil {
				done <- err
				return
			}
		}
		done <- w.FinishTrial(ctx, tr.ID(), storage.TrialTerminated, "")
	}()

	reportsTotal := regexp.MustCompile(`gotune_reports_total\{experiment="digits"\} (\d+)`)
	var prevIters, prevPoints, prevTotal, rounds int
	check := func() (finished bool) {
		var ts []Trial
		getJSON(t, srv.URL+"/api/experiments/digits/trials?status=RUNNING,TERMINATED", &ts)
		var t4 Trial
		for _, x := range ts {
			if x.Number == 4 {
				t4 = x
			}
		}
		if t4.Status != storage.TrialRunning && t4.Status != storage.TrialTerminated {
			t.Errorf("trial 4 of the live run shows %q, want RUNNING until it is TERMINATED", t4.Status)
		}
		if t4.Iterations < prevIters {
			t.Errorf("trial 4 went back from %d to %d iterations", prevIters, t4.Iterations)
		}
		prevIters = t4.Iterations
		var c Curves
		getJSON(t, srv.URL+"/api/experiments/digits/curves?metric=val_loss&trials=4", &c)
		pts := c.Curves[0].Points
		if len(pts) < prevPoints {
			t.Errorf("trial 4's curve went back from %d to %d points", prevPoints, len(pts))
		}
		for i, p := range pts {
			if p[0] != float64(i+1) {
				t.Fatalf("curve point %d is at iteration %v: a report is missing", i, p[0])
			}
		}
		prevPoints = len(pts)
		var d TrialDetail
		getJSON(t, srv.URL+"/api/experiments/digits/trials/4", &d)
		if d.Iterations < prevIters {
			t.Errorf("trial detail shows %d iterations after the list showed %d", d.Iterations, prevIters)
		}
		_, body, _ := get(t, srv.URL+"/metrics")
		m := reportsTotal.FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("no reports total in /metrics:\n%s", body)
		}
		total, _ := strconv.Atoi(m[1])
		if total < prevTotal {
			t.Errorf("gotune_reports_total went back from %d to %d", prevTotal, total)
		}
		prevTotal = total
		rounds++
		return t4.Status == storage.TrialTerminated
	}
	for finished := false; !finished; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			finished = true
		case tick <- struct{}{}:
			check()
		}
	}
	if !check() {
		t.Error("trial 4 is not TERMINATED once the writer finished it")
	}
	if prevIters != last || prevPoints != last || prevTotal != 5+3+2+last {
		t.Errorf("after the writes: %d iterations, %d points, %d reports in all; want %d, %d, %d",
			prevIters, prevPoints, prevTotal, last, last, 5+3+2+last)
	}
	if rounds < last/batch {
		t.Errorf("%d rounds of reads, want one per batch of writes", rounds)
	}
}
