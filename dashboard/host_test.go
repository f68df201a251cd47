package dashboard

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/gotune/gotune/storage"
)

// TestServeRefusesForeignHosts serves the fixture through Serve and asks
// for its API under many Host headers: loopback names, addresses and this
// machine's name are answered; any other name, as a page of a site whose
// name was made to resolve to 127.0.0.1 sends (DNS rebinding), is refused
// with 403 and a body that says why.
func TestServeRefusesForeignHosts(t *testing.T) {
	db, err := storage.OpenReadOnly(writeFixture(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, l, New(db)) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	hostname, _ := os.Hostname()
	for _, tt := range []struct {
		host string
		ok   bool
	}{
		{"127.0.0.1:" + port, true},
		{"localhost:" + port, true},
		{"LocalHost:" + port, true},
		{"localhost", true},
		{"localhost.:" + port, true},
		{"[::1]:" + port, true},
		{"[::1]", true},
		{"127.0.0.1:9000", true}, // an SSH tunnel from another port
		{"192.168.1.20:" + port, true},
		{hostname + ":" + port, hostname != ""},
		{"attacker.example:" + port, false},
		{"attacker.example", false},
		{"localhost.attacker.example:" + port, false},
		{"127.0.0.1.nip.io:" + port, false},
		{"x.localhost:" + port, false},
	} {
		for _, path := range []string{"/api/experiments", "/", "/metrics"} {
			req, err := http.NewRequest("GET", "http://"+l.Addr().String()+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = tt.host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !tt.ok {
				if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "DNS rebinding") ||
					!strings.Contains(string(body), "open http://"+l.Addr().String()+"/") {
					t.Errorf("Host %q, %s: %d %q; want 403 saying why and what to open", tt.host, path, resp.StatusCode, body)
				}
				continue
			}
			if resp.StatusCode != http.StatusOK {
				t.Errorf("Host %q, %s: %d %q; want 200", tt.host, path, resp.StatusCode, body)
			}
		}
	}
}
