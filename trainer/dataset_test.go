package trainer

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestLoadCSV(t *testing.T) {
	d, err := readCSV("t.csv", strings.NewReader("\ufeffa, b ,y\n1, 2.5,3\n -4,5e1 , 3\n0,0,1.5\n"), "y", nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Rows() != 3 || d.Cols != 2 || !reflect.DeepEqual(d.FeatureNames, []string{"a", "b"}) {
		t.Fatalf("rows %d cols %d names %v", d.Rows(), d.Cols, d.FeatureNames)
	}
	if !reflect.DeepEqual(d.Features, []float64{1, 2.5, -4, 50, 0, 0}) {
		t.Errorf("features %v", d.Features)
	}
	if !reflect.DeepEqual(d.Targets, []float64{3, 3, 1.5}) || d.TargetsErr() != nil {
		t.Errorf("targets %v, %v", d.Targets, d.TargetsErr())
	}
	if !reflect.DeepEqual(d.Classes, []string{"1.5", "3"}) || !reflect.DeepEqual(d.Class, []int{1, 1, 0}) {
		t.Errorf("classes %v, class %v", d.Classes, d.Class)
	}

	d, err = readCSV("t.csv", strings.NewReader("id,x,kind\nr1,1,b\nr2,2,a\nr3,3,b\n"), "kind", []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d.Classes, []string{"a", "b"}) || !reflect.DeepEqual(d.Class, []int{1, 0, 1}) || d.Targets != nil {
		t.Errorf("text labels: classes %v, class %v, targets %v", d.Classes, d.Class, d.Targets)
	}
	if err := d.TargetsErr(); err == nil || !strings.Contains(err.Error(), `t.csv:2: label "kind": "b" is not a finite number`) {
		t.Errorf("TargetsErr: %v", err)
	}
}

func TestLoadCSVErrors(t *testing.T) {
	tests := []struct {
		name, body string
		features   []string
		want       string
	}{
		{"missing label", "a,b\n1,2\n", nil, `t.csv:1: no column named "label" (the label); the header has "a", "b"`},
		{"not a number", "a,label\n1,0\n2x,1\n", nil, `t.csv:3: column "a": "2x" is not a finite number`},
		{"infinite", "a,label\n1,0\nInf,1\n", nil, `t.csv:3: column "a": "Inf" is not a finite number`},
		{"missing value", "a,label\n1,0\n,1\n", nil, `t.csv:3: column "a" is empty`},
		{"missing label value", "a,label\n1,0\n2, \n", nil, `t.csv:3: the label column "label" is empty`},
		{"ragged row", "a,label\n1,0\n2\n", nil, "t.csv:3: wrong number of fields"},
		{"bad quote", "a,label\n1,0\n\"2,1\n", nil, "t.csv:3:"},
		{"no rows", "a,label\n", nil, "no data rows"},
		{"empty file", "", nil, "the file is empty"},
		{"duplicate column", "a,a,label\n1,2,0\n", nil, `column "a" appears twice`},
		{"label only", "label\n1\n", nil, "no feature columns"},
		{"label as feature", "a,label\n1,0\n", []string{"label"}, "is the label and cannot also be a feature"},
		{"feature twice", "a,label\n1,0\n", []string{"a", "a"}, `feature "a" is named twice`},
		{"text feature", "name,label\nbob,0\n", nil, `t.csv:2: column "name": "bob" is not a finite number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := readCSV("t.csv", strings.NewReader(tt.body), "label", tt.features)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want %q", err, tt.want)
			}
		})
	}
	if _, err := LoadCSV(filepath.Join(t.TempDir(), "none.csv"), "label"); err == nil || !strings.Contains(err.Error(), "none.csv") {
		t.Errorf("missing file: %v", err)
	}
}

// FuzzLoadCSV feeds arbitrary files to the CSV reader: it must return an
// error or a consistent data set, never panic.
func FuzzLoadCSV(f *testing.F) {
	f.Add([]byte("a,b,label\n1,2,0\n3,4,1\n"))
	f.Add([]byte("x,label\n1,cat\n2,dog\n"))
	f.Add([]byte("\ufeffx,label\n\"1\",2\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := readCSV("f.csv", bytes.NewReader(data), "label", nil)
		if err != nil {
			return
		}
		if d.Rows() == 0 || d.Cols == 0 || len(d.Features) != d.Rows()*d.Cols || len(d.FeatureNames) != d.Cols {
			t.Fatalf("inconsistent data set: %d rows, %d cols, %d features, names %v", d.Rows(), d.Cols, len(d.Features), d.FeatureNames)
		}
		for i, c := range d.Class {
			if c < 0 || c >= len(d.Classes) {
				t.Fatalf("row %d has class %d of %d", i, c, len(d.Classes))
			}
		}
		if (d.Targets == nil) == (d.TargetsErr() == nil) {
			t.Fatalf("targets %v with error %v", d.Targets, d.TargetsErr())
		}
		for _, v := range d.Features {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("non-finite feature %v", v)
			}
		}
	})
}

func TestLoadSplit(t *testing.T) {
	train, val, err := LoadSplit(digitsSplit, 1797)
	if err != nil {
		t.Fatal(err)
	}
	if len(train) != 1437 || len(val) != 360 {
		t.Errorf("digits split: %d train, %d val rows, want 1437 and 360", len(train), len(val))
	}
	dir := t.TempDir()
	tests := []struct{ name, body, want string }{
		{"bad header", "index,set\n0,train\n", "the header must be row,split"},
		{"out of range", "row,split\n0,train\n5,val\n", ":3: row \"5\" is not a row index of the data set (0 to 2)"},
		{"twice", "row,split\n0,train\n0,val\n", ":3: row 0 is listed twice"},
		{"bad split", "row,split\n0,test\n", `:2: split "test" must be "train" or "val"`},
		{"missing rows", "row,split\n0,train\n1,val\n", "lists 2 rows but the data set has 3"},
		{"empty", "", "the file is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.name+".csv")
			os.WriteFile(path, []byte(tt.body), 0o644)
			_, _, err := LoadSplit(path, 3)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want %q", err, tt.want)
			}
		})
	}
}

func TestScaling(t *testing.T) {
	d := &Dataset{Cols: 3, Features: []float64{1, 5, 7, 3, 5, 9, 100, 100, 100}}
	rows := []int{0, 1} // the third row is held out: it must not count
	tests := []struct {
		kind          string
		shift, factor []float64
	}{
		{"standard", []float64{2, 5, 8}, []float64{1, 0, 1}},
		{"minmax", []float64{1, 5, 7}, []float64{0.5, 0, 0.5}},
		{"none", []float64{0, 0, 0}, []float64{1, 1, 1}},
	}
	for _, tt := range tests {
		shift, factor, err := d.Scaling(tt.kind, rows)
		if err != nil || !reflect.DeepEqual(shift, tt.shift) || !reflect.DeepEqual(factor, tt.factor) {
			t.Errorf("%s: shift %v factor %v (%v), want %v and %v", tt.kind, shift, factor, err, tt.shift, tt.factor)
		}
	}
	if _, _, err := d.Scaling("log", rows); err == nil {
		t.Error("unknown scaling accepted")
	}
}

// FuzzLoadSplit feeds arbitrary split files to the reader: it must return
// an error or a partition of the rows, never panic.
func FuzzLoadSplit(f *testing.F) {
	f.Add([]byte("row,split\n0,train\n2,val\n1,train\n"))
	f.Add([]byte("row,split\n-1,train\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		train, val, err := readSplit("f.csv", bytes.NewReader(data), 3)
		if err != nil {
			return
		}
		all := append(append([]int(nil), train...), val...)
		slices.Sort(all)
		if !slices.Equal(all, []int{0, 1, 2}) {
			t.Fatalf("train %v and val %v do not partition rows 0-2", train, val)
		}
	})
}
