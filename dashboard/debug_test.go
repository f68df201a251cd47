package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gotune/gotune/storage"
)

// debugFixture records a trial whose rank 0 wrote a 1,000-line log and
// whose two workers have CPU, memory and GPU samples, and serves it.
func debugFixture(t *testing.T) (srv *httptest.Server, logPath string) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "gotune.db")
	db, err := storage.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	exp, err := db.CreateExperiment(ctx, "dbg", "loss", "min", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := db.CreateTrial(ctx, exp.ID, 1, map[string]any{"x": 1})
	if err != nil {
		t.Fatal(err)
	}
	logPath = filepath.Join(dir, "worker_0.log")
	var b strings.Builder
	for i := 1; i <= 1000; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	os.WriteFile(logPath, []byte(b.String()), 0o644)
	var ids []int64
	for rank := range 2 {
		lp := ""
		if rank == 0 {
			lp = logPath
		}
		id, err := db.SetWorker(ctx, tr.ID(), storage.WorkerRecord{Rank: rank, Node: "n", PID: 10 + rank, Status: "RUNNING", LogPath: lp})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	t0 := time.Now()
	var samples []storage.ResourceSample
	for i := range 3 {
		at := t0.Add(time.Duration(i) * time.Second)
		for r, id := range ids {
			samples = append(samples,
				storage.ResourceSample{Time: at, Node: "n", WorkerID: id, GPU: storage.NoGPU, Util: float64(50 * (r + 1)), MemoryUsed: int64(i+1) << 20},
				storage.ResourceSample{Time: at, Node: "n", WorkerID: id, GPU: r, Util: 90, MemoryUsed: 1 << 30, MemoryTotal: 8 << 30})
		}
	}
	samples = append(samples, storage.ResourceSample{Time: t0, Node: "n", GPU: storage.NoGPU, Util: 10}) // the node's
	if err := db.AddResourceSamples(ctx, exp.ID, samples); err != nil {
		t.Fatal(err)
	}
	db.Close()
	ro, err := storage.OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ro.Close() })
	srv = httptest.NewServer(New(ro))
	t.Cleanup(srv.Close)
	return srv, logPath
}

func TestWorkerLogAPI(t *testing.T) {
	srv, logPath := debugFixture(t)
	url := srv.URL + "/api/experiments/dbg/trials/1/log?rank=0"
	var tail LogPage
	getJSON(t, url+"&limit=3", &tail)
	if strings.Join(tail.Lines, ",") != "line 998,line 999,line 1000" || tail.End != tail.Size {
		t.Fatalf("tail: %+v", tail)
	}
	// The page above ends where the tail starts.
	var above LogPage
	getJSON(t, fmt.Sprintf("%s&limit=2&before=%d", url, tail.Start), &above)
	if strings.Join(above.Lines, ",") != "line 996,line 997" || above.End != tail.Start {
		t.Errorf("page above: %+v", above)
	}
	var first LogPage
	getJSON(t, url+"&limit=5&before=30", &first)
	if first.Start != 0 || strings.Join(first.Lines, ",") != "line 1,line 2,line 3,line 4" {
		t.Errorf("first page: %+v", first)
	}
	// Following: a new line appears once it is whole.
	f, _ := os.OpenFile(logPath, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("line 1001\nline 10")
	var follow LogPage
	getJSON(t, fmt.Sprintf("%s&after=%d", url, tail.End), &follow)
	if strings.Join(follow.Lines, ",") != "line 1001" || follow.End != tail.End+10 {
		t.Errorf("follow: %+v", follow)
	}
	f.WriteString("02\n")
	f.Close()
	getJSON(t, fmt.Sprintf("%s&after=%d", url, follow.End), &follow)
	if strings.Join(follow.Lines, ",") != "line 1002" {
		t.Errorf("follow a line finished later: %+v", follow)
	}
	var found LogPage
	getJSON(t, url+"&q=LINE%2099", &found)
	if len(found.Matches) != 11 || found.Matches[0].Line != "line 99" || found.Matches[0].Offset != int64(len("line 1\n")*9+len("line 10\n")*89) {
		t.Errorf("search: %d matches, first %+v", len(found.Matches), found.Matches)
	}
	// Rotation: the log moves to .1 and starts again.
	os.Rename(logPath, logPath+".1")
	os.WriteFile(logPath, []byte("new 1\nnew 2\n"), 0o644)
	var rotated LogPage
	getJSON(t, fmt.Sprintf("%s&after=%d", url, follow.End), &rotated)
	if !rotated.Rotated || strings.Join(rotated.Lines, ",") != "new 1,new 2" {
		t.Errorf("follow across a rotation: %+v", rotated)
	}
	var top LogPage
	getJSON(t, url+"&limit=1", &top)
	if top.OlderPart != 1 {
		t.Errorf("the log's page does not point at its rotated file: %+v", top)
	}
	var older LogPage
	getJSON(t, url+"&limit=2&part=1", &older)
	if strings.Join(older.Lines, ",") != "line 1001,line 1002" || older.Part != 1 || older.OlderPart != 0 {
		t.Errorf("the rotated file's last page: %+v", older)
	}
	for _, tc := range []struct {
		query string
		code  int
		want  string
	}{
		{"rank=0&part=-1", 400, "part"},
		{"rank=0&part=2", 404, "log of rank 0"},
		{"rank=1", 404, "no log of rank 1"},
		{"rank=x", 400, "rank"},
		{"rank=0&limit=0", 400, "limit"},
		{"rank=0&before=-1", 400, "before"},
	} {
		code, body, _ := get(t, srv.URL+"/api/experiments/dbg/trials/1/log?"+tc.query)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s, want %d and %q", tc.query, code, body, tc.code, tc.want)
		}
	}
}

// A worker that printed nothing but its reports has no log file: its log
// is an empty page that says so, not an error (the page showed one in red).
func TestWorkerLogNotWrittenYet(t *testing.T) {
	srv, logPath := debugFixture(t)
	os.Remove(logPath)
	var page LogPage
	getJSON(t, srv.URL+"/api/experiments/dbg/trials/1/log?rank=0", &page)
	if !page.Absent || len(page.Lines) != 0 || page.Size != 0 {
		t.Errorf("got %+v, want an empty page marked absent", page)
	}
	getJSON(t, srv.URL+"/api/experiments/dbg/trials/1/log?rank=0&after=0", &page)
	if !page.Absent || len(page.Lines) != 0 {
		t.Errorf("following: got %+v, want an empty page marked absent", page)
	}
}

func TestTrialUsageAPI(t *testing.T) {
	srv, _ := debugFixture(t)
	var series []UsageSeries
	getJSON(t, srv.URL+"/api/experiments/dbg/trials/1/usage", &series)
	var got []string
	for _, s := range series {
		gpu := ""
		if s.GPU != nil {
			gpu = fmt.Sprint(*s.GPU)
		}
		got = append(got, fmt.Sprintf("%d/%s%s:%d", s.Rank, s.Kind, gpu, len(s.Points)))
	}
	want := "0/cpu:3 0/gpu_memory0:3 0/gpu_util0:3 0/rss:3 1/cpu:3 1/gpu_memory1:3 1/gpu_util1:3 1/rss:3"
	if strings.Join(got, " ") != want {
		t.Errorf("series %s, want %s", strings.Join(got, " "), want)
	}
	if series[3].Points[2][1] != 3<<20 || series[4].Points[0][1] != 100 {
		t.Errorf("values: rss %v, cpu %v", series[3].Points, series[4].Points)
	}
}

// Stacks come from a running sweep only, and only for the dashboard's own
// page.
func TestStacksAPIWithoutARun(t *testing.T) {
	srv, _ := debugFixture(t)
	url := srv.URL + "/api/experiments/dbg/trials/1/stacks"
	resp, err := http.Post(url, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("no run: %d, want 503", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodPost, url, nil)
	req.Header.Set("Origin", "http://evil.example")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("another origin: %d, want 403", resp.StatusCode)
	}
	if code, _, _ := get(t, url); code != http.StatusNotFound {
		t.Errorf("GET: %d, want 404", code)
	}
}

// A worker's CPU and memory samples are not the host's.
func TestWorkerSamplesAreNotTheHosts(t *testing.T) {
	srv, _ := debugFixture(t)
	var res Resources
	getJSON(t, srv.URL+"/api/experiments/dbg/resources", &res)
	for _, s := range res.Samples {
		if s.Index == storage.NoGPU && s.Util != 10 {
			t.Errorf("host sample %+v, want the node's own (10%%)", s)
		}
	}
	_, body, _ := get(t, srv.URL+"/metrics")
	if !strings.Contains(body, `gotune_host_cpu_utilization_percent{experiment="dbg",node="n"} 10`) {
		t.Errorf("metrics:\n%s", body)
	}
}
