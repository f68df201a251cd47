package cluster

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gotune/gotune/cluster/agentpb"
)

// chunks feeds receiveDir a fixed list of chunks.
func chunks(cs ...*agentpb.FileChunk) func() (*agentpb.FileChunk, error) {
	return func() (*agentpb.FileChunk, error) {
		if len(cs) == 0 {
			return nil, io.EOF
		}
		c := cs[0]
		cs = cs[1:]
		return c, nil
	}
}

func TestSendReceiveDir(t *testing.T) {
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "a", "empty"), 0o755)
	os.WriteFile(filepath.Join(src, "a", "f"), []byte(strings.Repeat("x", 3*chunkSize+7)), 0o640)
	os.WriteFile(filepath.Join(src, "zero"), nil, 0o600)
	var sent []*agentpb.FileChunk
	if err := sendDir(src, func(c *agentpb.FileChunk) error {
		c.Data = append([]byte(nil), c.Data...)
		sent = append(sent, c)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "copy")
	if err := receiveDir(dest, chunks(sent...)); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "a", "f")); len(b) != 3*chunkSize+7 {
		t.Errorf("big file: %d bytes", len(b))
	}
	if fi, err := os.Stat(filepath.Join(dest, "a", "f")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, %v", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(dest, "zero")); err != nil || fi.Size() != 0 {
		t.Errorf("empty file: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dest, "a", "empty")); err != nil || !fi.IsDir() {
		t.Errorf("empty folder: %v", err)
	}

	// A link cannot be sent, and the receiver hears why.
	os.Symlink("/etc/passwd", filepath.Join(src, "link"))
	sent = nil
	err := sendDir(src, func(c *agentpb.FileChunk) error { sent = append(sent, c); return nil })
	if err == nil || sent[len(sent)-1].Error == "" {
		t.Fatalf("sent a symbolic link: %v", err)
	}
	dest2 := filepath.Join(t.TempDir(), "copy")
	if err := receiveDir(dest2, chunks(sent...)); err == nil || !strings.Contains(err.Error(), "cannot be sent") {
		t.Errorf("receive of a failed send: %v", err)
	}
	if _, err := os.Stat(dest2); !os.IsNotExist(err) {
		t.Error("a failed receive left its folder")
	}
}

// FuzzReceiveDirStaysInside checks that no chunk path writes outside the
// destination folder.
func FuzzReceiveDirStaysInside(f *testing.F) {
	for _, p := range []string{"a", "a/b", "../x", "/etc/x", "a/../../x", "./a", "a//b", "", ".", "..", `a\..\..\x`} {
		f.Add(p, false)
		f.Add(p, true)
	}
	f.Fuzz(func(t *testing.T, path string, dir bool) {
		root := t.TempDir()
		dest := filepath.Join(root, "in", "dest")
		err := receiveDir(dest, chunks(&agentpb.FileChunk{Path: path, Dir: dir, Mode: 0o644, Data: []byte("x")}))
		filepath.WalkDir(root, func(p string, d os.DirEntry, _ error) error {
			if p != root && p != filepath.Join(root, "in") && p != dest && !strings.HasPrefix(p, dest+string(filepath.Separator)) {
				t.Fatalf("chunk path %q (err %v) wrote %s outside %s", path, err, p, dest)
			}
			return nil
		})
	})
}
