package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gotune/gotune/cluster/agentpb"
	"github.com/gotune/gotune/workers"
)

// AgentConfig configures RunAgent.
type AgentConfig struct {
	// Head is the head's address, host:port. Required.
	Head string
	// Token is the cluster's shared secret, the head's. Required.
	Token string
	// TLS, when not nil, connects with TLS (see ClientTLS); otherwise the
	// connection is plaintext.
	TLS *TLSFiles
	// Node is what this node offers (see workers.Discover and
	// workers.Declared); its Name is the name the agent asks for, ""
	// meaning "agent". An agent that joins again under the name of a lost
	// node gets that node back.
	Node workers.Node
	// Host is the address of this node that its workers listen on and
	// other nodes reach them at. "" means the local address of the
	// connection to the head. When it is an IP address, the connection to
	// the head also leaves from it.
	Host string
	// Shared says this node sees the head's files at the same paths (a
	// shared file system), so no folder is copied either way.
	Shared bool
	// WorkDir holds the processes' folders; "" means a temporary folder,
	// removed when RunAgent returns.
	WorkDir string
	// Executable runs the processes whose workers.LaunchSpec sets Self;
	// "" means this program (which must then be the head's program too).
	Executable string
	// Retry is the pause between attempts to reach the head; 0 means 1s.
	Retry time.Duration
	// StopGrace, when positive, makes the end of RunAgent's context a
	// graceful stop: the agent sends its worker processes SIGTERM, relays
	// their last output and exits to the head, and leaves once they are
	// gone, killing what is left after StopGrace. Zero kills them at once.
	StopGrace time.Duration
	// Logf receives a line per join, loss and process start; nil means the
	// standard logger.
	Logf func(format string, args ...any)
}

// ErrRefused is wrapped by RunAgent's error when the head refuses the
// agent for good: a wrong token, or another protocol version.
var ErrRefused = errors.New("the head refused the agent")

// RunAgent lends this node to the head at cfg.Head until ctx ends: it
// joins, starts the worker processes the head asks for and streams their
// output back, and sends a heartbeat every so often. When it loses the
// head (the connection breaks, or the head goes silent for its timeout)
// it kills its processes and joins again. It returns ctx's error once ctx
// ends, or an error wrapping ErrRefused at once when the head refuses it.
func RunAgent(ctx context.Context, cfg AgentConfig) error {
	switch {
	case cfg.Head == "":
		return errors.New("agent: no head address")
	case cfg.Token == "":
		return errors.New("agent: no token: give the head's token")
	}
	if cfg.Retry == 0 {
		cfg.Retry = time.Second
	}
	if cfg.Logf == nil {
		cfg.Logf = log.Printf
	}
	cfg.Logf = printableLogf(cfg.Logf)
	if cfg.Executable == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("agent: find this program: %w", err)
		}
		cfg.Executable = exe
	}
	work := cfg.WorkDir
	if work == "" {
		dir, err := os.MkdirTemp("", "gotune-agent-")
		if err != nil {
			return fmt.Errorf("agent: work folder: %w", err)
		}
		defer os.RemoveAll(dir)
		work = dir
	} else if err := os.MkdirAll(work, 0o755); err != nil {
		return fmt.Errorf("agent: work folder: %w", err)
	}
	a := &agent{cfg: cfg, work: work}
	conn, err := a.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	client := agentpb.NewHeadClient(conn)
	said := "" // the last failure logged, so that retries do not repeat it
	for {
		joined, err := a.session(ctx, client)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, ErrRefused) {
			return err
		}
		if joined {
			cfg.Logf("agent: lost the head at %s: %v; joining again", cfg.Head, err)
			said = ""
		} else if msg := status.Convert(err).Message(); msg != said {
			cfg.Logf("agent: cannot join the head at %s: %s; trying again every %v", cfg.Head, msg, cfg.Retry)
			said = msg
		}
		select {
		case <-time.After(cfg.Retry):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// agent is RunAgent's state across sessions.
type agent struct {
	cfg  AgentConfig
	work string

	mu        sync.Mutex
	localAddr string // of the latest connection to the head
}

func (a *agent) dial() (*grpc.ClientConn, error) {
	host, _, err := net.SplitHostPort(a.cfg.Head)
	if err != nil {
		return nil, fmt.Errorf("agent: head address %q: %w", a.cfg.Head, err)
	}
	creds := insecure.NewCredentials()
	if a.cfg.TLS != nil {
		tc, err := ClientTLS(*a.cfg.TLS, host)
		if err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
		creds = credentials.NewTLS(tc)
	}
	dialer := func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		if ip := net.ParseIP(a.cfg.Host); ip != nil {
			d.LocalAddr = &net.TCPAddr{IP: ip}
		}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			if tcp, ok := c.LocalAddr().(*net.TCPAddr); ok {
				a.mu.Lock()
				a.localAddr = tcp.IP.String()
				a.mu.Unlock()
			}
		}
		return c, err
	}
	conn, err := grpc.NewClient("passthrough:///"+a.cfg.Head,
		grpc.WithTransportCredentials(creds),
		grpc.WithPerRPCCredentials(tokenCreds{a.cfg.Token}),
		grpc.WithContextDialer(dialer))
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	return conn, nil
}

// host is the address the node's workers listen on.
func (a *agent) host() string {
	if a.cfg.Host != "" {
		return a.cfg.Host
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.localAddr == "" {
		return "127.0.0.1"
	}
	return a.localAddr
}

// agentSession is one membership of the sweep: its run owns the stream.
type agentSession struct {
	a      *agent
	client agentpb.HeadClient
	id     string
	name   string
	host   string
	work   string
	ctx    context.Context
	end    context.CancelCauseFunc
	out    chan *agentpb.AgentMessage
	wg     sync.WaitGroup // goroutines serving requests

	mu     sync.Mutex
	procs  map[uint64]*agentProc
	inputs map[string]*inputCopy // by the head's path
	nIn    int
}

// agentProc is a process the agent runs for the head.
type agentProc struct {
	p     *workers.Process
	dir   string // its folder, removed on Release
	wd    string // its working folder, for relative paths
	ctlIn *queue[[]byte]
	// scratch is its own folder for what it hands over, inside dir; ""
	// when the head gave it none or this node shares the head's files
	// (the head takes the folders over itself then): nothing is fetched.
	scratch string
}

// inputCopy is a folder of the head copied to this node, shared by the
// processes that read it.
type inputCopy struct {
	dir   string
	refs  int
	ready chan struct{}
	err   error
}

// session joins the head and serves it until the session ends; joined
// says whether it got as far as joining.
func (a *agent) session(ctx context.Context, client agentpb.HeadClient) (joined bool, err error) {
	base := ctx
	if a.cfg.StopGrace > 0 {
		base = context.WithoutCancel(ctx) // drain ends the session
	}
	sctx, end := context.WithCancelCause(base)
	defer end(nil)
	stream, err := client.Session(sctx)
	if err != nil {
		return false, err
	}
	host := a.host()
	join := &agentpb.Join{Node: nodeToPB(a.cfg.Node), Host: host, Shared: a.cfg.Shared, Version: protocolVersion}
	// A failed send shows as Recv's error, with the head's reason.
	stream.Send(&agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Join{Join: join}})
	first, err := stream.Recv()
	if err != nil {
		return false, refusal(err)
	}
	if req := first.GetRequire(); req != nil {
		lacks := &agentpb.Lacks{Programs: lacking(req.Programs)}
		stream.Send(&agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Lacks{Lacks: lacks}})
		if first, err = stream.Recv(); err != nil {
			return false, refusal(err)
		}
	}
	w := first.GetWelcome()
	if w == nil {
		return false, fmt.Errorf("protocol error: the head's first message is %T", first.Msg)
	}
	s := &agentSession{
		a: a, client: client, id: w.Session, name: w.Name, host: host,
		work: filepath.Join(a.work, "session-"+w.Session[:min(8, len(w.Session))]),
		ctx:  sctx, end: end, out: make(chan *agentpb.AgentMessage, 64),
		procs: map[uint64]*agentProc{}, inputs: map[string]*inputCopy{},
	}
	a.cfg.Logf("agent: joined the head at %s as node %s (workers listen on %s)", a.cfg.Head, s.name, host)
	if a.cfg.StopGrace > 0 {
		stop := context.AfterFunc(ctx, func() { s.drain(context.Cause(ctx)) })
		defer stop()
	}
	err = s.run(stream, time.Duration(w.HeartbeatMillis)*time.Millisecond, time.Duration(w.TimeoutMillis)*time.Millisecond)
	s.shutdown()
	return true, err
}

// lacking returns the programs, bare names in PATH or absolute paths, that
// this node cannot execute.
func lacking(programs []string) []string {
	var missing []string
	for _, p := range programs {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	return missing
}

// refusal marks the head's answers that retrying cannot change.
func refusal(err error) error {
	switch status.Code(err) {
	case codes.Unauthenticated, codes.FailedPrecondition, codes.InvalidArgument:
		return fmt.Errorf("%w: %s", ErrRefused, status.Convert(err).Message())
	}
	return err
}

func (s *agentSession) run(stream agentpb.Head_SessionClient, interval, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = DefaultAgentTimeout
	}
	if interval <= 0 {
		interval = heartbeatInterval(timeout)
	}
	watchdog := time.AfterFunc(timeout, func() {
		s.end(fmt.Errorf("no word from the head for %v", timeout))
	})
	defer watchdog.Stop()
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		for {
			m, err := stream.Recv()
			if err != nil {
				s.end(err)
				return
			}
			watchdog.Reset(timeout)
			s.dispatch(m)
		}
	}()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	beat := &agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Heartbeat{Heartbeat: &agentpb.Heartbeat{}}}
	for {
		var m *agentpb.AgentMessage
		select {
		case <-s.ctx.Done():
			<-recvDone // the stream's context is s.ctx: Recv returns
			return context.Cause(s.ctx)
		case m = <-s.out:
		case <-tick.C:
			m = beat
		}
		if err := stream.Send(m); err != nil {
			s.end(err)
		}
	}
}

// send queues m for the head; it fails once the session has ended.
func (s *agentSession) send(m *agentpb.AgentMessage) error {
	select {
	case s.out <- m:
		return nil
	case <-s.ctx.Done():
		return context.Cause(s.ctx)
	}
}

func (s *agentSession) dispatch(m *agentpb.HeadMessage) {
	switch msg := m.Msg.(type) {
	case *agentpb.HeadMessage_Heartbeat:
	case *agentpb.HeadMessage_Launch:
		s.spawn(func() { s.launch(msg.Launch) })
	case *agentpb.HeadMessage_Signal:
		if ap := s.proc(msg.Signal.Id); ap != nil {
			if msg.Signal.Kill {
				ap.p.Kill()
			} else {
				ap.p.Stop(time.Duration(msg.Signal.GraceMillis) * time.Millisecond)
			}
		}
	case *agentpb.HeadMessage_Control:
		if ap := s.proc(msg.Control.Id); ap != nil && ap.ctlIn != nil {
			ap.ctlIn.push(msg.Control.Data)
		}
	case *agentpb.HeadMessage_Port:
		s.spawn(func() {
			r := &agentpb.PortReply{Id: msg.Port.Id}
			port, err := workers.LocalLauncher{Address: s.host}.FreePort(s.ctx)
			if err != nil {
				r.Error = err.Error()
			}
			r.Port = int32(port)
			s.send(&agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Port{Port: r}})
		})
	case *agentpb.HeadMessage_Fetch:
		s.spawn(func() { s.fetch(msg.Fetch) })
	case *agentpb.HeadMessage_Usage:
		s.spawn(func() {
			r := &agentpb.UsageReply{Id: msg.Usage.Id}
			if ap := s.proc(msg.Usage.Process); ap == nil {
				r.Error = fmt.Sprintf("no process %d on this node", msg.Usage.Process)
			} else if u, err := ap.p.Usage(s.ctx); err != nil {
				r.Error = err.Error()
			} else {
				r.CpuSeconds, r.RssBytes, r.Processes = u.CPUSeconds, int64(u.RSS), int32(u.Processes)
			}
			s.send(&agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Usage{Usage: r}})
		})
	case *agentpb.HeadMessage_Stack:
		s.spawn(func() {
			r := &agentpb.StackReply{Id: msg.Stack.Id}
			if ap := s.proc(msg.Stack.Process); ap == nil {
				r.Error = fmt.Sprintf("no process %d on this node", msg.Stack.Process)
			} else if st, err := ap.p.Stack(s.ctx); err != nil {
				r.Error = err.Error()
			} else {
				r.Pid, r.Method, r.Text = int64(st.PID), st.Method, st.Text
			}
			s.send(&agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Stack{Stack: r}})
		})
	case *agentpb.HeadMessage_Release:
		s.mu.Lock()
		ap := s.procs[msg.Release.Id]
		delete(s.procs, msg.Release.Id)
		s.mu.Unlock()
		if ap != nil {
			os.RemoveAll(ap.dir)
		}
	default:
		s.end(fmt.Errorf("protocol error: unexpected %T from the head", m.Msg))
	}
}

// spawn runs f in a goroutine the session waits for on shutdown.
func (s *agentSession) spawn(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

func (s *agentSession) proc(id uint64) *agentProc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[id]
}

// drain stops the session's processes gracefully, waits (up to the stop
// grace) until they are gone and the head has been sent their exits, and
// then ends the session with cause.
func (s *agentSession) drain(cause error) {
	grace := s.a.cfg.StopGrace
	s.mu.Lock()
	procs := make([]*agentProc, 0, len(s.procs))
	for _, ap := range s.procs {
		procs = append(procs, ap)
	}
	s.mu.Unlock()
	// The head hears first, so that it places nothing here when these
	// processes' exits free the node.
	s.send(&agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Leaving{Leaving: &agentpb.Leaving{}}})
	s.a.cfg.Logf("agent: stopping: SIGTERM to %d worker processes, SIGKILL after %v", len(procs), grace)
	deadline := time.After(grace)
	for _, ap := range procs {
		ap.p.Stop(grace)
	}
	relayed := make(chan struct{})
	go func() {
		for _, ap := range procs {
			<-ap.p.Done()
		}
		s.wg.Wait() // the relays end once a process's exit is queued
		for len(s.out) > 0 && s.ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
		close(relayed)
	}()
	select {
	case <-relayed:
		// The last message may still be on its way: give the head a moment
		// to end the session itself, as a head that is stopping does.
		select {
		case <-s.ctx.Done():
		case <-time.After(time.Second):
		case <-deadline:
		}
	case <-s.ctx.Done():
	case <-deadline:
	}
	s.end(cause)
}

// shutdown kills the session's processes, waits for them and for the
// requests in flight, and removes the session's folders.
func (s *agentSession) shutdown() {
	s.mu.Lock()
	procs := make([]*agentProc, 0, len(s.procs))
	for _, ap := range s.procs {
		procs = append(procs, ap)
	}
	s.mu.Unlock()
	for _, ap := range procs {
		if ap.p != nil {
			ap.p.Kill()
		}
	}
	s.wg.Wait()
	for _, ap := range procs {
		if ap.p != nil {
			<-ap.p.Done()
		}
	}
	os.RemoveAll(s.work)
}

// launch starts a process for the head and relays its output, control
// stream and exit until it is gone.
func (s *agentSession) launch(l *agentpb.Launch) {
	started := &agentpb.Started{Id: l.Id}
	ap, err := s.start(l)
	if err != nil {
		started.Error = err.Error()
		s.send(&agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Started{Started: started}})
		return
	}
	started.Pid = int64(ap.p.Pid())
	if s.send(&agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Started{Started: started}}) != nil {
		return // shutdown kills it
	}
}

// start prepares and starts l's process. Its output waits in a queue
// until Started is sent, so that the head hears of it first.
func (s *agentSession) start(l *agentpb.Launch) (*agentProc, error) {
	if len(l.Args) == 0 {
		return nil, errors.New("launch: no command")
	}
	ap := &agentProc{dir: filepath.Join(s.work, "p"+strconv.FormatUint(l.Id, 10))}
	spec := workers.LaunchSpec{
		Args: append([]string(nil), l.Args...), Dir: l.Dir,
		Env: overlayEnv(os.Environ(), l.Env), ReportPrefix: l.ReportPrefix, Control: l.Control,
	}
	if l.Self {
		spec.Args[0] = s.a.cfg.Executable
	}
	if err := os.MkdirAll(ap.dir, 0o755); err != nil {
		return nil, fmt.Errorf("process folder: %w", err)
	}
	var inputs []*inputCopy
	release := func() {
		for _, in := range inputs {
			s.releaseInput(in)
		}
	}
	if !s.a.cfg.Shared {
		paths := map[string]string{}
		if l.Scratch != "" {
			local := filepath.Join(ap.dir, "scratch")
			if err := os.MkdirAll(local, 0o755); err != nil {
				return nil, fmt.Errorf("scratch folder: %w", err)
			}
			paths[l.Scratch] = local
			ap.scratch = local
		}
		for _, in := range l.Inputs {
			c, err := s.input(in)
			if c != nil {
				inputs = append(inputs, c)
			}
			if err != nil {
				release()
				os.RemoveAll(ap.dir)
				return nil, fmt.Errorf("copy %s from the head: %w", in.Path, err)
			}
			paths[in.Path] = c.dir
		}
		for i, arg := range spec.Args {
			spec.Args[i] = mapPath(arg, paths)
		}
		for i, kv := range spec.Env {
			if k, v, ok := strings.Cut(kv, "="); ok {
				spec.Env[i] = k + "=" + mapPath(v, paths)
			}
		}
	}
	ap.wd = spec.Dir
	if !filepath.IsAbs(ap.wd) {
		cwd, _ := os.Getwd()
		ap.wd = filepath.Join(cwd, ap.wd)
	}
	out := newQueue[*agentpb.AgentMessage]()
	output := func(report bool) func(string) {
		return func(line string) {
			out.push(&agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Output{Output: &agentpb.Output{Id: l.Id, Line: line, Report: report}}})
		}
	}
	var onReport func(string)
	if l.ReportPrefix != "" {
		onReport = output(true)
	}
	spec.OnOutput = output(false)
	p, err := workers.StartProcess(spec, onReport)
	if err != nil {
		release()
		os.RemoveAll(ap.dir)
		return nil, err
	}
	ap.p = p
	ctl := p.Control()
	if ctl != nil {
		ap.ctlIn = newQueue[[]byte]()
	}
	// Published complete: the session's receiving goroutine reads it.
	s.mu.Lock()
	s.procs[l.Id] = ap
	s.mu.Unlock()
	s.a.cfg.Logf("agent: started pid %d%s: %s", p.Pid(), describeWorker(spec.Env), strings.Join(spec.Args, " "))

	var ctlDone sync.WaitGroup
	if ctl != nil {
		ctlDone.Add(1)
		go func() {
			defer ctlDone.Done()
			buf := make([]byte, 32<<10)
			for {
				n, err := ctl.Read(buf)
				if n > 0 {
					data := append([]byte(nil), buf[:n]...)
					out.push(&agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Control{Control: &agentpb.ControlData{Id: l.Id, Data: data}}})
				}
				if err != nil {
					return
				}
			}
		}()
		go func() {
			for {
				data, ok := ap.ctlIn.pop()
				if !ok {
					return
				}
				ctl.Write(data) // fails only once the process is gone
			}
		}()
	}
	go func() {
		<-p.Done()
		ctlDone.Wait()
		if ap.ctlIn != nil {
			ap.ctlIn.close()
		}
		release()
		out.push(&agentpb.AgentMessage{Msg: &agentpb.AgentMessage_Exited{Exited: exitToPB(l.Id, p.Err())}})
		out.close()
	}()
	// The relay starts after Started is queued: the caller sends it next.
	s.spawn(func() {
		for {
			m, ok := out.pop()
			if !ok {
				return
			}
			if s.send(m) != nil {
				return
			}
		}
	})
	return ap, nil
}

// describeWorker names the trial and rank a worker's environment gives,
// for the agent's log.
func describeWorker(env []string) string {
	trial, rank := lastValue(env, "GOTUNE_TRIAL_ID"), lastValue(env, "GOTUNE_WORLD_RANK")
	if trial == "" {
		return ""
	}
	return fmt.Sprintf(" (trial %s, rank %s)", trial, rank)
}

// lastValue is the value of the last entry of env that sets key, "" for
// none.
func lastValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

func exitToPB(id uint64, err error) *agentpb.Exited {
	e := &agentpb.Exited{Id: id}
	var ee *workers.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		e.Code, e.Signal = int32(ee.Code), int32(ee.Signal)
	default:
		e.Error = err.Error()
	}
	return e
}

// overlayEnv is base without its GOTUNE_ variables and those overlay sets,
// followed by overlay.
func overlayEnv(base, overlay []string) []string {
	set := map[string]bool{}
	for _, kv := range overlay {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	env := make([]string, 0, len(base)+len(overlay))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if !set[k] && !strings.HasPrefix(k, "GOTUNE_") {
			env = append(env, kv)
		}
	}
	return append(env, overlay...)
}

// mapPath replaces the longest folder of paths that v is or lies inside
// by its local counterpart.
func mapPath(v string, paths map[string]string) string {
	best := ""
	for from := range paths {
		if (v == from || strings.HasPrefix(v, from+"/")) && len(from) > len(best) {
			best = from
		}
	}
	if best == "" {
		return v
	}
	return paths[best] + v[len(best):]
}

// input returns the local copy of an input folder, copying it first when
// no process of the session holds one. The caller releases it.
func (s *agentSession) input(in *agentpb.Input) (*inputCopy, error) {
	s.mu.Lock()
	c := s.inputs[in.Path]
	if c == nil {
		s.nIn++
		c = &inputCopy{dir: filepath.Join(s.work, "inputs", strconv.Itoa(s.nIn)), ready: make(chan struct{})}
		s.inputs[in.Path] = c
		go func() {
			c.err = s.download(in.Key, c.dir)
			close(c.ready)
		}()
	}
	c.refs++
	s.mu.Unlock()
	<-c.ready
	return c, c.err
}

func (s *agentSession) releaseInput(c *inputCopy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.refs--
	if c.refs > 0 {
		return
	}
	for path, cc := range s.inputs {
		if cc == c {
			delete(s.inputs, path)
		}
	}
	os.RemoveAll(c.dir)
}

// callContext names the session and a request in a file transfer's
// metadata.
func (s *agentSession) callContext(request uint64) context.Context {
	return metadata.AppendToOutgoingContext(s.ctx, "gotune-session", s.id, "gotune-request", strconv.FormatUint(request, 10))
}

func (s *agentSession) download(key, dest string) error {
	stream, err := s.client.GetFiles(s.callContext(0), &agentpb.GetFilesRequest{Key: key})
	if err != nil {
		return err
	}
	return receiveDir(dest, stream.Recv)
}

// fetch sends a folder a process handed over to the head, then deletes it.
func (s *agentSession) fetch(f *agentpb.Fetch) {
	failed := func(err error) {
		s.send(&agentpb.AgentMessage{Msg: &agentpb.AgentMessage_FetchFailed{FetchFailed: &agentpb.FetchFailed{Id: f.Id, Error: err.Error()}}})
	}
	ap := s.proc(f.Process)
	if ap == nil {
		failed(fmt.Errorf("%s: its process is unknown", f.Path))
		return
	}
	// The same rule as the head's: only a folder inside the process's own
	// scratch folder is sent, and deleted once sent.
	dir, err := workers.Confine(ap.scratch, absUnder(ap.wd, f.Path))
	if err != nil {
		failed(err)
		return
	}
	ctx, cancel := context.WithCancel(s.callContext(f.Id))
	defer cancel()
	stream, err := s.client.PutFiles(ctx)
	if err != nil {
		failed(err)
		return
	}
	// A failure reaches the head in the stream (sendDir's last chunk) or
	// as the stream's end: the head fails the fetch either way.
	if err := sendDir(dir, stream.Send); err != nil && !errors.Is(err, io.EOF) {
		stream.CloseAndRecv()
		return
	}
	if _, err := stream.CloseAndRecv(); err != nil {
		return
	}
	os.RemoveAll(dir)
}
