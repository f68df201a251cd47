package workers

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
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
