package trainer

import (
	"regexp"
	"slices"
	"strings"
)

// columnTable reads, beside DefaultPattern, the tables some training
// libraries print, a row an epoch under a header of metric names (skorch,
// fastai):
//
//	  epoch    train_loss    valid_acc    valid_loss     dur
//	-------  ------------  -----------  ------------  ------
//	      1        0.7064       0.5550        0.7064  0.0333
//
// A header is a line of two or more names, none twice, and nothing else.
// It counts once the next line (rules of dashes and blank lines aside) is
// a row under it, so that a line of plain words is not taken for one. A
// row's every cell lies under a column of its own: its text overlaps the
// column name's, as right- and left-aligned cells do (a blank cell leaves
// its column out); in lines separated by tabs, cell i is column i's. A row
// gives a metric for each cell that is a number, named by its column, and
// needs two of them; other cells (fastai's time "00:07", skorch's "+" of a
// checkpoint) are skipped. The header holds for the rows after it, other
// lines between them, until another header with its row replaces it.
type columnTable struct {
	header    *tableLine // the header rows are read under; nil before one
	candidate *tableLine // a header whose row has not come yet
}

// tableLine is a line split into cells; tabbed says tabs separate them.
type tableLine struct {
	cells  []tableCell
	tabbed bool
}

// tableCell is a whitespace-separated field of a line, with its byte
// offsets.
type tableCell struct {
	text       string
	start, end int
}

// columnName is what a header's every field must be: a name as
// DefaultPattern reads one, not ending in punctuation ("module." is a
// sentence's last word).
var columnName = regexp.MustCompile(`^[A-Za-z_](?:[A-Za-z0-9_.\-/]*[A-Za-z0-9_])?$`)

// read takes the next output line (as shownText gives it) and returns the
// metrics of a row; stepKey names the step.
func (t *columnTable) read(line, stepKey string) (observation, bool) {
	l := &tableLine{cells: tableCells(line), tabbed: strings.Contains(line, "\t")}
	if isTableRule(l.cells) {
		return observation{}, false
	}
	if cand := t.candidate; cand != nil {
		t.candidate = nil
		if obs, ok := tableRow(cand, l, stepKey); ok {
			t.header = cand
			return obs, true
		}
	}
	if isTableHeader(l.cells) {
		t.candidate = l
		return observation{}, false
	}
	if t.header == nil {
		return observation{}, false
	}
	return tableRow(t.header, l, stepKey)
}

// tableCells splits line at runs of spaces and tabs.
func tableCells(line string) []tableCell {
	var cells []tableCell
	start := -1
	for i := 0; i <= len(line); i++ {
		blank := i == len(line) || line[i] == ' ' || line[i] == '\t'
		switch {
		case blank && start >= 0:
			cells = append(cells, tableCell{line[start:i], start, i})
			start = -1
		case !blank && start < 0:
			start = i
		}
	}
	return cells
}

// isTableRule reports whether cells are a blank line or a rule under a
// header ("-------  ------", "=====", "+----+").
func isTableRule(cells []tableCell) bool {
	for _, c := range cells {
		if strings.Trim(c.text, "-=+|") != "" {
			return false
		}
	}
	return true
}

// isTableHeader reports whether cells are two or more column names, each
// once.
func isTableHeader(cells []tableCell) bool {
	if len(cells) < 2 {
		return false
	}
	seen := map[string]bool{}
	for _, c := range cells {
		if !columnName.MatchString(c.text) || seen[c.text] {
			return false
		}
		seen[c.text] = true
	}
	return true
}

// tableRow reads row as a row under header: see columnTable.
func tableRow(header, row *tableLine, stepKey string) (observation, bool) {
	cols, cells := header.cells, row.cells
	if len(cells) == 0 || len(cells) > len(cols) {
		return observation{}, false
	}
	byOrder := header.tabbed && row.tabbed && len(cells) == len(cols)
	obs := observation{metrics: map[string]float64{}}
	used := make([]bool, len(cols))
	numbers := 0
	for i, c := range cells {
		col := i
		if !byOrder {
			if col = underColumn(cols, c); col < 0 || used[col] {
				return observation{}, false
			}
		}
		used[col] = true
		v, ok := parseNumber(c.text)
		if !ok {
			continue
		}
		numbers++
		obs.set(cols[col].text, stepKey, v)
	}
	if numbers < 2 {
		return observation{}, false
	}
	return obs, true
}

// underColumn is the index of the header's column that c overlaps most,
// or -1 for none.
func underColumn(header []tableCell, c tableCell) int {
	best, most := -1, 0
	for i, h := range header {
		if overlap := min(h.end, c.end) - max(h.start, c.start); overlap > most {
			best, most = i, overlap
		}
	}
	return best
}

// barCell is a cell of a line whose cells bars separate, as
// pytorch/examples' word_language_model (and fairseq) print their
// progress:
//
//	| epoch   1 |   200/ 2983 batches | lr 20.00 | ms/batch 45.23 | loss  7.63
//	| end of epoch   1 | time:  3.65s | valid loss  5.77 | valid ppl   320.88
//
// one or more words, then spaces or a colon and a number, with "%", "s" or
// "ms" after it. Its groups are the words and the number.
var barCell = regexp.MustCompile(`^((?:[A-Za-z_][\w.\-/]*\s+)*[A-Za-z_][\w.\-/]*)(?:\s*:\s*|\s+)(` + plainDecimal + `)(?:%|m?s)?$`)

// stepWord matches the words that name a step in a barred cell, as
// stepHeading's do at a line's start.
var stepWord = regexp.MustCompile(`^` + stepWords + `$`)

// barPair is a metric a barred cell gives: its name and its value's
// text, the word that ends the last cell before it that gives none (its
// qualifier, as wordBefore gives one: "subset" for fairseq's "| valid on
// 'valid' subset | loss 6.85 |"), and the cell's byte offsets in its line.
type barPair struct {
	name, value, qualifier string
	start, end             int
}

// barPairs reads line as cells between bars (see barCell). A cell's
// words, joined by "_", name its metric ("valid_loss"), since the bars
// show where the name begins, except that a cell whose last word names a
// step ("end of epoch 1") gives that word. fairseq names its training and
// validation losses alike, the lines apart by a cell of words ("| epoch
// 081 | loss 4.71 |", "| epoch 081 | valid on 'valid' subset | loss 6.85
// |"): that cell's last word is the qualifier, so that the two are told
// as EventMetricsAmbiguous. A line gives its pairs only when two cells or
// more are of that form, so that a sentence with a bar in it gives none.
func barPairs(line string) []barPair {
	if !strings.Contains(line, "|") {
		return nil
	}
	var pairs []barPair
	start, context := 0, ""
	for _, cell := range strings.SplitAfter(line, "|") {
		cellStart := start
		start += len(cell)
		text := strings.TrimSpace(strings.TrimSuffix(cell, "|"))
		m := barCell.FindStringSubmatch(text)
		if m == nil {
			if text != "" {
				context = wordBefore(text)
			}
			continue
		}
		words := strings.Fields(m[1])
		name := strings.Join(words, "_")
		if last := words[len(words)-1]; stepWord.MatchString(last) {
			name = last
		}
		pairs = append(pairs, barPair{name: name, value: m[2], qualifier: context, start: cellStart, end: start})
	}
	if len(pairs) < 2 {
		return nil
	}
	return pairs
}

// inBarCell reports whether the byte at offset i of a line lies in one of
// the cells its pairs were read from.
func inBarCell(pairs []barPair, i int) bool {
	return slices.ContainsFunc(pairs, func(p barPair) bool { return p.start <= i && i < p.end })
}
