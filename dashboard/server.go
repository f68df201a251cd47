// Package dashboard serves gotune's web UI over a results database: the
// experiments, a sortable and filterable trials table, learning curves,
// parameters against the objective, each trial's workers (stragglers
// marked), checkpoints and events, updated while a sweep runs. It also
// serves the JSON API the page reads (under /api/) and Prometheus metrics
// (/metrics). It only reads the database; every asset is embedded in the
// binary.
//
// It imports storage, tuner (parameter importance, live stacks) and workers
// (usage); only cmd/gotune imports it.
package dashboard

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/workers"
)

// DefaultAddr is where `gotune dashboard` listens unless told otherwise.
const DefaultAddr = "127.0.0.1:8265"

//go:embed static
var static embed.FS

// Server is the dashboard's HTTP handler: the page, its assets, the JSON
// API and /metrics. Build it with New; it is safe for concurrent use.
type Server struct {
	db    *storage.DB
	usage func() workers.Usage
	now   func() time.Time
	mux   *http.ServeMux
}

// Option customises a Server.
type Option func(*Server)

// WithUsage has the server report what a running sweep's resource manager
// holds (from workers.Manager.Usage), in the API and in /metrics. Without
// it, resources in use are known only through the workers and resource
// samples the database records.
func WithUsage(f func() workers.Usage) Option { return func(s *Server) { s.usage = f } }

// WithClock makes the server take the time from now instead of the wall
// clock: what "the last minute" and "recent samples" mean. For tests.
func WithClock(now func() time.Time) Option { return func(s *Server) { s.now = now } }

// New returns a server over db, which it only reads: open it with
// storage.OpenReadOnly (a sweep may be writing it meanwhile).
func New(db *storage.DB, opts ...Option) *Server {
	s := &Server{db: db, now: time.Now, mux: http.NewServeMux()}
	for _, o := range opts {
		o(s)
	}
	assets, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded folder is part of the build
	}
	files := http.FileServerFS(assets)
	s.mux.Handle("GET /", noCache(files))
	s.mux.HandleFunc("GET /metrics", s.metrics)
	s.mux.HandleFunc("GET /api/version", s.version)
	s.mux.HandleFunc("GET /api/experiments", s.api(s.experiments))
	s.mux.HandleFunc("GET /api/experiments/{exp}", s.api(s.experiment))
	s.mux.HandleFunc("GET /api/experiments/{exp}/trials", s.api(s.trials))
	s.mux.HandleFunc("GET /api/experiments/{exp}/trials/{trial}", s.api(s.trial))
	s.mux.HandleFunc("POST /api/experiments/{exp}/trials/{trial}/stacks", s.stacks)
	s.mux.HandleFunc("GET /api/experiments/{exp}/trials/{trial}/log", s.api(s.workerLog))
	s.mux.HandleFunc("GET /api/experiments/{exp}/trials/{trial}/usage", s.api(s.trialUsage))
	s.mux.HandleFunc("GET /api/experiments/{exp}/curves", s.api(s.curves))
	s.mux.HandleFunc("GET /api/experiments/{exp}/events", s.api(s.events))
	s.mux.HandleFunc("GET /api/experiments/{exp}/resources", s.api(s.resources))
	s.mux.HandleFunc("GET /api/experiments/{exp}/front", s.api(s.front))
	s.mux.HandleFunc("GET /api/experiments/{exp}/importance", s.api(s.importance))
	s.mux.HandleFunc("GET /api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{http.StatusNotFound, fmt.Errorf("no API endpoint %s %s", r.Method, r.URL.Path)})
	})
	return s
}

// ServeHTTP serves the page, the API and the metrics.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// Everything the page loads comes from this server.
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	s.mux.ServeHTTP(w, r)
}

// noCache makes browsers revalidate the assets, so that a new gotune's
// page is never mixed with an old one's script.
func noCache(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}

// Listen opens addr for the dashboard. A missing host, as in ":8265" or
// "8265", means 127.0.0.1, so that the dashboard is reachable from this
// machine only unless an address such as 0.0.0.0:8265 says otherwise.
func Listen(addr string) (net.Listener, error) {
	if !strings.Contains(addr, ":") {
		addr = ":" + addr
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dashboard address %q: %w (want HOST:PORT, as in %s)", addr, err, DefaultAddr)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w (is another dashboard running? choose another port with --addr)", err)
	}
	return l, nil
}

// Serve serves h on l until ctx ends, then shuts the server down, waiting
// up to 5 seconds for requests in flight. It returns nil after a shutdown
// that ctx asked for. Requests for a host name other than this machine's
// own are refused, against DNS rebinding: see GuardHost.
func Serve(ctx context.Context, l net.Listener, h http.Handler) error {
	hostname, _ := os.Hostname()
	srv := &http.Server{Handler: GuardHost(h, hostname), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

// GuardHost passes on to h only the requests whose Host header names this
// machine in a way no one else's DNS answer can change, and refuses the
// others with 403 Forbidden and a body that says why and what to open
// instead. This protects the dashboard from DNS rebinding: a web page of
// another site, whose name its owner makes resolve to 127.0.0.1 (or to the
// address the dashboard serves), would otherwise read the dashboard
// through the visitor's browser, its requests carrying that site's name.
//
// Accepted hosts, with any port or none (so that an SSH tunnel to another
// local port works): "localhost", any IP address literal
// ("127.0.0.1", "[::1]", or the address of one of the machine's interfaces
// when the dashboard serves on 0.0.0.0: a browser sends an address only
// when the page's own address is that address, which no rebinding can
// fake), and hostname, this machine's own name (os.Hostname; "" accepts
// none). Other names, a DNS alias or a reverse proxy's public name for
// instance, are refused: open the dashboard by address, or have the proxy
// send the Host header as 127.0.0.1.
func GuardHost(h http.Handler, hostname string) http.Handler {
	hostname = strings.TrimSuffix(strings.ToLower(hostname), ".")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if allowedHost(r.Host, hostname) {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusForbidden)
		also := ""
		if hostname != "" {
			also = " and this machine's name (" + hostname + ")"
		}
		open := "http://127.0.0.1:PORT/"
		if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			open = "http://" + a.String() + "/"
		}
		fmt.Fprintf(w, "gotune dashboard: refused a request for host %q: against DNS rebinding, the dashboard answers only to localhost, IP addresses%s; open %s instead\n",
			r.Host, also, open)
	})
}

// allowedHost reports whether a Host header value names this machine by
// one of the names GuardHost accepts.
func allowedHost(host, hostname string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	return host != "" && (host == "localhost" || host == hostname)
}
