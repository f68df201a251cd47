package trainer

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// MetricsConfig says where a command trial's metrics come from besides its
// "@gotune {json}" report lines, which are always read: rank 0's output
// lines matched by patterns, a file the script appends to, TensorBoard
// event files. Several may be combined. Each collected metric has a step
// (a pattern's group, a file's field, an event's step), recorded in the
// report under the name Step, so that a restarted or resumed group records
// every step exactly once, as report lines that carry their step do.
//
// Metrics of one step that arrive apart (on several lines, from several
// sources) make one report: a step's report is delivered once every source
// that has produced a metric has moved past it (a line, row or event with a
// later step), or when rank 0 exits; or sooner, once it holds every
// objective (Spec.Objectives) and nothing more has come for it for a
// quarter of the time it took to appear (2 seconds to a minute), so that a
// scheduler hears of an epoch when it ends, not when the next one does.
// That stops for the rest of the attempt once a reported step had an
// objective twice, or a metric came for a step reported already (told as
// skipped). A metric given twice in one step keeps its last value. A line
// or row without a step belongs to the step its source saw last; before
// any step, each one is a report of its own, numbered by count. A step at
// or below the last step recorded is dropped, as work redone after a
// restart (a file re-read, a script started over).
type MetricsConfig struct {
	// Output reads rank 0's stdout and stderr lines (all but report lines)
	// with Patterns, or when Patterns is empty with DefaultPattern, as
	// tables (a header of metric names over rows of numbers, as skorch and
	// fastai print), and as cells between bars ("| valid loss 5.77 |").
	Output bool `toml:"output" json:"output,omitempty"`
	// Patterns are Go regular expressions (regexp/syntax) matched against
	// each of rank 0's output lines, every match of each in turn; setting
	// them turns Output on. A named group is a metric (its text read as a
	// number; a group that matched nothing or no number is skipped), the
	// group named Step is the step; a pattern with groups "name" and "value"
	// instead gives one metric per match, named by its name group, as
	// DefaultPattern does.
	Patterns []string `toml:"patterns" json:"patterns,omitempty"`
	// File is a file the script appends metrics to, one record a line: JSON
	// objects (JSON lines: numbers are metrics, other values skipped) or CSV
	// with a header row (empty cells skipped, as Lightning's CSVLogger
	// leaves them). A relative path is in the command's working folder;
	// "{trial_dir}" and "{param}" are expanded as in the command; glob
	// characters match several files (lightning_logs/*/metrics.csv), each
	// read as a source of its own.
	File string `toml:"file" json:"file,omitempty"`
	// Format is File's format, "jsonl" or "csv"; "" is "csv" for a name that
	// ends in .csv and "jsonl" otherwise.
	Format string `toml:"format" json:"format,omitempty"`
	// TensorBoard is a folder (resolved as File) under which the script
	// writes TensorBoard event files: every scalar of every file found
	// there, at any depth, is a metric named by its tag, at the event's
	// step. Each file is a source of its own. The event files gotune
	// itself writes directly in the trial's folder are not read.
	TensorBoard string `toml:"tensorboard" json:"tensorboard,omitempty"`
	// Step names a collected metric's step: the pattern group or pair, or
	// the file's field, that holds it, and the report key it is recorded
	// under (also for events); default DefaultStep. A sweep's scheduler
	// counts progress by it: its time_attr defaults to Step.
	Step string `toml:"step" json:"step,omitempty"`
}

// DefaultStep is MetricsConfig.Step's default.
const DefaultStep = "step"

// DefaultPattern reads name=value and name: value pairs, as Katib's StdOut
// collector does: "epoch=3 loss=0.41", "accuracy: 0.93"; and the quoted
// names of a printed dict or JSON object: "{'loss': 0.69, 'epoch': 0.5}",
// as Hugging Face's Trainer logs, or {"val_loss": 0.25}, a value's
// NumPy or PyTorch wrapper aside ("np.float64(0.25)", "tensor(0.25)",
// as a dict of them prints). A line that begins with epoch, episode,
// step, iter or iteration and a whole number gives that too, named as
// written ("Epoch 3: 100%|…" gives Epoch = 3; see stepHeading); a pair
// quoted as code ("`max_epochs=6` reached") gives nothing. In a line of
// cells between bars, a cell of words and a number gives a metric named
// by its words ("| valid loss  5.77 |" gives valid_loss; see barCell). A
// number with thousands separators ("tokens per iteration will be: 16,384") is read
// whole, to be refused (see parseNumber), not as its first digits; a
// term's coefficient ("y = +1.23 x^1 …") gives nothing (see coefficient).
// After a line's last colon, metric words and numbers apart by spaces
// alone give metrics too ("Test set results: loss 1.37 accuracy 0.40";
// see spacedPairs).
const DefaultPattern = `(?P<name>[A-Za-z_][A-Za-z0-9_.\-/]*)['"]?\s*(?:=|:)\s*(?:(?:np|numpy)\.\w+\(|tensor\()?(?P<value>[-+]?(?:\d{1,3}(?:,\d{3})+(?:\.\d*)?|\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?i:nan|inf(?:inity)?))(?:[^\w.:]|$)`

// Collects reports whether any source besides report lines is set.
func (m MetricsConfig) Collects() bool {
	return m.Output || len(m.Patterns) > 0 || m.File != "" || m.TensorBoard != ""
}

// StepName is Step with its default applied.
func (m MetricsConfig) StepName() string {
	if m.Step == "" {
		return DefaultStep
	}
	return m.Step
}

// fileFormat is the format of File with the default applied.
func (m MetricsConfig) fileFormat() string {
	if m.Format != "" {
		return m.Format
	}
	if strings.HasSuffix(strings.ToLower(m.File), ".csv") {
		return "csv"
	}
	return "jsonl"
}

func (m MetricsConfig) validate() error {
	for i, p := range m.Patterns {
		if _, err := compilePattern(p); err != nil {
			return &FieldError{fmt.Sprintf("metrics.patterns[%d]", i), err}
		}
	}
	switch m.Format {
	case "", "jsonl", "csv":
	default:
		return &FieldError{"metrics.format", fmt.Errorf("must be \"jsonl\" or \"csv\", got %q", m.Format)}
	}
	if m.Format != "" && m.File == "" {
		return &FieldError{"metrics.format", errors.New("a format needs a file")}
	}
	return nil
}

// unreadScanBytes is how much of a worker's log UnreadMetrics reads.
const unreadScanBytes = 1 << 20

// UnreadMetrics reads rank 0's log in the folder logDir (Spec.LogDir)
// of a group that printed no report line and had no [trainer.metrics]
// section to read its output, for what DefaultPattern (and columnTable,
// in the tables DefaultPattern does not read) would read there: the first
// line that gives metric, else the first that gives any metric besides a
// heading's step ("Epoch 2"), else the first such heading, with the names
// it gives, sorted. line is "" when none does or the log
// cannot be read; gotune's own lines in the log do not count. It reads
// the log's first MiB.
func UnreadMetrics(logDir, metric string) (line string, names []string) {
	f, err := os.Open(workerLog(logDir, 0))
	if err != nil {
		return "", nil
	}
	defer f.Close()
	pt, err := compilePattern(DefaultPattern)
	if err != nil {
		panic(err) // DefaultPattern is a constant
	}
	var table columnTable
	best := 0
	sc := bufio.NewScanner(io.LimitReader(f, unreadScanBytes))
	sc.Buffer(nil, unreadScanBytes)
	for sc.Scan() {
		shown := shownText(sc.Text())
		text := strings.TrimSpace(shown)
		if strings.HasPrefix(text, "gotune: ") {
			continue
		}
		obs, ok := pt.match(text, "")
		if row, isRow := table.read(shown, ""); isRow && !ok {
			obs, ok = row, true
		}
		if !ok || len(obs.metrics) == 0 {
			continue
		}
		// Better a line with the metric, then one with more than a
		// heading's epoch ("Epoch 2").
		rank := 1
		if _, has := obs.metrics[metric]; has {
			rank = 3
		} else if len(obs.metrics) > 1 || !stepHeading.MatchString(text) {
			rank = 2
		}
		if rank > best {
			best, line, names = rank, text, slices.Sorted(maps.Keys(obs.metrics))
			if rank == 3 {
				break
			}
		}
	}
	return line, names
}

// reprLine finds the lines a script writes when it prints its parsed
// arguments (print(args): "Namespace(lr=0.0002, niter=25)") or its model
// (print(model): "(1): BatchNorm2d(512, eps=1e-05, momentum=0.1)"), as
// pytorch/examples' dcgan does at its start, and Lightning's lines on the
// accelerators it found ("TPU available: False, using: 0 TPU cores"):
// DefaultPattern reads no metric from them, their pairs being arguments
// or the machine's.
var reprLine = regexp.MustCompile(`^(?:Namespace\(|\([\w.]+\): [A-Za-z_][\w.]*\(|[A-Z]PU available: )`)

// terminalEscape matches a terminal's escape sequences: CSI (colours,
// cursor moves: "\x1b[32m") and OSC (titles, links: "\x1b]8;;url\x1b\\")
// ones.
var terminalEscape = regexp.MustCompile(`\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)`)

// shownText is line as a terminal shows it, which is what patterns read:
// without its escape sequences, which a script that colours its output
// puts between a metric's name and its value ("\x1b[32mloss\x1b[0m: 0.5"),
// and from its last carriage return on, since a progress bar that
// rewrites itself ("\rEpoch 1: 50%|… loss=0.9\rEpoch 1: 100%|… loss=0.8")
// ends its line with its last state, or clears it for the next line to
// follow on the same one.
func shownText(line string) string {
	if strings.Contains(line, "\x1b") {
		line = terminalEscape.ReplaceAllString(line, "")
	}
	if i := strings.LastIndexByte(strings.TrimRight(line, "\r"), '\r'); i >= 0 {
		line = line[i+1:]
	}
	return line
}

// isSeed reports whether a pair's name is a random seed's ("Seed" in
// dcgan's "Random Seed: 1", "manual_seed=42"): DefaultPattern reads no
// metric from it, a seed being an argument a script echoes, not a result.
func isSeed(name string) bool {
	return strings.HasSuffix(strings.ToLower(name), "seed")
}

// pattern is a compiled output pattern.
type pattern struct {
	text string
	re   *regexp.Regexp
	// pairs: the pattern has groups "name" and "value", one metric a match.
	pairs       bool
	name, value int
}

// compilePattern compiles p and checks that it can give a metric.
func compilePattern(p string) (*pattern, error) {
	re, err := regexp.Compile(p)
	if err != nil {
		return nil, err
	}
	pt := &pattern{text: p, re: re}
	pt.name, pt.value = re.SubexpIndex("name"), re.SubexpIndex("value")
	pt.pairs = pt.name > 0 && pt.value > 0
	named := 0
	for _, n := range re.SubexpNames() {
		if n != "" {
			named++
		}
	}
	if named == 0 {
		return nil, errors.New("has no named group: name each metric, as in (?P<val_loss>[0-9.]+)")
	}
	return pt, nil
}

// observation is what one line or record of a source gave: metrics, and
// its step when it named one; for a pattern of name and value groups
// (DefaultPattern), the word just before each name ("test" in "test
// loss: 0.1"), "" for none.
type observation struct {
	step       *float64
	metrics    map[string]float64
	qualifiers map[string]string
}

// set records v under name: as the step when name is stepKey, else as a
// metric; it reports whether v became a metric.
func (o *observation) set(name, stepKey string, v float64) bool {
	if name == stepKey {
		o.step = &v
		return false
	}
	o.metrics[name] = v
	return true
}

// stepHeading matches, for DefaultPattern, a line that begins with a
// step-like word and a whole number, as progress bars and headings print
// their epoch or step: Lightning's "Epoch 3: 100%|…", Keras's "Epoch 1/10",
// nanoGPT's "step 250: train loss …", scikit-learn's "Iteration 4, loss =
// 0.52", PyTorch's Quickstart tutorial's "Epoch 2", and in brackets, as
// many tutorials' "Epoch [1/5], Step [100/600], Loss: 0.21" and the
// ImageNet example's "Epoch: [0][ 10/5005]", also after a bar, as fairseq's
// "| epoch 001:    450 / 1891 loss=11.52, …", or a bracket, as
// PyTorch-GAN's "[Epoch 0/200] [Batch 0/938] [D loss: 0.69]", or an arrow,
// as pytorch/examples' super_resolution's "===> Epoch[1](1/7): Loss:
// 0.2250". A tab may end the number, as it ends the episode of
// pytorch/examples' reinforcement_learning's "Episode 10\tLast reward:
// 9.00\tAverage reward: 10.02". Its groups are the word and the number.
var stepHeading = regexp.MustCompile(`^\s*(?:[=-]*>+\s*)?[|\[]?\s*(` + stepWords + `)(?:\s+|\s*:?\s*\[\s*)(\d+)\s*(?::|,|/\s*\d+|\]|\t|$)`)

// stepWords are the words that name a step in a heading (stepHeading) or
// a barred cell (stepWord), in any case: a reinforcement learning script
// counts its episodes as others count epochs.
const stepWords = `(?i:epoch|episode|step|iter|iteration)`

// logField matches a field that a logging library puts before a
// message, with the separator after it: Python's default format's
// "INFO:root:", a time ("2026-11-28 04:22:24,123", "[2026-11-28
// 04:22:24]", Hugging Face's "11/28/2026 04:22:24", Python's
// time.ctime(), "Sat Nov 28 04:22:24 2026", which pytorch/examples'
// fast_neural_style puts before its "Epoch 1:"), a level ("INFO",
// "[INFO]"), absl's "I1128 04:22:24.123456 140 train.py:42]".
var logField = regexp.MustCompile(`^\s*(?:` + logLevel + `:[\w.<>]*:|\[?(?:\d{4}-\d{2}-\d{2}[ T]|\d{2}/\d{2}/\d{4} )\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\]?|\[?` + ctime + `\]?|\[?` + logLevel + `\]?|[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+\d+ [\w.]+:\d+\])(?:\s*[-|:](?:\s|$))?`)

// ctime matches a time as Python's time.ctime() and time.asctime() write
// it: "Sat Nov 28 04:22:24 2026", "Sun Nov  1 04:22:24 2026".
const ctime = `(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]\d \d{2}:\d{2}:\d{2} \d{4}`

// logLevel matches the level names of Python's logging.
const logLevel = `(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)`

// logName matches the logger's name (with loguru's function and line)
// that comes after a logging library's other fields, and its separator:
// "__main__ - ", "__main__:train:42 - ".
var logName = regexp.MustCompile(`^\s*[\w.<>]+(?::[\w.<>]+:\d+)?\s+[-|]\s`)

// messageStart is where the message of a line that a logging library
// wrote begins (after logField's fields and logName), or 0.
func messageStart(line string) int {
	at := 0
	for {
		m := logField.FindStringIndex(line[at:])
		if m == nil || m[1] == 0 {
			break
		}
		at += m[1]
	}
	if at > 0 {
		if m := logName.FindStringIndex(line[at:]); m != nil {
			at += m[1]
		}
	}
	return at
}

// stepHeadings returns the submatch offsets, in line, of the step
// headings that begin line's text from offset at on, one after another
// in brackets ("[Step 500/9380] [Epoch 1/10] [D loss: …]" gives Step and
// Epoch), or nil.
func stepHeadings(line string, at int) [][]int {
	var found [][]int
	for {
		h := stepHeading.FindStringSubmatchIndex(line[at:])
		if h == nil {
			return found
		}
		for i := range h {
			h[i] += at
		}
		found = append(found, h)
		at = h[1]
		if at < len(line) && line[at] == ']' {
			at++
		}
		if rest := strings.TrimLeft(line[at:], " "); !strings.HasPrefix(rest, "[") {
			return found
		}
	}
}

// match reads line with pt: the metrics of every match, and a step when a
// match gave one (the last). stepKey names the step.
func (pt *pattern) match(line, stepKey string) (observation, bool) {
	isDefault := pt.text == DefaultPattern
	message := 0 // where the message begins, after a logging library's fields
	if isDefault {
		message = messageStart(line)
		if reprLine.MatchString(strings.TrimSpace(line[message:])) {
			return observation{}, false
		}
	}
	ms := pt.re.FindAllStringSubmatchIndex(line, -1)
	var headings [][]int
	var bars []barPair
	var spaced []namedValue
	if isDefault {
		headings = stepHeadings(line, message)
		spaced = spacedPairs(line[message:])
		bars = barPairs(line[message:])
		for i := range bars {
			bars[i].start += message
			bars[i].end += message
		}
	}
	if ms == nil && headings == nil && bars == nil && spaced == nil {
		return observation{}, false
	}
	obs := observation{metrics: map[string]float64{}}
	text := func(m []int, group int) string {
		if m[2*group] < 0 {
			return ""
		}
		return line[m[2*group]:m[2*group+1]]
	}
	// put records a metric, or the step, and for a pattern of name and
	// value groups the word before the metric's name.
	put := func(name, text, qualifier string) {
		v, ok := parseNumber(text)
		if !ok || name == "" || isDefault && isSeed(name) || !obs.set(name, stepKey, v) || !pt.pairs {
			return
		}
		if obs.qualifiers == nil {
			obs.qualifiers = map[string]string{}
		}
		obs.qualifiers[name] = qualifier
	}
	// The name-value pairs the line gives, in order, put once they are
	// named apart (see nameApart).
	var pairs []namedValue
	for _, h := range headings {
		pairs = append(pairs, namedValue{line[h[2]:h[3]], line[h[4]:h[5]], ""})
	}
	clause := message // where the text before the match's name begins
	for _, m := range ms {
		if pt.pairs {
			start := m[2*pt.name]
			if isDefault && start > 0 && line[start-1] == '`' {
				continue // code a message quotes: "`max_epochs=6` reached"
			}
			if inBarCell(bars, start) {
				continue // the cell names it whole: "| valid loss: 5.7 |"
			}
			if start < message {
				continue // a logging library's field: loguru's "__main__:train:42"
			}
			name, value, qualifier := text(m, pt.name), text(m, pt.value), wordBefore(line[:start])
			if isDefault {
				if head, q, ok := phraseHead(line[clause:start]); ok {
					name, qualifier = head, q
				}
				clause = m[1]
				if coefficient.MatchString(line[m[2*pt.value+1]:]) {
					continue // a term of an expression: "y = +1.23 x^1 -0.45 x^2"
				}
				value = accuracyFraction(name, value, line[m[2*pt.value+1]:])
			}
			pairs = append(pairs, namedValue{name, value, qualifier})
			continue
		}
		for i, name := range pt.re.SubexpNames() {
			if name != "" {
				put(name, text(m, i), "")
			}
		}
	}
	for _, p := range bars {
		pairs = append(pairs, namedValue{p.name, p.value, p.qualifier})
	}
	pairs = append(pairs, spaced...)
	if isDefault {
		nameApart(pairs)
	}
	for _, p := range pairs {
		put(p.name, p.value, p.qualifier)
	}
	if len(obs.metrics) == 0 && obs.step == nil {
		return observation{}, false
	}
	return obs, true
}

// coefficient matches what follows a number that is a term's coefficient
// in an expression, not a value: " x^1 …" in "y = +1.23 x^1 -0.45 x^2
// +0.67", as pytorch/examples' regression prints the polynomial it
// learned, or "*x" in "y = 2*x + 1". DefaultPattern reads no metric from
// such a pair, its name being the expression's, and its first number
// only a part of it.
var coefficient = regexp.MustCompile(`^\s*(?:[*^]|[A-Za-z_]\w*\s*[*^])`)

// spacedPairs reads the end of line that follows its last colon as
// metrics when it is nothing but two or more metric words (metricWords),
// each followed by spaces and a number, as pytorch/examples' gcn and gat
// print their test results: "Test set results: loss 1.3767 accuracy
// 0.4008" gives loss and accuracy. The word before the colon is their
// qualifier ("results"), so that a loss read so and one read elsewhere
// are told as EventMetricsAmbiguous. Other words ("Downloading: file 1
// of 3"), a unit or a comma ("iter 110: loss 2.29, time 12.3ms") give
// nothing.
func spacedPairs(line string) []namedValue {
	colon := strings.LastIndex(line, ": ")
	if colon < 0 {
		return nil
	}
	fields := strings.Fields(line[colon+1:])
	if len(fields) < 4 || len(fields)%2 != 0 {
		return nil
	}
	qualifier := wordBefore(line[:colon])
	var pairs []namedValue
	for i := 0; i < len(fields); i += 2 {
		if !metricWords[strings.ToLower(fields[i])] || !plainNumber.MatchString(fields[i+1]) {
			return nil
		}
		pairs = append(pairs, namedValue{fields[i], fields[i+1], qualifier})
	}
	return pairs
}

// plainNumber matches a number as a spaced pair writes it (see
// plainDecimal).
var plainNumber = regexp.MustCompile(`^` + plainDecimal + `$`)

// plainDecimal is a number as a barred cell (barCell) or a spaced pair
// (spacedPairs) writes it: decimal, with an optional sign and exponent,
// or nan or inf; no thousands separators.
const plainDecimal = `[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|(?i:nan|inf))`

// fractionOf matches what follows a count that is a fraction: "/10000" in
// "Accuracy: 9830/10000 (98%)".
var fractionOf = regexp.MustCompile(`^/\s*(\d+)(?:[^\w.:/]|$)`)

// accuracyFraction is the text of an accuracy's value: for one given as
// correct out of total, as pytorch/examples' MNIST script prints its test
// accuracy ("Accuracy: 9830/10000 (98%)"), the fraction (0.983) rather
// than the count; value as it was otherwise. after is the line after the
// value.
func accuracyFraction(name, value, after string) string {
	if n := strings.ToLower(name); n != "accuracy" && n != "acc" {
		return value
	}
	m := fractionOf.FindStringSubmatch(after)
	if m == nil {
		return value
	}
	correct, ok := parseNumber(value)
	total, err := strconv.ParseFloat(m[1], 64)
	if !ok || err != nil || total == 0 || correct > total {
		return value
	}
	return strconv.FormatFloat(correct/total, 'g', -1, 64)
}

// namedValue is a metric's name, its value's text and the word before the
// name, as a line gives them.
type namedValue struct {
	name, value, qualifier string
}

// nameApart renames the pairs of a name that one line gives after
// different words, so that none is lost to another: PyTorch-GAN's "[D
// loss: 0.69] [G loss: 0.71]" gives D_loss and G_loss, and "train loss:
// 0.5, val loss: 0.4" train_loss and val_loss. A pair with no word before
// it keeps its name.
func nameApart(pairs []namedValue) {
	words := map[string]map[string]bool{}
	for _, p := range pairs {
		if words[p.name] == nil {
			words[p.name] = map[string]bool{}
		}
		words[p.name][p.qualifier] = true
	}
	for i, p := range pairs {
		if len(words[p.name]) > 1 && p.qualifier != "" {
			pairs[i].name = p.qualifier + "_" + p.name
		}
	}
}

// metricWords are the words that name what a sentence-like line measures
// (see phraseHead), in lower case.
var metricWords = map[string]bool{"accuracy": true, "acc": true, "loss": true, "error": true, "precision": true,
	"recall": true, "f1": true, "auc": true, "perplexity": true, "ppl": true, "mse": true, "mae": true, "rmse": true}

// phraseHead reads the text of a line before a pair's name (from the
// line's start or the previous pair, to its last separator) as a phrase
// like "Accuracy of the network on the 10000 test", which PyTorch's
// tutorials print before "images: 54 %": a metric word followed by a
// preposition names what is measured, and the pair's own name ("images")
// only ends the phrase. It returns that metric word as written and the
// word before it (its qualifier, as wordBefore gives one), and ok false
// when the phrase is not of that form ("loss scale", "Number of").
func phraseHead(before string) (name, qualifier string, ok bool) {
	if i := strings.LastIndexAny(before, ",;|\t()[]{}"); i >= 0 {
		before = before[i+1:]
	}
	words := strings.Fields(before)
	for i := 0; i+1 < len(words); i++ {
		switch strings.ToLower(words[i+1]) {
		case "of", "on", "over", "for", "in", "at", "across":
		default:
			continue
		}
		if !metricWords[strings.ToLower(words[i])] {
			return "", "", false // the phrase is of something else
		}
		if i > 0 {
			qualifier = wordBefore(words[i-1])
		}
		return words[i], qualifier, true
	}
	return "", "", false
}

// wordBefore is the word of letters that ends head, spaces aside ("test"
// for "test "), or "" when head ends otherwise (a number, punctuation).
func wordBefore(head string) string {
	head = strings.TrimRight(head, " ")
	start := len(head)
	isLetter := func(b byte) bool { return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' }
	for start > 0 && isLetter(head[start-1]) {
		start--
	}
	if start > 0 && (head[start-1] == '_' || '0' <= head[start-1] && head[start-1] <= '9') {
		return ""
	}
	return head[start:]
}

// parseNumber reads a metric's text: a decimal number, or nan or inf in
// any case, with an optional sign (a pattern leaves a unit or "%" out of
// its group).
func parseNumber(s string) (float64, bool) {
	s = strings.TrimSpace(s)
	if s == "" || strings.ContainsAny(s, "xXpP_") { // hex floats and digit separators are not metrics' text
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil
}

// parseJSONRecord reads one line of a JSON-lines metrics file: a JSON
// object whose number values are metrics (other values are skipped); the
// field stepKey is the step.
func parseJSONRecord(line []byte, stepKey string) (observation, error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return observation{}, nil
	}
	dec := json.NewDecoder(strings.NewReader(quoteNonFinite(string(line))))
	dec.UseNumber()
	var raw map[string]any
	if err := dec.Decode(&raw); err != nil {
		return observation{}, fmt.Errorf("not a JSON object: %w", err)
	}
	if dec.More() {
		return observation{}, errors.New("more than one JSON value on the line")
	}
	obs := observation{metrics: map[string]float64{}}
	for k, v := range raw {
		var f float64
		switch v := v.(type) {
		case json.Number:
			var err error
			if f, err = strconv.ParseFloat(string(v), 64); err != nil || math.IsInf(f, 0) {
				continue
			}
		case string:
			var ok bool
			if f, ok = parseNumber(v); !ok || !(math.IsNaN(f) || math.IsInf(f, 0)) {
				continue
			}
		default:
			continue
		}
		obs.set(k, stepKey, f)
	}
	return obs, nil
}

// parseCSVRecord reads one data row of a CSV metrics file whose header is
// header: a cell that holds a number is a metric of its column (empty or
// other cells are skipped); the column stepKey is the step.
func parseCSVRecord(header []string, line []byte, stepKey string) (observation, error) {
	cells, err := csvCells(line)
	if err != nil {
		return observation{}, err
	}
	obs := observation{metrics: map[string]float64{}}
	for i, cell := range cells {
		if i >= len(header) {
			break
		}
		f, ok := parseNumber(cell)
		if !ok {
			continue
		}
		obs.set(header[i], stepKey, f)
	}
	return obs, nil
}

// csvCells splits one CSV line into its cells.
func csvCells(line []byte) ([]string, error) {
	r := csv.NewReader(bytes.NewReader(line))
	r.FieldsPerRecord = -1
	r.LazyQuotes = true
	cells, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("not a CSV row: %w", err)
	}
	return cells, nil
}
