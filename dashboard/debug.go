package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/tuner"
)

// The trial page's live debugging: its workers' stacks (asked of the
// running sweep), logs (read from the files the workers table names) and
// resources over time (from resource_samples).

// POST /api/experiments/{exp}/trials/{trial}/stacks[?rank=R]: the current
// stacks of a running trial's workers, from the sweep's control socket
// (tuner.TrialStacks); so only a dashboard on the sweep's machine has
// them. A POST, since taking a stack signals or attaches to the workers;
// refused from another page's origin.
func (s *Server) stacks(w http.ResponseWriter, r *http.Request) {
	if o := r.Header.Get("Origin"); o != "" {
		if u, err := url.Parse(o); err != nil || u.Host != r.Host {
			writeError(w, &apiError{http.StatusForbidden, fmt.Errorf("stacks are taken for this dashboard's own page only, not for %s", o)})
			return
		}
	}
	name := r.PathValue("exp")
	n, err := strconv.Atoi(r.PathValue("trial"))
	if err != nil {
		writeError(w, badRequest("trial must be a trial number, got %q", r.PathValue("trial")))
		return
	}
	rank := -1
	if v := r.URL.Query().Get("rank"); v != "" {
		if rank, err = strconv.Atoi(v); err != nil || rank < 0 {
			writeError(w, badRequest("rank must be a rank (0 or more), got %q", v))
			return
		}
	}
	if _, err := s.db.Trial(r.Context(), name, n); err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	reply, err := tuner.TrialStacks(ctx, s.db.Path(), name, n, rank)
	if err != nil {
		code := http.StatusConflict // not running, or no such rank
		if errors.Is(err, tuner.ErrNotLive) {
			code = http.StatusServiceUnavailable
		}
		writeError(w, &apiError{code, err})
		return
	}
	body, err := json.Marshal(reply)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, body)
}

// Log paging limits: lines per page by default and at most, the bytes read
// for one page, and the matches a search returns.
const (
	logPageLines  = 200
	maxLogLines   = 2000
	maxLogBytes   = 1 << 20
	maxLogMatches = 500
)

// LogPage is a run of whole lines of a worker's log file, or the lines
// that match a search.
type LogPage struct {
	Rank int `json:"rank"`
	// Part is the file the page is of: 0 the log itself, K its K-th
	// rotated file (the log's path with ".K"), older as K grows; Path is
	// its path. OlderPart is the next older file, 0 when there is none.
	Part      int    `json:"part"`
	Path      string `json:"path"`
	OlderPart int    `json:"older_part,omitempty"`
	// Size is the file's size when read; Start and End are the byte
	// offsets of the page's first line and just past its last: ask for
	// before=Start for the page above and after=End to follow the log.
	Size  int64    `json:"size"`
	Start int64    `json:"start"`
	End   int64    `json:"end"`
	Lines []string `json:"lines"`
	// Matches are the lines that hold the search text, with their byte
	// offsets, oldest first; Truncated says more matched than are given.
	Matches   []LogMatch `json:"matches,omitempty"`
	Truncated bool       `json:"truncated,omitempty"`
	// Rotated says the file is shorter than the after offset asked for:
	// it was rotated, and the page starts at its beginning.
	Rotated bool `json:"rotated,omitempty"`
	// Absent says the log file does not exist (yet): the worker has
	// printed nothing but its reports, which are not logged. The page is
	// then empty.
	Absent bool `json:"absent,omitempty"`
}

// LogMatch is one line of a log that holds the searched text.
type LogMatch struct {
	Offset int64  `json:"offset"`
	Line   string `json:"line"`
}

// GET /api/experiments/{exp}/trials/{trial}/log?rank=R: a page of the log
// of the trial's worker of rank R (the file of its latest attempt; every
// attempt appends to it). With no other parameter: its last limit lines
// (default 200, at most 2000). before=B: the limit lines that end before
// byte B. after=A: the lines from byte A on (to follow a running worker).
// q=TEXT: the lines that hold TEXT (case-insensitive), at most 500.
// part=K reads the log's K-th rotated file (PATH.K) instead.
func (s *Server) workerLog(r *http.Request, db *storage.DB) (any, error) {
	name := r.PathValue("exp")
	n, err := strconv.Atoi(r.PathValue("trial"))
	if err != nil {
		return nil, badRequest("trial must be a trial number, got %q", r.PathValue("trial"))
	}
	q := r.URL.Query()
	rank, err := strconv.Atoi(q.Get("rank"))
	if err != nil || rank < 0 {
		return nil, badRequest("rank must be a rank (0 or more), got %q", q.Get("rank"))
	}
	limit := logPageLines
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > maxLogLines {
			return nil, badRequest("limit must be 1 to %d lines, got %q", maxLogLines, v)
		}
	}
	offset := func(key string) (int64, bool, error) {
		v := q.Get(key)
		if v == "" {
			return 0, false, nil
		}
		o, err := strconv.ParseInt(v, 10, 64)
		if err != nil || o < 0 {
			return 0, false, badRequest("%s must be a byte offset, got %q", key, v)
		}
		return o, true, nil
	}
	part := 0
	if v := q.Get("part"); v != "" {
		if part, err = strconv.Atoi(v); err != nil || part < 0 {
			return nil, badRequest("part must be 0 (the log) or a rotated file's number, got %q", v)
		}
	}
	before, hasBefore, err := offset("before")
	if err != nil {
		return nil, err
	}
	after, hasAfter, err := offset("after")
	if err != nil {
		return nil, err
	}
	ws, err := db.Workers(r.Context(), name, n)
	if err != nil {
		return nil, err
	}
	path := ""
	for _, w := range ws { // by attempt: the latest wins
		if w.Rank == rank && w.LogPath != "" {
			path = w.LogPath
		}
	}
	if path == "" {
		return nil, &apiError{http.StatusNotFound, fmt.Errorf("trial %d has no log of rank %d", n, rank)}
	}
	base := path
	if part > 0 {
		path = fmt.Sprintf("%s.%d", base, part)
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) && part == 0 {
		// A worker that printed nothing but its reports has no log yet.
		return &LogPage{Rank: rank, Path: path, Lines: []string{}, Absent: true}, nil
	}
	if err != nil {
		return nil, &apiError{http.StatusNotFound, fmt.Errorf("log of rank %d: %w", rank, err)}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	page := &LogPage{Rank: rank, Part: part, Path: path, Size: fi.Size(), Lines: []string{}}
	if _, err := os.Stat(fmt.Sprintf("%s.%d", base, part+1)); err == nil {
		page.OlderPart = part + 1
	}
	switch {
	case q.Get("q") != "":
		err = searchLog(f, q.Get("q"), page)
	case hasAfter:
		if after > page.Size {
			after, page.Rotated = 0, true
		}
		err = readAfter(f, after, page)
	default:
		if !hasBefore || before > page.Size {
			before = page.Size
		}
		err = readBefore(f, before, limit, page)
	}
	if err != nil {
		return nil, fmt.Errorf("read log %s: %w", path, err)
	}
	return page, nil
}

// readBefore puts into page the last limit whole lines that end at or
// before byte end.
func readBefore(f *os.File, end int64, limit int, page *LogPage) error {
	start := max(end-maxLogBytes, 0)
	b := make([]byte, end-start)
	if _, err := f.ReadAt(b, start); err != nil && err != io.EOF {
		return err
	}
	// A window that ends inside a line drops that line's part, and one
	// that starts inside a line likewise.
	if i := bytes.LastIndexByte(b, '\n'); i < len(b)-1 {
		b, end = b[:i+1], end-int64(len(b)-i-1)
	}

	if start > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			b, start = nil, end
		} else {
			b, start = b[i+1:], start+int64(i+1)
		}
	}
	lines := splitLines(b)
	if len(lines) > limit {
		for _, l := range lines[:len(lines)-limit] {
			start += int64(len(l)) + 1
		}
		lines = lines[len(lines)-limit:]
	}
	page.Start, page.End, page.Lines = start, end, lines
	return nil
}

// readAfter puts into page the whole lines from byte from on, at most
// maxLogBytes of them; a last line not yet ended waits for its end.
func readAfter(f *os.File, from int64, page *LogPage) error {
	n := min(page.Size-from, maxLogBytes)
	b := make([]byte, n)
	if _, err := f.ReadAt(b, from); err != nil && err != io.EOF {
		return err
	}
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[:i+1]
	} else {
		b = nil
	}
	page.Start, page.End, page.Lines = from, from+int64(len(b)), splitLines(b)
	return nil
}

// searchLog puts into page the lines of f that hold text, ignoring case.
func searchLog(f *os.File, text string, page *LogPage) error {
	want := strings.ToLower(text)
	var off int64
	err := eachLine(f, func(line []byte) bool {
		if strings.Contains(strings.ToLower(string(line)), want) {
			if len(page.Matches) == maxLogMatches {
				page.Truncated = true
				return false
			}
			page.Matches = append(page.Matches, LogMatch{Offset: off, Line: string(line)})
		}
		off += int64(len(line)) + 1
		return true
	})
	page.End = off
	return err
}

// eachLine calls f with each line of r, without its end, until f returns
// false.
func eachLine(r io.Reader, f func([]byte) bool) error {
	buf := make([]byte, 64<<10)
	var carry []byte
	for {
		n, err := r.Read(buf)
		data := append(carry, buf[:n]...)
		for {
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				break
			}
			if !f(data[:i]) {
				return nil
			}
			data = data[i+1:]
		}
		carry = append([]byte(nil), data...)
		if err == io.EOF {
			if len(carry) > 0 {
				f(carry)
			}
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func splitLines(b []byte) []string {
	if len(b) == 0 {
		return []string{}
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// UsageSeries is one measure of one worker over time.
type UsageSeries struct {
	Attempt int `json:"attempt"`
	Rank    int `json:"rank"`
	// Kind is "cpu" (percent of one core, summed over the worker's
	// processes), "rss" (bytes), "gpu_util" (percent) or "gpu_memory"
	// (bytes); GPU is the device's index for the last two.
	Kind string `json:"kind"`
	GPU  *int   `json:"gpu,omitempty"`
	// Points are [unix seconds, value] pairs, oldest first.
	Points [][2]float64 `json:"points"`
}

// GET /api/experiments/{exp}/trials/{trial}/usage: the resources each of
// the trial's workers used over time, as sampled while it ran.
func (s *Server) trialUsage(r *http.Request, db *storage.DB) (any, error) {
	name := r.PathValue("exp")
	n, err := strconv.Atoi(r.PathValue("trial"))
	if err != nil {
		return nil, badRequest("trial must be a trial number, got %q", r.PathValue("trial"))
	}
	ws, err := db.Workers(r.Context(), name, n)
	if err != nil {
		return nil, err
	}
	out := []UsageSeries{}
	if len(ws) == 0 {
		return out, nil
	}
	byID := map[int64]storage.WorkerRecord{}
	from := ws[0].StartedAt
	for _, w := range ws {
		byID[w.ID] = w
		if w.StartedAt.Before(from) {
			from = w.StartedAt
		}
	}
	samples, err := db.ResourceSamples(r.Context(), name, from)
	if err != nil {
		return nil, err
	}
	type key struct {
		worker int64
		kind   string
		gpu    int
	}
	series := map[key]*UsageSeries{}
	add := func(k key, w storage.WorkerRecord, t time.Time, v float64) {
		s := series[k]
		if s == nil {
			s = &UsageSeries{Attempt: w.Attempt, Rank: w.Rank, Kind: k.kind, Points: [][2]float64{}}
			if k.gpu != storage.NoGPU {
				g := k.gpu
				s.GPU = &g
			}
			series[k] = s
		}
		s.Points = append(s.Points, [2]float64{float64(t.UnixMilli()) / 1000, v})
	}
	for _, sm := range samples {
		w, ok := byID[sm.WorkerID]
		if !ok {
			continue
		}
		if sm.GPU == storage.NoGPU {
			add(key{sm.WorkerID, "cpu", storage.NoGPU}, w, sm.Time, sm.Util)
			add(key{sm.WorkerID, "rss", storage.NoGPU}, w, sm.Time, float64(sm.MemoryUsed))
		} else {
			add(key{sm.WorkerID, "gpu_util", sm.GPU}, w, sm.Time, sm.Util)
			add(key{sm.WorkerID, "gpu_memory", sm.GPU}, w, sm.Time, float64(sm.MemoryUsed))
		}
	}
	for _, s := range series {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Attempt != b.Attempt {
			return a.Attempt < b.Attempt
		}
		if a.Rank != b.Rank {
			return a.Rank < b.Rank
		}
		return a.Kind < b.Kind
	})
	return out, nil
}
