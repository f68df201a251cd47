package cluster

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"log"
	"math"
	"math/big"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/workers"
)

// A Slurm head (StartSlurm) is a head that no node of its own serves: it
// keeps up to SlurmConfig.MaxJobs Slurm jobs in the queue, each sized for
// one trial group and running one `gotune agent` per node of its
// allocation, which joins the sweep over TLS with a certificate and a
// token drawn for this run. A job that ends while the sweep runs is
// replaced; the groups it held fail as on a lost node and restart from
// their checkpoints where the next job offers room. When the sweep ends,
// or is interrupted, every job of it is cancelled. Jobs are named after
// the experiment and its database (SlurmJobName), so that a run finds and
// cancels those a previous run of the same experiment left in the queue.

// slurmPoll is how often the queue is looked at.
const slurmPoll = 2 * time.Second

// SlurmGiveUp is how many jobs in a row may end before any of their agents
// joined, or how many submissions in a row may fail, before a Slurm head
// gives up (see Slurm.Context): something in the jobs' setup is wrong, and
// more jobs will not mend it.
const SlurmGiveUp = 3

// SlurmJobName is the name of the Slurm jobs of experiment name whose
// results go to the database db: gotune-NAME-HASH, HASH standing for the
// database's absolute path.
func SlurmJobName(db, name string) string {
	abs, err := filepath.Abs(db)
	if err != nil {
		abs = db
	}
	sum := sha256.Sum256([]byte(abs))
	safe := regexp.MustCompile(`[^A-Za-z0-9_.-]+`).ReplaceAllString(name, "_")
	return "gotune-" + safe + "-" + hex.EncodeToString(sum[:4])
}

// SlurmConfig configures StartSlurm.
type SlurmConfig struct {
	// Experiment is the sweep's experiment name. Required.
	Experiment string
	// Database is the sweep's results database. The jobs are named after
	// it and Experiment (SlurmJobName); the head's certificate and the
	// jobs' output go to the folder slurm/NAME beside it, NAME being the
	// jobs' name. Required.
	Database string
	// Group is what each job asks Slurm for: room for one trial group at
	// its largest.
	Group GroupSize
	// MaxJobs is how many jobs are kept in the queue at most; 0 means 1.
	MaxJobs int
	// Partition, Account and Time are sbatch's --partition, --account and
	// --time, left out when "".
	Partition, Account, Time string
	// SbatchArgs are more options of sbatch's, after the others.
	SbatchArgs []string
	// Listen is the address the head listens on (host:port); "" means
	// ":0", a port of every address.
	Listen string
	// Host is the address of this node that the jobs' nodes reach it at
	// (HeadConfig.Host). "" means the head learns it from the first
	// agent's connection; the certificate then names this machine's host
	// name.
	Host string
	// Program is the gotune program the jobs run as `PROGRAM agent`, at a
	// path every node sees; "" means this program.
	Program string
	// Shared says the jobs' nodes see this node's files at the same paths
	// (AgentConfig.Shared).
	Shared bool
	// Token is the agents' shared secret; "" draws one for this head.
	Token string
	// Timeout is HeadConfig.Timeout.
	Timeout time.Duration
	// Programs is HeadConfig.Programs.
	Programs []string
	// Logf receives a line per job submitted, ended or cancelled, and the
	// head's lines; nil means the standard logger.
	Logf func(format string, args ...any)
}

// GroupSize is one trial group at its largest, as a Slurm job is sized for
// it: a packed group on one node, as one task with all its CPUs; a spread
// group on one node per worker.
type GroupSize struct {
	// Workers is how many workers the group has at most; 0 means 1.
	Workers int
	// CPUsPerWorker is each worker's CPUs; 0 means 1.
	CPUsPerWorker float64
	// MemoryPerWorker is each worker's memory; 0 asks for none.
	MemoryPerWorker workers.Bytes
	// GPUsPerWorker is each worker's GPUs, possibly a fraction.
	GPUsPerWorker float64
	// Placement is workers.Spread for one node per worker, anything else
	// for one node.
	Placement workers.Placement
}

// SetupError is a StartSlurm failure that the configuration or this
// machine's setup must mend before a sweep can start: Slurm's commands
// missing from PATH, an address the head cannot listen on, a job Slurm
// refuses, or the experiment's jobs kept by another run (which wraps
// storage.ErrExperimentRunning).
type SetupError struct{ Err error }

func (e *SetupError) Error() string { return e.Err.Error() }

// Unwrap is e.Err.
func (e *SetupError) Unwrap() error { return e.Err }

// Slurm is a head whose agents run in the Slurm jobs it keeps in the
// queue (see StartSlurm).
type Slurm struct {
	head    *Head
	ctx     context.Context
	name    string   // the jobs' name
	dir     string   // where the certificate and the jobs' output go
	user    string   // whose jobs squeue and scancel look at
	sbatch  []string // sbatch's arguments, but for the script on stdin
	script  string
	env     []string
	want    int
	logf    func(string, ...any)
	fail    context.CancelCauseFunc
	lock    *storage.ExperimentLock
	stopped chan struct{}
	done    chan struct{}

	mu         sync.Mutex
	live       map[string]bool // submitted, not yet seen gone from the queue
	joined     map[string]bool // jobs an agent of which joined
	dead       int             // jobs in a row that ended before any agent joined
	submitFail int             // submissions in a row that failed
	sweeping   bool            // an agent has joined and the sweep runs
}

// StartSlurm starts a head whose groups run in Slurm jobs, from where jobs
// are submitted (a login node): it cancels the jobs a previous run of the
// experiment left in the queue, submits the first jobs and waits until an
// agent of one has joined or ctx ends. A sweep then runs with
// tuner.WithCluster(s.Head()) under s.Context(), and Close cancels the
// jobs. A failure the configuration or the setup must mend is a
// *SetupError; the others are Slurm's or the jobs' (none joined before
// SlurmGiveUp of them ended).
func StartSlurm(ctx context.Context, cfg SlurmConfig) (*Slurm, error) {
	for _, p := range []string{"sbatch", "squeue", "scancel"} {
		if _, err := exec.LookPath(p); err != nil {
			return nil, &SetupError{fmt.Errorf("[cluster] launcher = \"slurm\" needs Slurm's %s, which is not in PATH: run the sweep where Slurm jobs are submitted (a login node), or load Slurm's environment (module load slurm)", p)}
		}
	}
	switch {
	case cfg.Experiment == "":
		return nil, errors.New("slurm: no experiment name")
	case cfg.Database == "":
		return nil, errors.New("slurm: no database")
	}
	if cfg.Logf == nil {
		cfg.Logf = log.Printf
	}
	u, err := user.Current()
	if err != nil {
		return nil, err
	}
	db, err := filepath.Abs(cfg.Database)
	if err != nil {
		return nil, err
	}
	name := SlurmJobName(db, cfg.Experiment)
	// Not in the experiment's own folder, which a new experiment of the
	// name sets aside once the sweep starts.
	s := &Slurm{
		name: name, dir: filepath.Join(filepath.Dir(db), "slurm", name),
		user: u.Username, logf: cfg.Logf,
		stopped: make(chan struct{}), done: make(chan struct{}),
		live: map[string]bool{}, joined: map[string]bool{},
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, err
	}
	// Held while this run keeps the jobs, so that another run of the
	// experiment never cancels them as a previous run's.
	lock, err := storage.LockFolder(s.dir)
	if errors.Is(err, storage.ErrExperimentRunning) {
		return nil, &SetupError{fmt.Errorf("%w: %q in %s runs its Slurm jobs %s from another process; wait for it to end or stop it, then run again to continue", storage.ErrExperimentRunning, cfg.Experiment, db, s.name)}
	} else if err != nil {
		return nil, err
	}
	s.lock = lock
	started := false
	defer func() {
		if !started {
			lock.Release()
		}
	}()
	if left := s.queued(); len(left) > 0 {
		s.logf("cancelling %d Slurm jobs %s a previous run left in the queue", len(left), s.name)
		s.cancelAll()
	}

	token := cfg.Token
	if token == "" {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		token = hex.EncodeToString(b)
	}
	// Without a host given, the head learns the address the jobs' nodes
	// reach it at from the first agent's connection.
	host := cfg.Host
	if host == "" {
		if host, err = os.Hostname(); err != nil {
			return nil, err
		}
	}
	files, err := selfSignedCert(s.dir, host)
	if err != nil {
		return nil, fmt.Errorf("the head's certificate: %w", err)
	}
	listenAt := cfg.Listen
	if listenAt == "" {
		listenAt = ":0"
	}
	h, err := ListenHead(listenAt, HeadConfig{
		Manager: workers.NewManager(nil, workers.ManagerConfig{}),
		Token:   token, TLS: &files, Timeout: cfg.Timeout, Host: cfg.Host, Logf: s.logf,
		Programs: cfg.Programs,
	})
	if err != nil {
		return nil, &SetupError{err}
	}
	s.head = h
	_, port, _ := net.SplitHostPort(h.Addr())
	program := cfg.Program
	if program == "" {
		if program, err = os.Executable(); err != nil {
			h.Close()
			return nil, err
		}
	}
	s.script = agentJobScript(program, net.JoinHostPort(host, port), files.Cert, cfg.Experiment, cfg.Shared)
	s.sbatch = append([]string{"--parsable", "--job-name=" + s.name, "--output=" + filepath.Join(s.dir, "slurm-%j.out"), "--chdir=" + s.dir},
		groupResources(cfg.Group)...)
	for _, o := range []struct{ flag, v string }{{"--partition", cfg.Partition}, {"--account", cfg.Account}, {"--time", cfg.Time}} {
		if o.v != "" {
			s.sbatch = append(s.sbatch, o.flag+"="+o.v)
		}
	}
	s.sbatch = append(s.sbatch, cfg.SbatchArgs...)
	s.env = append(os.Environ(), "GOTUNE_TOKEN="+token)
	s.want = max(cfg.MaxJobs, 1)

	// The first submission shows whether Slurm takes the jobs at all.
	s.logf("listening for agents on %s; Slurm jobs %s (%d at a time: %s) run them, their output in %s",
		h.Addr(), s.name, s.want, strings.Join(s.sbatch[4:], " "), s.dir)
	for i := range s.want {
		id, err := s.submit()
		if err != nil && i == 0 {
			h.Close()
			return nil, &SetupError{fmt.Errorf("[cluster] launcher = \"slurm\": %w", err)}
		}
		if err != nil {
			s.logf("%v; trying again later", err)
			break
		}
		s.logf("submitted Slurm job %s", id)
	}
	s.ctx, s.fail = context.WithCancelCause(ctx)
	go s.keep()
	s.logf("waiting for the first job's agent to join (squeue --name=%s)", s.name)
	if err := h.WaitAgents(s.ctx, 1); err != nil {
		s.Close()
		if cause := context.Cause(s.ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			return nil, cause
		}
		return nil, err
	}
	s.mu.Lock()
	s.sweeping = true
	s.mu.Unlock()
	started = true
	return s, nil
}

// Head is the head the jobs' agents join, for tuner.WithCluster.
func (s *Slurm) Head() *Head { return s.head }

// JobName is the name of the jobs (SlurmJobName), for squeue --name.
func (s *Slurm) JobName() string { return s.name }

// Context is StartSlurm's context, cancelled once Close is called, and
// with the cause when the jobs keep failing (SlurmGiveUp jobs in a row
// ended before their agent joined, or as many submissions failed): run
// the sweep under it.
func (s *Slurm) Context() context.Context { return s.ctx }

// agentJobScript is the batch script of an agent job: one agent per node
// of the allocation, named after the job and the node, trusting the
// head's certificate at ca. The token comes in the job's environment.
func agentJobScript(program, head, ca, experiment string, shared bool) string {
	opts := ""
	if shared {
		opts = " --shared"
	}
	return fmt.Sprintf(`#!/bin/sh
# The node agents of gotune sweep %s: one per node of this job.
exec srun --ntasks-per-node=1 --kill-on-bad-exit=1 sh -c 'exec "$0" agent --head "$1" --ca "$2" --name "slurm-$SLURM_JOB_ID-$SLURM_NODEID"%s' %s %s %s
`, strings.ReplaceAll(experiment, "\n", " "), opts, shellQuote(program), shellQuote(head), shellQuote(ca))
}

// groupResources are the sbatch options that size a job for the group g at
// its largest (see GroupSize).
func groupResources(g GroupSize) []string {
	n := float64(max(g.Workers, 1))
	cpus := g.CPUsPerWorker
	if cpus == 0 {
		cpus = 1
	}
	mem := float64(g.MemoryPerWorker) / float64(workers.MiB)
	up := func(x float64) string { return strconv.Itoa(int(math.Ceil(x - 1e-9))) }
	var args []string
	if g.Placement == workers.Spread && n > 1 {
		args = []string{"--nodes=" + up(n), "--ntasks-per-node=1", "--cpus-per-task=" + up(cpus)}
		if mem > 0 {
			args = append(args, "--mem="+up(mem)+"M")
		}
		if g.GPUsPerWorker > 0 {
			args = append(args, "--gpus-per-node="+up(g.GPUsPerWorker))
		}
		return args
	}
	args = []string{"--nodes=1", "--ntasks=1", "--cpus-per-task=" + up(n*cpus)}
	if mem > 0 {
		args = append(args, "--mem="+up(n*mem)+"M")
	}
	if g.GPUsPerWorker > 0 {
		args = append(args, "--gpus="+up(n*g.GPUsPerWorker))
	}
	return args
}

// submit submits one agent job and returns its id.
func (s *Slurm) submit() (string, error) {
	cmd := exec.Command("sbatch", s.sbatch...)
	cmd.Stdin = strings.NewReader(s.script)
	cmd.Env = s.env
	out, err := slurmOutput(cmd)
	if err != nil {
		return "", err
	}
	id, _, _ := strings.Cut(strings.TrimSpace(out), ";")
	if _, err := strconv.Atoi(id); err != nil {
		return "", fmt.Errorf("sbatch printed %q, not a job id", out)
	}
	s.mu.Lock()
	s.live[id] = true
	s.mu.Unlock()
	return id, nil
}

// slurmOutput runs one of Slurm's commands and returns its output; its
// error says what the command printed on stderr. It runs through
// workers.RunCommand, since a program that called workers.Subreap (as
// gotune run does) reaps the processes it did not start that way.
func slurmOutput(cmd *exec.Cmd) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := workers.RunCommand(cmd); err != nil {
		return "", fmt.Errorf("%s: %v: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// queued lists the jobs of this sweep's name in the queue, nil when
// squeue fails.
func (s *Slurm) queued() map[string]bool {
	out, err := slurmOutput(exec.Command("squeue", "--noheader", "--user="+s.user, "--name="+s.name, "--format=%i"))
	if err != nil {
		return nil
	}
	ids := map[string]bool{}
	for _, id := range strings.Fields(out) {
		ids[id] = true
	}
	return ids
}

// keep looks at the queue every slurmPoll until Close: it replaces the jobs
// that ended while groups wait, and stops the sweep when jobs keep ending before their
// agents join or submissions keep failing.
func (s *Slurm) keep() {
	defer close(s.done)
	t := time.NewTicker(slurmPoll)
	defer t.Stop()
	for {
		if err := s.tend(); err != nil {
			s.logf("%v", err)
			s.fail(err)
			return
		}
		select {
		case <-s.stopped:
			return
		case <-t.C:
		}
	}
}

// tend notes the jobs that joined and those that ended, and submits jobs
// for the groups that wait, up to the number wanted.
func (s *Slurm) tend() error {
	queued := s.queued()
	if queued == nil {
		return nil // squeue failed: look again later
	}
	for _, a := range s.head.Agents() {
		if rest, ok := strings.CutPrefix(a.Name, "slurm-"); ok {
			id, _, _ := strings.Cut(rest, "-")
			s.mu.Lock()
			if s.live[id] && !s.joined[id] {
				s.joined[id], s.dead = true, 0
			}
			s.mu.Unlock()
		}
	}
	s.mu.Lock()
	var ended []string
	for id := range s.live {
		if !queued[id] {
			ended = append(ended, id)
			delete(s.live, id)
			if !s.joined[id] {
				s.dead++
			}
		}
	}
	// A job is wanted while groups wait for more than the jobs whose
	// agents have not joined yet will bring: a job that ends when nothing
	// waits is not replaced until something does.
	unjoined := 0
	for id := range s.live {
		if !s.joined[id] {
			unjoined++
		}
	}
	dead := s.dead
	missing := min(s.want-len(s.live), s.head.Manager().Usage().Waiting-unjoined)
	if !s.sweeping {
		missing = s.want - len(s.live) // no group asks yet: the first agent is awaited
	}
	s.mu.Unlock()
	for _, id := range ended {
		s.logf("Slurm job %s ended (%s; its output: %s)", id, jobEnd(id), filepath.Join(s.dir, "slurm-"+id+".out"))
	}
	if dead >= SlurmGiveUp {
		return fmt.Errorf("%d Slurm jobs in a row ended before their agent joined the sweep; see their output, as in %s", dead, filepath.Join(s.dir, "slurm-"+ended[len(ended)-1]+".out"))
	}
	for range missing {
		id, err := s.submit()
		if err != nil {
			s.submitFail++
			if s.submitFail >= SlurmGiveUp {
				return fmt.Errorf("%d submissions in a row failed, the last: %w", s.submitFail, err)
			}
			s.logf("%v; trying again", err)
			return nil
		}
		s.submitFail = 0
		s.logf("submitted Slurm job %s", id)
	}
	return nil
}

// jobEnd is how Slurm says job id ended, as far as it still knows.
func jobEnd(id string) string {
	out, err := slurmOutput(exec.Command("scontrol", "--oneliner", "show", "job", id))
	if err != nil {
		return "no longer known to Slurm"
	}
	var state, code string
	for _, kv := range strings.Fields(out) {
		if v, ok := strings.CutPrefix(kv, "JobState="); ok {
			state = v
		} else if v, ok := strings.CutPrefix(kv, "ExitCode="); ok {
			code = v
		}
	}
	return state + ", exit code " + code
}

// Close stops replacing jobs, stops the head, cancels every job of the
// sweep and waits (up to a minute) until they have left the queue, and
// cancels Context. Call it once the sweep has ended, or to interrupt it.
func (s *Slurm) Close() {
	select {
	case <-s.stopped:
		return
	default:
	}
	close(s.stopped)
	defer s.fail(nil)
	<-s.done
	s.head.Close()
	s.mu.Lock()
	n := len(s.live)
	s.mu.Unlock()
	s.logf("cancelling the sweep's %d Slurm jobs", n)
	s.cancelAll()
	s.lock.Release()
}

// cancelAll cancels the jobs of this sweep's name, and waits up to a
// minute until squeue no longer lists them.
func (s *Slurm) cancelAll() {
	if _, err := slurmOutput(exec.Command("scancel", "--user="+s.user, "--name="+s.name)); err != nil {
		s.logf("%v", err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		left := s.queued()
		if left != nil && len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			s.logf("Slurm jobs %s still in the queue a minute after scancel", s.name)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// selfSignedCert writes a new self-signed certificate for the head, good
// for host, this machine's name and addresses, and its key into dir.
func selfSignedCert(dir, host string) (TLSFiles, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return TLSFiles{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return TLSFiles{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "gotune head"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(1, 0, 0),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
	}
	names := []string{host, "localhost"}
	if h, err := os.Hostname(); err == nil {
		names = append(names, h)
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ipn.IP)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return TLSFiles{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return TLSFiles{}, err
	}
	f := TLSFiles{Cert: filepath.Join(dir, "head.pem"), Key: filepath.Join(dir, "head-key.pem")}
	if err := os.WriteFile(f.Key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return TLSFiles{}, err
	}
	if err := os.WriteFile(f.Cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return TLSFiles{}, err
	}
	return f, nil
}

// shellQuote quotes s for a POSIX shell when it needs quoting.
func shellQuote(s string) string {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' || r == '/' || r == ':' || r == '=') {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return s
}
