package workers

import (
	"os"
	"testing"
	"time"
)

// hangBound bounds waits that only end when something works: a failure
// makes the test fail instead of hang.
const hangBound = 2 * time.Minute

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

func waitDone(t *testing.T, p *Process) {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(hangBound):
		t.Fatal("the process never ended")
	}
}

func sh(script string, extra ...string) LaunchSpec {
	return LaunchSpec{Args: []string{"/bin/sh", "-c", script}, Env: append(os.Environ(), extra...)}
}
