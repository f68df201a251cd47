package tfevents

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
)

// Writer appends events to one event file. Each Write reaches the file
// before it returns (no buffering), so TensorBoard sees a running trial's
// curves grow; it is not synced to disk. A Writer is not safe for
// concurrent use.
type Writer struct {
	f    *os.File
	path string
	buf  []byte
}

// fileSeq tells apart the files one process creates in the same second.
var fileSeq atomic.Int64

// Create makes a new event file in dir (which must exist), named as
// TensorFlow names them, events.out.tfevents.<seconds>.<host>.<pid>.<n>,
// and writes its first event, the file version, stamped now.
func Create(dir string, now time.Time) (*Writer, error) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	host = strings.ReplaceAll(host, string(filepath.Separator), "_")
	name := fmt.Sprintf("events.out.tfevents.%d.%s.%d.%d", now.Unix(), host, os.Getpid(), fileSeq.Add(1))
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("tensorboard event file: %w", err)
	}
	w := &Writer{f: f, path: path}
	if err := w.Write(Event{WallTime: Seconds(now), FileVersion: FileVersion}); err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

// Path is the event file's path.
func (w *Writer) Path() string { return w.path }

// Write appends events to the file in one write.
func (w *Writer) Write(events ...Event) error {
	w.buf = w.buf[:0]
	var msg []byte
	for _, e := range events {
		msg = AppendEvent(msg[:0], e)
		w.buf = AppendRecord(w.buf, msg)
	}
	if _, err := w.f.Write(w.buf); err != nil {
		return fmt.Errorf("tensorboard event file: %w", err)
	}
	return nil
}

// Close closes the file.
func (w *Writer) Close() error { return w.f.Close() }

// IsEventFile reports whether name is that of a TensorBoard event file, as
// TensorBoard recognises them.
func IsEventFile(name string) bool { return strings.Contains(name, "tfevents") }

// Seconds is t as an event's wall time, seconds since 1970.
func Seconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
