package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gotune/gotune/storage"
)

func queryCommand(dbFlag cli.Flag) *cli.Command {
	return &cli.Command{
		Name:      "query",
		Usage:     "run read-only SQL over the results (the views experiments_v, trials_v, reports_v and every table)",
		ArgsUsage: `"SQL"`,
		Flags: []cli.Flag{
			dbFlag,
			&cli.BoolFlag{Name: "json", Usage: "print one JSON array of objects"},
			&cli.BoolFlag{Name: "csv", Usage: "print CSV with a header row"},
			&cli.BoolFlag{Name: "epoch", Usage: "print times (the columns named time or ending in _at) as seconds since 1970, as stored, instead of ISO 8601"},
			&cli.DurationFlag{Name: "timeout", Value: defaultQueryTimeout, Usage: "stop the statement after this long (`DURATION`, e.g. 30s or 2m; 0: no limit)"},
		},
		Action: func(c *cli.Context) error {
			q, err := oneArg(c, "the SQL query")
			if err != nil {
				return err
			}
			if c.Bool("json") && c.Bool("csv") {
				return badInput(fmt.Errorf("choose one of --json and --csv"))
			}
			db, err := openResults(c.String("db"))
			if err != nil {
				return err
			}
			defer db.Close()
			w := tableRows
			switch {
			case c.Bool("json"):
				w = jsonRows
			case c.Bool("csv"):
				w = csvRows
			}
			timeout := c.Duration("timeout")
			if timeout < 0 {
				return badInput(fmt.Errorf("--timeout %v: want a duration of 0 (no limit) or more", timeout))
			}
			ctx, cancel := c.Context, context.CancelFunc(func() {})
			if timeout > 0 {
				ctx, cancel = context.WithTimeout(ctx, timeout)
			}
			defer cancel()
			if err := runQuery(ctx, c, db, q, w); err != nil {
				if errors.Is(ctx.Err(), context.DeadlineExceeded) {
					return &exitError{exitFailed, fmt.Errorf("query: stopped after %v (--timeout): the statement ran too long; narrow it (a WITH RECURSIVE needs a condition that ends it) or give it more time with --timeout", timeout)}
				}
				return &exitError{exitFailed, fmt.Errorf("query: %w", storage.ExplainRefusal(err))}
			}
			return nil
		},
	}
}

// defaultQueryTimeout is how long gotune query lets a statement run.
const defaultQueryTimeout = 30 * time.Second

// rowWriter prints a query's result: the header, then each row rows
// yields; it returns the first error of rows or of its own.
type rowWriter func(out io.Writer, header []string, rows func(yield func(row []any) error) error) error

// runQuery runs q through db's read-only connections and prints its rows
// with write. A statement that would write fails in SQLite; when ctx ends,
// SQLite is interrupted and the statement fails.
func runQuery(ctx context.Context, c *cli.Context, db *storage.DB, q string, write rowWriter) error {
	rows, err := db.Query(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return err
	}
	times := map[int]bool{}
	if !c.Bool("epoch") {
		for i, col := range cols {
			times[i] = isTimeColumn(col)
		}
	}
	// Buffer the output, so that a query that fails midway prints nothing
	// but its error.
	var buf bytes.Buffer
	err = write(&buf, cols, func(yield func([]any) error) error {
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				return err
			}
			for i, v := range vals {
				if times[i] {
					vals[i] = isoTime(v)
				}
			}
			if err := yield(vals); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	if err != nil {
		return err
	}
	_, err = buf.WriteTo(c.App.Writer)
	return err
}

// isTimeColumn says whether a column of a query's result holds times, by
// the schema's naming: time, or a name ending in _at (created_at, ...).
func isTimeColumn(name string) bool {
	name = strings.ToLower(name)
	return name == "time" || strings.HasSuffix(name, "_at")
}

// isoTime is a time column's value as a time in UTC (printed in ISO 8601)
// when it is a number of seconds since 1970, as the schema stores times;
// anything else stays as it is.
func isoTime(v any) any {
	var secs float64
	switch x := v.(type) {
	case float64:
		secs = x
	case int64:
		secs = float64(x)
	default:
		return v
	}
	if math.IsNaN(secs) || math.IsInf(secs, 0) {
		return v
	}
	whole, frac := math.Modf(secs)
	return time.Unix(int64(whole), int64(frac*1e9)).UTC().Round(time.Millisecond)
}

// isoLayout prints a time column's values: ISO 8601 in UTC, to the
// millisecond.
const isoLayout = "2006-01-02T15:04:05.000Z07:00"

// sqlText renders a value of a query's result as text; NULL is "".
func sqlText(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case []byte:
		return string(x)
	case float64:
		return formatNumber(x)
	case time.Time:
		return x.Format(isoLayout)
	}
	return fmt.Sprint(v)
}

// formatNumber prints x in as few digits as read back the same, without an
// exponent where positional notation stays short (a time in seconds since
// 1970 reads 1795741125.26, not 1.79574112526e+09).
func formatNumber(x float64) string {
	if a := math.Abs(x); a == 0 || (a >= 1e-4 && a < 1e21) {
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	return strconv.FormatFloat(x, 'g', -1, 64)
}

func tableRows(out io.Writer, header []string, rows func(func([]any) error) error) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	err := rows(func(row []any) error {
		cells := make([]string, len(row))
		for i, v := range row {
			cells[i] = sqlText(v)
			if v == nil {
				cells[i] = "NULL"
			}
		}
		_, err := fmt.Fprintln(tw, strings.Join(cells, "\t"))
		return err
	})
	if err != nil {
		return err
	}
	return tw.Flush()
}

func csvRows(out io.Writer, header []string, rows func(func([]any) error) error) error {
	cw := csv.NewWriter(out)
	if err := cw.Write(header); err != nil {
		return err
	}
	err := rows(func(row []any) error {
		cells := make([]string, len(row))
		for i, v := range row {
			cells[i] = sqlText(v)
		}
		return cw.Write(cells)
	})
	if err != nil {
		return err
	}
	cw.Flush()
	return cw.Error()
}

// jsonRows prints one JSON array with an object per row, keys in the
// columns' order.
func jsonRows(out io.Writer, header []string, rows func(func([]any) error) error) error {
	keys := make([][]byte, len(header))
	for i, h := range header {
		keys[i], _ = json.Marshal(h) // a string always marshals
	}
	n := 0
	io.WriteString(out, "[")
	err := rows(func(row []any) error {
		var b bytes.Buffer
		if n > 0 {
			b.WriteString(",")
		}
		b.WriteString("\n  {")
		for i, v := range row {
			if i > 0 {
				b.WriteString(", ")
			}
			b.Write(keys[i])
			b.WriteString(": ")
			val, err := sqlJSON(v)
			if err != nil {
				return err
			}
			b.Write(val)
		}
		b.WriteString("}")
		n++
		_, err := b.WriteTo(out)
		return err
	})
	if err != nil {
		return err
	}
	if n > 0 {
		io.WriteString(out, "\n")
	}
	_, err = io.WriteString(out, "]\n")
	return err
}

// sqlJSON renders a value of a query's result as JSON: numbers as numbers
// (infinities as strings), text and blobs as strings, NULL as null.
func sqlJSON(v any) ([]byte, error) {
	switch x := v.(type) {
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return storage.AppendJSONFloat(nil, x), nil
		}
	case []byte:
		return json.Marshal(string(x))
	case time.Time:
		return json.Marshal(x.Format(isoLayout))
	}
	return json.Marshal(v)
}
