package trainer

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Dataset is a table of numeric features and a label per row, as the
// built-in models train on. Features are stored row-major.
type Dataset struct {
	// Features has Rows()*Cols values; row i is Features[i*Cols:(i+1)*Cols].
	Features []float64
	Cols     int
	// FeatureNames are the CSV header names of the feature columns, in
	// file order.
	FeatureNames []string
	// Label is the name of the label column.
	Label string
	// Classes lists the distinct labels, as a classifier predicts them:
	// in increasing numeric order when every label is a number (formatted
	// as strconv.FormatFloat's 'g' does), otherwise in byte order of the
	// text. Class[i] is row i's index into Classes.
	Classes []string
	Class   []int
	// Targets holds each row's label as a number, for regression; nil when
	// some label is not a finite number (TargetsErr says which).
	Targets []float64

	targetsErr error
}

// Rows is the number of examples.
func (d *Dataset) Rows() int { return len(d.Class) }

// Row returns the features of row i.
func (d *Dataset) Row(i int) []float64 { return d.Features[i*d.Cols : (i+1)*d.Cols] }

// TargetsErr is nil when every label is a number (Targets is set), and
// otherwise an error naming the file and line of the first label that is not.
func (d *Dataset) TargetsErr() error { return d.targetsErr }

// LoadCSV reads a CSV file whose first line is a header of column names and
// whose other lines are data rows. label names the column to predict; its
// values may be numbers or text (class names). features names the columns
// to use as inputs, which must hold numbers; when it is empty, every column
// but the label is used. Fields may be surrounded by spaces; a leading UTF-8
// byte-order mark is ignored. An error names the file and the line at fault.
func LoadCSV(path, label string, features ...string) (*Dataset, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	defer f.Close()
	return readCSV(path, f, label, features)
}

func readCSV(path string, in io.Reader, label string, features []string) (*Dataset, error) {
	r := csv.NewReader(in)
	r.ReuseRecord = true
	header, err := r.Read()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("dataset %s: the file is empty; its first line must be a header of column names", path)
	}
	if err != nil {
		return nil, csvError(path, err)
	}
	header = slices.Clone(header) // the reader reuses its record slice
	header[0] = strings.TrimPrefix(header[0], "\ufeff")
	for i, h := range header {
		header[i] = strings.TrimSpace(h)
		if j := slices.Index(header[:i], header[i]); j >= 0 {
			return nil, fmt.Errorf("dataset %s:1: column %q appears twice (columns %d and %d)", path, header[i], j+1, i+1)
		}
	}
	labelCol := slices.Index(header, label)
	if labelCol < 0 {
		return nil, fmt.Errorf("dataset %s:1: no column named %q (the label); the header has %s", path, label, quoteList(header))
	}
	var cols []int
	if len(features) == 0 {
		for i := range header {
			if i != labelCol {
				cols = append(cols, i)
			}
		}
	} else {
		for _, name := range features {
			i := slices.Index(header, name)
			switch {
			case i < 0:
				return nil, fmt.Errorf("dataset %s:1: no column named %q (a feature); the header has %s", path, name, quoteList(header))
			case i == labelCol:
				return nil, fmt.Errorf("dataset %s:1: column %q is the label and cannot also be a feature", path, name)
			case slices.Contains(cols, i):
				return nil, fmt.Errorf("dataset %s:1: feature %q is named twice", path, name)
			}
			cols = append(cols, i)
		}
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("dataset %s:1: no feature columns besides the label %q", path, label)
	}
	d := &Dataset{Cols: len(cols), Label: label}
	for _, c := range cols {
		d.FeatureNames = append(d.FeatureNames, header[c])
	}

	var labels []string
	var numeric []float64
	allNumeric := true
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, csvError(path, err)
		}
		line, _ := r.FieldPos(0)
		for _, c := range cols {
			field := strings.TrimSpace(rec[c])
			v, err := strconv.ParseFloat(field, 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				if field == "" {
					return nil, fmt.Errorf("dataset %s:%d: column %q is empty; fill in or drop rows with missing values", path, line, header[c])
				}
				return nil, fmt.Errorf("dataset %s:%d: column %q: %q is not a finite number", path, line, header[c], field)
			}
			d.Features = append(d.Features, v)
		}
		text := strings.TrimSpace(rec[labelCol])
		if text == "" {
			return nil, fmt.Errorf("dataset %s:%d: the label column %q is empty", path, line, label)
		}
		labels = append(labels, text)
		if allNumeric {
			v, err := strconv.ParseFloat(text, 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				allNumeric = false
				d.targetsErr = fmt.Errorf("dataset %s:%d: label %q: %q is not a finite number", path, line, label, text)
			}
			numeric = append(numeric, v)
		}
	}
	if len(labels) == 0 {
		return nil, fmt.Errorf("dataset %s: no data rows after the header", path)
	}
	if allNumeric {
		d.Targets = numeric
		d.indexNumericClasses()
	} else {
		d.indexTextClasses(labels)
	}
	return d, nil
}

// csvError reports a CSV syntax error with the file and line first, as the
// other errors of LoadCSV do.
func csvError(path string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		if errors.Is(pe.Err, csv.ErrFieldCount) {
			return fmt.Errorf("dataset %s:%d: %v (the header has a different number of columns)", path, pe.Line, pe.Err)
		}
		return fmt.Errorf("dataset %s:%d:%d: %v", path, pe.Line, pe.Column, pe.Err)
	}
	return fmt.Errorf("dataset %s: %w", path, err)
}

func quoteList(names []string) string {
	var b bytes.Buffer
	for i, n := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		if i == 8 && len(names) > 9 {
			fmt.Fprintf(&b, "and %d more", len(names)-8)
			break
		}
		b.WriteString(strconv.Quote(n))
	}
	return b.String()
}

func (d *Dataset) indexNumericClasses() {
	values := slices.Clone(d.Targets)
	slices.Sort(values)
	values = slices.Compact(values)
	d.Classes = make([]string, len(values))
	for i, v := range values {
		d.Classes[i] = strconv.FormatFloat(v, 'g', -1, 64)
	}
	d.Class = make([]int, len(d.Targets))
	for i, y := range d.Targets {
		d.Class[i], _ = slices.BinarySearch(values, y)
	}
}

func (d *Dataset) indexTextClasses(labels []string) {
	d.Classes = slices.Clone(labels)
	slices.Sort(d.Classes)
	d.Classes = slices.Compact(d.Classes)
	d.Class = make([]int, len(labels))
	for i, y := range labels {
		d.Class[i], _ = slices.BinarySearch(d.Classes, y)
	}
}

// Split shuffles the row indices with a fixed seed and returns the first
// (1-valFraction) share as training rows and the rest as validation rows.
// The split depends only on seed and the number of rows.
func (d *Dataset) Split(valFraction float64, seed uint64) (train, val []int) {
	idx := make([]int, d.Rows())
	for i := range idx {
		idx[i] = i
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	rng.Shuffle(len(idx), func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
	nVal := int(math.Round(valFraction * float64(len(idx))))
	return idx[nVal:], idx[:nVal]
}

// LoadSplit reads a split file: a CSV with the header "row,split" and one
// line per data row of a data set of the given number of rows, giving the
// row's 0-based index (in file order, header excluded) and "train" or
// "val". Every row must be listed exactly once. It returns the training and
// validation rows in increasing order. An error names the file and line.
func LoadSplit(path string, rows int) (train, val []int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("split: %w", err)
	}
	defer f.Close()
	return readSplit(path, f, rows)
}

func readSplit(path string, in io.Reader, rows int) (train, val []int, err error) {
	r := csv.NewReader(in)
	r.ReuseRecord = true
	header, err := r.Read()
	if errors.Is(err, io.EOF) {
		return nil, nil, fmt.Errorf("split %s: the file is empty; its first line must be the header row,split", path)
	}
	if err != nil {
		return nil, nil, csvError(path, err)
	}
	if len(header) != 2 || strings.TrimPrefix(strings.TrimSpace(header[0]), "\ufeff") != "row" || strings.TrimSpace(header[1]) != "split" {
		return nil, nil, fmt.Errorf("split %s:1: the header must be row,split, got %s", path, strings.Join(header, ","))
	}
	seen := make([]bool, rows)
	listed := 0
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, csvError(path, err)
		}
		line, _ := r.FieldPos(0)
		i, err := strconv.Atoi(strings.TrimSpace(rec[0]))
		if err != nil || i < 0 || i >= rows {
			return nil, nil, fmt.Errorf("split %s:%d: row %q is not a row index of the data set (0 to %d)", path, line, rec[0], rows-1)
		}
		if seen[i] {
			return nil, nil, fmt.Errorf("split %s:%d: row %d is listed twice", path, line, i)
		}
		seen[i] = true
		listed++
		switch strings.TrimSpace(rec[1]) {
		case "train":
			train = append(train, i)
		case "val":
			val = append(val, i)
		default:
			return nil, nil, fmt.Errorf("split %s:%d: split %q must be \"train\" or \"val\"", path, line, rec[1])
		}
	}
	if listed != rows {
		return nil, nil, fmt.Errorf("split %s: lists %d rows but the data set has %d; every data row needs a line", path, listed, rows)
	}
	slices.Sort(train)
	slices.Sort(val)
	return train, val, nil
}

// scalings are the feature scalings the built-in models offer (Config.Scale).
var scalings = []string{"standard", "minmax", "none"}

// Scaling returns, per feature, the shift and the factor that scale a value
// v to (v-shift)*factor, fitted on rows (the training rows, so nothing of
// the validation rows leaks into training):
//
//   - "standard": zero mean and unit variance;
//   - "minmax": the range [0, 1];
//   - "none": values as they are.
//
// A feature constant over rows maps to zero under "standard" and "minmax".
func (d *Dataset) Scaling(kind string, rows []int) (shift, factor []float64, err error) {
	shift = make([]float64, d.Cols)
	factor = make([]float64, d.Cols)
	switch kind {
	case "none":
		for j := range factor {
			factor[j] = 1
		}
	case "standard":
		for _, i := range rows {
			for j, v := range d.Row(i) {
				shift[j] += v
			}
		}
		n := float64(len(rows))
		for j := range shift {
			shift[j] /= n
		}
		for _, i := range rows {
			for j, v := range d.Row(i) {
				dv := v - shift[j]
				factor[j] += dv * dv
			}
		}
		for j, ss := range factor {
			if sd := math.Sqrt(ss / n); sd > 1e-12*max(1, math.Abs(shift[j])) {
				factor[j] = 1 / sd
			} else {
				factor[j] = 0
			}
		}
	case "minmax":
		hi := make([]float64, d.Cols)
		copy(shift, d.Row(rows[0]))
		copy(hi, d.Row(rows[0]))
		for _, i := range rows {
			for j, v := range d.Row(i) {
				shift[j] = min(shift[j], v)
				hi[j] = max(hi[j], v)
			}
		}
		for j := range factor {
			if hi[j] > shift[j] {
				factor[j] = 1 / (hi[j] - shift[j])
			}
		}
	default:
		return nil, nil, fmt.Errorf("unknown scaling %q (have %s)", kind, strings.Join(scalings, ", "))
	}
	return shift, factor, nil
}
