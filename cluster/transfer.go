package cluster

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/gotune/gotune/cluster/agentpb"
	"github.com/gotune/gotune/workers"
)

// chunkSize is the most file data one FileChunk carries, well below
// gRPC's default message limit of 4 MiB.
const chunkSize = 256 << 10

// sendDir sends the folders and regular files under dir as FileChunks,
// folders before what they hold. Anything else (a symbolic link, a device)
// fails the transfer: a checkpoint is plain files. When it fails for
// another reason than send, it tries to tell the receiver in a last chunk.
func sendDir(dir string, send func(*agentpb.FileChunk) error) error {
	sendErr := false
	err := walkDir(dir, func(c *agentpb.FileChunk) error {
		if err := send(c); err != nil {
			sendErr = true
			return err
		}
		return nil
	})
	if err != nil && !sendErr {
		send(&agentpb.FileChunk{Error: err.Error()})
	}
	return err
}

func walkDir(dir string, send func(*agentpb.FileChunk) error) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a folder", dir)
	}
	buf := make([]byte, chunkSize)
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return send(&agentpb.FileChunk{Path: rel, Dir: true, Mode: uint32(info.Mode().Perm())})
		case !info.Mode().IsRegular():
			return fmt.Errorf("%s is neither a folder nor a regular file: it cannot be sent", p)
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		first := true
		for {
			n, rerr := io.ReadFull(f, buf)
			if n > 0 || first {
				if err := send(&agentpb.FileChunk{Path: rel, Mode: uint32(info.Mode().Perm()), Data: buf[:n]}); err != nil {
					return err
				}
				first = false
			}
			if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
				return nil
			}
			if rerr != nil {
				return rerr
			}
		}
	})
}

// receiveDir creates dest, which must not exist, and writes the chunks
// recv returns into it until recv returns io.EOF. A path that would leave
// dest is refused. On failure dest is removed.
func receiveDir(dest string, recv func() (*agentpb.FileChunk, error)) (err error) {
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(dest, 0o755); err != nil {
		return err
	}
	var f *os.File
	var cur string
	defer func() {
		if f != nil {
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			os.RemoveAll(dest)
		}
	}()
	for {
		c, rerr := recv()
		if errors.Is(rerr, io.EOF) {
			return nil
		}
		if rerr != nil {
			return rerr
		}
		if c.Error != "" {
			return errors.New(workers.Printable(c.Error, workers.MaxPeerError, true))
		}
		if c.Path != cur || c.Dir {
			if f != nil {
				if err := f.Close(); err != nil {
					return err
				}
				f = nil
			}
			cur = c.Path
			if !filepath.IsLocal(filepath.FromSlash(c.Path)) || path.Clean(c.Path) != c.Path {
				return fmt.Errorf("refused the file %q: not a plain path inside the folder", c.Path)
			}
			target := filepath.Join(dest, filepath.FromSlash(c.Path))
			mode := fs.FileMode(c.Mode).Perm()
			if c.Dir {
				if err := os.MkdirAll(target, mode|0o700); err != nil {
					return err
				}
				continue
			}
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			if f, err = os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode|0o600); err != nil {
				return err
			}
		}
		if _, err := f.Write(c.Data); err != nil {
			return err
		}
	}
}
