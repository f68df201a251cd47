package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gotune/gotune/workers"
)

// TestFetchConfinedToScratch hands over folders outside the process's
// scratch folder, directly and through links, from a process of this node
// and from agents' processes: each is refused and left as it was, on the
// head and on the agent; a folder inside is taken over.
func TestFetchConfinedToScratch(t *testing.T) {
	for _, mode := range []string{"local", "agent", "shared agent"} {
		t.Run(mode, func(t *testing.T) {
			start := workers.LocalLauncher{}.Start
			if mode != "local" {
				h, _ := testHead(t, HeadConfig{})
				testAgent(t, h, AgentConfig{Node: workers.Node{Name: "a", CPUs: 1}, Host: "127.0.0.2", Shared: mode == "shared agent"})
				waitAgents(t, h, 1)
				start = h.Launcher(0).Start
			}
			dir := t.TempDir()
			scratch := filepath.Join(dir, "scratch")
			outside := filepath.Join(dir, "etc")
			os.MkdirAll(scratch, 0o755)
			os.MkdirAll(outside, 0o755)
			os.WriteFile(filepath.Join(outside, "passwd"), []byte("keep"), 0o644)
			spec := sh(`mkdir "$CK/ok" && echo data > "$CK/ok/f" && ln -s "$OUT" "$CK/link" &&
for p in "$OUT" "$CK/link" "$CK/../etc" "$CK" "$CK/ok"; do echo "@r $p"; done`, "CK="+scratch, "OUT="+outside)
			spec.ReportPrefix = "@r "
			spec.Scratch = scratch
			type fetched struct {
				local string
				err   error
			}
			var mu sync.Mutex
			var got []fetched
			ready := make(chan struct{})
			var p *workers.Process
			p, err := start(spec, func(line string) {
				<-ready
				local, err := p.Fetch(context.Background(), line)
				mu.Lock()
				got = append(got, fetched{local, err})
				mu.Unlock()
			})
			if err != nil {
				t.Fatal(err)
			}
			close(ready)
			waitDone(t, p)
			if p.Err() != nil {
				t.Fatalf("exit %v: %q", p.Err(), p.Tail())
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 5 {
				t.Fatalf("%d fetches, want 5: %+v", len(got), got)
			}
			for i, f := range got[:4] {
				// An agent's refusal comes back as its text.
				if f.err == nil || !strings.Contains(f.err.Error(), workers.ErrOutsideScratch.Error()) {
					t.Errorf("fetch %d: %q, %v; want it refused", i+1, f.local, f.err)
				}
			}
			if b, err := os.ReadFile(filepath.Join(outside, "passwd")); err != nil || string(b) != "keep" {
				t.Errorf("the folder outside: %q, %v; want it untouched", b, err)
			}
			if b, err := os.ReadFile(filepath.Join(got[4].local, "f")); got[4].err != nil || err != nil || string(b) != "data\n" {
				t.Errorf("the folder inside: %q (%v): %q, %v", got[4].local, got[4].err, b, err)
			}
			if rel, err := filepath.Rel(evalOrSelf(scratch), evalOrSelf(got[4].local)); err != nil || !filepath.IsLocal(rel) {
				t.Errorf("taken over at %s, not inside %s", got[4].local, scratch)
			}
		})
	}
}

// evalOrSelf is path with its links resolved, or path when that fails.
func evalOrSelf(path string) string {
	if p, err := filepath.EvalSymlinks(path); err == nil {
		return p
	}
	return path
}
