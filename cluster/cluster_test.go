package cluster

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/gotune/gotune/cluster/agentpb"
	"github.com/gotune/gotune/workers"
)

// hangBound bounds waits that only end when something works: a failure
// makes the test fail instead of hang.
const hangBound = 2 * time.Minute

// logLines collects log lines for assertions.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logLines) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

// testHead starts a head with no nodes of its own on 127.0.0.1.
func testHead(t *testing.T, cfg HeadConfig) (*Head, *logLines) {
	t.Helper()
	logs := &logLines{}
	if cfg.Manager == nil {
		cfg.Manager = workers.NewManager(nil, workers.ManagerConfig{})
	}
	if cfg.Token == "" {
		cfg.Token = "secret"
	}
	cfg.Logf = logs.logf
	h, err := ListenHead("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h, logs
}

// testAgent runs an agent in this process until the test ends or stop is
// called; its error arrives on the returned channel.
func testAgent(t *testing.T, h *Head, cfg AgentConfig) (stop func(), done <-chan error) {
	t.Helper()
	if cfg.Head == "" {
		cfg.Head = h.Addr()
	}
	if cfg.Token == "" {
		cfg.Token = "secret"
	}
	if cfg.Node.CPUs == 0 {
		cfg.Node.CPUs = 2
	}
	if cfg.Logf == nil {
		cfg.Logf = t.Logf
	}
	if cfg.Retry == 0 {
		cfg.Retry = 50 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		ch <- RunAgent(ctx, cfg)
		close(finished)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-finished:
			case <-time.After(hangBound):
				t.Error("the agent did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return stop, ch
}

func waitAgents(t *testing.T, h *Head, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	if err := h.WaitAgents(ctx, n); err != nil {
		t.Fatal(err)
	}
}

// until polls cond until it holds, failing the test after hangBound.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitDone(t *testing.T, p *workers.Process) {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(hangBound):
		t.Fatal("the process never ended")
	}
}

func sh(script string, extra ...string) workers.LaunchSpec {
	return workers.LaunchSpec{Args: []string{"/bin/sh", "-c", script}, Env: append(os.Environ(), extra...)}
}

func TestAgentRunsProcesses(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			h, logs := testHead(t, HeadConfig{})
			testAgent(t, h, AgentConfig{Node: workers.Node{Name: "a", CPUs: 3, GPUs: []workers.GPU{{Index: 0, MIG: -1, Name: "declared"}}}, Host: "127.0.0.2", Shared: shared})
			waitAgents(t, h, 1)
			if !logs.has("agent a joined from 127.0.0.2") {
				t.Error("no join logged")
			}
			nodes := h.Manager().Nodes()
			if len(nodes) != 1 || nodes[0].Name != "a" || nodes[0].CPUs != 3 || len(nodes[0].GPUs) != 1 {
				t.Fatalf("the manager's nodes: %+v", nodes)
			}
			l := h.Launcher(0)
			if l == nil || l.Host() != "127.0.0.2" || l.Node() != "a" {
				t.Fatalf("launcher %+v", l)
			}
			if port, err := l.FreePort(context.Background()); err != nil || port <= 0 {
				t.Fatalf("free port %d, %v", port, err)
			}

			dir := t.TempDir()
			// Reports, logs and the exit status travel back; the head's
			// variables reach the process on top of the agent's.
			spec := sh(`echo "@r {\"x\": $X}"; echo to the log; echo to stderr >&2; pwd; exit 3`, "X=7")
			spec.ReportPrefix = "@r "
			spec.LogPath = filepath.Join(dir, "logs", "w.log")
			var mu sync.Mutex
			var reports []string
			p, err := l.Start(spec, func(line string) { mu.Lock(); reports = append(reports, line); mu.Unlock() })
			if err != nil {
				t.Fatal(err)
			}
			if p.Node() != "a" || p.Pid() <= 0 {
				t.Errorf("node %q, pid %d", p.Node(), p.Pid())
			}
			waitDone(t, p)
			var ee *workers.ExitError
			if !errors.As(p.Err(), &ee) || ee.Code != 3 {
				t.Errorf("exit %v, want status 3", p.Err())
			}
			if len(reports) != 1 || reports[0] != `{"x": 7}` {
				t.Errorf("reports %q", reports)
			}
			logText, _ := os.ReadFile(spec.LogPath)
			for _, want := range []string{"to the log", "to stderr", "started on node a"} {
				if !strings.Contains(string(logText), want) {
					t.Errorf("the log lacks %q:\n%s", want, logText)
				}
			}
			if tail := p.Tail(); len(tail) < 2 {
				t.Errorf("tail %q", tail)
			}

			// A checkpoint written in the scratch folder comes back, and an
			// input folder is there to read.
			scratch := filepath.Join(dir, "scratch")
			input := filepath.Join(dir, "input")
			os.MkdirAll(filepath.Join(input, "sub"), 0o755)
			os.WriteFile(filepath.Join(input, "sub", "state"), []byte("resumed"), 0o644)
			os.MkdirAll(scratch, 0o755)
			spec = sh(`mkdir -p "$CK/ck1/deep" && cat "$IN/sub/state" > "$CK/ck1/deep/f" && head -c 600000 /dev/zero > "$CK/ck1/big" && echo "@r $CK/ck1"`,
				"CK="+scratch, "IN="+input)
			spec.ReportPrefix = "@r "
			spec.Scratch, spec.Inputs = scratch, []string{input}
			// Fetch is called as the report arrives, before the process's
			// end can release its folders.
			type fetched struct {
				reported, local string
				err             error
			}
			got := make(chan fetched, 1)
			ready := make(chan struct{})
			p, err = l.Start(spec, func(line string) {
				<-ready
				local, err := p.Fetch(context.Background(), line)
				got <- fetched{line, local, err}
			})
			close(ready)
			if err != nil {
				t.Fatal(err)
			}
			var f fetched
			select {
			case f = <-got:
			case <-time.After(hangBound):
				t.Fatal("no report")
			}
			reported, local := f.reported, f.local
			if f.err != nil {
				t.Fatal(f.err)
			}
			if !shared && strings.HasPrefix(reported, scratch) {
				t.Errorf("the agent did not give the process a scratch folder of its own: %s", reported)
			}
			waitDone(t, p)
			if p.Err() != nil {
				t.Fatalf("exit %v: %q", p.Err(), p.Tail())
			}
			if b, err := os.ReadFile(filepath.Join(local, "deep", "f")); err != nil || string(b) != "resumed" {
				t.Errorf("fetched checkpoint: %q, %v", b, err)
			}
			if fi, err := os.Stat(filepath.Join(local, "big")); err != nil || fi.Size() != 600000 {
				t.Errorf("fetched big file: %v, %v", fi, err)
			}
			if shared {
				if local != reported {
					t.Errorf("shared files: fetched to %s, want %s itself", local, reported)
				}
			} else {
				if !strings.HasPrefix(local, scratch+"/") {
					t.Errorf("fetched to %s, not inside the scratch folder %s", local, scratch)
				}
				until(t, "the agent to delete what it handed over", func() bool {
					_, err := os.Stat(reported)
					return errors.Is(err, os.ErrNotExist)
				})
			}
		})
	}
}

func TestAgentControlStreamAndSignals(t *testing.T) {
	h, _ := testHead(t, HeadConfig{})
	testAgent(t, h, AgentConfig{Node: workers.Node{Name: "a"}, Host: "127.0.0.3"})
	waitAgents(t, h, 1)
	l := h.Launcher(0)

	// The control stream relays both ways: the process echoes a line back
	// upper-cased.
	spec := sh(`read line <&3; echo "$line" | tr a-z A-Z >&3`)
	spec.Control = true
	p, err := l.Start(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctl := p.Control()
	if _, err := ctl.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	b := make([]byte, 64)
	for {
		n, err := ctl.Read(b)
		buf.Write(b[:n])
		if err != nil {
			break
		}
	}
	if buf.String() != "HELLO\n" {
		t.Errorf("control stream gave %q", buf.String())
	}
	waitDone(t, p)
	if p.Err() != nil {
		t.Errorf("exit %v", p.Err())
	}

	// Stop sends SIGTERM; Kill SIGKILL.
	for _, kill := range []bool{false, true} {
		p, err := l.Start(sh(`trap '' TERM; echo ready; while :; do sleep 0.05; done`), nil)
		if err != nil {
			t.Fatal(err)
		}
		until(t, "the process to start", func() bool { return len(p.Tail()) > 0 })
		if kill {
			p.Kill()
		} else {
			p.Stop(50 * time.Millisecond) // the process ignores SIGTERM: SIGKILL follows
		}
		waitDone(t, p)
		var ee *workers.ExitError
		if !errors.As(p.Err(), &ee) || ee.Signal != syscall.SIGKILL {
			t.Errorf("kill=%v: exit %v, want SIGKILL", kill, p.Err())
		}
	}

	// A program that does not exist fails the start.
	if _, err := l.Start(workers.LaunchSpec{Args: []string{"/nonexistent/prog"}}, nil); err == nil || !strings.Contains(err.Error(), "nonexistent") {
		t.Errorf("start of a missing program: %v", err)
	}
	// A fetch of a missing folder fails with the agent's reason.
	p, err = l.Start(sh(`sleep 60`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Fetch(context.Background(), "/nonexistent/ck"); err == nil || !strings.Contains(err.Error(), "nonexistent") {
		t.Errorf("fetch of a missing folder: %v", err)
	}
	p.Kill()
	waitDone(t, p)
}

func TestAgentLossAndRejoin(t *testing.T) {
	h, logs := testHead(t, HeadConfig{Timeout: 2 * time.Second})
	stop, _ := testAgent(t, h, AgentConfig{Node: workers.Node{Name: "a"}, Host: "127.0.0.2"})
	waitAgents(t, h, 1)
	testAgent(t, h, AgentConfig{Node: workers.Node{Name: "a"}, Host: "127.0.0.3"}) // same name: it becomes a-2
	waitAgents(t, h, 2)
	var aIndex int
	for _, ai := range h.Agents() {
		if ai.Host == "127.0.0.2" {
			aIndex = ai.Index
			if ai.Name != "a" {
				t.Errorf("first agent named %q", ai.Name)
			}
		} else if ai.Name != "a-2" {
			t.Errorf("second agent named %q, want a-2", ai.Name)
		}
	}
	p, err := h.Launcher(aIndex).Start(sh(`sleep 60`), nil)
	if err != nil {
		t.Fatal(err)
	}
	m := h.Manager()
	alloc, err := m.Acquire(context.Background(), workers.Request{Workers: 4, Per: workers.Resources{CPUs: 1}})
	if err != nil {
		t.Fatal(err)
	}

	stop() // the agent goes away: its node is lost and its process fails
	waitDone(t, p)
	if !errors.Is(p.Err(), workers.ErrNodeLost) {
		t.Errorf("the process of a lost node ended with %v, want ErrNodeLost", p.Err())
	}
	until(t, "the loss to be logged", func() bool { return logs.has("agent a lost") })
	if !m.Lost(aIndex) {
		t.Error("the node is not lost")
	}
	if _, err := h.Launcher(aIndex).Start(sh(`true`), nil); !errors.Is(err, workers.ErrNodeLost) {
		t.Errorf("start on a lost node: %v", err)
	}
	// Nothing is placed on the lost node, even once its workers are free.
	alloc.Release()
	b, err := m.Acquire(context.Background(), workers.Request{Workers: 2, Per: workers.Resources{CPUs: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range b.Workers() {
		if w.NodeIndex == aIndex {
			t.Errorf("placed on the lost node: %+v", b.Workers())
		}
	}
	// A group that needs the lost node waits for it rather than fails.
	tk, err := m.Submit(workers.Request{Workers: 3, Per: workers.Resources{CPUs: 1}})
	if err != nil {
		t.Fatalf("a group that fits with the lost node was refused: %v", err)
	}
	b.Release()
	if granted(tk) {
		t.Fatal("granted a group of 3 on one live node of 2 CPUs")
	}

	// The agent comes back under its name: the node is back, and the
	// waiting group is placed.
	testAgent(t, h, AgentConfig{Node: workers.Node{Name: "a", CPUs: 2}, Host: "127.0.0.4"})
	select {
	case <-tk.Ready():
	case <-time.After(hangBound):
		t.Fatal("the waiting group was not placed once the node came back")
	}
	tk.Cancel()
	if m.Lost(aIndex) || len(m.Nodes()) != 2 {
		t.Errorf("after the rejoin: lost %v, %d nodes", m.Lost(aIndex), len(m.Nodes()))
	}
	if got := h.Launcher(aIndex).Host(); got != "127.0.0.4" {
		t.Errorf("the rejoined node's host is %s", got)
	}
}

// TestStoppingAgentTakesNoMoreWork stops an agent as SIGTERM does, with a
// grace for its processes: the head takes its node out of placement before
// their exits free it, so that no group is placed there only to be lost
// when the agent leaves a moment later.
func TestStoppingAgentTakesNoMoreWork(t *testing.T) {
	h, logs := testHead(t, HeadConfig{})
	stop, _ := testAgent(t, h, AgentConfig{Node: workers.Node{Name: "a"}, Host: "127.0.0.2", StopGrace: 30 * time.Second})
	waitAgents(t, h, 1)
	p, err := h.Launcher(0).Start(sh(`exec sleep 60`), nil)
	if err != nil {
		t.Fatal(err)
	}
	go stop()
	waitDone(t, p)
	if errors.Is(p.Err(), workers.ErrNodeLost) {
		t.Errorf("the process of a stopping agent ended with %v, want its own exit on SIGTERM", p.Err())
	}
	if !h.Manager().Lost(0) {
		t.Error("the node of a stopping agent takes work once its process has exited")
	}
	if !logs.has("agent a is stopping: no more work goes to it") {
		t.Errorf("the head did not say the agent is stopping: %q", logs.lines)
	}
	until(t, "the agent to leave", func() bool { return logs.has("agent a left") })
	if logs.has("agent a lost") {
		t.Errorf("an agent that said it was stopping is called lost: %q", logs.lines)
	}
}

// A silent agent (stopped, or cut off) is lost after the timeout, though
// its connection stays open.
func TestSilentAgentIsLost(t *testing.T) {
	h, logs := testHead(t, HeadConfig{Timeout: 300 * time.Millisecond})
	conn, err := grpc.NewClient(h.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(tokenCreds{"secret"}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := agentpb.NewHeadClient(conn).Session(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(&agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Join{Join: &agentpb.Join{
		Node: &agentpb.Node{Name: "mute", Cpus: 1}, Version: protocolVersion}}})
	for {
		if _, err := stream.Recv(); err != nil {
			break // the head ended the session
		}
	}
	until(t, "the loss to be logged", func() bool { return logs.has("agent mute lost: no word from the agent") })
	if !h.Manager().Lost(0) {
		t.Error("the silent agent's node is not lost")
	}
}

func TestAgentWrongToken(t *testing.T) {
	h, logs := testHead(t, HeadConfig{})
	_, done := testAgent(t, h, AgentConfig{Node: workers.Node{Name: "intruder"}, Token: "guess"})
	select {
	case err := <-done:
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "token") {
			t.Errorf("RunAgent with a wrong token: %v", err)
		}
	case <-time.After(hangBound):
		t.Fatal("an agent with a wrong token kept trying")
	}
	if !logs.has("refused a call to /gotune.agent.v1.Head/Session from 127.0.0.1") || !logs.has("wrong token") {
		t.Error("the refusal was not logged")
	}
	if len(h.Manager().Nodes()) != 0 {
		t.Error("a refused agent's node was added")
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T, dir, name string) (cert, key string) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	return cert, key
}

func TestAgentTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t, dir, "head")
	agentCert, agentKey := selfSigned(t, dir, "agent")
	ca := filepath.Join(dir, "ca.pem")
	a, _ := os.ReadFile(cert)
	b, _ := os.ReadFile(agentCert)
	os.WriteFile(ca, append(a, b...), 0o644)

	// Mutual TLS: the head checks the agent's certificate, the agent the head's.
	h, _ := testHead(t, HeadConfig{TLS: &TLSFiles{Cert: cert, Key: key, CA: ca}})
	testAgent(t, h, AgentConfig{Node: workers.Node{Name: "tls"}, TLS: &TLSFiles{Cert: agentCert, Key: agentKey, CA: ca}})
	waitAgents(t, h, 1)
	p, err := h.Launcher(0).Start(sh(`exit 0`), nil)
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, p)

	// A client that does not trust the head's certificate, or that brings
	// none of its own, gets no session.
	tests := []struct {
		name string
		tls  TLSFiles
	}{
		{"untrusted head", TLSFiles{Cert: agentCert, Key: agentKey, CA: agentCert}},
		{"no client certificate", TLSFiles{CA: ca}},
	}
	for _, tt := range tests {
		tc, err := ClientTLS(tt.tls, "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(h.Addr(), grpc.WithTransportCredentials(credentials.NewTLS(tc)),
			grpc.WithPerRPCCredentials(tokenCreds{"secret"}))
		if err != nil {
			t.Fatal(err)
		}
		stream, err := agentpb.NewHeadClient(conn).Session(context.Background())
		if err == nil {
			err = stream.Send(&agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Join{Join: &agentpb.Join{Node: &agentpb.Node{Name: "x"}, Version: protocolVersion}}})
			if err == nil {
				_, err = stream.Recv()
			}
		}
		if err == nil {
			t.Errorf("%s: the session was accepted", tt.name)
		}
		conn.Close()
	}
	if n := len(h.Manager().Nodes()); n != 1 {
		t.Errorf("%d nodes joined, want only the trusted agent's", n)
	}
}

// TestAgentLackingTheProgramIsRefused: an agent whose node lacks the
// sweep's program is refused when it joins, told which program and which
// node, and never takes work; the head goes on and takes an agent that has
// it.
func TestAgentLackingTheProgramIsRefused(t *testing.T) {
	const program = "gotune-test-train"
	h, logs := testHead(t, HeadConfig{Programs: []string{"sh", program}})
	_, done := testAgent(t, h, AgentConfig{Node: workers.Node{Name: "bare"}})
	select {
	case err := <-done:
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), `node bare (127.0.0.1) lacks the sweep's program "`+program+`"`) {
			t.Errorf("RunAgent on a node without the program: %v", err)
		}
	case <-time.After(hangBound):
		t.Fatal("an agent without the program kept trying")
	}
	if !logs.has(`agent refused: node bare (127.0.0.1) lacks the sweep's program "` + program + `"`) {
		t.Errorf("the refusal was not logged: %q", logs.lines)
	}
	if len(h.Manager().Nodes()) != 0 {
		t.Fatal("a refused agent's node was added")
	}

	bin := t.TempDir()
	os.WriteFile(filepath.Join(bin, program), []byte("#!/bin/sh\necho trained\n"), 0o755)
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	testAgent(t, h, AgentConfig{Node: workers.Node{Name: "equipped"}})
	waitAgents(t, h, 1)
	p, err := h.Launcher(0).Start(workers.LaunchSpec{Args: []string{program}, Env: os.Environ()}, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, p)
	if p.Err() != nil || p.Node() != "equipped" {
		t.Errorf("the program on node %s: %v", p.Node(), p.Err())
	}
}

// granted reports whether tk's group has been placed.
func granted(tk *workers.Ticket) bool {
	select {
	case <-tk.Ready():
		return true
	default:
		return false
	}
}
