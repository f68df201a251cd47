package trainer

import (
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gotune/gotune/tfevents"
)

// nanoGPT's train.py prints these two kinds of lines (its log and eval
// lines, in its own formats).
var nanoGPTPatterns = []string{
	`^step (?P<step>\d+): train loss (?P<train_loss>[-+.\w]+), val loss (?P<val_loss>[-+.\w]+)`,
	`^iter (?P<step>\d+): loss (?P<loss>[-+.\w]+), time`,
}

// nanoGPTScript prints nanoGPT's lines for iterations 0 to 30, an eval
// every 10 and a log line every 5, with other output between. With a
// file named by $1 missing, it creates it and dies after iteration 20's
// eval, before its log line.
const nanoGPTScript = `
echo "tokens per iteration will be: 4,096"
for i in 0 5 10 15 20 25 30; do
	if [ $((i % 10)) -eq 0 ]; then
		echo "step $i: train loss 2.$i, val loss 3.$i"
		if [ -n "$1" ] && [ $i -eq 20 ] && [ ! -e "$1" ]; then : > "$1"; kill -9 $$; fi
	fi
	echo "iter $i: loss 1.$i, time 12.3ms, mfu -100.00%"
	echo "number of parameters: 0.01M" >&2
done
`

// stepSeries renders results as "step:metric=value,..." in order, to compare.
func stepSeries(results []Result, key string, metrics ...string) string {
	var b strings.Builder
	for _, r := range results {
		fmt.Fprintf(&b, "%v:", r.Metrics[key])
		for _, m := range metrics {
			if v, ok := r.Metrics[m]; ok {
				fmt.Fprintf(&b, "%s=%v,", m, v)
			}
		}
		b.WriteString(" ")
	}
	return b.String()
}

func TestCollectedOutputMakesOneReportPerStep(t *testing.T) {
	dead := filepath.Join(t.TempDir(), "died")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"undisturbed", nil, "0:train_loss=2,val_loss=3,loss=1, 5:loss=1.5, 10:train_loss=2.1,val_loss=3.1,loss=1.1, 15:loss=1.15, 20:train_loss=2.2,val_loss=3.2,loss=1.2, 25:loss=1.25, 30:train_loss=2.3,val_loss=3.3,loss=1.3, "},
		// Killed after step 20's eval line: step 20 is recorded as it was
		// then (without its loss), and the restarted script, which starts
		// over, records only the steps after it.
		{"restarted", []string{dead}, "0:train_loss=2,val_loss=3,loss=1, 5:loss=1.5, 10:train_loss=2.1,val_loss=3.1,loss=1.1, 15:loss=1.15, 20:train_loss=2.2,val_loss=3.2, 25:loss=1.25, 30:train_loss=2.3,val_loss=3.3,loss=1.3, "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := commandSpec(t, 1)
			spec.Command = append([]string{"sh", "-c", nanoGPTScript, "sh"}, tc.args...)
			spec.Metrics = MetricsConfig{Patterns: nanoGPTPatterns}
			spec.Failure.MaxFailures = 1
			sink := &collect{}
			sum, err := Run(context.Background(), spec, sink)
			if err != nil {
				t.Fatal(err)
			}
			if got := stepSeries(sink.results, "step", "train_loss", "val_loss", "loss"); got != tc.want {
				t.Errorf("reports\n got %s\nwant %s", got, tc.want)
			}
			if restarts := sum.Restarts; restarts != len(tc.args) {
				t.Errorf("%d restarts, want %d", restarts, len(tc.args))
			}
		})
	}
}

// xgboostPatterns read XGBoost's evaluation lines, as the
// README gives them: the round in brackets is the step, and each
// tab-separated name:value pair a metric.
var xgboostPatterns = []string{`^\[(?P<step>\d+)\]`, `\t(?P<name>[\w-]+):(?P<value>[-+\d.eE]+)`}

// TestXGBoostRoundsAreSteps: XGBoost's lines, read by the README's
// patterns, make one report per round, its step the round's number.
func TestXGBoostRoundsAreSteps(t *testing.T) {
	spec := commandSpec(t, 1)
	spec.Command = []string{"sh", "-c", `for i in 0 1 2; do printf '[%d]\ttrain-logloss:0.4%d\teval-logloss:0.5%d\n' $i $i $i; done`}
	spec.Metrics = MetricsConfig{Patterns: xgboostPatterns}
	sink := &collect{}
	if _, err := Run(context.Background(), spec, sink); err != nil {
		t.Fatal(err)
	}
	want := "0:train-logloss=0.4,eval-logloss=0.5, 1:train-logloss=0.41,eval-logloss=0.51, 2:train-logloss=0.42,eval-logloss=0.52, "
	if got := stepSeries(sink.results, "step", "train-logloss", "eval-logloss"); got != want {
		t.Errorf("reports\n got %s\nwant %s", got, want)
	}
}

// TestQuickstartTutorialHeadings: PyTorch's Quickstart tutorial's lines,
// read by the README's patterns, or by the default pattern with step =
// "Epoch": the "Epoch N" heading is the step, and the loss and test lines
// after it join it (with the default pattern, the test line's "Avg loss"
// comes last and is its epoch's loss).
func TestQuickstartTutorialHeadings(t *testing.T) {
	script := `for e in 1 2; do printf 'Epoch %d\n-------------------------------\n' $e
printf 'loss: 2.30%d000  [    0/60000]\nloss: 2.20%d000  [ 6400/60000]\n' $e $e
printf 'Test Error: \n Accuracy: 7%d.3%%, Avg loss: 0.78%d000 \n\n' $e $e; done; echo 'Done!'`
	for _, tc := range []struct {
		name    string
		metrics MetricsConfig
		want    string
	}{
		{"patterns", MetricsConfig{Step: "epoch", Patterns: []string{`^Epoch (?P<epoch>\d+)$`, `^loss: (?P<loss>[\d.]+)`, `Accuracy: (?P<accuracy>[\d.]+)%, Avg loss: (?P<test_loss>[\d.]+)`}},
			"1:loss=2.201,accuracy=71.3,test_loss=0.781, 2:loss=2.202,accuracy=72.3,test_loss=0.782, "},
		{"default pattern", MetricsConfig{Step: "Epoch", Output: true},
			"1:loss=0.781,Accuracy=71.3, 2:loss=0.782,Accuracy=72.3, "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := commandSpec(t, 1)
			spec.Command = []string{"sh", "-c", script}
			spec.Metrics = tc.metrics
			spec.StepKey = tc.metrics.Step
			sink := runCollecting(t, spec)
			if got := stepSeries(sink.results, tc.metrics.Step, "loss", "accuracy", "Accuracy", "test_loss"); got != tc.want {
				t.Errorf("reports\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestBracketedStepHeadings: the lines many PyTorch tutorials print every
// few batches, "Epoch [1/2], Step [100/300], Loss: 0.21", make one report
// an epoch with the default pattern and step = "Epoch", with the epoch's
// last loss.
func TestBracketedStepHeadings(t *testing.T) {
	spec := commandSpec(t, 1)
	spec.Command = []string{"sh", "-c", `for e in 1 2; do for s in 100 200 300; do echo "Epoch [$e/2], Step [$s/300], Loss: 0.$e$s"; done; done`}
	spec.Metrics = MetricsConfig{Step: "Epoch", Output: true}
	spec.StepKey = "Epoch"
	sink := runCollecting(t, spec)
	if got, want := stepSeries(sink.results, "Epoch", "Loss", "Step"), "1:Loss=0.13, 2:Loss=0.23, "; got != want {
		t.Errorf("reports\n got %s\nwant %s", got, want)
	}
}

// TestArrowedStepHeadings: pytorch/examples' super_resolution prints
// "===> Epoch[1](3/7): Loss: 0.18" for each batch, then its epoch's
// average loss and its test PSNR on lines without the epoch; with step =
// "Epoch" each epoch is a report whose Loss is the average, which comes
// last.
func TestArrowedStepHeadings(t *testing.T) {
	script := `echo "Namespace(batchSize=64, lr=0.01, nEpochs=2, seed=123, upscale_factor=3)"
echo '===> Building model'
for e in 1 2; do for i in 1 2 3; do echo "===> Epoch[$e]($i/3): Loss: 0.$e$i"; done
echo "===> Epoch $e Complete: Avg. Loss: 0.$e"2; echo "===> Avg. PSNR: 2$e.5 dB"; echo "Checkpoint saved to model_epoch_$e.pth"; done`
	spec := commandSpec(t, 1)
	spec.Command = []string{"sh", "-c", script}
	spec.Metrics = MetricsConfig{Step: "Epoch", Output: true}
	spec.StepKey = "Epoch"
	sink := runCollecting(t, spec)
	if got, want := stepSeries(sink.results, "Epoch", "Loss", "PSNR"), "1:Loss=0.12,PSNR=21.5, 2:Loss=0.22,PSNR=22.5, "; got != want {
		t.Errorf("reports\n got %s\nwant %s", got, want)
	}
}

// TestBarredCells: pytorch/examples' word_language_model prints its
// progress as cells between bars; with step = "epoch" each epoch is a
// report of its training lines' last values and its validation line, and
// the test line after training joins the last epoch, each metric named by
// its cell's words.
func TestBarredCells(t *testing.T) {
	script := `
for e in 1 2; do
	for b in 20 40; do printf '| epoch %3d | %5d/   40 batches | lr 20.00 | ms/batch 5%d.00 | loss  7.%d | ppl  1%d00.00\n' $e $b $b $e$b $e; done
	echo '-----------------------------------------'
	printf '| end of epoch %3d | time:  3.%ds | valid loss  6.%d | valid ppl   60%d.00\n' $e $e $e $e
	echo '-----------------------------------------'
done
echo '| End of training | test loss  5.67 | test ppl   290.74'`
	spec := commandSpec(t, 1)
	spec.Command = []string{"sh", "-c", script}
	spec.Metrics = MetricsConfig{Step: "epoch", Output: true}
	spec.StepKey = "epoch"
	sink := runCollecting(t, spec)
	got := stepSeries(sink.results, "epoch", "loss", "ms/batch", "valid_loss", "valid_ppl", "time", "test_loss")
	want := "1:loss=7.14,ms/batch=540,valid_loss=6.1,valid_ppl=601,time=3.1, 2:loss=7.24,ms/batch=540,valid_loss=6.2,valid_ppl=602,time=3.2,test_loss=5.67, "
	if got != want {
		t.Errorf("reports\n got %s\nwant %s", got, want)
	}
}

// TestCollectedStepsAfterResume: a resumed run (Spec.LastStep) records
// only the steps after the last recorded one, and a line without a step
// (MNIST's test line) belongs to the step its source saw last.
func TestCollectedStepsAfterResume(t *testing.T) {
	script := `
for e in 1 2 3 4; do
	printf 'Train Epoch: %d [0/60000 (0%%)]\tLoss: 0.%d00000\n' $e $e
	printf '\nTest set: Average loss: 0.0%d00, Accuracy: 98%d0/10000 (98%%)\n\n' $e $e
done`
	spec := commandSpec(t, 1)
	spec.Command = []string{"sh", "-c", script}
	spec.Metrics = MetricsConfig{Step: "epoch", Patterns: []string{
		`Train Epoch: (?P<epoch>\d+) .*Loss: (?P<train_loss>\S+)`,
		`Test set: Average loss: (?P<test_loss>\S+), Accuracy: (?P<correct>\d+)/\d+ \((?P<accuracy>\d+)%\)`,
	}}
	spec.StepKey = "epoch"
	spec.LastStep, spec.Delivered = &Step{"epoch", 2}, 2
	sink := runCollecting(t, spec)
	got := stepSeries(sink.results, "epoch", "train_loss", "test_loss", "correct", "accuracy")
	want := "3:train_loss=0.3,test_loss=0.03,correct=9830,accuracy=98, 4:train_loss=0.4,test_loss=0.04,correct=9840,accuracy=98, "
	if got != want {
		t.Errorf("reports\n got %s\nwant %s", got, want)
	}
	if len(sink.results) == 2 && (sink.results[0].Iteration != 3 || sink.results[1].Iteration != 4) {
		t.Errorf("iterations %d, %d, want 3, 4", sink.results[0].Iteration, sink.results[1].Iteration)
	}
}

// TestCollectedFileReadAgainRecordsEveryStepOnce: a metrics file (CSV
// with a header and empty cells, as Lightning's CSVLogger writes it, or
// JSON lines in a folder of each start, found by a glob), appended to by a
// script that dies once and starts over, is read again by the restarted
// group: every step is recorded once.
func TestCollectedFileReadAgainRecordsEveryStepOnce(t *testing.T) {
	cases := []struct {
		name, file, script string
	}{
		{"csv", "metrics.csv", `
f=metrics.csv
[ -e "$f" ] || echo "epoch,step,train_loss,val_loss" > "$f"
for s in 1 2 3 4 5 6; do
	echo "0,$s,0.$s," >> "$f"
	if [ $((s % 2)) -eq 0 ]; then echo "0,$s,,1.$s" >> "$f"; fi
	if [ $s -eq 4 ] && [ ! -e died ]; then : > died; kill -9 $$; fi
done`},
		{"jsonl", "logs/*/metrics.jsonl", `
d=logs/version_$$; mkdir -p $d; f=$d/metrics.jsonl
for s in 1 2 3 4 5 6; do
	echo "{\"step\": $s, \"train_loss\": 0.$s, \"note\": \"x\"}" >> "$f"
	if [ $((s % 2)) -eq 0 ]; then echo "{\"step\": $s, \"val_loss\": 1.$s}" >> "$f"; fi
	if [ $s -eq 4 ] && [ ! -e died ]; then : > died; kill -9 $$; fi
done`},
	}
	// {sweep_dir} names the sweep file's folder in a metrics path as in
	// the command: here it is the workdir too.
	cases = append(cases, cases[0])
	cases[2].name, cases[2].file = "sweep_dir", "{sweep_dir}/metrics.csv"
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := commandSpec(t, 1)
			spec.Command = []string{"sh", "-c", tc.script}
			spec.Workdir = t.TempDir()
			spec.PathBase = spec.Workdir
			spec.Metrics = MetricsConfig{File: tc.file}
			spec.Failure.MaxFailures = 1
			sink := runCollecting(t, spec)
			got := stepSeries(sink.results, "step", "train_loss", "val_loss")
			want := "1:train_loss=0.1, 2:train_loss=0.2,val_loss=1.2, 3:train_loss=0.3, 4:train_loss=0.4,val_loss=1.4, 5:train_loss=0.5, 6:train_loss=0.6,val_loss=1.6, "
			if got != want {
				t.Errorf("reports\n got %s\nwant %s", got, want)
			}
		})
	}
}

// TestLinesFromStderrComeInLate: a script that prints its validation loss
// on stdout and its training loss on stderr (a progress bar, logging) has
// the two read apart, so a step's stderr line can come after the next
// step's stdout line; it still lands in its step's report. A line that
// comes later than collectSettle after its step was passed is skipped,
// told as lines out of order, not as work a restart redid.
func TestLinesFromStderrComeInLate(t *testing.T) {
	spec := commandSpec(t, 1)
	spec.Command = []string{"sh", "-c", `
echo "epoch 1 val 0.5"; echo "epoch 2 val 0.4"
echo "epoch 1 train 0.9" >&2; echo "epoch 2 train 0.8" >&2
echo "epoch 3 val 0.3"; sleep 1; echo "epoch 3 train 0.7" >&2
echo "epoch 4 val 0.2"; sleep 1; echo "epoch 2 train 0.6" >&2`}
	spec.Metrics = MetricsConfig{Patterns: []string{`epoch (?P<epoch>\d+) val (?P<val_loss>\S+)`, `epoch (?P<epoch>\d+) train (?P<train_loss>\S+)`}, Step: "epoch"}
	spec.StepKey = "epoch"
	sink := runCollecting(t, spec)
	got := stepSeries(sink.results, "epoch", "val_loss", "train_loss")
	want := "1:val_loss=0.5,train_loss=0.9, 2:val_loss=0.4,train_loss=0.8, 3:val_loss=0.3,train_loss=0.7, 4:val_loss=0.2, "
	if got != want {
		t.Errorf("reports\n got %s\nwant %s", got, want)
	}
	skipped := sink.causes(EventReportsSkipped)
	if len(skipped) != 1 || !strings.Contains(skipped[0], "skipped 1 reports with epoch 2 to 2: each came after the trial had recorded that epoch or a later one") {
		t.Errorf("skipped reports told %q, want the late epoch 2 as out of order", skipped)
	}
}

// TestStepReportedBeforeTheNextBegins: a collected step that holds the
// objective is reported without waiting for a later step once nothing has
// come for it for its quiet time; each case's script waits for the
// reports named in its waits before it goes on. The first step that holds
// the objective waits for the next, which shows whether the script gives
// its objective once a step: each case's script begins with an epoch 0
// that does, but the first case's. Without an objective, a step waits for
// the next. A line without a step that comes within the quiet time (a
// final test loss) joins its step. An objective given twice in a step (a
// loss per batch), or a metric that comes after its step was reported,
// turns early reports off for the rest of the attempt.
func TestStepReportedBeforeTheNextBegins(t *testing.T) {
	defer func(q time.Duration) { collectQuietMin = q }(collectQuietMin)
	collectQuietMin = time.Second
	cases := []struct {
		name       string
		objectives []string
		script     string // "wait N" waits for epoch N's report
		want       string
		skipped    string
	}{
		// L-BFGS's closure prints the loss at each evaluation, seconds
		// apart, and the first is the step's first line.
		{"objective several times in the first step", []string{"train_loss"},
			"echo 'epoch 1 train 0.9'; sleep 1.5; echo 'epoch 1 train 0.8'; echo 'epoch 2 train 0.7'; sleep 1.5; echo 'epoch 2 train 0.6'",
			"1:train_loss=0.8, 2:train_loss=0.6, ", ""},
		{"objective", []string{"val_loss"},
			"echo 'epoch 1 train 0.9'; echo 'epoch 1 val 0.5'; wait 1; echo 'epoch 2 train 0.8'; sleep 0.5; echo 'epoch 2 val 0.4'; wait 2; echo 'epoch 3 val 0.3'",
			"1:val_loss=0.5,train_loss=0.9, 2:val_loss=0.4,train_loss=0.8, 3:val_loss=0.3, ", ""},
		{"no objective", nil,
			"echo 'epoch 1 val 0.5'; sleep 1.5; [ -e \"$d/got_1\" ] && : > \"$d/gave_up_early\"; echo 'epoch 2 val 0.4'",
			"1:val_loss=0.5, 2:val_loss=0.4, ", ""},
		{"a final line without a step", []string{"val_loss"},
			"echo 'epoch 1 val 0.5'; wait 1; echo 'epoch 2 val 0.4'; sleep 0.3; echo 'test 0.35'",
			"1:val_loss=0.5, 2:val_loss=0.4,test_loss=0.35, ", ""},
		{"loss per batch", []string{"train_loss"},
			"echo 'epoch 1 train 0.9'; sleep 0.3; echo 'epoch 1 train 0.8'; echo 'epoch 2 train 0.7'; sleep 1.5; echo 'epoch 2 train 0.6'; echo 'epoch 3 train 0.5'",
			"1:train_loss=0.8, 2:train_loss=0.6, 3:train_loss=0.5, ", ""},
		// The late metric is a report of its own at its step (see
		// TestLateMetricsOfTheLastStep).
		{"metric after its step", []string{"val_loss"},
			"echo 'epoch 1 val 0.5'; wait 1; echo 'epoch 1 train 0.9'; echo 'epoch 2 val 0.4'; sleep 1.5; echo 'epoch 2 train 0.8'",
			"1:val_loss=0.5, 1:train_loss=0.9, 2:val_loss=0.4,train_loss=0.8, ", ""},
		{"objective after its step", []string{"val_loss"},
			"echo 'epoch 1 val 0.5'; wait 1; echo 'epoch 1 val 0.45'; echo 'epoch 2 val 0.4'",
			"1:val_loss=0.5, 2:val_loss=0.4, ", "skipped 1 reports with epoch 1 to 1"},
		{"metric after a later step", []string{"val_loss"},
			"echo 'epoch 1 val 0.5'; wait 1; echo 'epoch 2 val 0.4'; wait 2; echo 'epoch 1 train 0.9'",
			"1:val_loss=0.5, 2:val_loss=0.4, ", "skipped 1 reports with epoch 1 to 1"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			script, want := tc.script, tc.want
			if i > 0 {
				script = "echo 'epoch 0 train 1.0'; echo 'epoch 0 val 0.6'; " + script
				want = "0:val_loss=0.6,train_loss=1, " + want
			}
			dir := t.TempDir()
			spec := commandSpec(t, 1)
			// wait gives up after 20 s, leaving a file that says so.
			spec.Command = []string{"sh", "-c", `
d=$1
wait() { i=0; until [ -e "$d/got_$1" ]; do i=$((i+1)); [ $i -gt 400 ] && { : > "$d/gave_up_$1"; return; }; sleep 0.05; done; }
` + script, "sh", dir}
			spec.Metrics = MetricsConfig{Patterns: []string{`epoch (?P<epoch>\d+) val (?P<val_loss>\S+)`, `epoch (?P<epoch>\d+) train (?P<train_loss>\S+)`, `^test (?P<test_loss>\S+)`}, Step: "epoch"}
			spec.StepKey = "epoch"
			spec.Objectives = tc.objectives
			sink := &collect{on: func(r Result) Action {
				os.WriteFile(filepath.Join(dir, fmt.Sprintf("got_%v", r.Metrics["epoch"])), nil, 0o644)
				return Continue
			}}
			if _, err := Run(context.Background(), spec, sink); err != nil {
				t.Fatal(err)
			}
			if got := stepSeries(sink.results, "epoch", "val_loss", "train_loss", "test_loss"); got != want {
				t.Errorf("reports\n got %s\nwant %s", got, want)
			}
			if gaveUp, _ := filepath.Glob(filepath.Join(dir, "gave_up_*")); len(gaveUp) > 0 {
				t.Errorf("the script waited in vain for the reports of %v (or had one too early)", gaveUp)
			}
			skipped := sink.causes(EventReportsSkipped)
			if tc.skipped == "" && len(skipped) > 0 || tc.skipped != "" && (len(skipped) != 1 || !strings.Contains(skipped[0], tc.skipped)) {
				t.Errorf("skipped reports told %q, want %q", skipped, tc.skipped)
			}
		})
	}
}

// TestSteplessLinesAfterTheObjectiveAreTold: lines without a step that
// give a metric a second time after the step they join had its objective
// (a loss printed while the next epoch trains, when the epoch comes only
// on its last line) are told once; a line that gives the objective itself
// (MNIST's test line), once after it, or before it (an epoch's heading
// first) are not.
func TestSteplessLinesAfterTheObjectiveAreTold(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		objective    string
		want         string // what the one event says; "" for none
	}{
		{"the epoch on its last line", `for e in 1 2 3; do echo "loss: 0.9$e"; echo "loss: 0.8$e"; echo "step: $e val_loss: 0.5$e"; done`, "val_loss",
			`lines that give no step, such as "loss: 0.82", gave loss again after step 1 had val_loss: they count as step 1's`},
		{"MNIST's test line", `for e in 1 2 3; do echo "step: $e train_loss: 0.9$e"; echo "step: $e train_loss: 0.8$e"; echo "test_loss: 0.5$e"; done`, "test_loss", ""},
		{"one line after the objective", `for e in 1 2 3; do echo "step: $e train_loss: 0.9$e"; echo "test_loss: 0.5$e"; done`, "train_loss", ""},
		{"the epoch's heading first", `for e in 1 2 3; do echo "step: $e"; echo "loss: 0.9$e"; echo "loss: 0.8$e"; echo "val_loss: 0.5$e"; done`, "val_loss", ""},
		// time_sequence_prediction: a loss at each L-BFGS evaluation.
		{"the objective several times after a heading", `for e in 1 2 3; do echo "step:  $e"; echo "loss: 0.9$e"; echo "loss: 0.8$e"; echo "loss: 0.7$e"; done`, "loss", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := commandSpec(t, 1)
			spec.Command = []string{"sh", "-c", tc.script}
			spec.Metrics = MetricsConfig{Output: true}
			spec.Objectives = []string{tc.objective}
			sink := runCollecting(t, spec)
			checkToldOnce(t, sink.causes(EventMetricsAmbiguous), tc.want)
		})
	}
}

// TestLateMetricsOfTheLastStep: metrics that come for the last step
// recorded, after it was, and that it lacks (Hugging Face's Trainer
// prints its run's summary seconds after the last epoch's evaluation) are
// a report of their own at that step; the lines a restarted attempt
// prints again, the late ones among them, are skipped. (A late metric
// that the step holds already is skipped: see
// TestStepReportedBeforeTheNextBegins, which also says why the script
// begins with an epoch 0.)
func TestLateMetricsOfTheLastStep(t *testing.T) {
	defer func(q time.Duration) { collectQuietMin = q }(collectQuietMin)
	collectQuietMin = 500 * time.Millisecond
	dir := t.TempDir()
	spec := commandSpec(t, 1)
	// wait N waits for the trial's Nth report.
	spec.Command = []string{"sh", "-c", `
d=$1
wait() { i=0; until [ -e "$d/report_$1" ]; do i=$((i+1)); [ $i -gt 400 ] && { : > "$d/gave_up_$1"; return; }; sleep 0.05; done; }
echo 'epoch 0 val 0.6'; echo 'epoch 1 val 0.5'; wait 2; echo 'epoch 2 val 0.4'; wait 3
echo 'summary train_runtime=12.5 epoch=2'; echo 'epoch 3 val 0.3'; wait 4
if [ ! -e "$d/died" ]; then : > "$d/died"; kill -9 $$; fi
echo 'epoch 4 val 0.2'`, "sh", dir}
	spec.Metrics = MetricsConfig{Patterns: []string{`epoch (?P<epoch>\d+) val (?P<val_loss>\S+)`, `train_runtime=(?P<train_runtime>\S+) epoch=(?P<epoch>\d+)`}, Step: "epoch"}
	spec.StepKey = "epoch"
	spec.Objectives = []string{"val_loss"}
	spec.Failure.MaxFailures = 1
	sink := &collect{on: func(r Result) Action {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("report_%d", r.Iteration)), nil, 0o644)
		return Continue
	}}
	sum, err := Run(context.Background(), spec, sink)
	if err != nil || sum.Restarts != 1 {
		t.Fatalf("Run: %+v, %v", sum, err)
	}
	want := "0:val_loss=0.6, 1:val_loss=0.5, 2:val_loss=0.4, 2:train_runtime=12.5, 3:val_loss=0.3, 4:val_loss=0.2, "
	if got := stepSeries(sink.results, "epoch", "val_loss", "train_runtime"); got != want {
		t.Errorf("reports\n got %s\nwant %s", got, want)
	}
	if gaveUp, _ := filepath.Glob(filepath.Join(dir, "gave_up_*")); len(gaveUp) > 0 {
		t.Errorf("the script waited in vain for reports %v", gaveUp)
	}
	skipped := sink.causes(EventReportsSkipped)
	if len(skipped) != 1 || !strings.Contains(skipped[0], "the restarted workers redid steps") {
		t.Errorf("skipped reports told %q, want only the steps the restart redid", skipped)
	}
}

// TestUnmatchedPatternIsTold: a pattern that matched nothing by rank 0's
// exit is told as an event that names it and shows the last lines.
func TestUnmatchedPatternIsTold(t *testing.T) {
	spec := commandSpec(t, 1)
	spec.Command = []string{"sh", "-c", `for i in 1 2 3 4 5 6 7; do echo "epoch $i loss 0.$i"; done; echo '@gotune {"loss": 1}'`}
	spec.Metrics = MetricsConfig{Patterns: []string{`loss=(?P<loss>\S+)`, `epoch (?P<step>\d+)`}}
	sink := runCollecting(t, spec)
	told := sink.causes(EventMetricsUnmatched)
	if len(told) != 1 {
		t.Fatalf("told %q, want one event", told)
	}
	for _, want := range []string{`"loss=(?P<loss>\\S+)"`, "7 output lines", "epoch 3 loss 0.3", "epoch 7 loss 0.7"} {
		if !strings.Contains(told[0], want) {
			t.Errorf("event %q does not say %q", told[0], want)
		}
	}
	if strings.Contains(told[0], "epoch 2 loss") {
		t.Errorf("event %q shows more than the last %d lines", told[0], unmatchedLines)
	}
	if len(sink.results) != 1 || sink.results[0].Metrics["loss"] != 1 {
		t.Errorf("results %+v: the report line is still read", sink.results)
	}
}

// checkToldOnce fails t unless the events' causes told are none, for a
// want of "", or one that contains want.
func checkToldOnce(t *testing.T, told []string, want string) {
	t.Helper()
	switch {
	case want == "" && len(told) > 0:
		t.Errorf("told %q, want nothing", told)
	case want != "" && (len(told) != 1 || !strings.Contains(told[0], want)):
		t.Errorf("told %q, want once %q", told, want)
	}
}

// TestStepNeverGivenIsTold: a step that MetricsConfig.Step names and no
// line gave, while lines gave metrics (a script that prints its epoch in
// a way the default pattern does not read, or names it otherwise but for
// case), is told as an event, since each report is then numbered by
// count, with the name as the lines write it where they do; a step given
// once is not.
func TestStepNeverGivenIsTold(t *testing.T) {
	for _, tc := range []struct {
		name, step, script string
		want               string // in the event; "" for no event
	}{
		{"never", "Epoch", `for i in 1 2 3; do echo "Training epoch $i done"; echo "loss: 0.$i"; done`, `the step "Epoch" by its end: each report is numbered by count; give the pattern`},
		{"another case", "epoch", `for i in 1 2 3; do echo "Epoch $i: loss=0.$i"; done`, `the lines give "Epoch": set step = "Epoch"`},
		{"given", "Epoch", `for i in 1 2 3; do echo "Epoch $i"; echo "loss: 0.$i"; done`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := commandSpec(t, 1)
			spec.Command = []string{"sh", "-c", tc.script}
			spec.Metrics = MetricsConfig{Output: true, Step: tc.step}
			spec.StepKey = tc.step
			sink := runCollecting(t, spec)
			checkToldOnce(t, sink.causes(EventMetricsUnmatched), tc.want)
		})
	}
}

// TestUnmatchedPatternIsToldEarlyWhenNothingMatched: after unmatchedWait,
// the patterns that matched nothing are told of only when no pattern has
// given a metric; otherwise a pattern for a final line waits for rank 0's
// exit, when it has matched.
func TestUnmatchedPatternIsToldEarlyWhenNothingMatched(t *testing.T) {
	defer func(w time.Duration) { unmatchedWait = w }(unmatchedWait)
	unmatchedWait = 300 * time.Millisecond
	for _, tc := range []struct {
		name, script string
		told         int
	}{
		{"a final line", "echo 'epoch 1 val 0.5'; sleep 1; echo 'test 0.4'", 0},
		{"nothing in time", "echo 'loading'; sleep 1; echo 'epoch 1 val 0.5'; echo 'test 0.4'", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := commandSpec(t, 1)
			spec.Command = []string{"sh", "-c", tc.script}
			spec.Metrics = MetricsConfig{Patterns: []string{`epoch (?P<epoch>\d+) val (?P<val_loss>\S+)`, `^test (?P<test_loss>\S+)`}, Step: "epoch"}
			spec.StepKey = "epoch"
			sink := runCollecting(t, spec)
			told := sink.causes(EventMetricsUnmatched)
			if len(told) != tc.told {
				t.Errorf("told %q, want %d events", told, tc.told)
			}
			if got, want := stepSeries(sink.results, "epoch", "val_loss", "test_loss"), "1:val_loss=0.5,test_loss=0.4, "; got != want {
				t.Errorf("reports\n got %s\nwant %s", got, want)
			}
		})
	}
}

// TestAmbiguousNamesAreTold: the default pattern reads "loss" from both
// "loss: 0.5" and "test loss: 0.1"; that is told once, quoting both
// lines. Names read the same way each time (MNIST's "Loss" and "Average
// loss" differ in case; a number before a name is no word) are not.
func TestAmbiguousNamesAreTold(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		want         []string // what the one event says; none when empty
	}{
		{"a test loss", `for s in 0 1; do echo "STEP: $s"; echo "loss: 0.5$s"; echo "loss: 0.4$s"; echo "test loss: 0.1$s"; done`,
			[]string{`reads loss from lines that name it differently, "loss: 0.50" and "test loss: 0.10"`}},
		{"MNIST", `for e in 1 2; do printf 'Train Epoch: %d [0/60000 (0%%)]\tLoss: 0.3\n' $e; echo "Test set: Average loss: 0.03, Accuracy: 9800/10000 (98%)"; done`, nil},
		{"numbers before names", `for e in 1 2; do echo "epoch $e loss: 0.$e"; echo "epoch=$e val_loss=0.$e"; done`, nil},
		// fairseq's training and validation lines of an epoch.
		{"fairseq", `for e in 1 2; do echo "| epoch 00$e | loss 4.7$e | wps 1845$e"; echo "| epoch 00$e | valid on 'valid' subset | loss 6.8$e | best_loss 6.8"; done`,
			[]string{`reads loss from lines that name it differently, "| epoch 001 | loss 4.71 | wps 18451" and "| epoch 001 | valid on 'valid' subset | loss 6.81 | best_loss 6.8"`}},
		{"word_language_model", `for e in 1 2; do echo "| epoch $e |   200/ 2983 batches | lr 20.00 | loss  7.6$e | ppl  2063.12"; echo "| end of epoch $e | time: 140.11s | valid loss  5.7$e | valid ppl   320.88"; done`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := commandSpec(t, 1)
			spec.Command = []string{"sh", "-c", tc.script}
			spec.Metrics = MetricsConfig{Output: true}
			sink := runCollecting(t, spec)
			told := sink.causes(EventMetricsAmbiguous)
			if len(tc.want) == 0 && len(told) > 0 || len(tc.want) > 0 && len(told) != 1 {
				t.Fatalf("told %q, want %d events", told, min(len(tc.want), 1))
			}
			for _, want := range tc.want {
				if !strings.Contains(told[0], want) {
					t.Errorf("event %q does not say %q", told[0], want)
				}
			}
		})
	}
}

// TestUnmatchedPatternOfAFailedWorkerIsNotTold: when rank 0 fails before
// its pattern matched, its failure, which quotes its last lines, says why,
// and no metrics_unmatched event adds that the pattern matched nothing.
func TestUnmatchedPatternOfAFailedWorkerIsNotTold(t *testing.T) {
	spec := commandSpec(t, 1)
	spec.Command = []string{"sh", "-c", `echo "loading data"; echo "no such file: data.txt" >&2; exit 1`}
	spec.Metrics = MetricsConfig{Patterns: []string{`loss (?P<loss>\S+)`}}
	sink := &collect{}
	_, err := Run(context.Background(), spec, sink)
	if err == nil || !strings.Contains(err.Error(), "no such file: data.txt") {
		t.Fatalf("Run: %v, want the worker's failure with its last lines", err)
	}
	for _, e := range sink.events {
		if e.Kind == EventMetricsUnmatched {
			t.Errorf("told %q beside the failure", e.Cause)
		}
	}
}

// TestRestartCountGoesOnAcrossRuns: TORCHELASTIC_RESTART_COUNT goes on
// from Spec.Restarts (a resumed sweep's), and the attempt in the log from
// Spec.Attempts (which also counts a paused trial's earlier starts).
func TestRestartCountGoesOnAcrossRuns(t *testing.T) {
	dead := filepath.Join(t.TempDir(), "died")
	spec := commandSpec(t, 1)
	spec.Command = []string{"sh", "-c", `echo "step=$TORCHELASTIC_RESTART_COUNT restart_count=$TORCHELASTIC_RESTART_COUNT"; [ -e "$1" ] || { : > "$1"; exit 3; }`, "sh", dead}
	spec.Metrics = MetricsConfig{Output: true}
	spec.Restarts, spec.Attempts = 2, 5
	spec.Failure.MaxFailures = 1
	sink := runCollecting(t, spec)
	var counts []float64
	for _, r := range sink.results {
		counts = append(counts, r.Metrics["restart_count"])
	}
	if fmt.Sprint(counts) != "[2 3]" {
		t.Errorf("restart counts %v, want [2 3]", counts)
	}
	log := readFile(t, filepath.Join(spec.LogDir, "worker_0.log"))
	for _, want := range []string{"attempt 6: worker 0", "attempt 7: worker 0"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log does not say %q:\n%s", want, log)
		}
	}
}

func TestMetricsConfigErrors(t *testing.T) {
	cases := []struct {
		cfg  Config
		want string
	}{
		{Config{Model: "mlp", Dataset: "d.csv", Metrics: MetricsConfig{Output: true}}, "metrics: collecting metrics needs a command"},
		{Config{Command: []string{"x"}, Metrics: MetricsConfig{Patterns: []string{`(`}}}, "metrics.patterns[0]: error parsing regexp"},
		{Config{Command: []string{"x"}, Metrics: MetricsConfig{Patterns: []string{`ok`, `loss (\S+)`}}}, "metrics.patterns[0]: has no named group"},
		{Config{Command: []string{"x"}, Metrics: MetricsConfig{File: "m.txt", Format: "tsv"}}, `metrics.format: must be "jsonl" or "csv"`},
		{Config{Command: []string{"x"}, Metrics: MetricsConfig{Format: "csv"}}, "metrics.format: a format needs a file"},
	}
	for _, tc := range cases {
		err := tc.cfg.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %s…", tc.cfg.Metrics, err, tc.want)
		}
	}
}

func TestDefaultPatternReadsPairs(t *testing.T) {
	pt, err := compilePattern(DefaultPattern)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ line, want string }{
		{"epoch=3 loss=0.41 acc=97%", "step=<nil> acc=97 epoch=3 loss=0.41 "},
		{"step: 12, val_loss: 1e-3, lr=3E-4", "step=12 lr=0.0003 val_loss=0.001 "},
		{"loss = nan, grad_norm: -Inf", "step=<nil> grad_norm=-Inf loss=NaN "},
		{"time: 12:30:01 host=a1", "step=<nil> "},
		{"version=1.2.3 ok", "step=<nil> "},
		// argparse's arguments, as a script prints them at its start.
		{"Namespace(batchSize=64, lr=0.0002, niter=25, outf='.')", "step=<nil> "},
		{"run Namespace(lr=0.1) loss=2", "step=<nil> loss=2 lr=0.1 "},
		// A model's layers, as print(model) writes them.
		{"    (1): BatchNorm2d(512, eps=1e-05, momentum=0.1, affine=True)", "step=<nil> "},
		{"    (relu): LeakyReLU(negative_slope=0.2, inplace=True)", "step=<nil> "},
		{"Result(loss=0.3, acc=0.9)", "step=<nil> acc=0.9 loss=0.3 "},
		// A printed dict (Hugging Face's Trainer logs) or JSON object.
		{"{'loss': 0.6931, 'grad_norm': 1.23, 'learning_rate': 4.5e-05, 'epoch': 0.5}", "step=<nil> epoch=0.5 grad_norm=1.23 learning_rate=4.5e-05 loss=0.6931 "},
		{`{"step": 7, "val_loss": 0.25, "model": "resnet", "nested": {"acc": 0.9}}`, "step=7 acc=0.9 val_loss=0.25 "},
		// Values NumPy 2 or PyTorch wrap, as a dict of them prints.
		{"{'val_loss': np.float64(0.25), 'epoch': np.int64(3)}", "step=<nil> epoch=3 val_loss=0.25 "},
		{"{'val_loss': tensor(0.2500), 'val_acc': tensor(0.9100)}", "step=<nil> val_acc=0.91 val_loss=0.25 "},
		{"loss: tensor(0.6931, grad_fn=<NllLossBackward0>)", "step=<nil> loss=0.6931 "},
		// Thousands separators: not a metric's text, and not its first digits.
		{"tokens per iteration will be: 16,384", "step=<nil> "},
		{"samples: 1,234,567.5 loss: 0.5", "step=<nil> loss=0.5 "},
		{`{"a":100,"b":200} c: 1,2`, "step=<nil> a=100 b=200 c=1 "},
		// A seed, as dcgan echoes it, is an argument.
		{"Random Seed:  1", "step=<nil> "},
		{"manual_seed=42 loss=0.5 seeds=3", "step=<nil> loss=0.5 seeds=3 "},
		{"(epoch 2): loss=0.3", "step=<nil> loss=0.3 "},
		// A line that begins with its epoch or step, as progress bars and
		// headings print it.
		{"Epoch 3: 100%|#####| 63/63 [00:00<00:00, 80.50it/s, v_num=0, train_loss=0.312]", "step=<nil> Epoch=3 train_loss=0.312 v_num=0 "},
		{"Epoch 1/10", "step=<nil> Epoch=1 "},
		{"1875/1875 [==============================] - 2s 1ms/step - loss: 0.2961 - accuracy: 0.9143 - val_loss: 0.1414 - val_accuracy: 0.9577", "step=<nil> accuracy=0.9143 loss=0.2961 val_accuracy=0.9577 val_loss=0.1414 "},
		{"Epoch 2", "step=<nil> Epoch=2 "},
		{"step 250: train loss 2.0, val loss 2.1", "step=250 "},
		{"Iteration 4, loss = 0.52", "step=<nil> Iteration=4 loss=0.52 "},
		{"Epoch [1/5], Step [100/600], Loss: 0.2153", "step=<nil> Epoch=1 Loss=0.2153 "},
		{"Epoch: [0][ 10/5005]\tTime  0.512 ( 0.512)\tLoss 6.9e+00 (6.9e+00)", "step=<nil> Epoch=0 "},
		{"iter [12] loss: 0.5", "step=<nil> iter=12 loss=0.5 "},
		{"Epoch: 3 loss: 0.5", "step=<nil> Epoch=3 loss=0.5 "},
		{"Step 1 of the plan", "step=<nil> "},
		// An episode, as pytorch/examples' reinforcement_learning prints
		// it, a tab after its number.
		{"Episode 10\tLast reward: 9.00\tAverage reward: 10.02", "step=<nil> Average_reward=10.02 Episode=10 Last_reward=9 "},
		{"Epoch 3\tloss: 0.5", "step=<nil> Epoch=3 loss=0.5 "},
		{"Episode 3 finished after 20 timesteps", "step=<nil> "},
		{"| episode 4 | reward 9.5 |", "step=<nil> episode=4 reward=9.5 "},
		// After an arrow, as pytorch/examples' super_resolution prints
		// each batch's loss; its epoch's summary is no heading.
		{"===> Epoch[1](3/7): Loss: 0.1823", "step=<nil> Epoch=1 Loss=0.1823 "},
		{"===> Epoch 1 Complete: Avg. Loss: 0.1677", "step=<nil> Loss=0.1677 "},
		{"--> step 40: loss=0.2", "step=40 loss=0.2 "},
		{"=> Epoch 2", "step=<nil> Epoch=2 "},
		// A sentence that names its metric first, as PyTorch's tutorials
		// print their test accuracy.
		{"Accuracy of the network on the 10000 test images: 54 %", "step=<nil> Accuracy=54 "},
		{"Test Accuracy of the model on the 10000 test images: 97.5 %", "step=<nil> Accuracy=97.5 "},
		{"train loss over epoch: 0.52, lr: 0.1", "step=<nil> loss=0.52 lr=0.1 "},
		{"loss scale: 65536", "step=<nil> scale=65536 "},
		{"Number of parameters: 1234, loss: 0.5", "step=<nil> loss=0.5 parameters=1234 "},
		{"Epoch [x] loss: 0.5", "step=<nil> loss=0.5 "},
		{"epochs 10", "step=<nil> "},
		// Lightning's lines on its accelerators and its code quotes.
		{"TPU available: False, using: 0 TPU cores", "step=<nil> "},
		{"`Trainer.fit` stopped: `max_epochs=6` reached.", "step=<nil> "},
		// Cells between bars, as pytorch/examples' word_language_model and
		// fairseq print them: a name, then its value.
		{"| epoch   1 |   200/ 2983 batches | lr 20.00 | ms/batch 45.23 | loss  7.63 | ppl  2063.12", "step=<nil> epoch=1 loss=7.63 lr=20 ms/batch=45.23 ppl=2063.12 "},
		{"| end of epoch   1 | time: 140.11s | valid loss  5.77 | valid ppl   320.88", "step=<nil> epoch=1 time=140.11 valid_loss=5.77 valid_ppl=320.88 "},
		{"| End of training | test loss  5.67 | test ppl   290.74", "step=<nil> test_loss=5.67 test_ppl=290.74 "},
		{"| epoch 001 | loss 9.123 | ppl 557.43 | wps 2345 | step 10", "step=10 epoch=1 loss=9.123 ppl=557.43 wps=2345 "},
		{"| epoch 2 | loss=0.5 | acc 0.9", "step=<nil> acc=0.9 epoch=2 loss=0.5 "},
		{"| loss 0.5 | ok", "step=<nil> "},
		{"Loading shards | step 5", "step=<nil> "},
		{"| lr | 0.1 |", "step=<nil> "},
		{"100%|##########| 469/469 [00:12<00:00, 37.5it/s]", "step=<nil> "},
		{"seed 3 | loss 0.5 | Random seed 1", "step=<nil> loss=0.5 "},
		{"| Train Acc: 91.5% | Epoch Time 3.2s | best val step 40", "step=40 Epoch_Time=3.2 Train_Acc=91.5 "},
		// An accuracy as correct out of total, as MNIST's test line gives it.
		{"Test set: Average loss: 0.0318, Accuracy: 9830/10000 (98%)", "step=<nil> Accuracy=0.983 loss=0.0318 "},
		{"Acc: 45/50 Loss: 3/4", "step=<nil> Acc=0.9 Loss=3 "},
		{"accuracy: 12/0", "step=<nil> accuracy=12 "},
		{"acc: 5/4", "step=<nil> acc=5 "},
		{"acc: 0.5/1.0", "step=<nil> acc=0.5 "},
		// A polynomial, as pytorch/examples' regression prints the one it
		// learned: its first coefficient is no value of y.
		{"==> Learned function:\ty = -14.30 x^1 +2.53 x^2 -0.71 x^3 +1.08 x^4 +3.22", "step=<nil> "},
		{"y = 2*x + 1, loss: 0.5", "step=<nil> loss=0.5 "},
		{"loss: 0.5 x", "step=<nil> loss=0.5 "},
		// Metric words and numbers after a colon, apart by spaces alone, as
		// pytorch/examples' gcn and gat print their test results.
		{"Test set results: loss 1.3767 accuracy 0.4008", "step=<nil> accuracy=0.4008 loss=1.3767 "},
		{"Epoch 3: loss 0.5 acc 0.9", "step=<nil> Epoch=3 acc=0.9 loss=0.5 "},
		{"Downloading: file 1 of 3", "step=<nil> "},
		{"Results: loss 0.5 accuracy", "step=<nil> "},
		{"Results: loss 0.5 lr 0.1", "step=<nil> "},
		{"iter 110: loss 2.29, time 12.3ms, mfu 5.20%", "step=<nil> iter=110 "},
		{"Results: loss 0x10 accuracy 0.4", "step=<nil> "},
		// A name given twice in a line after different words.
		{"[Epoch 0/200] [Batch 0/938] [D loss: 0.693147] [G loss: 0.707]", "step=<nil> D_loss=0.693147 Epoch=0 G_loss=0.707 "},
		{"[Step 500/9380] [Epoch 1/10] [Batch 30/938] [D loss: 0.69]", "step=<nil> Epoch=1 Step=500 loss=0.69 "},
		{"[Epoch 1/10] [Iter 3] x", "step=<nil> Epoch=1 Iter=3 "},
		{"Epoch 1: train loss: 0.5, val loss: 0.4", "step=<nil> Epoch=1 train_loss=0.5 val_loss=0.4 "},
		{"loss: 0.5 test loss: 0.1", "step=<nil> loss=0.5 test_loss=0.1 "},
		{"test loss: 0.5, test loss: 0.1", "step=<nil> loss=0.1 "},
		// A logging library's fields before the message.
		{"INFO:root:Epoch 3: loss=0.5", "step=<nil> Epoch=3 loss=0.5 "},
		{"2026-11-28 04:22:24,123 - INFO - __main__ - Epoch 3, val_loss: 0.4", "step=<nil> Epoch=3 val_loss=0.4 "},
		{"11/28/2026 04:22:24 - INFO - __main__ - Epoch 3/10", "step=<nil> Epoch=3 "},
		{"[2026-11-28 04:22:24] [INFO] step 40: loss=0.2", "step=40 loss=0.2 "},
		{"2026-11-28 04:22:24.123 | INFO     | __main__:train:42 - Epoch 3 | loss 0.5 | acc 0.9", "step=<nil> Epoch=3 acc=0.9 loss=0.5 "},
		{"I1128 04:22:24.123456 140 train.py:42] epoch 3, loss: 0.5", "step=<nil> epoch=3 loss=0.5 "},
		{"INFO:root:Namespace(lr=0.1, epochs=3)", "step=<nil> "},
		// A time as time.ctime() writes it, as pytorch/examples'
		// fast_neural_style puts it first.
		{"Sat Nov 28 04:22:24 2026\tEpoch 1:\t[2000/83000]\tcontent: 742803.125000\tstyle: 2530112.5\ttotal: 3272915.625", "step=<nil> Epoch=1 content=742803.125 style=2.5301125e+06 total=3.272915625e+06 "},
		{"Sun Nov  1 04:22:24 2026 step 3: loss=0.5", "step=3 loss=0.5 "},
		{"Sat Nov 28 04:22:24 2026 - INFO - Epoch 2", "step=<nil> Epoch=2 "},
		{"INFO model - epoch 2 done", "step=<nil> "},
		{"| epoch 001:    450 / 1891 loss=11.521, nll_loss=10.881, ppl=1886.05", "step=<nil> epoch=1 loss=11.521 nll_loss=10.881 ppl=1886.05 "},
		{"| epoch 081 | valid on 'valid' subset | loss 6.846 | nll_loss 4.610 | best_loss 6.84088", "step=<nil> best_loss=6.84088 epoch=81 loss=6.846 nll_loss=4.61 "},
	}
	for _, tc := range cases {
		obs, _ := pt.match(tc.line, "step")
		got := "step=<nil> "
		if obs.step != nil {
			got = fmt.Sprintf("step=%v ", *obs.step)
		}
		for _, k := range sortedKeys(obs.metrics) {
			got += fmt.Sprintf("%s=%v ", k, obs.metrics[k])
		}
		if got != tc.want {
			t.Errorf("%q: got %q, want %q", tc.line, got, tc.want)
		}
	}
}

// TestShownText: patterns read a line as a terminal shows it.
func TestShownText(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{"loss: 0.5", "loss: 0.5"},
		{"\x1b[32mloss\x1b[0m: 0.5", "loss: 0.5"},
		{"\rEpoch 1: 50%|#  | 1/2 [loss=0.9]\rEpoch 1: 100%|##| 2/2 [loss=0.8]", "Epoch 1: 100%|##| 2/2 [loss=0.8]"},
		{"Epoch 1: 100%|##| 2/2 [loss=0.8]\r          \repoch: 1 val_loss: 0.5", "epoch: 1 val_loss: 0.5"},
		{"loss: 0.5\r", "loss: 0.5\r"},
		{"\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ acc=0.9", "link acc=0.9"},
	} {
		if got := shownText(tc.line); got != tc.want {
			t.Errorf("shownText(%q) = %q, want %q", tc.line, got, tc.want)
		}
	}
}

// TestColouredLinesAreRead: a line's terminal escape sequences (a script
// that colours its output, a link) are not part of what patterns read.
func TestColouredLinesAreRead(t *testing.T) {
	spec := commandSpec(t, 1)
	spec.Command = []string{"sh", "-c", `for s in 1 2; do printf '\033[1mstep\033[0m=%d \033[32mloss\033[0m: 0.%d \033]8;;http://x\033\\val_loss\033]8;;\033\\=0.4%d\n' $s $s $s; done`}
	spec.Metrics = MetricsConfig{Output: true}
	sink := runCollecting(t, spec)
	want := "1:loss=0.1,val_loss=0.41, 2:loss=0.2,val_loss=0.42, "
	if got := stepSeries(sink.results, "step", "loss", "val_loss"); got != want {
		t.Errorf("reports\n got %s\nwant %s", got, want)
	}
	for _, r := range sink.results {
		if len(r.Metrics) != 3 {
			t.Errorf("report %d: metrics %v, want step, loss and val_loss", r.Iteration, r.Metrics)
		}
	}
}

// A pattern of its own with groups name and value reads a metric per
// match, named by the text of name, as Katib's metric filters do.
func TestNameAndValuePattern(t *testing.T) {
	pt, err := compilePattern(`\{metricName: (?P<name>[\w|-]+), metricValue: (?P<value>[-+\w.]+)\}`)
	if err != nil {
		t.Fatal(err)
	}
	obs, ok := pt.match("INFO {metricName: epoch, metricValue: 3};{metricName: accuracy, metricValue: 0.9800};{metricName: loss, metricValue: nan}", "epoch")
	if !ok || obs.step == nil || *obs.step != 3 || len(obs.metrics) != 2 || obs.metrics["accuracy"] != 0.98 || !math.IsNaN(obs.metrics["loss"]) {
		t.Errorf("match: %v %+v", ok, obs)
	}
}

// FuzzPatternMatch: any line matched by the default pattern yields named
// metrics whose values are the numbers written in the line, each with the
// word of letters (or none) that comes before its name in the line.
func FuzzPatternMatch(f *testing.F) {
	for _, s := range []string{"epoch=3 loss=0.41", "{'loss': 0.69, 'epoch': 0.5}", `{"val_loss": 1e-3}`, "loss: 0.5 test loss: 0.1", "step 100: train loss 2.31, val loss 2.35", "a: inf b=-1e309", "x=0x10 y=1_000", "\x00=1", "| end of epoch   1 | time:  3.65s | valid loss  5.77 | a: 1", "2026-11-28 04:22:24.123 | INFO | m:f:4 - Epoch 3: a=1", "Accuracy: 9830/10000 (98%)", ""} {
		f.Add(s)
	}
	pt, err := compilePattern(DefaultPattern)
	if err != nil {
		f.Fatal(err)
	}
	name := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.\-/]*$`)
	word := regexp.MustCompile(`^[A-Za-z]*$`)
	f.Fuzz(func(t *testing.T, line string) {
		obs, ok := pt.match(line, "step")
		if !ok {
			return
		}
		for k, v := range obs.metrics {
			if !name.MatchString(k) || k == "step" {
				t.Errorf("%q: metric name %q", line, k)
			}
			if math.IsInf(v, 0) && !strings.Contains(strings.ToLower(line), "inf") {
				t.Errorf("%q: %s is infinite", line, k)
			}
		}
		if len(obs.metrics) == 0 && obs.step == nil {
			t.Errorf("%q: a match without a metric", line)
		}
		for k, q := range obs.qualifiers {
			if _, ok := obs.metrics[k]; !ok || !word.MatchString(q) || !strings.Contains(line, q) {
				t.Errorf("%q: %s after the word %q", line, k, q)
			}
		}
		if len(obs.qualifiers) != len(obs.metrics) {
			t.Errorf("%q: words before %d of %d metrics", line, len(obs.qualifiers), len(obs.metrics))
		}
	})
}

// FuzzParseJSONRecord: any line either fails cleanly or yields finite
// numbers, NaN or infinities only where the line spells them.
func FuzzParseJSONRecord(f *testing.F) {
	for _, s := range []string{`{"step": 3, "loss": 0.4, "tag": "x"}`, `{"loss": NaN}`, `{"a": 1e999}`, `[1]`, `{"step": "inf"}`, `{} {}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		obs, err := parseJSONRecord([]byte(line), "step")
		if err != nil {
			return
		}
		for k, v := range obs.metrics {
			if (math.IsNaN(v) || math.IsInf(v, 0)) && !strings.ContainsAny(line, "NIni") {
				t.Errorf("%q: %s = %v", line, k, v)
			}
		}
	})
}

// FuzzParseCSVRecord: any row either fails cleanly or yields metrics
// named by the header's columns only.
func FuzzParseCSVRecord(f *testing.F) {
	for _, s := range []string{"0,5,0.3,", `1,"2",x,1e3`, "\"unterminated,1", ",,,,,,,", "nan,inf"} {
		f.Add(s)
	}
	header := []string{"epoch", "step", "train_loss", "val_loss"}
	f.Fuzz(func(t *testing.T, row string) {
		obs, err := parseCSVRecord(header, []byte(row), "step")
		if err != nil {
			return
		}
		for k := range obs.metrics {
			if k != "epoch" && k != "train_loss" && k != "val_loss" {
				t.Errorf("%q: metric %q is no column", row, k)
			}
		}
	})
}

// TestCollectedEventsFromTensorBoardFiles: scalars of event files under
// the folder, written before and while the group runs, are recorded by
// tag at their steps, once.
func TestCollectedEventsFromTensorBoardFiles(t *testing.T) {
	dir := t.TempDir()
	writeEvents(t, filepath.Join(dir, "runs", "old"), 1, 2) // an earlier run's, recorded already up to 1
	spec := commandSpec(t, 1)
	spec.Command = []string{os.Args[0], eventsArg, filepath.Join(dir, "runs", "new"), "1", "3"}
	spec.Metrics = MetricsConfig{TensorBoard: filepath.Join(dir, "runs")}
	spec.LastStep, spec.Delivered = &Step{"step", 1}, 1
	sink := runCollecting(t, spec)
	got := stepSeries(sink.results, "step", "loss/train", "loss/val")
	want := "2:loss/train=0.5,loss/val=0.25, 3:loss/train=0.33333334,loss/val=0.11111112, "
	if got != want {
		t.Errorf("reports\n got %s\nwant %s", got, want)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func sortedKeys(m map[string]float64) []string { return slices.Sorted(maps.Keys(m)) }

// eventsArg makes the test binary write event files (see init).
const eventsArg = "gotune-test-events"

// init runs the test binary as a script that writes TensorBoard events:
// eventsArg DIR FROM TO writes steps FROM to TO into a new event file in
// DIR, loss/train = 1/step and loss/val = 1/step², and exits.
func init() {
	if len(os.Args) < 5 || os.Args[1] != eventsArg {
		return
	}
	from, _ := strconv.Atoi(os.Args[3])
	to, _ := strconv.Atoi(os.Args[4])
	if err := writeEventFile(os.Args[2], from, to); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func writeEventFile(dir string, from, to int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	w, err := tfevents.Create(dir, time.Now())
	if err != nil {
		return err
	}
	defer w.Close()
	for s := from; s <= to; s++ {
		v := float32(1) / float32(s)
		e := tfevents.Event{WallTime: tfevents.Seconds(time.Now()), Step: int64(s),
			Scalars: []tfevents.Scalar{{Tag: "loss/train", Value: v}, {Tag: "loss/val", Value: v * v}}}
		if err := w.Write(e); err != nil {
			return err
		}
	}
	return nil
}

func writeEvents(t *testing.T, dir string, from, to int) {
	t.Helper()
	if err := writeEventFile(dir, from, to); err != nil {
		t.Fatal(err)
	}
}

// FuzzTailEventFile feeds arbitrary bytes, in two writes, to the reader of
// a growing event file: it never panics, never reads past the data, and
// reads the same events whether the file arrived whole or in two parts.
func FuzzTailEventFile(f *testing.F) {
	var good []byte
	for s := int64(1); s <= 3; s++ {
		ev := tfevents.AppendEvent(nil, tfevents.Event{Step: s, Scalars: []tfevents.Scalar{{Tag: "loss", Value: float32(s)}}})
		good = tfevents.AppendRecord(good, ev)
	}
	f.Add(good, 20)
	f.Add(good[:len(good)-3], 7)
	f.Add([]byte("\x00\x00\x00\x00\x00\x00\x00\x00garbage"), 3)
	f.Fuzz(func(t *testing.T, data []byte, cut int) {
		if cut < 0 || cut > len(data) {
			cut = len(data) / 2
		}
		dir := t.TempDir()
		path := filepath.Join(dir, "events.out.tfevents.1.host")
		whole := &tailFile{path: path, events: true}
		parts := &tailFile{path: path, events: true}
		if err := os.WriteFile(path, data[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		got := parts.read("step")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		got = append(got, parts.read("step")...)
		want := whole.read("step")
		if parts.offset > int64(len(data)) || whole.offset > int64(len(data)) {
			t.Fatalf("read to %d and %d of %d bytes", parts.offset, whole.offset, len(data))
		}
		if !whole.broken && observations(got) != observations(want) {
			t.Errorf("in two parts %v, whole %v", got, want)
		}
	})
}

// observations renders obs as "step:metrics" items, to compare.
func observations(obs []observation) string {
	var b strings.Builder
	for _, o := range obs {
		if o.step != nil {
			fmt.Fprintf(&b, "%v", *o.step)
		}
		fmt.Fprintf(&b, ":%v ", o.metrics)
	}
	return b.String()
}
