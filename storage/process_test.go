package storage

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestReadsWhileAnotherProcessWrites reads through read-only handles while
// a child process commits reports of many trials at once: every read sees a
// consistent snapshot (each trial's summary matches its reports) and counts
// never go back.
func TestReadsWhileAnotherProcessWrites(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gotune.db")
	const n = 150
	cmd := child(t, roleReport, path)
	cmd.Env = append(cmd.Env, "STORAGE_TEST_N="+strconv.Itoa(n))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait for the first commit, so the database and the experiment exist.
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		t.Fatalf("child wrote nothing: %v", cmd.Wait())
	}
	done := make(chan error, 1)
	go func() {
		io.Copy(io.Discard, stdout)
		done <- cmd.Wait()
	}()

	reads, last := 0, 0
	check := func() {
		ro, err := OpenReadOnly(path)
		if err != nil {
			t.Fatal(err)
		}
		defer ro.Close()
		st, err := ro.ResumeState(ctx, "e")
		if err != nil {
			t.Fatal(err)
		}
		total := 0
		for _, s := range st.Trials {
			if s.Trial.Iterations != len(s.Reports) {
				t.Fatalf("trial %d: summary says %d iterations, snapshot holds %d reports", s.Trial.Number, s.Trial.Iterations, len(s.Reports))
			}
			total += len(s.Reports)
		}
		if total < last {
			t.Fatalf("reports went from %d to %d", last, total)
		}
		last = total
		reads++
	}
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("writer process: %v", err)
			}
			running = false
		default:
		}
		check()
	}
	if last != childTrials*n {
		t.Errorf("after the writer ended: %d reports, want %d", last, childTrials*n)
	}
	t.Logf("%d consistent reads during the run", reads)
}

// TestKill9 kills a writing process with SIGKILL: every report it
// acknowledged is in the database, its experiment lock refused a second run
// while it lived and is free once it is dead, and the experiment can be
// resumed.
func TestKill9(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gotune.db")
	cmd := child(t, roleReport, path)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	acked := map[int]int{} // trial -> highest acknowledged iteration
	lines := bufio.NewScanner(stdout)
	for count := 0; count < 400 && lines.Scan(); count++ {
		var trial, it int
		if _, err := fmt.Sscanf(lines.Text(), "ack %d %d", &trial, &it); err != nil {
			t.Fatalf("child said %q", lines.Text())
		}
		acked[trial] = max(acked[trial], it)
	}

	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = db.LockExperiment("e")
	if !errors.Is(err, ErrExperimentRunning) || !strings.Contains(err.Error(), fmt.Sprintf("process %d", cmd.Process.Pid)) {
		t.Fatalf("second run while the first lives: got %v, want ErrExperimentRunning naming process %d", err, cmd.Process.Pid)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Acknowledgements already in the pipe count too.
	for lines.Scan() {
		var trial, it int
		if _, err := fmt.Sscanf(lines.Text(), "ack %d %d", &trial, &it); err == nil {
			acked[trial] = max(acked[trial], it)
		}
	}
	cmd.Wait()

	lock, err := db.LockExperiment("e")
	if err != nil {
		t.Fatalf("the lock of a killed run was not released: %v", err)
	}
	defer lock.Release()
	st, err := db.ResumeState(ctx, "e")
	if err != nil {
		t.Fatal(err)
	}
	if st.Experiment.Status != ExperimentRunning {
		t.Errorf("experiment status %s, want RUNNING", st.Experiment.Status)
	}
	for _, s := range st.Trials {
		n := s.Trial.Number
		if len(s.Reports) < acked[n] {
			t.Errorf("trial %d: %d reports survived, %d were acknowledged", n, len(s.Reports), acked[n])
		}
		for i, r := range s.Reports {
			if r.Iteration != i+1 {
				t.Fatalf("trial %d: report %d has iteration %d", n, i+1, r.Iteration)
			}
		}
		if !s.Unfinished() {
			t.Errorf("trial %d is %s after a crash, want unfinished", n, s.Trial.Status)
		}
		if want := len(s.Reports) / 5 * 5; want > 0 && (s.Checkpoint == nil || s.Checkpoint.Iteration < want-5) {
			t.Errorf("trial %d: latest checkpoint %+v with %d reports", n, s.Checkpoint, len(s.Reports))
		}
	}

	// Resume: each trial restarts from its checkpoint and reports again.
	if err := db.ResumeExperiment(ctx, st.Experiment.ID); err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Trials {
		from := 0
		if s.Checkpoint != nil {
			from = s.Checkpoint.Iteration
		}
		if err := db.RestartTrial(ctx, s.Trial.ID(), from, "experiment resumed"); err != nil {
			t.Fatal(err)
		}
		loss := 0.0 // below every loss the child reported: the new best
		if err := db.AddReport(ctx, s.Trial.ID(), Report{Iteration: from + 1, Metrics: map[string]float64{"loss": loss}}, &loss); err != nil {
			t.Fatalf("trial %d: report after restart: %v", s.Trial.Number, err)
		}
		if err := db.FinishTrial(ctx, s.Trial.ID(), TrialTerminated, ""); err != nil {
			t.Fatal(err)
		}
	}
	ts, err := db.Trials(ctx, "e")
	if err != nil {
		t.Fatal(err)
	}
	for i, tr := range ts {
		from := 0
		if c := st.Trials[i].Checkpoint; c != nil {
			from = c.Iteration
		}
		if tr.Restarts != 1 || tr.Iterations != from+1 || *tr.BestMetric != 0 || tr.Status != TrialTerminated {
			t.Errorf("trial %d after resume: %+v", tr.Number, tr)
		}
	}
}

// TestDiskFillsUnderAFileSizeLimit runs a writer under RLIMIT_FSIZE, as if
// its disk filled: the write that does not fit fails with a disk-full
// error, every acknowledged report is intact, and writing goes on once
// there is room, in that process and in the next.
func TestDiskFillsUnderAFileSizeLimit(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gotune.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, db, "min", 1)
	f.report(t, 1, 1, 0.5)
	db.Close()

	cmd := child(t, roleFill, path)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("fill child: %v\n%s", err, out)
	}
	lastAck, full, resumed := 1, "", false
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		switch {
		case strings.HasPrefix(line, "ack "):
			lastAck, _ = strconv.Atoi(strings.TrimPrefix(line, "ack "))
		case strings.HasPrefix(line, "full "):
			full = line
		case line == "resumed":
			resumed = true
		}
	}
	if lastAck < 10 || full == "" || !resumed {
		t.Fatalf("child output: last ack %d, full %q, resumed %v", lastAck, full, resumed)
	}
	t.Log(full)
	for _, want := range []string{"disk full", path, "intact", "free some space"} {
		if !strings.Contains(full, want) {
			t.Errorf("the disk-full error lacks %q: %s", want, full)
		}
	}

	db, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	reps, err := db.Reports(ctx, "e", 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := lastAck + childResumed; len(reps) != want {
		t.Fatalf("%d reports after the disk filled and emptied, want %d", len(reps), want)
	}
	for i, r := range reps {
		if r.Iteration != i+1 {
			t.Fatalf("report %d has iteration %d", i+1, r.Iteration)
		}
	}
	loss := 1.0
	if err := db.AddReport(ctx, f.trials[0].ID(), Report{Iteration: len(reps) + 1, Metrics: map[string]float64{"loss": 1}}, &loss); err != nil {
		t.Fatalf("write in the next process: %v", err)
	}
}
