package dashboard

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gotune/gotune/storage"
)

// /metrics: Prometheus's text exposition format, version 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/), written
// here directly: a few gauges and one counter, each family with its HELP
// and TYPE lines, label values escaped.

// rateWindow is the span over which reports per second are counted.
const rateWindow = time.Minute

// family is one metric family of the exposition.
type family struct {
	name, help, typ string
	samples         []sample
}

type sample struct {
	labels []string // name, value, name, value, ...
	value  float64
}

func (f *family) add(v float64, labels ...string) {
	f.samples = append(f.samples, sample{labels: labels, value: v})
}

// writeFamilies encodes families in the text format.
func writeFamilies(b *bytes.Buffer, fams []*family) {
	for _, f := range fams {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", f.name, escapeHelp(f.help), f.name, f.typ)
		for _, s := range f.samples {
			b.WriteString(f.name)
			if len(s.labels) > 0 {
				b.WriteByte('{')
				for i := 0; i < len(s.labels); i += 2 {
					if i > 0 {
						b.WriteByte(',')
					}
					fmt.Fprintf(b, `%s="%s"`, s.labels[i], escapeLabel(s.labels[i+1]))
				}
				b.WriteByte('}')
			}
			b.WriteByte(' ')
			b.WriteString(formatValue(s.value))
			b.WriteByte('\n')
		}
	}
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

func escapeHelp(s string) string  { return helpEscaper.Replace(s) }
func escapeLabel(s string) string { return labelEscaper.Replace(s) }

func formatValue(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return strconv.FormatFloat(v, 'f', -1, 64) // counts and bytes in full
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// metrics serves /metrics, read from one snapshot of the database.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	var fams []*family
	err := s.db.Snapshot(r.Context(), func(db *storage.DB) error {
		var err error
		fams, err = s.collect(r.Context(), db)
		return err
	})
	if err != nil {
		http.Error(w, "collect metrics: "+err.Error(), http.StatusInternalServerError)
		return
	}
	var b bytes.Buffer
	writeFamilies(&b, fams)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write(b.Bytes())
}

// collect reads every metric family. Besides the storage API and the
// trials_v view, two queries read the schema's tables directly (reports and
// workers, which no view or method summarises this way): keep them in step
// with storage/schema.go; the tests run them against the real schema.
func (s *Server) collect(ctx context.Context, db *storage.DB) ([]*family, error) {
	exps, err := db.Experiments(ctx)
	if err != nil {
		return nil, err
	}
	trials := &family{name: "gotune_trials", typ: "gauge", help: "Trials by experiment and status."}
	reports := &family{name: "gotune_reports_total", typ: "counter",
		help: "Reports recorded, by experiment (reports a restarted trial discards are taken back)."}
	rate := &family{name: "gotune_reports_per_second", typ: "gauge",
		help: "Reports recorded per second over the last minute, by experiment."}
	workers := &family{name: "gotune_workers", typ: "gauge",
		help: "Workers of the running trials' current attempts, by experiment and status."}
	gpuUtil := &family{name: "gotune_gpu_utilization_percent", typ: "gauge",
		help: "Latest utilisation of each GPU sampled in the last two minutes."}
	gpuMem := &family{name: "gotune_gpu_memory_used_bytes", typ: "gauge",
		help: "Latest memory in use on each GPU sampled in the last two minutes."}
	hostUtil := &family{name: "gotune_host_cpu_utilization_percent", typ: "gauge",
		help: "Latest CPU utilisation of each host sampled in the last two minutes."}
	hostMem := &family{name: "gotune_host_memory_used_bytes", typ: "gauge",
		help: "Latest memory in use on each host sampled in the last two minutes."}

	counts, err := s.trialCounts(ctx, db)
	if err != nil {
		return nil, err
	}
	recent, err := recentReports(ctx, db, s.now().Add(-rateWindow))
	if err != nil {
		return nil, err
	}
	running, err := runningWorkers(ctx, db)
	if err != nil {
		return nil, err
	}
	for _, e := range exps {
		c := counts[e.Name]
		// A dead run's PENDING and RUNNING trials count as INTERRUPTED,
		// and its workers run no more, as the API shows them.
		live := db.RunLive(e.Name)
		shown := shownCounts(c.status, live)
		for _, st := range slices.Concat(storage.TrialStatuses, []string{storage.TrialInterrupted}) {
			trials.add(float64(shown[st]), "experiment", e.Name, "status", st)
		}
		reports.add(float64(c.reports), "experiment", e.Name)
		rate.add(float64(recent[e.ID])/rateWindow.Seconds(), "experiment", e.Name)
		if live {
			for _, st := range slices.Sorted(maps.Keys(running[e.Name])) {
				workers.add(float64(running[e.Name][st]), "experiment", e.Name, "status", st)
			}
		}
		samples, err := db.ResourceSamples(ctx, e.Name, s.now().Add(-sampleWindow))
		if err != nil {
			return nil, err
		}
		type key struct {
			node string
			gpu  int
		}
		latest := map[key]storage.ResourceSample{}
		var order []key
		for _, sm := range samples {
			if sm.GPU == storage.NoGPU && sm.WorkerID != 0 {
				continue // a worker's processes, not the host
			}
			k := key{sm.Node, sm.GPU}
			if _, ok := latest[k]; !ok {
				order = append(order, k)
			}
			latest[k] = sm
		}
		slices.SortFunc(order, func(a, b key) int {
			if c := strings.Compare(a.node, b.node); c != 0 {
				return c
			}
			return a.gpu - b.gpu
		})
		for _, k := range order {
			sm := latest[k]
			if k.gpu == storage.NoGPU {
				hostUtil.add(sm.Util, "experiment", e.Name, "node", k.node)
				hostMem.add(float64(sm.MemoryUsed), "experiment", e.Name, "node", k.node)
				continue
			}
			gpu := strconv.Itoa(k.gpu)
			gpuUtil.add(sm.Util, "experiment", e.Name, "node", k.node, "gpu", gpu)
			gpuMem.add(float64(sm.MemoryUsed), "experiment", e.Name, "node", k.node, "gpu", gpu)
		}
	}
	fams := []*family{trials, reports, rate, workers, gpuUtil, gpuMem, hostUtil, hostMem}
	if u := s.managerUsage(); u != nil {
		capacity := &family{name: "gotune_resources_capacity", typ: "gauge",
			help: "What the running sweep's nodes offer (memory in bytes)."}
		inUse := &family{name: "gotune_resources_in_use", typ: "gauge",
			help: "What the running sweep's trial groups hold (memory in bytes)."}
		waiting := &family{name: "gotune_groups_waiting", typ: "gauge",
			help: "Trial groups of the running sweep waiting for resources."}
		capacity.add(u.CPUs, "resource", "cpus")
		capacity.add(u.GPUs, "resource", "gpus")
		capacity.add(float64(u.Memory), "resource", "memory_bytes")
		inUse.add(u.CPUsInUse, "resource", "cpus")
		inUse.add(u.GPUsInUse, "resource", "gpus")
		inUse.add(float64(u.MemoryInUse), "resource", "memory_bytes")
		waiting.add(float64(u.WaitingGroups))
		fams = append(fams, capacity, inUse, waiting)
	}
	return fams, nil
}

// expCounts is an experiment's trials by status and its reports.
type expCounts struct {
	status  map[string]int
	reports int
}

// trialCounts counts each experiment's trials by status and its reports
// (the sum of its trials' iterations), through the trials_v view.
func (s *Server) trialCounts(ctx context.Context, db *storage.DB) (map[string]expCounts, error) {
	rows, err := db.Query(ctx, `SELECT experiment, status, count(*), coalesce(sum(iterations), 0) FROM trials_v GROUP BY experiment, status`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]expCounts{}
	for rows.Next() {
		var exp, status string
		var n, its int
		if err := rows.Scan(&exp, &status, &n, &its); err != nil {
			return nil, err
		}
		c, ok := out[exp]
		if !ok {
			c.status = map[string]int{}
		}
		c.status[status] = n
		c.reports += its
		out[exp] = c
	}
	return out, rows.Err()
}

// recentSlack is how much older than the window a report may be before the
// newest-first scan stops: reports are committed in about the order of
// their times, not exactly.
const recentSlack = 10 * time.Second

// recentReports counts the reports of each experiment (by id) stamped at or
// after since. It walks the reports newest first (the reports table is in
// commit order) and stops at the first one well before since, so its cost
// is the number of recent reports, not of all of them.
func recentReports(ctx context.Context, db *storage.DB, since time.Time) (map[int64]int, error) {
	rows, err := db.Query(ctx, `SELECT r.time, t.experiment_id FROM reports r JOIN trials t ON t.id = r.trial_id ORDER BY r.id DESC`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	from := float64(since.UnixNano()) / 1e9
	stop := from - recentSlack.Seconds()
	out := map[int64]int{}
	for rows.Next() {
		var ts float64
		var exp int64
		if err := rows.Scan(&ts, &exp); err != nil {
			return nil, err
		}
		if ts < stop {
			break
		}
		if ts >= from {
			out[exp]++
		}
	}
	return out, rows.Err()
}

// runningWorkers counts the workers of running trials' current attempts by
// experiment and status.
func runningWorkers(ctx context.Context, db *storage.DB) (map[string]map[string]int, error) {
	return countByExperiment(ctx, db, `SELECT e.name, w.status, count(*) FROM workers w
JOIN trials t ON t.id = w.trial_id AND w.attempt = t.restarts JOIN experiments e ON e.id = t.experiment_id
WHERE t.status = ? GROUP BY e.name, w.status`, storage.TrialRunning)
}
