package trainer

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
)

// Dataset is a table of numeric features and a label per row, as the
// built-in models train on. Features are stored row-major.
type Dataset struct {
	// Features has Rows()*Cols values; row i is Features[i*Cols:(i+1)*Cols].
	Features []float64
	Cols     int
	// Labels holds each row's label as read from the file.
	Labels []float64
	// Classes lists the distinct label values in increasing order, and
	// Class[i] is row i's index into Classes (for classifiers).
	Classes []float64
	Class   []int
	// FeatureNames are the CSV header names of the feature columns.
	FeatureNames []string
}

// Rows is the number of examples.
func (d *Dataset) Rows() int { return len(d.Labels) }

// Row returns the features of row i.
func (d *Dataset) Row(i int) []float64 { return d.Features[i*d.Cols : (i+1)*d.Cols] }

// LoadCSV reads a CSV file whose first line is a header of column names and
// whose other lines are numbers; label names the column to predict. An error
// names the file and the line at fault.
func LoadCSV(path, label string) (*Dataset, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.ReuseRecord = true
	header, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("dataset %s: reading header: %w", path, err)
	}
	header = slices.Clone(header) // the reader reuses its record slice
	labelCol := slices.Index(header, label)
	if labelCol < 0 {
		return nil, fmt.Errorf("dataset %s:1: no column named %q (label)", path, label)
	}
	d := &Dataset{Cols: len(header) - 1}
	for i, h := range header {
		if i != labelCol {
			d.FeatureNames = append(d.FeatureNames, h)
		}
	}
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("dataset %s: %w", path, err)
		}
		line, _ := r.FieldPos(0)
		for i, field := range rec {
			v, err := strconv.ParseFloat(field, 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("dataset %s:%d: column %q: %q is not a finite number", path, line, header[i], field)
			}
			if i == labelCol {
				d.Labels = append(d.Labels, v)
			} else {
				d.Features = append(d.Features, v)
			}
		}
	}
	if d.Rows() == 0 {
		return nil, fmt.Errorf("dataset %s: no data rows", path)
	}
	d.indexClasses()
	return d, nil
}

func (d *Dataset) indexClasses() {
	d.Classes = slices.Clone(d.Labels)
	slices.Sort(d.Classes)
	d.Classes = slices.Compact(d.Classes)
	d.Class = make([]int, len(d.Labels))
	for i, y := range d.Labels {
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

// Standardize returns per-feature mean and standard deviation over rows;
// a constant feature gets deviation 1 so it maps to zero.
func (d *Dataset) Standardize(rows []int) (mean, std []float64) {
	mean = make([]float64, d.Cols)
	std = make([]float64, d.Cols)
	for _, i := range rows {
		for j, v := range d.Row(i) {
			mean[j] += v
		}
	}
	n := float64(len(rows))
	for j := range mean {
		mean[j] /= n
	}
	for _, i := range rows {
		for j, v := range d.Row(i) {
			dv := v - mean[j]
			std[j] += dv * dv
		}
	}
	for j := range std {
		std[j] = math.Sqrt(std[j] / n)
		if std[j] < 1e-12 {
			std[j] = 1
		}
	}
	return mean, std
}
