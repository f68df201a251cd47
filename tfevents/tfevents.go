// Package tfevents writes and reads TensorBoard event files: a sequence of
// TFRecord records, each an Event protocol buffer, here holding scalar
// summaries, so that `tensorboard --logdir` draws curves of what a trial
// reported.
//
// A TFRecord record is the data's length (uint64, little-endian), the
// masked CRC-32C of those 8 bytes, the data, and the masked CRC-32C of the
// data (TensorFlow's tensorflow/core/lib/io/record_writer.cc). The Event,
// Summary and SessionLog messages are those of TensorFlow's
// tensorflow/core/util/event.proto and framework/summary.proto; only the
// fields below are written or read.
//
// It imports nothing of gotune's, so that trainer may read a script's
// event files through it.
package tfevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// FileVersion is the file_version of the first event of every file.
const FileVersion = "brain.Event:2"

// SessionStart is SessionLog.status START. TensorBoard drops the events
// of a run at or after a START event's step that it read before it: how a
// run that restarts from a checkpoint replaces what it reports again.
const SessionStart = 1

// Event is one record of an event file: the file's version, a set of
// scalars at a step, or a session log entry.
type Event struct {
	// WallTime is in seconds since 1970.
	WallTime float64
	Step     int64
	// FileVersion is set in a file's first event only.
	FileVersion string
	// Scalars are summary values (Summary.Value.simple_value), in order.
	Scalars []Scalar
	// SessionStatus is the SessionLog status (SessionStart), 0 when the
	// event holds no session log.
	SessionStatus int
}

// Scalar is one tagged value of a summary. TensorBoard stores it as a
// float32.
type Scalar struct {
	Tag   string
	Value float32
}

// Field numbers of the messages, from event.proto and summary.proto.
const (
	eventWallTime    = 1 // double
	eventStep        = 2 // int64
	eventFileVersion = 3 // string
	eventSummary     = 5 // Summary
	eventSessionLog  = 7 // SessionLog

	summaryValue = 1 // repeated Summary.Value

	valueTag         = 1 // string
	valueSimpleValue = 2 // float

	sessionLogStatus = 1 // enum SessionStatus
)

// AppendEvent appends e encoded as an Event message to b.
func AppendEvent(b []byte, e Event) []byte {
	b = protowire.AppendTag(b, eventWallTime, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, math.Float64bits(e.WallTime))
	if e.Step != 0 {
		b = protowire.AppendTag(b, eventStep, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(e.Step))
	}
	switch {
	case e.FileVersion != "":
		b = protowire.AppendTag(b, eventFileVersion, protowire.BytesType)
		b = protowire.AppendString(b, e.FileVersion)
	case e.SessionStatus != 0:
		var log []byte
		log = protowire.AppendTag(log, sessionLogStatus, protowire.VarintType)
		log = protowire.AppendVarint(log, uint64(e.SessionStatus))
		b = protowire.AppendTag(b, eventSessionLog, protowire.BytesType)
		b = protowire.AppendBytes(b, log)
	default:
		var sum []byte
		for _, s := range e.Scalars {
			var v []byte
			v = protowire.AppendTag(v, valueTag, protowire.BytesType)
			v = protowire.AppendString(v, s.Tag)
			v = protowire.AppendTag(v, valueSimpleValue, protowire.Fixed32Type)
			v = protowire.AppendFixed32(v, math.Float32bits(s.Value))
			sum = protowire.AppendTag(sum, summaryValue, protowire.BytesType)
			sum = protowire.AppendBytes(sum, v)
		}
		b = protowire.AppendTag(b, eventSummary, protowire.BytesType)
		b = protowire.AppendBytes(b, sum)
	}
	return b
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MaskedCRC is TFRecord's checksum of b: its CRC-32C, rotated right by 15
// bits, plus 0xa282ead8.
func MaskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}

// AppendRecord appends data framed as one TFRecord record to b.
func AppendRecord(b, data []byte) []byte {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(data)))
	b = append(b, n[:]...)
	b = binary.LittleEndian.AppendUint32(b, MaskedCRC(n[:]))
	b = append(b, data...)
	return binary.LittleEndian.AppendUint32(b, MaskedCRC(data))
}

// ErrCorrupt is wrapped by the errors of records whose checksum or
// encoding is wrong.
var ErrCorrupt = errors.New("corrupt event record")

// maxRecord bounds a record's length, far above any event written here,
// so that a corrupt length cannot make the reader allocate without limit.
const maxRecord = 64 << 20

// ReadRecord reads one TFRecord record from r and checks both checksums.
// It returns io.EOF at the end of r, and io.ErrUnexpectedEOF for a record
// cut short (a file still being written ends so).
func ReadRecord(r io.Reader) ([]byte, error) {
	var hdr [12]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	if got, want := binary.LittleEndian.Uint32(hdr[8:]), MaskedCRC(hdr[:8]); got != want {
		return nil, fmt.Errorf("%w: length checksum %08x, want %08x", ErrCorrupt, got, want)
	}
	n := binary.LittleEndian.Uint64(hdr[:8])
	if n > maxRecord {
		return nil, fmt.Errorf("%w: record of %d bytes", ErrCorrupt, n)
	}
	data := make([]byte, n+4)
	if _, err := io.ReadFull(r, data); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if got, want := binary.LittleEndian.Uint32(data[n:]), MaskedCRC(data[:n]); got != want {
		return nil, fmt.Errorf("%w: data checksum %08x, want %08x", ErrCorrupt, got, want)
	}
	return data[:n], nil
}

// ReadEvents reads every record of an event file and decodes its events.
func ReadEvents(r io.Reader) ([]Event, error) {
	var out []Event
	for {
		data, err := ReadRecord(r)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("event %d: %w", len(out)+1, err)
		}
		e, err := DecodeEvent(data)
		if err != nil {
			return out, fmt.Errorf("event %d: %w", len(out)+1, err)
		}
		out = append(out, e)
	}
}

// DecodeEvent decodes an Event message, keeping the fields Event has and
// skipping the others.
func DecodeEvent(b []byte) (Event, error) {
	var e Event
	err := eachField(b, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		switch {
		case num == eventWallTime && typ == protowire.Fixed64Type:
			v, n := protowire.ConsumeFixed64(b)
			e.WallTime = math.Float64frombits(v)
			return n, nil
		case num == eventStep && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			e.Step = int64(v)
			return n, nil
		case num == eventFileVersion && typ == protowire.BytesType:
			v, n := protowire.ConsumeString(b)
			e.FileVersion = v
			return n, nil
		case num == eventSummary && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return n, nil
			}
			return n, eachField(v, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
				if num != summaryValue || typ != protowire.BytesType {
					return protowire.ConsumeFieldValue(num, typ, b), nil
				}
				v, n := protowire.ConsumeBytes(b)
				if n < 0 {
					return n, nil
				}
				s, err := decodeValue(v)
				e.Scalars = append(e.Scalars, s)
				return n, err
			})
		case num == eventSessionLog && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return n, nil
			}
			return n, eachField(v, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
				if num == sessionLogStatus && typ == protowire.VarintType {
					v, n := protowire.ConsumeVarint(b)
					e.SessionStatus = int(v)
					return n, nil
				}
				return protowire.ConsumeFieldValue(num, typ, b), nil
			})
		}
		return protowire.ConsumeFieldValue(num, typ, b), nil
	})
	return e, err
}

func decodeValue(b []byte) (Scalar, error) {
	var s Scalar
	err := eachField(b, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		switch {
		case num == valueTag && typ == protowire.BytesType:
			v, n := protowire.ConsumeString(b)
			s.Tag = v
			return n, nil
		case num == valueSimpleValue && typ == protowire.Fixed32Type:
			v, n := protowire.ConsumeFixed32(b)
			s.Value = math.Float32frombits(v)
			return n, nil
		}
		return protowire.ConsumeFieldValue(num, typ, b), nil
	})
	return s, err
}

// eachField calls fn with each field of message b and the bytes after its
// tag; fn returns how many of them the field's value takes (negative: a
// protowire error).
func eachField(b []byte, fn func(protowire.Number, protowire.Type, []byte) (int, error)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %v", ErrCorrupt, protowire.ParseError(n))
		}
		b = b[n:]
		m, err := fn(num, typ, b)
		if err != nil {
			return err
		}
		if m < 0 {
			return fmt.Errorf("%w: field %d: %v", ErrCorrupt, num, protowire.ParseError(m))
		}
		b = b[m:]
	}
	return nil
}
