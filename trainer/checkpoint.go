package trainer

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// CheckpointFile is the file a built-in model writes into each checkpoint
// folder it hands over with a report, and reads back from Worker.ResumeDir.
// Its format: the line "gotune-model 1", a line of JSON describing the model
// (model name, layer sizes, optimizer, epoch, step count, vector length and
// a CRC-32C of the payload), then the payload: the parameters and then each
// optimizer state vector, as little-endian IEEE 754 float64s. Parameters are
// stored layer by layer, each layer's weights (inputs×outputs, row-major)
// followed by its biases.
const CheckpointFile = "model.ckpt"

const checkpointMagic = "gotune-model 1\n"

// modelState is what a checkpoint holds: enough to continue training with
// bit-identical results.
type modelState struct {
	Model     string `json:"model"`
	Sizes     []int  `json:"sizes"`
	Optimizer string `json:"optimizer"`
	// Epoch is the last epoch completed; training resumes at Epoch+1.
	Epoch int `json:"epoch"`
	// Steps is the optimizer's step count (Adam's bias correction uses it).
	Steps int64 `json:"steps"`
	// Length is the number of values of each vector; Vectors the number of
	// optimizer state vectors after the parameters.
	Length  int    `json:"length"`
	Vectors int    `json:"vectors"`
	CRC32C  uint32 `json:"crc32c"`
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// saveCheckpoint writes the parameters of a network of the given layer
// sizes and the optimizer's state after epoch into dir/CheckpointFile.
func saveCheckpoint(dir, model, optName string, epoch int, sizes []int, params []float64, opt optimizer) error {
	steps, vectors := opt.state()
	payload := make([]byte, 0, 8*len(params)*(1+len(vectors)))
	for _, vec := range append([][]float64{params}, vectors...) {
		for _, v := range vec {
			payload = binary.LittleEndian.AppendUint64(payload, math.Float64bits(v))
		}
	}
	header, err := json.Marshal(modelState{
		Model: model, Sizes: sizes, Optimizer: optName, Epoch: epoch, Steps: *steps,
		Length: len(params), Vectors: len(vectors), CRC32C: crc32.Checksum(payload, castagnoli),
	})
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	buf.WriteString(checkpointMagic)
	buf.Write(header)
	buf.WriteByte('\n')
	buf.Write(payload)
	if err := os.WriteFile(filepath.Join(dir, CheckpointFile), buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// WaitForSpace runs write, and runs it again after pauses that grow from
// 10 ms to 1 s while it fails because the disk (or a quota, or the
// file-size limit) is full, until it succeeds or ctx ends; then it returns
// write's error. The launching side hears that the worker waits (the tuner
// says the sweep is paused) and when it writes again. Built-in models
// write their checkpoints through it, so a full disk pauses their trials
// rather than failing them. write must be safe to run again after a
// failure.
func (w *Worker) WaitForSpace(ctx context.Context, write func() error) error {
	return whileDiskFull(ctx, write, func(err error) {
		if err != nil {
			err = fmt.Errorf("trial %d, worker %d waits for space: %w", w.trial, w.rank, err)
		}
		w.tellDiskFull(err)
	})
}

// whileDiskFull is WaitForSpace, telling tell of the wait (the error) and
// of its end (nil).
func whileDiskFull(ctx context.Context, write func() error, tell func(error)) error {
	waited := false
	for pause := 10 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		err := write()
		if !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EDQUOT) && !errors.Is(err, syscall.EFBIG) {
			if waited {
				tell(nil)
			}
			return err
		}
		if !waited {
			waited = true
			tell(err)
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

func (w *Worker) tellDiskFull(err error) {
	if w.diskFull != nil {
		w.diskFull(err)
	}
}

// loadCheckpoint reads dir/CheckpointFile into params (those of a network of
// the given layer sizes) and the optimizer's state and returns the epoch it
// was written after. The checkpoint must come from the same model with the
// same layer sizes. When
// it was written with another optimizer (a trial whose optimizer changed,
// as population-based training may do), only the parameters are restored
// and the optimizer starts afresh.
func loadCheckpoint(dir, model, optName string, sizes []int, params []float64, opt optimizer) (epoch int, err error) {
	path := filepath.Join(dir, CheckpointFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("resume: %s has no %s: the checkpoint was not written by a built-in model", dir, CheckpointFile)
	}
	if err != nil {
		return 0, fmt.Errorf("resume: %w", err)
	}
	return parseCheckpoint(path, data, model, optName, sizes, params, opt)
}

// maxStateVectors bounds the optimizer state vectors a checkpoint may
// announce (Adam has two).
const maxStateVectors = 4

// parseCheckpoint is loadCheckpoint on the contents of the file at path.
func parseCheckpoint(path string, data []byte, model, optName string, sizes []int, params []float64, opt optimizer) (epoch int, err error) {
	bad := func(why string) error {
		return fmt.Errorf("resume: %s is damaged or not a model checkpoint: %s", path, why)
	}
	rest, ok := bytes.CutPrefix(data, []byte(checkpointMagic))
	if !ok {
		return 0, bad("it does not start with " + checkpointMagic[:len(checkpointMagic)-1])
	}
	header, payload, ok := bytes.Cut(rest, []byte{'\n'})
	if !ok {
		return 0, bad("no header line")
	}
	var st modelState
	if err := json.Unmarshal(header, &st); err != nil {
		return 0, bad(err.Error())
	}
	if st.Length < 0 || st.Vectors < 0 || st.Vectors > maxStateVectors || st.Length > len(payload) ||
		len(payload) != 8*st.Length*(1+st.Vectors) {
		return 0, bad(fmt.Sprintf("its payload has %d bytes, the header announces %d vectors of %d values", len(payload), 1+st.Vectors, st.Length))
	}
	if crc32.Checksum(payload, castagnoli) != st.CRC32C {
		return 0, bad("checksum mismatch")
	}
	if st.Model != model || !slices.Equal(st.Sizes, sizes) {
		return 0, fmt.Errorf("resume: %s holds a %s with layer sizes %v; this trial trains a %s with layer sizes %v", path, st.Model, st.Sizes, model, sizes)
	}
	if st.Length != len(params) || st.Epoch < 0 {
		return 0, bad("its header does not match its layer sizes")
	}
	read := func(dst []float64) {
		for i := range dst {
			dst[i] = math.Float64frombits(binary.LittleEndian.Uint64(payload[8*i:]))
		}
		payload = payload[8*len(dst):]
	}
	read(params)
	steps, vectors := opt.state()
	if st.Optimizer == optName && st.Vectors == len(vectors) {
		for _, vec := range vectors {
			read(vec)
		}
		*steps = st.Steps
	}
	return st.Epoch, nil
}
