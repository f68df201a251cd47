package main

import (
	"bytes"
	"cmp"
	_ "embed"
	"encoding/csv"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
)

// nasCell is a generated benchmark in the manner of NAS-Bench-201's
// cells: a cell of 4 nodes whose 6 edges (0→1, 0→2, 1→2, 0→3, 1→3,
// 2→3) each take one of 5 operations (none, skip, conv 1×1, conv 3×3,
// average pooling), every edge a categorical parameter. Its value is a
// test error in percent with NAS-Bench-201's broad shape: a cell whose
// output node is cut off from its input (every path has a "none")
// scores 90, chance on 10 classes; otherwise the error falls with the
// convolutions on the paths that reach the output (3×3 more than 1×1,
// a deeper path of them more than a wide one), and seeded per-edge,
// pairwise and per-cell effects make the optimum one cell rather than a
// rule.
type nasCell struct {
	// edgeOp is the seeded effect of an operation on an edge, pair that
	// of two edges' operations together, cell a per-cell effect.
	edgeOp [6][5]float64
	pair   [6][6][5][5]float64
	rng    *rand.Rand
}

// nasEdges are the cell's edges, from and to.
var nasEdges = [6][2]int{{0, 1}, {0, 2}, {1, 2}, {0, 3}, {1, 3}, {2, 3}}

// The operations, by index.
const (
	opNone = iota
	opSkip
	opConv1
	opConv3
	opPool
)

func newNASCell(seed uint64) *nasCell {
	c := &nasCell{rng: rand.New(rand.NewPCG(seed, seed))}
	for e := range 6 {
		for op := range 5 {
			c.edgeOp[e][op] = 0.6 * c.rng.NormFloat64()
		}
	}
	for a := range 6 {
		for b := a + 1; b < 6; b++ {
			for i := range 5 {
				for j := range 5 {
					c.pair[a][b][i][j] = 0.25 * c.rng.NormFloat64()
				}
			}
		}
	}
	return c
}

// err is the error of the cell whose edges have operations ops. Called
// once per cell in makeTables' order, it draws the per-cell effect from
// the seeded generator.
func (c *nasCell) err(ops []int) float64 {
	noise := 0.15 * c.rng.NormFloat64()
	// live[e]: edge e lies on a path from node 0 to node 3 through
	// edges that are not "none".
	var from, to [4]bool
	from[0] = true
	for e, ft := range nasEdges {
		if ops[e] != opNone && from[ft[0]] {
			from[ft[1]] = true
		}
	}
	if !from[3] {
		return 90 + noise
	}
	to[3] = true
	for e := 5; e >= 0; e-- {
		if ft := nasEdges[e]; ops[e] != opNone && to[ft[1]] {
			to[ft[0]] = true
		}
	}
	var live [6]bool
	capacity := 0.0
	// depth[n]: the most convolutions on a live path from node 0 to n.
	var depth [4]float64
	for e, ft := range nasEdges {
		if ops[e] == opNone || !from[ft[0]] || !to[ft[1]] {
			continue
		}
		live[e] = true
		conv := 0.0
		switch ops[e] {
		case opConv3:
			conv = 1
		case opConv1:
			conv = 0.55
		case opPool:
			capacity += 0.1
		case opSkip:
			capacity += 0.05
		}
		capacity += conv
		depth[ft[1]] = max(depth[ft[1]], depth[ft[0]]+conv)
	}
	v := 5.5 + 30*math.Exp(-0.8*capacity-0.9*depth[3])
	if live[3] && ops[3] == opSkip {
		// A residual path from the input to the output trains better.
		v -= 0.8
	}
	for a := range 6 {
		if !live[a] {
			continue
		}
		v += c.edgeOp[a][ops[a]]
		for b := a + 1; b < 6; b++ {
			if live[b] {
				v += c.pair[a][b][ops[a]][ops[b]]
			}
		}
	}
	return v + noise
}

// mlpDigitsCSV holds the final (27th epoch) validation accuracy of the
// built-in mlp on the 8×8 digits for the 717 random configurations of
// bench/curves/digits.toml that bench/curves replays: the last value of
// each curve of its table.
//
//go:embed mlp_digits.csv
var mlpDigitsCSV []byte

// mlpDigits is a tabular benchmark of measured results: a grid over the
// mlp's hyperparameters (mlpDigitsGrid) whose every configuration takes
// the validation error (1 − accuracy) of the measured configurations
// nearest to it, a surrogate as the HPOLib and NAS-Bench tables are
// measured ones.
type mlpDigits struct {
	// xs holds each measured configuration in the unit coordinates of
	// mlpDigitsCoords; errs its validation error.
	xs   [][]float64
	errs []float64
}

// mlpDigitsGrid holds the grid's levels of lr (log-spaced), momentum,
// hidden (log-spaced), layers, dropout and batch_size (a choice).
var mlpDigitsGrid = [][]float64{
	{0.0003, 0.00080, 0.0021, 0.0055, 0.015, 0.040, 0.11, 0.3},
	{0, 0.33, 0.66, 0.99},
	{8, 16, 32, 64, 128, 256},
	{1, 2, 3},
	{0, 0.25, 0.5},
	{16, 32, 64, 128, 256},
}

// mlpDigitsLevels and mlpDigitsCategorical describe the grid as a table.
var (
	mlpDigitsLevels      = []int{8, 4, 6, 3, 3, 5}
	mlpDigitsCategorical = []bool{false, false, false, false, false, true}
)

// mlpDigitsNeighbours is how many measured configurations a grid point
// averages, weighted by inverse squared distance.
const mlpDigitsNeighbours = 3

// mlpDigitsCoords maps a configuration to [0, 1] per parameter,
// log-scaled for lr, hidden and batch_size, as bench/curves finds a
// configuration's nearest measured one.
func mlpDigitsCoords(v []float64) []float64 {
	lin := func(x, lo, hi float64) float64 { return (x - lo) / (hi - lo) }
	lg := func(x, lo, hi float64) float64 { return lin(math.Log(x), math.Log(lo), math.Log(hi)) }
	return []float64{lg(v[0], 0.0003, 0.3), lin(v[1], 0, 0.99), lg(v[2], 8, 256), lin(v[3], 1, 3), lin(v[4], 0, 0.5), lg(v[5], 16, 256)}
}

func newMLPDigits() *mlpDigits {
	recs, err := csv.NewReader(bytes.NewReader(mlpDigitsCSV)).ReadAll()
	if err != nil {
		panic(err)
	}
	m := &mlpDigits{}
	for _, rec := range recs[1:] {
		v := make([]float64, len(rec))
		for i, f := range rec {
			if v[i], err = strconv.ParseFloat(f, 64); err != nil {
				panic(err)
			}
		}
		m.xs = append(m.xs, mlpDigitsCoords(v[:6]))
		m.errs = append(m.errs, 1-v[6])
	}
	return m
}

// err is the grid point idx's validation error: the mean of its
// mlpDigitsNeighbours nearest measured configurations' errors, weighted
// by inverse squared distance.
func (m *mlpDigits) err(idx []int) float64 {
	v := make([]float64, len(idx))
	for i, k := range idx {
		v[i] = mlpDigitsGrid[i][k]
	}
	x := mlpDigitsCoords(v)
	type near struct{ d2, err float64 }
	nears := make([]near, len(m.xs))
	for r, y := range m.xs {
		d2 := 0.0
		for i := range x {
			d2 += (x[i] - y[i]) * (x[i] - y[i])
		}
		nears[r] = near{d2, m.errs[r]}
	}
	slices.SortFunc(nears, func(a, b near) int { return cmp.Compare(a.d2, b.d2) })
	sum, wsum := 0.0, 0.0
	for _, n := range nears[:mlpDigitsNeighbours] {
		w := 1 / (n.d2 + 1e-6)
		sum, wsum = sum+w*n.err, wsum+w
	}
	return sum / wsum
}
