package main

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

	"github.com/urfave/cli/v2"

	"github.com/gotune/gotune/cluster"
	"github.com/gotune/gotune/cmd/gotune/sweepfile"
	"github.com/gotune/gotune/storage"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/tuner"
	"github.com/gotune/gotune/workers"
)

// With [cluster] launcher = "slurm", `gotune run` is a head that no node
// of its own serves: it keeps up to max_jobs Slurm jobs in the queue, each
// sized for one trial group and running one `gotune agent` per node of
// its allocation, which joins the sweep over TLS with a certificate and a
// token drawn for this run. A job that ends while the sweep runs is
// replaced; the groups it held fail as on a lost node and restart from
// their checkpoints where the next job offers room. When the sweep ends,
// or is interrupted, every job of it is cancelled. Jobs are named after
// the experiment and its database (slurmJobName), so that a run finds and
// cancels those a previous run of the same experiment left in the queue.

// slurmPoll is how often the queue is looked at.
const slurmPoll = 2 * time.Second

// slurmGiveUp is how many jobs in a row may end before any of their agents
// joined, or how many submissions in a row may fail, before the sweep
// stops: something in the jobs' setup is wrong, and more jobs will not
// mend it.
const slurmGiveUp = 3

// slurmJobName is the name of the Slurm jobs of experiment name whose
// results go to db: gotune-NAME-HASH, HASH standing for the database's
// absolute path.
func slurmJobName(db, name string) string {
	abs, err := filepath.Abs(db)
	if err != nil {
		abs = db
	}
	sum := sha256.Sum256([]byte(abs))
	safe := regexp.MustCompile(`[^A-Za-z0-9_.-]+`).ReplaceAllString(name, "_")
	return "gotune-" + safe + "-" + hex.EncodeToString(sum[:4])
}

// slurmCluster is the head of a sweep run through Slurm and the jobs it
// keeps in the queue.
type slurmCluster struct {
	head    *cluster.Head
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

// startSlurm makes this run the head of a sweep whose groups run in Slurm
// jobs: it cancels the jobs a previous run left, submits the first jobs
// and waits until an agent has joined. It returns the context the sweep
// runs under (cancelled with a cause when jobs keep failing), the tuner's
// options and the function that cancels the jobs and stops the head.
func startSlurm(ctx context.Context, c *cli.Context, sweep sweepfile.Sweep, cfg tuner.Config) (context.Context, []tuner.Option, func(), error) {
	cl := sweep.Cluster
	for _, f := range []string{"agents", "head-workers", "cert", "key", "ca"} {
		if c.IsSet(f) {
			return nil, nil, nil, badInput(fmt.Errorf("--%s: the sweep's [cluster] launcher = \"slurm\" runs the sweep on the agents of its own Slurm jobs, over TLS of its own", f))
		}
	}
	for _, p := range []string{"sbatch", "squeue", "scancel"} {
		if _, err := exec.LookPath(p); err != nil {
			return nil, nil, nil, badInput(fmt.Errorf("[cluster] launcher = \"slurm\" needs Slurm's %s, which is not in PATH: run the sweep where Slurm jobs are submitted (a login node), or load Slurm's environment (module load slurm)", p))
		}
	}
	u, err := user.Current()
	if err != nil {
		return nil, nil, nil, err
	}
	db := cfg.Storage
	if db == "" {
		db = tuner.DefaultStorage
	}
	if db, err = filepath.Abs(db); err != nil {
		return nil, nil, nil, err
	}
	name := slurmJobName(db, cfg.Name)
	// Not in the experiment's own folder, which a new experiment of the
	// name sets aside once the sweep starts.
	s := &slurmCluster{
		name: name, dir: filepath.Join(filepath.Dir(db), "slurm", name),
		user: u.Username, logf: logTo(c.App.ErrWriter),
		stopped: make(chan struct{}), done: make(chan struct{}),
		live: map[string]bool{}, joined: map[string]bool{},
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, nil, nil, err
	}
	// Held while this run keeps the jobs, so that another run of the
	// experiment never cancels them as a previous run's.
	lock, err := storage.LockFolder(s.dir)
	if errors.Is(err, storage.ErrExperimentRunning) {
		return nil, nil, nil, badInput(fmt.Errorf("%w: %q in %s runs its Slurm jobs %s from another process; wait for it to end or stop it, then run again to continue", storage.ErrExperimentRunning, cfg.Name, db, s.name))
	} else if err != nil {
		return nil, nil, nil, err
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

	token := c.String("token")
	if token == "" {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return nil, nil, nil, err
		}
		token = hex.EncodeToString(b)
	}
	// Without a host given, the head learns the address the jobs' nodes
	// reach it at from the first agent's connection.
	headHost := cl.Host
	if c.IsSet("host") {
		headHost = c.String("host")
	}
	host := headHost
	if host == "" {
		if host, err = os.Hostname(); err != nil {
			return nil, nil, nil, err
		}
	}
	files, err := selfSignedCert(s.dir, host)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("the head's certificate: %w", err)
	}
	listenAt := c.String("listen")
	if listenAt == "" {
		listenAt = ":0"
	}
	h, err := cluster.ListenHead(listenAt, cluster.HeadConfig{
		Manager: workers.NewManager(nil, workers.ManagerConfig{}),
		Token:   token, TLS: &files, Timeout: c.Duration("agent-timeout"), Host: headHost, Logf: s.logf,
		Programs: cfg.NodePrograms(),
	})
	if err != nil {
		return nil, nil, nil, badInput(err)
	}
	s.head = h
	_, port, _ := net.SplitHostPort(h.Addr())
	program := cl.Gotune
	if program == "" {
		if program, err = os.Executable(); err != nil {
			h.Close()
			return nil, nil, nil, err
		}
	}
	s.script = agentJobScript(program, net.JoinHostPort(host, port), files.Cert, cfg.Name, cl.Shared)
	s.sbatch = append([]string{"--parsable", "--job-name=" + s.name, "--output=" + filepath.Join(s.dir, "slurm-%j.out"), "--chdir=" + s.dir},
		groupResources(cfg.Trainer.Scaling)...)
	for _, o := range []struct{ flag, v string }{{"--partition", cl.Partition}, {"--account", cl.Account}, {"--time", cl.Time}} {
		if o.v != "" {
			s.sbatch = append(s.sbatch, o.flag+"="+o.v)
		}
	}
	s.sbatch = append(s.sbatch, cl.SbatchArgs...)
	s.env = append(os.Environ(), "GOTUNE_TOKEN="+token)
	s.want = cl.MaxJobs
	if s.want == 0 {
		s.want = cfg.Search.MaxConcurrent
	}
	if s.want == 0 {
		s.want = max(cfg.Search.NumSamples, 1)
	}

	// The first submission shows whether Slurm takes the jobs at all.
	s.logf("listening for agents on %s; Slurm jobs %s (%d at a time: %s) run them, their output in %s",
		h.Addr(), s.name, s.want, strings.Join(s.sbatch[4:], " "), s.dir)
	for i := range s.want {
		id, err := s.submit()
		if err != nil && i == 0 {
			h.Close()
			return nil, nil, nil, badInput(fmt.Errorf("[cluster] launcher = \"slurm\": %w", err))
		}
		if err != nil {
			s.logf("%v; trying again later", err)
			break
		}
		s.logf("submitted Slurm job %s", id)
	}
	ctx, s.fail = context.WithCancelCause(ctx)
	go s.keep()
	stop := func() {
		s.stop()
		s.fail(nil)
	}
	s.logf("waiting for the first job's agent to join (squeue --name=%s)", s.name)
	if err := h.WaitAgents(ctx, 1); err != nil {
		stop()
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			return nil, nil, nil, &exitError{exitFailed, cause}
		}
		return nil, nil, nil, &exitError{exitFailed, err}
	}
	s.mu.Lock()
	s.sweeping = true
	s.mu.Unlock()
	started = true
	return ctx, []tuner.Option{tuner.WithCluster(h)}, stop, nil
}

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

// groupResources are the sbatch options that size a job for one trial
// group at its largest: a packed group on one node, as one task with all
// its CPUs; a spread group on one node per worker.
func groupResources(s trainer.ScalingConfig) []string {
	n := float64(s.Workers())
	cpus := s.CPUsPerWorker
	if cpus == 0 {
		cpus = 1
	}
	mem := float64(s.MemoryPerWorker) / float64(workers.MiB)
	up := func(x float64) string { return strconv.Itoa(int(math.Ceil(x - 1e-9))) }
	var args []string
	if s.Placement == workers.Spread && n > 1 {
		args = []string{"--nodes=" + up(n), "--ntasks-per-node=1", "--cpus-per-task=" + up(cpus)}
		if mem > 0 {
			args = append(args, "--mem="+up(mem)+"M")
		}
		if s.GPUsPerWorker > 0 {
			args = append(args, "--gpus-per-node="+up(s.GPUsPerWorker))
		}
		return args
	}
	args = []string{"--nodes=1", "--ntasks=1", "--cpus-per-task=" + up(n*cpus)}
	if mem > 0 {
		args = append(args, "--mem="+up(n*mem)+"M")
	}
	if s.GPUsPerWorker > 0 {
		args = append(args, "--gpus="+up(n*s.GPUsPerWorker))
	}
	return args
}

// submit submits one agent job and returns its id.
func (s *slurmCluster) submit() (string, error) {
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
// workers.RunCommand, since gotune run reaps the processes it did not
// start that way (workers.Subreap).
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
func (s *slurmCluster) queued() map[string]bool {
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

// keep looks at the queue every slurmPoll until stop: it replaces the jobs
// that ended while groups wait, and stops the sweep when jobs keep ending before their
// agents join or submissions keep failing.
func (s *slurmCluster) keep() {
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
func (s *slurmCluster) tend() error {
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
	if dead >= slurmGiveUp {
		return fmt.Errorf("%d Slurm jobs in a row ended before their agent joined the sweep; see their output, as in %s", dead, filepath.Join(s.dir, "slurm-"+ended[len(ended)-1]+".out"))
	}
	for range missing {
		id, err := s.submit()
		if err != nil {
			s.submitFail++
			if s.submitFail >= slurmGiveUp {
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

// stop stops replacing jobs, stops the head, cancels every job of the
// sweep and waits (a while) until they have left the queue.
func (s *slurmCluster) stop() {
	select {
	case <-s.stopped:
		return
	default:
	}
	close(s.stopped)
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
func (s *slurmCluster) cancelAll() {
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
func selfSignedCert(dir, host string) (cluster.TLSFiles, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return cluster.TLSFiles{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return cluster.TLSFiles{}, err
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
		return cluster.TLSFiles{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return cluster.TLSFiles{}, err
	}
	f := cluster.TLSFiles{Cert: filepath.Join(dir, "head.pem"), Key: filepath.Join(dir, "head-key.pem")}
	if err := os.WriteFile(f.Key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return cluster.TLSFiles{}, err
	}
	if err := os.WriteFile(f.Cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return cluster.TLSFiles{}, err
	}
	return f, nil
}
