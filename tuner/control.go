package tuner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
)

// A running Fit answers questions about its live trials on a control
// socket: HTTP over a Unix socket at storage.ControlPath beside the
// database, which only this machine's user that runs the sweep can open
// (the socket is mode 0600). `gotune stack` and the dashboard are its
// clients (TrialStacks). The socket exists only while Fit runs; the
// experiment's lock makes its path this run's alone.
//
//	GET /v1/stacks?trial=N[&rank=R]  → StacksReply, or {"error": "..."}

// maxSocketPath is the longest path a Unix socket can be bound at (the
// kernel's limit is 108 bytes with the terminating zero); a longer
// storage.ControlPath becomes a symbolic link to a socket in a short
// temporary folder.
const maxSocketPath = 100

// controlTempPrefix starts the name of the temporary folder of a control
// socket whose own path is too long.
const controlTempPrefix = "gotune-ctl-"

// StacksReply is the control socket's answer to a stacks request.
type StacksReply struct {
	Experiment string                `json:"experiment"`
	Trial      int                   `json:"trial"`
	Time       time.Time             `json:"time"`
	Stacks     []trainer.WorkerStack `json:"stacks"`
}

// inspectors holds an Inspector for every trial whose group runs now, by
// number; the control socket reads it, trials' groups write it, and the
// loop drops a trial's when its group ends, with what it reached.
type inspectors struct {
	mu sync.Mutex
	m  map[int]*trainer.Inspector
}

// of returns trial's inspector, made on first use.
func (in *inspectors) of(trial int) *trainer.Inspector {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.m == nil {
		in.m = map[int]*trainer.Inspector{}
	}
	if in.m[trial] == nil {
		in.m[trial] = &trainer.Inspector{}
	}
	return in.m[trial]
}

// drop forgets trial's inspector, when its group has ended.
func (in *inspectors) drop(trial int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.m, trial)
}

// all returns every trial's inspector, by number.
func (in *inspectors) all() map[int]*trainer.Inspector {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make(map[int]*trainer.Inspector, len(in.m))
	for n, i := range in.m {
		out[n] = i
	}
	return out
}

// lookup returns trial's inspector, nil when the trial's group is not
// running here.
func (in *inspectors) lookup(trial int) *trainer.Inspector {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.m[trial]
}

// controlServer serves a Fit's control socket until closed.
type controlServer struct {
	srv  *http.Server
	path string // the socket, or the link to it
	tmp  string // the short folder that holds the socket, "" when none
	done chan struct{}
}

// removeStaleControl removes the control socket at path that a killed run
// left (a socket, or the link to one in a short temporary folder, which
// goes with it). The caller holds the experiment's lock, so no run serves
// it. A file of another kind at path is not gotune's and stays.
func removeStaleControl(path string) {
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&(os.ModeSocket|os.ModeSymlink) == 0 {
		return
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		if to, err := os.Readlink(path); err == nil && strings.HasPrefix(filepath.Base(filepath.Dir(to)), controlTempPrefix) {
			os.RemoveAll(filepath.Dir(to))
		}
	}
	os.Remove(path)
}

// serveControl starts the control socket of experiment exp of the database
// at dbPath, answering from ins. The caller holds the experiment's lock.
func serveControl(dbPath, exp string, ins *inspectors) (*controlServer, error) {
	abs, err := filepath.Abs(dbPath)
	if err != nil {
		return nil, err
	}
	c := &controlServer{path: storage.ControlPath(abs, exp), done: make(chan struct{})}
	removeStaleControl(c.path) // the lock says it is stale
	sock := c.path
	if len(sock) > maxSocketPath {
		if c.tmp, err = os.MkdirTemp("", controlTempPrefix); err != nil {
			return nil, fmt.Errorf("control socket: %w", err)
		}
		sock = filepath.Join(c.tmp, "s")
	}
	// On failure, remove only what this call made: a file found in the
	// way at c.path is not ours.
	fail := func(err error) (*controlServer, error) {
		if c.tmp != "" {
			os.RemoveAll(c.tmp)
		}
		return nil, fmt.Errorf("control socket %s: %w", c.path, err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return fail(err)
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		ln.Close() // removes the socket
		return fail(err)
	}
	if c.tmp != "" {
		if err := os.Symlink(sock, c.path); err != nil {
			ln.Close()
			return fail(err)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/stacks", func(w http.ResponseWriter, r *http.Request) {
		reply, code, err := stacks(r, exp, ins)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		if err != nil {
			json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
			return
		}
		json.NewEncoder(w).Encode(reply)
	})
	c.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(c.done)
		c.srv.Serve(ln)
	}()
	return c, nil
}

// stacks answers a stacks request.
func stacks(r *http.Request, exp string, ins *inspectors) (*StacksReply, int, error) {
	trial, err := strconv.Atoi(r.URL.Query().Get("trial"))
	if err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("trial: want a trial number, got %q", r.URL.Query().Get("trial"))
	}
	rank := -1
	if s := r.URL.Query().Get("rank"); s != "" {
		if rank, err = strconv.Atoi(s); err != nil || rank < 0 {
			return nil, http.StatusBadRequest, fmt.Errorf("rank: want a rank (0 or more), got %q", s)
		}
	}
	in := ins.lookup(trial)
	if in == nil {
		return nil, http.StatusConflict, fmt.Errorf("trial %d of %q is not running in this run of the sweep", trial, exp)
	}
	st, err := in.Stacks(r.Context(), rank)
	switch {
	case errors.Is(err, trainer.ErrNotRunning):
		return nil, http.StatusConflict, fmt.Errorf("trial %d is not running now", trial)
	case err != nil:
		return nil, http.StatusNotFound, fmt.Errorf("trial %d: %w", trial, err)
	}
	return &StacksReply{Experiment: exp, Trial: trial, Time: time.Now(), Stacks: st}, http.StatusOK, nil
}

// Close stops serving and removes the socket.
func (c *controlServer) Close() {
	if c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.srv.Shutdown(ctx)
	<-c.done
	c.removeFiles()
}

func (c *controlServer) removeFiles() {
	os.Remove(c.path)
	if c.tmp != "" {
		os.RemoveAll(c.tmp)
	}
}

// ErrNoSuchRank is wrapped by TrialStacks's error when the trial's group
// has no worker of the rank asked for.
var ErrNoSuchRank = errors.New("no such rank")

// noSuchRankError is the run's answer to a rank its trial's group lacks.
type noSuchRankError struct{ msg string }

func (e *noSuchRankError) Error() string { return e.msg }
func (e *noSuchRankError) Unwrap() error { return ErrNoSuchRank }

// ErrNotLive is wrapped by TrialStacks's error when no run of the
// experiment answers on this machine.
var ErrNotLive = errors.New("the experiment is not running on this machine")

// TrialStacks asks the run of experiment exp of the database at dbPath,
// through its control socket, for the current stacks of trial's workers:
// of rank only, or of all when rank is negative. Only a run on this
// machine can be asked.
func TrialStacks(ctx context.Context, dbPath, exp string, trial, rank int) (*StacksReply, error) {
	abs, err := filepath.Abs(dbPath)
	if err != nil {
		return nil, err
	}
	path := storage.ControlPath(abs, exp)
	sock := path
	if len(sock) > maxSocketPath {
		// Too long to connect to: the run made it a link to a short one.
		target, err := os.Readlink(sock)
		if err != nil {
			return nil, fmt.Errorf("%w: no run of %q answers at %s", ErrNotLive, exp, path)
		}
		sock = target
	}
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	defer client.CloseIdleConnections()
	url := fmt.Sprintf("http://gotune/v1/stacks?trial=%d", trial)
	if rank >= 0 {
		url += fmt.Sprintf("&rank=%d", rank)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w: no run of %q answers at %s", ErrNotLive, exp, path)
		}
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			if resp.StatusCode == http.StatusNotFound {
				return nil, &noSuchRankError{e.Error}
			}
			return nil, errors.New(e.Error)
		}
		return nil, fmt.Errorf("control socket %s: %s", path, resp.Status)
	}
	var reply StacksReply
	if err := json.Unmarshal(body, &reply); err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	return &reply, nil
}
