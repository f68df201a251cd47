package tfevents

import (
	"bytes"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// TestMaskedCRC checks the checksum against CRC-32C's check value (of
// "123456789", 0xe3069283) rotated and offset as TFRecord masks it.
func TestMaskedCRC(t *testing.T) {
	if got, want := MaskedCRC([]byte("123456789")), uint32(0xc78ab0e5); got != want {
		t.Errorf("MaskedCRC(123456789): got %08x, want %08x", got, want)
	}
	if got, want := MaskedCRC(nil), uint32(0xa282ead8); got != want {
		t.Errorf("MaskedCRC(empty): got %08x, want %08x", got, want)
	}
}

// TestAppendEventBytes compares an encoded event with the bytes the
// protocol buffer encoding prescribes, written out by hand.
func TestAppendEventBytes(t *testing.T) {
	got := AppendEvent(nil, Event{WallTime: 1.5, Step: 3, Scalars: []Scalar{{"a", 2}}})
	want := []byte{
		0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, // wall_time = 1.5 (double)
		0x10, 0x03, // step = 3
		0x2a, 0x0a, // summary, 10 bytes
		0x0a, 0x08, // value, 8 bytes
		0x0a, 0x01, 'a', // tag = "a"
		0x15, 0, 0, 0, 0x40, // simple_value = 2 (float)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("event bytes:\n got % x\nwant % x", got, want)
	}
	got = AppendEvent(nil, Event{WallTime: 0, Step: 7, SessionStatus: SessionStart})
	want = []byte{0x09, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0x07, 0x3a, 0x02, 0x08, 0x01}
	if !bytes.Equal(got, want) {
		t.Errorf("session log bytes:\n got % x\nwant % x", got, want)
	}
}

// TestWriterRoundTrip writes a file as a trial would and reads it back.
func TestWriterRoundTrip(t *testing.T) {
	dir := t.TempDir()
	start := time.Unix(1700000000, 250_000_000)
	w, err := Create(dir, start)
	if err != nil {
		t.Fatal(err)
	}
	events := []Event{
		{WallTime: 1700000001.5, Step: 1, Scalars: []Scalar{{"loss", 0.75}, {"acc", 0.5}}},
		{WallTime: 1700000002.5, Step: 2, Scalars: []Scalar{{"loss", float32(math.Inf(1))}, {"acc", float32(math.NaN())}}},
		{WallTime: 1700000003, Step: 2, SessionStatus: SessionStart},
		{WallTime: 1700000004, Step: 1 << 40, Scalars: []Scalar{{"loss/val", -1e-30}}},
	}
	if err := w.Write(events[:2]...); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(events[2:]...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if !IsEventFile(filepath.Base(w.Path())) || filepath.Dir(w.Path()) != dir {
		t.Errorf("file %s: not an event file name in %s", w.Path(), dir)
	}
	f, err := os.Open(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := ReadEvents(f)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]Event{{WallTime: Seconds(start), FileVersion: FileVersion}}, events...)
	if len(got) != len(want) {
		t.Fatalf("read %d events, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		// NaN != NaN: compare the bits.
		if len(g.Scalars) == len(w.Scalars) {
			for j := range g.Scalars {
				if math.Float32bits(g.Scalars[j].Value) == math.Float32bits(w.Scalars[j].Value) {
					g.Scalars[j].Value, w.Scalars[j].Value = 0, 0
				}
			}
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("event %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestReadRejectsDamage flips each byte of a record in turn and cuts it
// short: every change is caught by a checksum or reported as cut.
func TestReadRejectsDamage(t *testing.T) {
	rec := AppendRecord(nil, AppendEvent(nil, Event{WallTime: 2, Step: 1, Scalars: []Scalar{{"x", 1}}}))
	for i := range rec {
		bad := bytes.Clone(rec)
		bad[i] ^= 0x10
		_, err := ReadEvents(bytes.NewReader(bad))
		if !errors.Is(err, ErrCorrupt) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("byte %d flipped: got %v, want a corrupt record", i, err)
		}
	}
	for _, n := range []int{5, 12, len(rec) - 1} {
		if _, err := ReadEvents(bytes.NewReader(rec[:n])); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("cut to %d bytes: got %v, want io.ErrUnexpectedEOF", n, err)
		}
	}
}

// FuzzReadEvents feeds arbitrary files to the reader: it must not panic,
// and whatever it decodes must survive encoding and decoding again.
func FuzzReadEvents(f *testing.F) {
	f.Add(AppendRecord(nil, AppendEvent(nil, Event{WallTime: 1, Step: 2, Scalars: []Scalar{{"a", 1}, {"b", 2}}})))
	f.Add(AppendRecord(nil, AppendEvent(nil, Event{WallTime: 1, FileVersion: FileVersion})))
	f.Fuzz(func(t *testing.T, data []byte) {
		events, _ := ReadEvents(bytes.NewReader(data))
		for _, e := range events {
			again, err := DecodeEvent(AppendEvent(nil, e))
			if err != nil {
				t.Fatalf("re-encoded %+v: %v", e, err)
			}
			if again.Step != e.Step || len(again.Scalars) != len(e.Scalars) && e.FileVersion == "" && e.SessionStatus == 0 {
				t.Fatalf("re-encoded %+v, decoded %+v", e, again)
			}
		}
	})
}
