package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Child roles, run by TestMain in a separate process.
const (
	// roleReport locks experiment "e", creates it with childTrials trials
	// and has each trial report, concurrently, STORAGE_TEST_N times (0:
	// until killed), recording a checkpoint every 5 iterations. It prints
	// "ack TRIAL ITERATION" once each report is committed.
	roleReport = "report"
	// roleFill writes reports to trial 1 of experiment "e" under a file
	// size limit until the disk is "full", printing "ack ITERATION" per
	// committed report and then "full ERROR"; then it lifts the limit,
	// writes childResumed more reports with the same handle and prints
	// "resumed".
	roleFill = "fill"
)

const (
	childTrials  = 8
	childResumed = 10
)

func runChild(role, path string) error {
	switch role {
	case roleReport:
		n, _ := strconv.Atoi(os.Getenv("STORAGE_TEST_N"))
		return childReport(path, n)
	case roleFill:
		return childFill(path)
	}
	return fmt.Errorf("unknown role %q", role)
}

func childReport(path string, n int) error {
	ctx := context.Background()
	db, err := Open(path)
	if err != nil {
		return err
	}
	defer db.Close()
	lock, err := db.LockExperiment("e")
	if err != nil {
		return err
	}
	defer lock.Release()
	exp, err := db.CreateExperiment(ctx, "e", "loss", "min", nil)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	ack := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	errs := make(chan error, childTrials)
	for i := 1; i <= childTrials; i++ {
		go func() {
			errs <- func() error {
				tr, err := db.CreateTrial(ctx, exp.ID, i, map[string]any{"i": i})
				if err != nil {
					return err
				}
				for it := 1; n == 0 || it <= n; it++ {
					loss := 1 / float64(it+i)
					m := map[string]float64{"loss": loss, "epoch": float64(it)}
					if err := db.AddReport(ctx, tr.ID(), Report{Iteration: it, Time: time.Now(), Metrics: m}, &loss); err != nil {
						return err
					}
					if it%5 == 0 {
						if _, err := db.RecordCheckpoint(ctx, tr.ID(), it, fmt.Sprintf("/ckpt/%d/%d", i, it), m); err != nil {
							return err
						}
					}
					ack("ack %d %d", i, it)
				}
				return nil
			}()
		}()
	}
	for range childTrials {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

func childFill(path string) error {
	ctx := context.Background()
	db, err := Open(path)
	if err != nil {
		return err
	}
	defer db.Close()
	tr, err := db.Trial(ctx, "e", 1)
	if err != nil {
		return err
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		return err
	}
	limited := lim
	limited.Cur = uint64(st.Size()) + 256<<10
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &limited); err != nil {
		return err
	}
	big := map[string]float64{}
	for k := range 40 {
		big[fmt.Sprintf("metric_with_a_long_name_%02d", k)] = float64(k)
	}
	it := tr.Iterations
	for {
		it++
		loss := float64(it)
		err := db.AddReport(ctx, tr.ID(), Report{Iteration: it, Time: time.Now(), Metrics: big}, &loss)
		if err != nil {
			if !errors.Is(err, ErrDiskFull) {
				return fmt.Errorf("report %d: want a disk-full error, got %w", it, err)
			}
			fmt.Printf("full %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
			break
		}
		fmt.Printf("ack %d\n", it)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		return err
	}
	for range childResumed {
		loss := float64(it)
		if err := db.AddReport(ctx, tr.ID(), Report{Iteration: it, Time: time.Now(), Metrics: big}, &loss); err != nil {
			return fmt.Errorf("report %d after space came back: %w", it, err)
		}
		it++
	}
	fmt.Println("resumed")
	return nil
}
