package trainer

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gotune/gotune/tfevents"
)

// collectPoll is how often an attempt's metrics files and event files are
// read while it runs; they are read once more when rank 0 exits.
const collectPoll = time.Second

// unmatchedWait is how long a trial's first attempt runs before its
// sources are told of (EventMetricsUnmatched) when none has given a
// metric, unless rank 0 exits sooner. Once one has, a source that has
// given none is told of at rank 0's exit: a pattern for a line printed at
// the end (a final test loss) matches only then. A variable for the tests.
var unmatchedWait = time.Minute

// outputSource names rank 0's output among an attempt's sources.
const outputSource = "output"

// collectSettle is how long a step every live source has moved past waits
// before it is emitted, for the lines of it that come late: rank 0's
// stdout and stderr are read apart, so a line on one (a progress bar's
// loss on stderr) can be read after a later step's line on the other.
const collectSettle = 250 * time.Millisecond

// A step that holds every objective (see Spec.Objectives) is emitted
// without waiting for a later step once nothing has come for it for a
// quarter of the time it took to appear (since the step before it, or the
// attempt's start), but at least collectQuietMin and at most
// collectQuietMax, from the attempt's second such step on (see ready):
// epochs are often minutes, and a scheduler that hears of an epoch only
// when the next one ends lets every trial it stops run an epoch more. A
// script's other lines of a step come after its objective by a small part
// of the step's work (nanoGPT's log line, an iteration after the
// evaluation that began the step). Variables for the tests.
var (
	collectQuietMin = 2 * time.Second
	collectQuietMax = time.Minute
)

// collector gathers one attempt's metrics from the sources of
// Spec.Metrics and hands one report per step to emit, by the rules on
// MetricsConfig.
type collector struct {
	a        *attempt
	cfg      MetricsConfig
	stepKey  string
	patterns []*pattern
	table    *columnTable // with DefaultPattern: the tables it does not read
	file     string       // File resolved, "" for none
	tbDir    string       // TensorBoard resolved, "" for none
	emit     func(metrics map[string]float64)

	mu       sync.Mutex
	current  map[string]float64       // per source with a step: its latest
	frontier map[string]float64       // the same, of live sources (see observe)
	pending  map[float64]*pendingStep // by step, not yet emitted
	passed   map[float64]time.Time    // by pending step: when it was ready (see ready)
	settle   *time.Timer              // emits the passed steps once settled; nil when none wait
	// A step may be emitted before the sources move past it (see ready)
	// once trusted and while not fooled: trusted says that a step that
	// held every objective, each once, was emitted; fooled that the
	// script's steps fooled that rule, or would have, for the rest of the
	// attempt. emitted is the last step emitted, and began is when the
	// newest step appeared, or the attempt's start.
	trusted bool
	fooled  bool
	emitted *float64
	began   time.Time
	matched []int    // per pattern: lines it matched
	lines   int      // output lines seen
	last    []string // the latest output lines, oldest first
	files   map[string]*tailFile
	found   bool // a metrics or event file was found
	// named holds, per metric the default pattern read, how a line named
	// it first (see EventMetricsAmbiguous).
	named   map[string]*namedBy
	gave    bool // a source gave a metric
	stepped bool // a source gave a step
	// stepAsWritten is a metric's name that is the step's but for case
	// ("Epoch" for step = "epoch"), the first read before any step came;
	// "" for none.
	stepAsWritten string
	finished      bool
	told          bool
	// toldStepless: checkStepless has told of lines without a step.
	toldStepless bool

	stop       chan struct{}
	done       sync.WaitGroup
	finishOnce sync.Once
}

// unmatchedLines is how many of rank 0's last lines an
// EventMetricsUnmatched shows.
const unmatchedLines = 5

// newCollector prepares the sources of a's spec; dir is the command's
// working folder ("" for the caller's).
func newCollector(a *attempt, dir string, emit func(map[string]float64)) (*collector, error) {
	cfg := a.r.spec.Metrics
	c := &collector{a: a, cfg: cfg, stepKey: cfg.StepName(), emit: emit,
		current: map[string]float64{}, frontier: map[string]float64{}, pending: map[float64]*pendingStep{},
		passed: map[float64]time.Time{}, began: time.Now(),
		named: map[string]*namedBy{},
		files: map[string]*tailFile{}, stop: make(chan struct{})}
	if cfg.Output || len(cfg.Patterns) > 0 {
		texts := cfg.Patterns
		if len(texts) == 0 {
			texts = []string{DefaultPattern}
			c.table = &columnTable{}
		}
		for _, t := range texts {
			pt, err := compilePattern(t)
			if err != nil {
				return nil, fmt.Errorf("metrics pattern %q: %w", t, err)
			}
			c.patterns = append(c.patterns, pt)
		}
		c.matched = make([]int, len(c.patterns))
	}
	var err error
	if c.file, err = a.r.spec.metricsPath(cfg.File, dir); err != nil {
		return nil, fmt.Errorf("metrics file: %w", err)
	}
	if c.tbDir, err = a.r.spec.metricsPath(cfg.TensorBoard, dir); err != nil {
		return nil, fmt.Errorf("metrics tensorboard: %w", err)
	}
	return c, nil
}

// metricsPath expands path's placeholders as the command's ({trial_dir},
// {sweep_dir}, the trial's parameters) and makes it relative to dir; ""
// stays "".
func (s Spec) metricsPath(path, dir string) (string, error) {
	if path == "" {
		return "", nil
	}
	out, err := ExpandCommand([]string{path}, s.placeholders())
	if err != nil {
		return "", err
	}
	p := out[0]
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	return p, nil
}

// start reads the files once (what earlier attempts or runs left there,
// all of it emitted at once) and then while the attempt runs, and tells of
// silent sources after unmatchedWait on a trial's first attempt when
// none has given a metric. It must be called before the workers start.
func (c *collector) start() {
	if c.file != "" || c.tbDir != "" {
		c.poll(false)
		c.mu.Lock()
		c.flush(func(float64) bool { return true })
		c.mu.Unlock()
		c.done.Add(1)
		go func() {
			defer c.done.Done()
			t := time.NewTicker(collectPoll)
			defer t.Stop()
			for {
				select {
				case <-c.stop:
					return
				case <-t.C:
					c.poll(true)
				}
			}
		}()
	}
	if c.a.number == 1 {
		c.done.Add(1)
		go func() {
			defer c.done.Done()
			t := time.NewTimer(unmatchedWait)
			defer t.Stop()
			select {
			case <-c.stop:
			case <-t.C:
				c.mu.Lock()
				gave := c.gave
				c.mu.Unlock()
				if !gave {
					c.tellUnmatched("in its first minute")
				}
			}
		}()
	}
}

// line takes one of rank 0's output lines.
func (c *collector) line(text string) {
	c.mu.Lock()
	if c.finished {
		c.mu.Unlock()
		return
	}
	c.lines++
	c.last = append(c.last, text)
	if len(c.last) > unmatchedLines {
		c.last = c.last[1:]
	}
	text = shownText(text)
	var ambiguous []string
	var matched bool
	take := func(i int, obs observation) {
		matched = true
		c.matched[i]++
		ambiguous = append(ambiguous, c.checkNames(obs, text)...)
		if cause := c.checkStepless(outputSource, obs, text); cause != "" {
			ambiguous = append(ambiguous, cause)
		}
		c.observe(outputSource, obs, true)
	}
	for i, pt := range c.patterns {
		if obs, ok := pt.match(text, c.stepKey); ok {
			take(i, obs)
		}
	}
	if c.table != nil {
		// Every line goes to the table, which needs a header's next line.
		if obs, ok := c.table.read(text, c.stepKey); ok && !matched {
			take(0, obs)
		}
	}
	c.mu.Unlock()
	for _, cause := range ambiguous {
		c.tell(EventMetricsAmbiguous, cause)
	}
}

// namedBy is how a line first named a metric: the word before the name,
// and the line; told says that another word was told of.
type namedBy struct {
	qualifier, line string
	told            bool
}

// checkNames returns, on a trial's first attempt, the causes of the
// EventMetricsAmbiguous that obs, read from line, gives rise to: a metric
// whose name came after another word than before. Called with mu held.
func (c *collector) checkNames(obs observation, line string) []string {
	var causes []string
	for _, name := range slices.Sorted(maps.Keys(obs.qualifiers)) {
		q := obs.qualifiers[name]
		first := c.named[name]
		switch {
		case first == nil:
			c.named[name] = &namedBy{qualifier: q, line: line}
		case first.qualifier != q && !first.told && c.a.number == 1:
			first.told = true
			causes = append(causes, fmt.Sprintf("the default pattern reads %s from lines that name it differently, %q and %q: each step keeps the last; name them apart with trainer.metrics.patterns", name, first.line, line))
		}
	}
	return causes
}

// checkStepless returns, on a trial's first attempt and once in it, the
// cause of the EventMetricsAmbiguous that obs, read from line without a
// step, gives rise to: a metric that lines without a step give a second
// time after the step they join had every objective from a line with the
// step. A script that prints its loss while it trains and the epoch only
// on the epoch's own last line looks so: those lines are the next
// epoch's, but count as the one before (and keep it from being reported
// before the next ends). A step whose objective came from a line without
// it (the step's heading first, as time_sequence_prediction's "STEP:  0"
// before a loss at each L-BFGS evaluation) is not of that shape. Called
// with mu held.
func (c *collector) checkStepless(source string, obs observation, line string) string {
	objectives := c.a.r.spec.Objectives
	if obs.step != nil || c.toldStepless || c.a.number != 1 || len(objectives) == 0 {
		return ""
	}
	step, ok := c.current[source]
	p := c.pending[step]
	if !ok || p == nil || !p.holds(objectives) || p.objectiveStepless {
		return ""
	}
	if p.afterWhole == nil {
		p.afterWhole = map[string]int{}
	}
	for _, name := range slices.Sorted(maps.Keys(obs.metrics)) {
		if p.afterWhole[name]++; p.afterWhole[name] == 2 {
			c.toldStepless = true
			return fmt.Sprintf("lines that give no %[1]s, such as %[2]q, gave %[3]s again after %[1]s %[4]g had %[5]s: they count as %[1]s %[4]g's, which is reported only when the next %[1]s begins; if the script prints them during the next %[1]s (a loss while it trains, before the line that gives the %[1]s), give their pattern a group named %[1]s",
				c.stepKey, line, name, step, strings.Join(objectives, ", "))
		}
	}
	return ""
}

// pendingStep is what the sources gave of a step not yet emitted.
type pendingStep struct {
	metrics  map[string]float64
	repeated bool          // an objective was given twice (a loss per batch)
	added    time.Time     // when a live source last added to it
	quiet    time.Duration // how long it waits for more when it holds the objectives (see ready)
	// afterWhole counts, per metric, the lines without a step that gave it
	// once the step had every objective (see checkStepless).
	afterWhole map[string]int
	// objectiveStepless: a line without a step gave an objective.
	objectiveStepless bool
}

// holds reports whether p has every one of objectives.
func (p *pendingStep) holds(objectives []string) bool {
	for _, name := range objectives {
		if _, ok := p.metrics[name]; !ok {
			return false
		}
	}
	return true
}

// observe adds what a source gave and emits the steps that are ready:
// every live source has moved past them, or they look whole (see ready).
// A source is live once it gives something after the attempt's first
// reading of the files (what was there before came from an earlier attempt
// or run, whose processes are gone). Called with mu held.
func (c *collector) observe(source string, obs observation, live bool) {
	c.gave = c.gave || len(obs.metrics) > 0
	c.stepped = c.stepped || obs.step != nil
	if c.stepAsWritten == "" && c.cfg.Step != "" && !c.stepped {
		for name := range obs.metrics {
			if strings.EqualFold(name, c.cfg.Step) {
				c.stepAsWritten = name
				break
			}
		}
	}
	step := obs.step
	if step == nil {
		if f, ok := c.current[source]; ok {
			step = &f
		}
	}
	if step == nil {
		if len(obs.metrics) > 0 {
			c.emit(obs.metrics)
		}
		return
	}
	c.current[source] = *step
	if live && len(obs.metrics) > 0 && c.emitted != nil && *step <= *c.emitted {
		// A metric of a step emitted already: this script's steps end
		// later than their metrics show.
		c.fooled = true
	}
	p := c.pending[*step]
	if p == nil {
		p = &pendingStep{metrics: map[string]float64{}}
		c.pending[*step] = p
	}
	for k, v := range obs.metrics {
		_, seen := p.metrics[k]
		objective := slices.Contains(c.a.r.spec.Objectives, k)
		p.repeated = p.repeated || seen && objective
		p.objectiveStepless = p.objectiveStepless || objective && obs.step == nil
		p.metrics[k] = v
	}
	if !live {
		return
	}
	now := time.Now()
	if p.added.IsZero() {
		p.quiet = min(collectQuietMax, max(collectQuietMin, now.Sub(c.began)/4))
		c.began = now
	}
	p.added = now
	c.frontier[source] = *step
	low := *step
	for _, f := range c.frontier {
		low = min(low, f)
	}
	for s := range c.pending {
		if _, ok := c.passed[s]; !ok && s < low {
			c.passed[s] = now
		}
	}
	c.flushSettled()
}

// ready reports whether pending step p, which the live sources have not
// all moved past, may be emitted all the same: it holds every objective
// (Spec.Objectives) and nothing has been added to it for its quiet time
// (see collectQuietMin). That is trusted only once a step that held every
// objective, each once, was emitted, the first when the sources moved past
// it, so that a script that gives its objective several times a step (a
// loss per batch, or per L-BFGS evaluation, whose last value counts) is
// known before a step of it is cut short; and not once an emitted step had
// an objective twice or a metric came for a step emitted already. When p
// holds the objectives but has not been quiet long enough, wait says how
// long it has left.
func (c *collector) ready(p *pendingStep, now time.Time) (ok bool, wait time.Duration) {
	objectives := c.a.r.spec.Objectives
	if !c.trusted || c.fooled || len(objectives) == 0 || !p.holds(objectives) {
		return false, 0
	}
	wait = p.quiet - now.Sub(p.added)
	return wait <= 0, wait
}

// flushSettled marks the pending steps that are ready (see ready) as
// passed, emits the steps passed collectSettle ago or earlier, in order,
// and sets the timer for the next to settle or to have been quiet long
// enough. Called with mu held.
func (c *collector) flushSettled() {
	now := time.Now()
	var next time.Duration
	wake := func(d time.Duration) {
		if d > 0 && (next == 0 || d < next) {
			next = d
		}
	}
	markReady := func() {
		for s, p := range c.pending {
			if _, ok := c.passed[s]; ok {
				continue
			}
			ok, wait := c.ready(p, now)
			if ok {
				c.passed[s] = now
				wait = collectSettle
			}
			wake(wait)
		}
	}
	markReady()
	trusted := c.trusted
	c.flush(func(s float64) bool {
		at, ok := c.passed[s]
		if !ok {
			return false
		}
		wait := collectSettle - now.Sub(at)
		wake(wait)
		return wait <= 0
	})
	if c.trusted && !trusted {
		markReady() // the steps after the first that earned trust
	}
	if next == 0 || c.finished {
		return
	}
	if c.settle == nil {
		c.settle = time.AfterFunc(next, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.settle = nil
			if !c.finished {
				c.flushSettled()
			}
		})
		return
	}
	c.settle.Reset(next)
}

// flush emits the pending steps in step order while they pass. Called
// with mu held.
func (c *collector) flush(pass func(step float64) bool) {
	for _, s := range slices.Sorted(maps.Keys(c.pending)) {
		if !pass(s) {
			return
		}
		p := c.pending[s]
		delete(c.pending, s)
		delete(c.passed, s)
		if len(p.metrics) == 0 {
			continue // a step with no metric
		}
		if p.repeated {
			c.fooled = true
		} else if p.holds(c.a.r.spec.Objectives) {
			c.trusted = true
		}
		c.emitted = &s
		p.metrics[c.stepKey] = s
		c.emit(p.metrics)
	}
}

// finish reads the files a last time, emits every pending step and tells
// of silent sources on a trial's first attempt. Later calls wait for the
// first to end.
func (c *collector) finish() { c.finishOnce.Do(c.finishNow) }

func (c *collector) finishNow() {
	close(c.stop)
	c.done.Wait()
	c.poll(true)
	c.mu.Lock()
	c.finished = true
	if c.settle != nil {
		c.settle.Stop()
		c.settle = nil
	}
	c.flush(func(float64) bool { return true })
	c.mu.Unlock()
	if c.a.number == 1 {
		c.tellUnmatched("by its end")
	}
}

// hush keeps the collector from telling of patterns that matched nothing
// when rank 0 ends: it failed, and its failure, which quotes its last
// lines, says why. What it told in the first minute stands.
func (c *collector) hush() {
	c.mu.Lock()
	c.told = true
	c.mu.Unlock()
}

// tellUnmatched tells the EventSink, once, of each pattern that has
// matched no line, of a file or folder where no metric was found, and of
// a step named by MetricsConfig.Step that no source gave while they gave
// metrics.
func (c *collector) tellUnmatched(when string) {
	c.mu.Lock()
	if c.told {
		c.mu.Unlock()
		return
	}
	c.told = true
	var causes []string
	for i, pt := range c.patterns {
		if c.matched[i] > 0 {
			continue
		}
		what := fmt.Sprintf("metrics pattern %q", pt.text)
		if pt.text == DefaultPattern {
			what = "the default pattern (output = true: name=value and name: value pairs, columns of numbers under a header of names, and cells between bars)"
		}
		cause := fmt.Sprintf("%s matched none of rank 0's %d output lines %s", what, c.lines, when)
		if len(c.last) > 0 {
			cause += "; its last lines:\n" + strings.Join(c.last, "\n")
		}
		causes = append(causes, cause)
	}
	if (c.file != "" || c.tbDir != "") && !c.found {
		where := c.file
		if where == "" {
			where = c.tbDir + " (TensorBoard event files)"
		}
		causes = append(causes, fmt.Sprintf("no metrics file found at %s %s", where, when))
	}
	if c.cfg.Step != "" && c.gave && !c.stepped {
		// step = "Epoch" set, and metrics read, but never an epoch:
		// each report was numbered by count, which says nothing.
		fix := fmt.Sprintf("give the pattern for the line that holds it a group named %q", c.cfg.Step)
		if c.stepAsWritten != "" {
			fix = fmt.Sprintf("the lines give %q: set step = %[1]q in [trainer.metrics] (names match as written)", c.stepAsWritten)
		}
		causes = append(causes, fmt.Sprintf("metrics were read, but no line or record gave the step %q %s: each report is numbered by count; %s", c.cfg.Step, when, fix))
	}
	c.mu.Unlock()
	for _, cause := range causes {
		c.tell(EventMetricsUnmatched, cause)
	}
}

// tell tells the EventSink of an event of kind about the attempt's
// metrics.
func (c *collector) tell(kind EventKind, cause string) {
	if c.a.r.events == nil {
		return
	}
	e := Event{Kind: kind, Time: time.Now(), Cause: cause, Attempt: c.a.trialAttempt(), Workers: c.a.size()}
	c.a.r.events.Event(c.a.r.ctx, e) // a record for people: its failure is not the trial's
}

// poll reads what the metrics and event files gained since the last
// poll; live says it was written during the attempt (see observe).
func (c *collector) poll(live bool) {
	var paths []string
	if c.file != "" {
		matches, _ := filepath.Glob(c.file)
		paths = append(paths, matches...)
	}
	if c.tbDir != "" {
		own := c.a.r.spec.TrialDir
		filepath.WalkDir(c.tbDir, func(path string, d fs.DirEntry, err error) error {
			// gotune writes the trial's reports as events directly in the
			// trial's folder: those are not the script's.
			if err == nil && !d.IsDir() && tfevents.IsEventFile(d.Name()) && (own == "" || filepath.Dir(path) != filepath.Clean(own)) {
				paths = append(paths, path)
			}
			return nil
		})
	}
	sort.Strings(paths)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.finished {
		return
	}
	for _, path := range paths {
		tf := c.files[path]
		if tf == nil {
			tf = &tailFile{path: path, events: tfevents.IsEventFile(filepath.Base(path)) && path != c.file, format: c.cfg.fileFormat()}
			c.files[path] = tf
		}
		c.found = true
		for _, obs := range tf.read(c.stepKey) {
			c.observe(path, obs, live)
		}
	}
}

// tailFile reads what a metrics or event file gains, whole lines or
// records at a time.
type tailFile struct {
	path   string
	events bool   // a TensorBoard event file
	format string // a metrics file's: "jsonl" or "csv"
	offset int64
	header []string // a CSV file's, once read
	broken bool     // a corrupt event record: the rest is not read
}

// read returns the observations of the file's new whole lines or records.
// A file that shrank was started over: it is read from its beginning.
func (t *tailFile) read(stepKey string) []observation {
	f, err := os.Open(t.path)
	if err != nil {
		return nil
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() < t.offset {
		t.offset, t.header, t.broken = 0, nil, false
	}
	if t.broken {
		return nil
	}
	if _, err := f.Seek(t.offset, io.SeekStart); err != nil {
		return nil
	}
	if t.events {
		return t.readEvents(f)
	}
	var out []observation
	br := bufio.NewReader(f)
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			return out // a line not yet ended waits for the next read
		}
		t.offset += int64(len(line))
		line = bytes.TrimRight(line, "\r\n")
		if t.format == "csv" && t.header == nil {
			if cells, err := csvCells(line); err == nil {
				t.header = cells
			}
			continue
		}
		var obs observation
		if t.format == "csv" {
			obs, err = parseCSVRecord(t.header, line, stepKey)
		} else {
			obs, err = parseJSONRecord(line, stepKey)
		}
		if err == nil && (len(obs.metrics) > 0 || obs.step != nil) {
			out = append(out, obs)
		}
	}
}

// readEvents returns the scalars of the event file's new whole records.
func (t *tailFile) readEvents(r io.Reader) []observation {
	br := bufio.NewReader(r)
	var out []observation
	for {
		data, err := tfevents.ReadRecord(br)
		if errors.Is(err, tfevents.ErrCorrupt) {
			t.broken = true
			return out
		}
		if err != nil {
			return out // the end, or a record still being written
		}
		t.offset += int64(len(data)) + 16
		e, err := tfevents.DecodeEvent(data)
		if err != nil || len(e.Scalars) == 0 {
			continue
		}
		step := float64(e.Step)
		obs := observation{step: &step, metrics: map[string]float64{}}
		for _, s := range e.Scalars {
			// The float32 as TensorBoard shows it: 0.1, not 0.10000000149.
			v, _ := strconv.ParseFloat(strconv.FormatFloat(float64(s.Value), 'g', -1, 32), 64)
			obs.metrics[s.Tag] = v
		}
		out = append(out, obs)
	}
}
