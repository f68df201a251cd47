package allreduce

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the test binary run as one rank of a group (see rankMain)
// when the environment says so.
func TestMain(m *testing.M) {
	if os.Getenv("GOTUNE_ALLREDUCE_RANK") != "" {
		os.Exit(rankMain())
	}
	os.Exit(m.Run())
}

// rankMain is a rank process: it joins the group the environment names and
// checks one allreduce. Then the victim waits to be killed or stopped, and
// the others call a second allreduce, which the victim never joins; they
// print its error and exit 0 when it matches ErrClosed.
func rankMain() int {
	rank, _ := strconv.Atoi(os.Getenv("GOTUNE_ALLREDUCE_RANK"))
	size, _ := strconv.Atoi(os.Getenv("GOTUNE_ALLREDUCE_SIZE"))
	timeout, _ := time.ParseDuration(os.Getenv("GOTUNE_ALLREDUCE_TIMEOUT"))
	c, err := JoinTCP(context.Background(), TCPConfig{
		Rendezvous: os.Getenv("GOTUNE_ALLREDUCE_RENDEZVOUS"), Group: "dead-rank",
		Rank: rank, Size: size, Timeout: timeout,
	})
	if err != nil {
		fmt.Println("join:", err)
		return 2
	}
	if err := checkedSum(c); err != nil {
		fmt.Println("first allreduce:", err)
		return 2
	}
	fmt.Println("ready")
	if os.Getenv("GOTUNE_ALLREDUCE_VICTIM") != "" {
		select {}
	}
	err = c.AllReduceFloat64(context.Background(), make([]float64, 1000), Sum)
	fmt.Println("second allreduce:", err)
	if !errors.Is(err, ErrClosed) {
		return 3
	}
	return 0
}

// checkedSum runs an allreduce whose result is known.
func checkedSum(c Comm) error {
	buf := make([]float64, 100000)
	for i := range buf {
		buf[i] = float64(c.Rank())
	}
	if err := c.AllReduceFloat64(context.Background(), buf, Sum); err != nil {
		return err
	}
	want := float64(c.Size() * (c.Size() - 1) / 2)
	for i, v := range buf {
		if v != want {
			return fmt.Errorf("[%d] = %v, want %v", i, v, want)
		}
	}
	return nil
}

// rankProcess is a rank running as a child process.
type rankProcess struct {
	cmd    *exec.Cmd
	ready  chan struct{}
	mu     sync.Mutex
	output strings.Builder
	exited chan struct{} // closed when the process has exited
	err    error         // how it exited, once exited is closed
}

func startRank(t *testing.T, rv string, rank, size int, timeout time.Duration, victim bool) *rankProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		"GOTUNE_ALLREDUCE_RENDEZVOUS="+rv,
		"GOTUNE_ALLREDUCE_RANK="+strconv.Itoa(rank),
		"GOTUNE_ALLREDUCE_SIZE="+strconv.Itoa(size),
		"GOTUNE_ALLREDUCE_TIMEOUT="+timeout.String())
	if victim {
		cmd.Env = append(cmd.Env, "GOTUNE_ALLREDUCE_VICTIM=1")
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &rankProcess{cmd: cmd, ready: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.output.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if sc.Text() == "ready" {
				close(p.ready)
			}
		}
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.exited
	})
	return p
}

func (p *rankProcess) lines() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.output.String()
}

// TestDeadRankFailsOthers runs a group of four ranks, three of them child
// processes, and makes one child unresponsive while the others wait on it
// in an allreduce: killed, its connections close and the others fail at
// once (the timeout is far longer than the test's patience); stopped, it is
// alive but silent, and the others fail after the timeout.
func TestDeadRankFailsOthers(t *testing.T) {
	const size, victim = 4, 2
	for _, tc := range []struct {
		how     string
		timeout time.Duration
		signal  os.Signal
		because string
	}{
		{"killed", 10 * time.Minute, syscall.SIGKILL, "lost its connection"},
		{"stopped", time.Second, syscall.SIGSTOP, "heard nothing"},
	} {
		t.Run(tc.how, func(t *testing.T) {
			rv, err := NewRendezvous("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer rv.Close()
			procs := map[int]*rankProcess{}
			for rank := 1; rank < size; rank++ {
				procs[rank] = startRank(t, rv.Addr(), rank, size, tc.timeout, rank == victim)
			}
			c, err := JoinTCP(context.Background(), TCPConfig{Rendezvous: rv.Addr(), Group: "dead-rank", Rank: 0, Size: size, Timeout: tc.timeout})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := checkedSum(c); err != nil {
				t.Fatal(err)
			}
			for rank, p := range procs {
				select {
				case <-p.ready:
				case <-p.exited:
					t.Fatalf("rank %d exited before its first allreduce (%v): %s", rank, p.err, p.lines())
				}
			}

			pending := make(chan error, 1)
			go func() { pending <- c.AllReduceFloat64(context.Background(), make([]float64, 1000), Sum) }()
			if err := procs[victim].cmd.Process.Signal(tc.signal); err != nil {
				t.Fatal(err)
			}
			watchdog := time.After(60 * time.Second)
			select {
			case err := <-pending:
				if !errors.Is(err, ErrClosed) {
					t.Errorf("rank 0: pending allreduce: got %v, want an error matching ErrClosed", err)
				}
			case <-watchdog:
				t.Fatal("rank 0: pending allreduce hung after rank 2 was " + tc.how)
			}
			if err := c.Barrier(context.Background()); !errors.Is(err, ErrClosed) {
				t.Errorf("rank 0: later Barrier: got %v, want an error matching ErrClosed", err)
			}
			var all strings.Builder
			for rank, p := range procs {
				if rank == victim {
					continue
				}
				select {
				case <-p.exited:
					if p.err != nil {
						t.Errorf("rank %d: %v: %s", rank, p.err, p.lines())
					}
				case <-watchdog:
					t.Fatalf("rank %d hung after rank 2 was %s: %s", rank, tc.how, p.lines())
				}
				all.WriteString(p.lines())
			}
			if !strings.Contains(all.String(), tc.because) {
				t.Errorf("no rank says %q:\n%s", tc.because, all.String())
			}
		})
	}
}

// TestClosedConnectionFailsGroup drops one ring connection under a group
// that is busy with allreduces: every rank's collectives fail.
func TestClosedConnectionFailsGroup(t *testing.T) {
	comms := tcpGroup(t, 3, 10*time.Minute)
	started := make(chan struct{}, 3)
	errs := make(chan error, 3)
	for _, c := range comms {
		go func() {
			buf := make([]float64, 50000)
			for i := 0; ; i++ {
				if err := c.AllReduceFloat64(context.Background(), buf, Sum); err != nil {
					errs <- err
					return
				}
				if i == 0 {
					started <- struct{}{}
				}
			}
		}()
	}
	for range 3 {
		<-started
	}
	comms[1].(*tcpComm).prev.Close()
	for range 3 {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrClosed) {
				t.Errorf("got %v, want an error matching ErrClosed", err)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("a rank hung after a connection closed")
		}
	}
}

// TestSlowPeerIsNotDead checks that a rank that takes several timeouts to
// join a collective does not fail the others: its heartbeats keep them
// waiting.
func TestSlowPeerIsNotDead(t *testing.T) {
	const timeout = 1500 * time.Millisecond
	comms := tcpGroup(t, 3, timeout)
	each(t, comms, "allreduce with a slow rank", func(c Comm) error {
		if c.Rank() == 1 {
			time.Sleep(5 * timeout / 2)
		}
		return checkedSum(c)
	})
}

func TestJoinTCPRejectsBadConfigs(t *testing.T) {
	ok := TCPConfig{Rendezvous: "127.0.0.1:1", Group: "g", Rank: 0, Size: 2}
	for name, edit := range map[string]func(*TCPConfig){
		"no rendezvous":    func(c *TCPConfig) { c.Rendezvous = "" },
		"no group":         func(c *TCPConfig) { c.Group = "" },
		"no ranks":         func(c *TCPConfig) { c.Size = 0 },
		"rank too large":   func(c *TCPConfig) { c.Rank = 2 },
		"negative rank":    func(c *TCPConfig) { c.Rank = -1 },
		"negative timeout": func(c *TCPConfig) { c.Timeout = -time.Second },
	} {
		cfg := ok
		edit(&cfg)
		if _, err := JoinTCP(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "TCPConfig") {
			t.Errorf("%s: got %v, want an error naming the bad TCPConfig field", name, err)
		}
	}
}

// TestRendezvousTimeoutNamesMissingRanks checks that a rank whose group never
// forms says which ranks did not arrive.
func TestRendezvousTimeoutNamesMissingRanks(t *testing.T) {
	rv, err := NewRendezvous("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer rv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := JoinTCP(ctx, TCPConfig{Rendezvous: rv.Addr(), Group: "g", Rank: 0, Size: 4})
		first <- err
	}()
	waitForGroup(t, rv, "g", 1)
	_, err = JoinTCP(context.Background(), TCPConfig{Rendezvous: rv.Addr(), Group: "g", Rank: 2, Size: 4, Timeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), "ranks 1, 3 of 4 never joined") {
		t.Errorf("rank 2: got %v, want it to name ranks 1 and 3", err)
	}
	cancel()
	<-first
}

func TestRendezvousRejectsConflictingJoins(t *testing.T) {
	rv, err := NewRendezvous("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer rv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, err := JoinTCP(ctx, TCPConfig{Rendezvous: rv.Addr(), Group: "g", Rank: 0, Size: 3})
		first <- err
	}()
	waitForGroup(t, rv, "g", 1)
	for name, tc := range map[string]struct {
		cfg  TCPConfig
		want string
	}{
		"size":      {TCPConfig{Group: "g", Rank: 1, Size: 2}, "expect 3"},
		"same rank": {TCPConfig{Group: "g", Rank: 0, Size: 3}, "already joined"},
	} {
		tc.cfg.Rendezvous = rv.Addr()
		if _, err := JoinTCP(context.Background(), tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error saying %q", name, err, tc.want)
		}
	}
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Errorf("first rank: got %v, want context.Canceled", err)
	}
}

// waitForGroup waits until n ranks of group have joined rv.
func waitForGroup(t *testing.T, rv *Rendezvous, group string, n int) {
	t.Helper()
	for range 1000 {
		rv.mu.Lock()
		g := rv.groups[group]
		joined := g != nil && len(g.members) == n || g == nil && n == 0
		rv.mu.Unlock()
		if joined {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%d ranks of group %q never joined", n, group)
}

// TestRendezvousForgetsRanksThatLeave checks that a rank that gives up
// before its group forms can join again (a restarted worker).
func TestRendezvousForgetsRanksThatLeave(t *testing.T) {
	rv, err := NewRendezvous("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer rv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		_, err := JoinTCP(ctx, TCPConfig{Rendezvous: rv.Addr(), Group: "g", Rank: 0, Size: 2})
		gaveUp <- err
	}()
	waitForGroup(t, rv, "g", 1)
	cancel()
	<-gaveUp
	waitForGroup(t, rv, "g", 0)
	comms := make([]Comm, 2)
	for rank, err := range parallel(2, func(rank int) (err error) {
		comms[rank], err = JoinTCP(context.Background(), TCPConfig{Rendezvous: rv.Addr(), Group: "g", Rank: rank, Size: 2})
		return err
	}) {
		if err != nil {
			t.Fatalf("rank %d: %v", rank, err)
		}
	}
	defer closeAll(comms)
	each(t, comms, "allreduce", checkedSum)
}

// TestRendezvousServesManyGroups forms several groups at once on one
// service, twice under the same names, and checks that each group's
// allreduce sees only its own ranks.
func TestRendezvousServesManyGroups(t *testing.T) {
	rv, err := NewRendezvous("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer rv.Close()
	const groups, size = 5, 3
	for round := range 2 {
		errs := parallel(groups*size, func(i int) error {
			g, rank := i/size, i%size
			c, err := JoinTCP(context.Background(), TCPConfig{Rendezvous: rv.Addr(), Group: fmt.Sprint("trial-", g), Rank: rank, Size: size})
			if err != nil {
				return err
			}
			defer c.Close()
			buf := []float64{float64(g)}
			if err := c.AllReduceFloat64(context.Background(), buf, Sum); err != nil {
				return err
			}
			if buf[0] != float64(g*size) {
				return fmt.Errorf("group %d: sum %v, want %v", g, buf[0], g*size)
			}
			return nil
		})
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d, group %d, rank %d: %v", round, i/size, i%size, err)
			}
		}
	}
}

func TestRendezvousCloseFailsWaitingRanks(t *testing.T) {
	rv, err := NewRendezvous("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := JoinTCP(context.Background(), TCPConfig{Rendezvous: rv.Addr(), Group: "g", Rank: 0, Size: 2})
		done <- err
	}()
	waitForGroup(t, rv, "g", 1)
	rv.Close()
	if err := <-done; err == nil || !strings.Contains(err.Error(), "lost the rendezvous") {
		t.Errorf("got %v, want an error saying the rendezvous was lost", err)
	}
}

// TestSameHostRanksUseLocalSockets checks which kind of connection a ring
// of ranks on one host uses: Unix-domain sockets with shared-memory slots
// that carry its frames, or TCP alone with TCPOnly.
func TestSameHostRanksUseLocalSockets(t *testing.T) {
	for _, tcpOnly := range []bool{false, true} {
		comms := joinGroup(t, 3, TCPConfig{TCPOnly: tcpOnly})
		each(t, comms, "allreduce", checkedSum)
		for rank, c := range comms {
			tc := c.(*tcpComm)
			for _, conn := range []net.Conn{tc.next, tc.prev} {
				_, isUnix := conn.(*net.UnixConn)
				_, isTCP := conn.(*net.TCPConn)
				if isUnix == tcpOnly || isTCP != tcpOnly {
					t.Errorf("TCPOnly %v: rank %d has a %T connection", tcpOnly, rank, conn)
				}
			}
			if slots := tc.outN > 0 && tc.inN > 0; slots == tcpOnly {
				t.Errorf("TCPOnly %v: rank %d sent %d and received %d frames through shared memory", tcpOnly, rank, tc.outN, tc.inN)
			}
		}
	}
}

// TestSlotFrameWithoutSlotsFails checks that a frame claiming to be in
// shared memory that was never offered breaks the group with an error
// instead of reading memory it does not have.
func TestSlotFrameWithoutSlotsFails(t *testing.T) {
	comms := joinGroup(t, 2, TCPConfig{TCPOnly: true, Timeout: 5 * time.Second})
	forger := comms[0].(*tcpComm)
	var hdr [headerLen]byte
	putHeader(hdr[:], 1, call{kind: kindAllReduce64, param: int(Sum), count: 4}, 0, 16)
	hdr[0] = frameSlot
	if _, err := forger.next.Write(hdr[:]); err != nil {
		t.Fatal(err)
	}
	err := comms[1].AllReduceFloat64(context.Background(), make([]float64, 4), Sum)
	if err == nil || !strings.Contains(err.Error(), "shared memory it did not offer") {
		t.Errorf("got %v, want an error about shared memory that was not offered", err)
	}
}
