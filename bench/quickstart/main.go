// Command quickstart measures the quickstart sweep end to end: it runs
// examples/quickstart.toml through the tuner against a fresh database and
// prints one JSON line with the wall time, the reports per second and the
// best trial's accuracy.
//
//	go run ./bench/quickstart [-sweep examples/quickstart.toml] [-runs 3]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/gotune/gotune/cmd/gotune/sweepfile"
	"github.com/gotune/gotune/tuner"
)

func main() {
	sweep := flag.String("sweep", "examples/quickstart.toml", "the sweep file to run")
	runs := flag.Int("runs", 3, "how many times to run it; the median is reported")
	flag.Parse()
	if err := measure(*sweep, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func measure(sweep string, runs int) error {
	cfg, err := sweepfile.Load(sweep)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "gotune-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	var walls []float64
	var reports int
	var bestAcc float64
	for i := range runs {
		// Each run in a folder of its own, as on a fresh machine.
		runDir := filepath.Join(dir, fmt.Sprintf("run%d", i))
		if err := os.Mkdir(runDir, 0o755); err != nil {
			return err
		}
		cfg.Storage = filepath.Join(runDir, "gotune.db")
		t, err := tuner.New(cfg)
		if err != nil {
			return err
		}
		start := time.Now()
		res, err := t.Fit(context.Background())
		if err != nil {
			return err
		}
		walls = append(walls, time.Since(start).Seconds())
		reports = 0
		for _, tr := range res.Trials {
			reports += tr.Iterations
		}
		bestAcc = *res.Best.BestMetric
	}
	slices.Sort(walls)
	median := walls[len(walls)/2]
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"bench":                        "quickstart",
		"system":                       "gotune",
		"sweep":                        sweep,
		"runs":                         runs,
		"trials":                       cfg.Search.NumSamples,
		"reports":                      reports,
		"wall_s":                       round(median, 3),
		"wall_s_min":                   round(walls[0], 3),
		"wall_s_max":                   round(walls[len(walls)-1], 3),
		"reports_per_s":                round(float64(reports)/median, 1),
		"best_" + cfg.Objective.Metric: round(bestAcc, 4),
		"cpus":                         runtime.NumCPU(),
	})
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}
