package workers

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestConfine(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "scratch")
	outside := filepath.Join(base, "etc") // stands for any folder of the user's
	for _, d := range []string{filepath.Join(root, "ck", "sub"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(root, "file"), nil, 0o644)
	links := map[string]string{
		filepath.Join(root, "escape"):   outside,                   // a link out
		filepath.Join(root, "up"):       "..",                      // a relative link out
		filepath.Join(root, "inner"):    filepath.Join(root, "ck"), // a link that stays inside
		filepath.Join(base, "rootlink"): root,                      // the root reached through a link
		filepath.Join(root, "self"):     ".",                       // a link to the root itself
	}
	for link, target := range links {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	realCk, _ := filepath.EvalSymlinks(filepath.Join(root, "ck"))
	for _, tt := range []struct {
		root, dir string
		want      string // the real path; "" for an error
		outside   bool   // the error wraps ErrOutsideScratch
	}{
		{root, filepath.Join(root, "ck"), realCk, false},
		{root, filepath.Join(root, "ck", "sub", ".."), realCk, false},
		{root, filepath.Join(root, "inner"), realCk, false},
		{filepath.Join(base, "rootlink"), filepath.Join(root, "ck"), realCk, false},
		{root, filepath.Join(base, "rootlink", "ck"), realCk, false},
		{root, outside, "", true},
		{root, filepath.Join(root, "..", "etc"), "", true},
		{root, filepath.Join(root, "ck", "..", "..", "etc"), "", true},
		{root, filepath.Join(root, "escape"), "", true},
		{root, filepath.Join(root, "up", "etc"), "", true},
		{root, filepath.Join(root, "inner", "..", "..", "etc"), "", true},
		{root, root, "", true},
		{root, filepath.Join(root, "ck", ".."), "", true},
		// A scratch folder never made: nothing is inside it.
		{filepath.Join(base, "unmade"), outside, "", true},
		{filepath.Join(base, "unmade"), filepath.Join(base, "unmade", "ck"), "", false},
		{root, filepath.Join(root, "self"), "", true},
		{root, "/", "", true},
		{root, filepath.Join(root, "..", "missing"), "", true},
		{"", filepath.Join(root, "ck"), "", true},
		{root, filepath.Join(root, "file"), "", false},
		{root, filepath.Join(root, "missing"), "", false},
		{root, "ck", "", false},
		// A relative scratch folder is the caller's mistake, never
		// compared with an absolute path (it made every checkpoint of a
		// sweep with a relative database "outside").
		{"scratch", filepath.Join(root, "ck"), "", false},
	} {
		got, err := Confine(tt.root, tt.dir)
		if tt.want != "" {
			if err != nil || got != tt.want {
				t.Errorf("Confine(%s, %s) = %q, %v; want %q", tt.root, tt.dir, got, err, tt.want)
			}
			continue
		}
		if err == nil {
			t.Errorf("Confine(%s, %s) = %q; want it refused", tt.root, tt.dir, got)
			continue
		}
		if errors.Is(err, ErrOutsideScratch) != tt.outside {
			t.Errorf("Confine(%s, %s): %v; want ErrOutsideScratch %v", tt.root, tt.dir, err, tt.outside)
		}
		if !strings.Contains(err.Error(), tt.dir) {
			t.Errorf("Confine(%s, %s): %v does not name the path", tt.root, tt.dir, err)
		}
	}
}

// TestFetchConfinedToScratch hands over folders outside the process's
// scratch folder, directly and through links, from a process of this node
// and from agents' processes: each is refused and left as it was, on the
// head and on the agent; a folder inside is taken over.
func TestFetchConfinedToScratch(t *testing.T) {
	for _, mode := range []string{"local", "agent", "shared agent"} {
		t.Run(mode, func(t *testing.T) {
			start := LocalLauncher{}.Start
			if mode != "local" {
				h, _ := testHead(t, HeadConfig{})
				testAgent(t, h, AgentConfig{Node: Node{Name: "a", CPUs: 1}, Host: "127.0.0.2", Shared: mode == "shared agent"})
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
			var p *Process
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
				if f.err == nil || !strings.Contains(f.err.Error(), ErrOutsideScratch.Error()) {
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
