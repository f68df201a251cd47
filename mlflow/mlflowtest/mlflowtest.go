// Package mlflowtest starts FastTrackML, a Go implementation of MLflow's
// tracking server, on loopback for tests, and reads back through MLflow's
// REST API what it holds. It imports nothing of gotune's.
package mlflowtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// version is the FastTrackML release scripts/fasttrackml.sh builds.
const version = "v0.6.0"

// Binary returns the FastTrackML binary: $GOTUNE_FASTTRACKML, or the one
// scripts/fasttrackml.sh built into its cache. When there is none the test
// is skipped, except with GOTUNE_CI=1: then Binary runs the script, and
// fails the test when that fails.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("GOTUNE_FASTTRACKML"); p != "" {
		return p
	}
	cache := os.Getenv("GOTUNE_FASTTRACKML_CACHE")
	if cache == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			t.Fatal(err)
		}
		cache = filepath.Join(dir, "gotune", "fml")
	}
	bin := filepath.Join(cache, version, "fml")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "fasttrackml.sh")
	if os.Getenv("GOTUNE_CI") != "1" {
		t.Skipf("no FastTrackML server at %s: build it with %s (or set GOTUNE_FASTTRACKML)", bin, script)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(script)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("build FastTrackML with %s: %v\n%s", script, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// FreeAddr returns a loopback address with a port nothing listens on now.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// Server is a FastTrackML server a test started; the test's cleanup stops it.
type Server struct {
	// URI is the server's address, the tracking URI to give gotune.
	URI string
	// Username and Password, when set, are what the server demands.
	Username, Password string
	log                bytes.Buffer
}

// Start starts a server on a free loopback port and waits until it
// answers. With a username, the server demands HTTP basic authentication.
func Start(t testing.TB, username, password string) *Server {
	return StartAt(t, FreeAddr(t), username, password)
}

// StartAt is Start on addr.
func StartAt(t testing.TB, addr, username, password string) *Server {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir()
	s := &Server{URI: "http://" + addr, Username: username, Password: password}
	args := []string{"server", "--listen-address", addr, "--database-uri", "sqlite://" + filepath.Join(dir, "fml.db"),
		"--default-artifact-root", filepath.Join(dir, "artifacts"), "--log-level", "warn"}
	if username != "" {
		args = append(args, "--auth-username", username, "--auth-password", password)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = &s.log, &s.log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start FastTrackML: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.URI + "/api/2.0/mlflow/experiments/get-by-name?experiment_name=_")
		if err == nil {
			resp.Body.Close()
			return s
		}
		select {
		case err := <-exited:
			t.Fatalf("FastTrackML exited before it answered: %v\n%s", err, s.log.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("FastTrackML did not answer at %s within 30s:\n%s", s.URI, s.log.String())
		}
	}
}

// call calls endpoint of the REST API (GET with query when in is
// url.Values, else POST of in as JSON) and decodes the answer into out.
func (s *Server) call(t testing.TB, endpoint string, in, out any) {
	t.Helper()
	u := s.URI + "/api/2.0/mlflow/" + endpoint
	var req *http.Request
	var err error
	if q, ok := in.(url.Values); ok {
		req, err = http.NewRequest(http.MethodGet, u+"?"+q.Encode(), nil)
	} else {
		b, _ := json.Marshal(in)
		req, err = http.NewRequest(http.MethodPost, u, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
	}
	if err != nil {
		t.Fatal(err)
	}
	if s.Username != "" {
		req.SetBasicAuth(s.Username, s.Password)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", endpoint, err)
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	body.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: HTTP %d: %s", endpoint, resp.StatusCode, body.String())
	}
	if err := json.Unmarshal(body.Bytes(), out); err != nil {
		t.Fatalf("%s: %v: %s", endpoint, err, body.String())
	}
}

// Point is one value of a metric as the server keeps it.
type Point struct {
	Value     any   `json:"value"` // a number, or "NaN" and the like
	Timestamp int64 `json:"timestamp"`
	Step      int64 `json:"step"`
}

// Run is one run as the server holds it.
type Run struct {
	ID, Name, Status string
	// Start and End are the run's times in milliseconds since 1970; End
	// is 0 while it runs.
	Start, End   int64
	Params, Tags map[string]string
	// Metrics holds every metric's whole history, in the server's order.
	Metrics map[string][]Point
}

// Runs returns every run of the experiment named name, by run name; it
// fails the test when the server has no such experiment.
func (s *Server) Runs(t testing.TB, name string) map[string]*Run {
	t.Helper()
	var exp struct {
		Experiment struct {
			ID string `json:"experiment_id"`
		} `json:"experiment"`
	}
	s.call(t, "experiments/get-by-name", url.Values{"experiment_name": {name}}, &exp)
	type kv struct{ Key, Value string }
	var got struct {
		Runs []struct {
			Info struct {
				ID     string `json:"run_id"`
				Name   string `json:"run_name"`
				Status string `json:"status"`
				Start  int64  `json:"start_time"`
				End    int64  `json:"end_time"`
			} `json:"info"`
			Data struct {
				Params  []kv `json:"params"`
				Tags    []kv `json:"tags"`
				Metrics []struct {
					Key string `json:"key"`
				} `json:"metrics"`
			} `json:"data"`
		} `json:"runs"`
		Next string `json:"next_page_token"`
	}
	out := map[string]*Run{}
	for page := ""; ; page = got.Next {
		got.Next = ""
		s.call(t, "runs/search", map[string]any{"experiment_ids": []string{exp.Experiment.ID}, "max_results": 1000, "page_token": page}, &got)
		for _, r := range got.Runs {
			run := &Run{ID: r.Info.ID, Name: r.Info.Name, Status: r.Info.Status, Start: r.Info.Start, End: r.Info.End,
				Params: map[string]string{}, Tags: map[string]string{}, Metrics: map[string][]Point{}}
			for _, p := range r.Data.Params {
				run.Params[p.Key] = p.Value
			}
			for _, p := range r.Data.Tags {
				run.Tags[p.Key] = p.Value
			}
			for _, m := range r.Data.Metrics {
				var h struct {
					Metrics []Point `json:"metrics"`
				}
				s.call(t, "metrics/get-history", url.Values{"run_id": {run.ID}, "metric_key": {m.Key}}, &h)
				run.Metrics[m.Key] = h.Metrics
			}
			if _, dup := out[run.Name]; dup {
				t.Fatalf("experiment %q has two runs named %q", name, run.Name)
			}
			out[run.Name] = run
		}
		if got.Next == "" {
			return out
		}
	}
}

// String summarises r for failure messages.
func (r *Run) String() string {
	n := 0
	for _, h := range r.Metrics {
		n += len(h)
	}
	return fmt.Sprintf("run %s (%s, %s): %d params, %d tags, %d metric values", r.Name, r.ID, r.Status, len(r.Params), len(r.Tags), n)
}
