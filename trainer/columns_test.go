package trainer

import (
	"fmt"
	"strings"
	"testing"
)

// TestColumnTables reads the output of a script line by line, as the
// collector does, and lists the rows read: each row's step (with
// stepKey "epoch") and metrics.
func TestColumnTables(t *testing.T) {
	cases := []struct {
		name  string
		lines []string
		want  []string
	}{
		{"skorch: right-aligned under a rule, coloured, a blank checkpoint cell", []string{
			"Re-initializing module.",
			"  epoch    train_loss    valid_acc    valid_loss    cp     dur",
			"-------  ------------  -----------  ------------  ----  ------",
			"      1        \x1b[36m0.6736\x1b[0m       \x1b[32m0.6250\x1b[0m        \x1b[35m0.6577\x1b[0m     +  0.0267",
			"      2        0.7001       0.6100        0.6800        0.0193",
		}, []string{
			"epoch=1 dur=0.0267 train_loss=0.6736 valid_acc=0.625 valid_loss=0.6577",
			"epoch=2 dur=0.0193 train_loss=0.7001 valid_acc=0.61 valid_loss=0.68",
		}},
		{"fastai: left-aligned from epoch 0, a time cell", []string{
			"epoch     train_loss  valid_loss  accuracy  time    ",
			"0         2.597476    7.834398    0.205096  00:07   ",
			"1         2.075519    2.908207    0.393121  00:06   ",
		}, []string{
			"epoch=0 accuracy=0.205096 train_loss=2.597476 valid_loss=7.834398",
			"epoch=1 accuracy=0.393121 train_loss=2.075519 valid_loss=2.908207",
		}},
		{"tabs: cell by cell", []string{
			"epoch\tloss\tval_acc",
			"1\t0.52\t0.81",
			"10\t0.31\t0.9",
		}, []string{
			"epoch=1 loss=0.52 val_acc=0.81",
			"epoch=10 loss=0.31 val_acc=0.9",
		}},
		{"the header holds over other lines", []string{
			"  epoch    loss    acc",
			"      1    0.50   0.70",
			"UserWarning: something changed",
			"saving model",
			"      2    0.40   0.80",
		}, []string{
			"epoch=1 acc=0.7 loss=0.5",
			"epoch=2 acc=0.8 loss=0.4",
		}},
		{"a new header replaces the old with its row", []string{
			"epoch  loss",
			"    1  0.50",
			"step   acc   f1",
			"   5   0.9  0.8",
		}, []string{
			"epoch=1 loss=0.5",
			"epoch=<nil> acc=0.9 f1=0.8 step=5",
		}},
		{"words with no row after them are no header", []string{
			"Loading the data set",
			"done",
			"   12   0.5   3   4",
		}, nil},
		{"a row must come right after its header", []string{
			"epoch  loss",
			"training...",
			"    1  0.50",
		}, nil},
		{"cells out of the columns are no row", []string{
			"  epoch    loss    acc",
			"      1    0.50   0.70",
			"Saved 3 files in 2 s",
			"1 2",
		}, []string{
			"epoch=1 acc=0.7 loss=0.5",
		}},
		{"one number is no row", []string{
			"  epoch    loss",
			"      1        ",
			"  model    size",
			"    cnn      12",
		}, nil},
		{"two cells under one column are no row", []string{
			"  epoch         loss",
			"      1  2     0.5",
		}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var table columnTable
			var got []string
			for _, line := range tc.lines {
				obs, ok := table.read(shownText(line), "epoch")
				if !ok {
					continue
				}
				row := "epoch=<nil>"
				if obs.step != nil {
					row = fmt.Sprintf("epoch=%v", *obs.step)
				}
				for _, k := range sortedKeys(obs.metrics) {
					row += fmt.Sprintf(" %s=%v", k, obs.metrics[k])
				}
				got = append(got, row)
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("rows read:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// FuzzColumnTable: whatever the lines, a row read names only columns of
// a header line before it, with numbers the row's line spells.
func FuzzColumnTable(f *testing.F) {
	f.Add("  epoch    loss    acc\n      1    0.50   0.70\n      2    nan    inf")
	f.Add("epoch\tloss\n1\t0.5")
	f.Add("a b\n-- --\n\n 1 2\nx y z\n1 2 3")
	f.Fuzz(func(t *testing.T, text string) {
		var table columnTable
		headers := map[string]bool{}
		for _, line := range strings.Split(text, "\n") {
			obs, ok := table.read(line, "step")
			if ok {
				if len(obs.metrics)+btoi(obs.step != nil) < 2 {
					t.Errorf("%q: a row of fewer than 2 numbers", line)
				}
				for name := range obs.metrics {
					if !headers[name] || name == "step" {
						t.Errorf("%q: metric %q is no column of a header before it", line, name)
					}
				}
			}
			for _, c := range tableCells(line) {
				headers[c.text] = true
			}
		}
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
