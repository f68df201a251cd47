package trainer

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gotune/gotune/workers"
)

// placeholder matches "{name}" and its escaped form "{{name}}".
var placeholder = regexp.MustCompile(`\{\{[A-Za-z_][A-Za-z0-9_.\-]*\}\}|\{[A-Za-z_][A-Za-z0-9_.\-]*\}`)

// Placeholders returns the hyperparameter names that command's "{name}"
// placeholders refer to, each once, in order of first appearance;
// "{trial_dir}" and "{sweep_dir}" name none.
func Placeholders(command []string) []string {
	var names []string
	seen := map[string]bool{TrialDirPlaceholder: true, SweepDirPlaceholder: true}
	for _, arg := range command {
		for _, m := range placeholder.FindAllString(arg, -1) {
			if strings.HasPrefix(m, "{{") {
				continue
			}
			name := m[1 : len(m)-1]
			if !seen[name] {
				seen[name] = true
				names = append(names, name)
			}
		}
	}
	return names
}

// ExpandCommand replaces every "{name}" in command's arguments with
// hyperparameter name's value, argument by argument: no shell sees the
// result, so values need no quoting and cannot split an argument. Floats
// are written in their shortest exact form (0.001, 1e-05), integers in
// decimal, booleans as true or false. "{{name}}" stands for a literal
// "{name}"; other braces (a JSON argument) are left alone. A placeholder
// that names no hyperparameter is an error.
func ExpandCommand(command []string, config map[string]any) ([]string, error) {
	out := make([]string, len(command))
	for i, arg := range command {
		var missing string
		out[i] = placeholder.ReplaceAllStringFunc(arg, func(m string) string {
			if strings.HasPrefix(m, "{{") {
				return m[1 : len(m)-1]
			}
			name := m[1 : len(m)-1]
			v, ok := config[name]
			if !ok {
				missing = name
				return m
			}
			return formatValue(v)
		})
		if missing != "" {
			return nil, fmt.Errorf("argument %q: {%s} names no hyperparameter", arg, missing)
		}
	}
	return out, nil
}

func formatValue(v any) string {
	switch v := v.(type) {
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case int64:
		return strconv.FormatInt(v, 10)
	case int:
		return strconv.Itoa(v)
	case string:
		return v
	case bool:
		return strconv.FormatBool(v)
	}
	return fmt.Sprint(v)
}

// commandKind runs any program as every worker, per the command-worker
// contract: the environment says each worker's place, "@gotune {json}"
// lines on stdout report, every other line goes to the worker's log.
//
// How the lines of several ranks make the trial's reports:
//   - Rank 0's k-th report line is the group's k-th report, with rank 0's
//     metrics; other ranks' metrics are ignored. "@gotune {}" from any rank
//     is a heartbeat only.
//   - A checkpoint on another rank's line is a shard: that rank's j-th shard
//     belongs with rank 0's j-th checkpoint (counted from the group's start),
//     and they are merged into one committed checkpoint.
//   - A report whose checkpoint may have shards waits for them: for every
//     rank that has handed over a shard before, until its shard arrives or it
//     exits. A shard counts as handed over from its report line, before its
//     folder is copied here from another node (which may take longer than
//     rank 0 takes to report again). At the group's first checkpoint, whose
//     contributors are not known yet, it waits for the ranks that have
//     handed over nothing until they do, exit, or firstShardWait passes
//     (firstRemoteShardWait when a rank is on another node), or, for a rank
//     on this node, until rank 0 prints its next report line. A rank on
//     another node gets the whole wait: its lines come through its agent,
//     and may reach gotune after rank 0's next one though printed before
//     it. A rank that contributes to one checkpoint must contribute to
//     every one, and must keep in step with rank 0 (as DDP ranks do through
//     their collectives): its shard of a round comes before rank 0's report
//     of the next round. When only rank 0 hands over checkpoints (the
//     common case), reports are delivered as soon as rank 0 prints them,
//     apart from that one short wait in groups of several workers.
//   - A shard that arrives after its report was delivered is dropped with a
//     warning in the rank's log and an EventReportRefused, and a checkpoint
//     missing a shard of a rank that contributes is not committed (the
//     report is delivered without it).
//   - A checkpoint or shard that is not a folder inside the rank's own
//     GOTUNE_CHECKPOINT_DIR is refused (see takeOver) and left untouched; it
//     keeps its place in the count, so its report commits no checkpoint.
type commandKind struct {
	argv []string
	dir  string
}

// firstShardWait bounds how long the group's first checkpoint waits for
// shards from ranks that have not handed over any yet, when rank 0 does not
// print its next report line sooner (for ranks on this node);
// firstRemoteShardWait bounds it instead when a rank is on another node,
// whose lines come through its agent, later still on a busy node or
// network.
const (
	firstShardWait       = 500 * time.Millisecond
	firstRemoteShardWait = 2 * time.Second
)

func (k *commandKind) runAttempt(a *attempt) {
	n := a.size()
	pg := newProcGroup(a)
	ge, err := a.newGroupEnv()
	if err != nil {
		a.fail(err)
		return
	}
	defer ge.closeRdv()
	col := newCollator(a, n)
	go col.run()
	var mc *collector
	if a.r.spec.Metrics.Collects() {
		if mc, err = newCollector(a, k.dir, col.addCollected); err != nil {
			col.close()
			a.fail(Permanent(err))
			return
		}
		mc.start()
	}
	places := placeRanks(a.slots, a.r.spec.Scaling.GPUVisibility)
	startAll(n, func(rank int) {
		dir, err := a.checkpointDir(rank)
		if err != nil {
			a.fail(err)
			return
		}
		spec := workers.LaunchSpec{
			Args:         k.argv,
			Dir:          k.dir,
			Env:          a.env(ge, rank, places[rank], dir),
			LogPath:      a.logPath(rank),
			LogMaxBytes:  a.r.spec.LogMaxBytes,
			LogKeep:      a.r.spec.LogKeep,
			ReportPrefix: ReportPrefix,
		}
		a.launchFolders(&spec, dir)
		if rank == 0 && mc != nil && mc.patterns != nil {
			spec.OnOutput = mc.line
		}
		var p *workers.Process
		ready := make(chan struct{})
		hooks := procHooks{
			onReport: func(line string) {
				<-ready
				col.add(rank, p, line)
			},
			exited: func(p *workers.Process) error {
				if rank == 0 && mc != nil {
					if p.Err() != nil {
						mc.hush() // its failure tells why nothing matched
					}
					mc.finish()
				}
				col.exited(rank)
				return nil
			},
		}
		p, _ = pg.start(rank, spec, hooks)
		close(ready)
	})
	a.workers.flush(a.ctx)
	pg.wait()
	if mc != nil {
		mc.finish()
	}
	col.close()
	a.finish(attemptEnd{kind: endCompleted})
}

// collator turns the report lines of an attempt's command workers into the
// group's reports, by the rules on commandKind, and delivers them in order
// from its own goroutine.
type collator struct {
	a *attempt
	n int

	mu           sync.Mutex
	cond         *sync.Cond
	queue        []*lineReport    // rank 0's reports, not yet delivered
	shards       []map[int]string // per rank: its shards by ordinal, waiting ("": refused)
	handed       []int            // checkpoints handed over per rank
	contributor  []bool
	exitedRank   []bool
	deliveredOrd int // rank 0's last checkpoint ordinal delivered or dropped
	// firstWaitOver: the first checkpoint's wait has passed (see
	// firstShardWait); movedOn: rank 0 printed a report line after its
	// first checkpoint's.
	firstWaitOver, movedOn bool
	// delivering: run is handing a report to the attempt; drainOver: rank
	// 0's exit stopped waiting for its reports (see exited).
	delivering, drainOver bool
	timer                 *time.Timer
	closed                bool
	done                  chan struct{}
	rank0                 *workers.Process
	// lastCollected is the step of the last collected report this attempt
	// delivered, nil before one, and collectedNames the metrics delivered
	// at it (see amends). Only the delivering goroutine uses them.
	lastCollected  *float64
	collectedNames map[string]bool
}

// lineReport is one of rank 0's reports waiting to be delivered.
type lineReport struct {
	metrics map[string]float64
	// collected: from Spec.Metrics' sources, not a report line.
	collected bool
	ordinal   int    // rank 0's checkpoint ordinal; 0 without a checkpoint
	dir       string // "" when rank 0's checkpoint was refused
}

func newCollator(a *attempt, n int) *collator {
	c := &collator{a: a, n: n, shards: make([]map[int]string, n), handed: make([]int, n),
		contributor: make([]bool, n), exitedRank: make([]bool, n), done: make(chan struct{})}
	for r := range c.shards {
		c.shards[r] = map[int]string{}
	}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// add takes one report line of rank, from the process's stdout reader.
func (c *collator) add(rank int, p *workers.Process, line string) {
	// Even a report line that is refused shows the worker is alive.
	c.a.beat(rank)
	if n, ok := workers.ParseOversizeReport(line); ok {
		msg := fmt.Sprintf("a report line of %d bytes is over the limit of %d: it is in the worker's log, not in the results", n, workers.MaxReportLine)
		p.Logf("warning: %s", msg)
		c.a.refused(rank, msg)
		return
	}
	metrics, dir, err := ParseReportLine(line)
	if err != nil {
		p.Logf("warning: ignored a malformed report line (%v): %s%s", err, ReportPrefix, clip(line))
		c.a.refused(rank, fmt.Sprintf("ignored a malformed report line (%v): %s%s", err, ReportPrefix, clip(line)))
		return
	}
	handed := dir != "" // even when refused: it keeps its place in the count
	if rank != 0 {
		if handed {
			c.addShard(rank, p, dir)
		}
		return // other ranks' metrics are not the trial's
	}
	if handed {
		dir = c.takeOver(rank, p, dir)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.cond.Broadcast()
	c.rank0 = p
	if len(metrics) == 0 && !handed {
		return // a heartbeat
	}
	if c.handed[0] > 0 {
		// Rank 0 has moved on past its first checkpoint: the other
		// ranks on this node have had a whole step to hand over theirs.
		c.movedOn = true
	}
	rep := &lineReport{metrics: metrics}
	if handed {
		c.handed[0]++
		rep.ordinal, rep.dir = c.handed[0], dir
		if rep.ordinal == 1 && c.n > 1 {
			wait := firstShardWait
			if slices.ContainsFunc(c.a.slots[1:], Slot.remote) {
				wait = firstRemoteShardWait
			}
			c.timer = time.AfterFunc(wait, func() {
				c.mu.Lock()
				c.firstWaitOver = true
				c.cond.Broadcast()
				c.mu.Unlock()
			})
		}
	}
	c.queue = append(c.queue, rep)
}

// addShard takes the checkpoint folder rank (not 0) handed over as its
// next shard. The shard takes its place in the count, and rank counts as
// a contributor, before the folder is taken over: a remote rank's folder
// is copied to this node first, which may take longer than rank 0 takes
// to report again, and the report it belongs with waits for it meanwhile.
func (c *collator) addShard(rank int, p *workers.Process, dir string) {
	c.mu.Lock()
	c.handed[rank]++
	j := c.handed[rank]
	c.contributor[rank] = true
	c.mu.Unlock()
	dir = c.takeOver(rank, p, dir)
	c.mu.Lock()
	late := j <= c.deliveredOrd
	if !late {
		c.shards[rank][j] = dir
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	if late && dir != "" {
		// The checkpoint went without it: say so where the user looks.
		msg := fmt.Sprintf("dropped checkpoint %s: rank 0's report it belongs with (its checkpoint %d) was already delivered, without it; hand each checkpoint over before rank 0's next report", dir, j)
		p.Logf("warning: %s", msg)
		c.a.refused(rank, msg)
		os.RemoveAll(dir)
	}
}

// takeOver is attempt.takeOver for a report line's checkpoint: it returns
// the folder taken over, or "" when it was refused or could not be taken
// over (the node was lost, the attempt is ending).
func (c *collator) takeOver(rank int, p *workers.Process, dir string) string {
	taken, _, err := c.a.takeOver(rank, p, dir)
	if err != nil {
		p.Logf("warning: ignored the checkpoint of a report: %v", err)
	}
	return taken
}

// addCollected queues a report of metrics collected from Spec.Metrics'
// sources, to be delivered in order with rank 0's report lines.
func (c *collator) addCollected(metrics map[string]float64) {
	c.a.beat(0)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queue = append(c.queue, &lineReport{metrics: metrics, collected: true})
	c.cond.Broadcast()
}

// exited records that rank's process is gone.
//
// When rank 0 exits, the call returns once the reports it printed are
// delivered (or exitDrainWait passes, or the attempt ends), so that a
// worker that fails right after a report has that report counted before
// its failure ends the attempt.
func (c *collator) exited(rank int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.exitedRank[rank] = true
	c.cond.Broadcast()
	if rank != 0 {
		return
	}
	waited := time.AfterFunc(exitDrainWait, func() {
		c.mu.Lock()
		c.drainOver = true
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer waited.Stop()
	for (len(c.queue) > 0 || c.delivering) && !c.closed && !c.drainOver && c.a.ended().kind == endNone {
		c.cond.Wait()
	}
}

// exitDrainWait bounds how long rank 0's exit waits for its reports to be
// delivered: one may wait for the shard of a rank that never hands it over.
const exitDrainWait = 2 * time.Second

// ready reports whether rep may be delivered. Called with mu held.
func (c *collator) ready(rep *lineReport) bool {
	if rep.ordinal == 0 || c.closed {
		return true
	}
	for r := 1; r < c.n; r++ {
		_, has := c.shards[r][rep.ordinal]
		switch {
		case has || c.exitedRank[r]:
		case c.contributor[r]:
			return false
		case rep.ordinal == 1 && !c.firstWaitOver && (c.a.slots[r].remote() || !c.movedOn):
			// A rank on another node gets the whole wait.
			return false
		}
	}
	return true
}

// run delivers reports in order as they become ready, until close.
func (c *collator) run() {
	defer close(c.done)
	for {
		c.mu.Lock()
		for !c.closed && (len(c.queue) == 0 || !c.ready(c.queue[0])) {
			c.cond.Wait()
		}
		if len(c.queue) == 0 {
			c.mu.Unlock()
			return
		}
		rep := c.queue[0]
		c.queue = c.queue[1:]
		var shards []string
		complete := true
		if rep.ordinal > 0 {
			dirs := []string{rep.dir}
			for r := 1; r < c.n; r++ {
				if s, ok := c.shards[r][rep.ordinal]; ok {
					dirs = append(dirs, s)
					delete(c.shards[r], rep.ordinal)
				} else if c.contributor[r] {
					complete = false
				}
			}
			for _, d := range dirs {
				if d == "" {
					complete = false // refused
				} else {
					shards = append(shards, d)
				}
			}
			c.deliveredOrd = rep.ordinal
		}
		rank0 := c.rank0
		c.delivering = true
		c.mu.Unlock()
		c.deliverOne(rep, shards, complete, rank0)
		c.mu.Lock()
		c.delivering = false
		c.cond.Broadcast()
		c.mu.Unlock()
	}
}

// deliverOne hands one report to the attempt, with its checkpoint's
// shards when the checkpoint is complete.
func (c *collator) deliverOne(rep *lineReport, shards []string, complete bool, rank0 *workers.Process) {
	switch c.a.ended().kind {
	case endStopped, endPaused, endResize:
		// Reports after the decision that ended the attempt are not the
		// trial's. After the caller gave up, deliver keeps every report.
		removeAll(shards)
		return
	}
	if !complete {
		if len(shards) > 0 {
			rank0.Logf("warning: the checkpoint of a report misses the shard of a rank that exited or was refused: it is not committed")
		}
		removeAll(shards)
		shards = nil
	}
	key := c.a.r.spec.StepKey
	step, stepped := rep.metrics[key]
	if rep.collected && stepped && c.a.r.lastStep != nil && c.a.r.lastStep.Key == key && step <= c.a.r.lastStep.Value && !c.amends(step, rep.metrics) {
		// A collected step at or below the last recorded one is work
		// redone (a metrics file read again, a script started over) or a
		// line that came late (see attempt.skipOutOfOrder).
		c.a.skipOutOfOrder(key, step)
		return
	}
	if _, err := c.a.deliver(rep.metrics, shards); err != nil {
		c.a.fail(err)
		return
	}
	if rep.collected && stepped {
		if c.lastCollected == nil || *c.lastCollected != step {
			c.lastCollected, c.collectedNames = &step, map[string]bool{}
		}
		for name := range rep.metrics {
			c.collectedNames[name] = true
		}
	}
}

// amends reports whether collected metrics at step add to the last step
// this attempt delivered, as a report of their own at that step: they
// came after it was recorded, and name none of its metrics (Hugging
// Face's Trainer prints its run's summary, with the last epoch, seconds
// after that epoch's evaluation). A late metric that the step holds
// already, or one for an earlier step or a step a restarted attempt
// redoes, is no addition.
func (c *collator) amends(step float64, metrics map[string]float64) bool {
	if c.lastCollected == nil || *c.lastCollected != step {
		return false
	}
	for name := range metrics {
		if name != c.a.r.spec.StepKey && c.collectedNames[name] {
			return false
		}
	}
	return true
}

// close delivers what is left once every worker is gone, and waits for it.
func (c *collator) close() {
	c.mu.Lock()
	c.closed = true
	if c.timer != nil {
		c.timer.Stop()
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	<-c.done
	for _, m := range c.shards {
		for _, dir := range m {
			removeAll([]string{dir}) // shards whose report never came
		}
	}
}

// clip shortens a line for a log message.
func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
