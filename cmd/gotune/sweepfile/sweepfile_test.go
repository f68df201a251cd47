package sweepfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gotune/gotune/searchspace"
)

const valid = `name = "digits"
seed = 7

[objective]
metric = "val_loss"
mode = "min"

[search]
num_samples = 4
max_concurrent = 2

[search.space]
lr = { loguniform = [1e-4, 1e-1] }
hidden = { choice = [32, 64] }
epochs = 3

[trainer]
model = "mlp"
dataset = "data.csv"

[trainer.scaling]
num_workers = 2
`

func TestDecodeValid(t *testing.T) {
	cfg, err := Decode("sweep.toml", []byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Name != "digits" || cfg.Seed != 7 || cfg.Search.NumSamples != 4 || cfg.Trainer.Scaling.NumWorkers != 2 {
		t.Errorf("decoded %+v", cfg)
	}
	if got := cfg.Search.Space.Domain("lr"); got != (searchspace.LogUniform{Low: 1e-4, High: 1e-1}) {
		t.Errorf("lr domain: got %v", got)
	}
	if got := cfg.Search.Space.Domain("epochs"); got != (searchspace.Constant{Value: int64(3)}) {
		t.Errorf("epochs domain: got %v", got)
	}
}

// TestDecodeErrors checks that each mistake names the file, the line and the key.
func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name    string
		replace [2]string
		line    int
		key     string
		msg     string
	}{
		{"misspelt top-level key", [2]string{"seed = 7", "sede = 7"}, 2, "sede", "unknown key"},
		{"misspelt key in table", [2]string{"num_samples = 4", "num_sample = 4"}, 9, "search.num_sample", "unknown key"},
		{"misspelt nested table", [2]string{"[trainer.scaling]", "[trainer.scalling]"}, 21, "trainer.scalling", "unknown key"},
		{"wrong type", [2]string{"num_samples = 4", `num_samples = "four"`}, 9, "search.num_samples", "want an integer, got a string"},
		{"wrong type of table", [2]string{`mode = "min"`, `mode = 3`}, 6, "objective.mode", "want a string"},
		{"bad domain", [2]string{"lr = { loguniform = [1e-4, 1e-1] }", "lr = { loguniform = [0, 1e-1] }"}, 13, "search.space.lr", "log range must be positive"},
		{"inverted range", [2]string{"lr = { loguniform = [1e-4, 1e-1] }", "lr = { uniform = [1, 0] }"}, 13, "search.space.lr", "inverted"},
		{"invalid value", [2]string{`mode = "min"`, `mode = "minimum"`}, 6, "objective.mode", `"min" or "max"`},
		{"missing key names its table", [2]string{`metric = "val_loss"`, ``}, 4, "objective.metric", "name the metric"},
		{"bad nested value", [2]string{"num_workers = 2", "num_workers = -1"}, 22, "trainer.scaling.num_workers", "at least 1"},
		{"syntax error", [2]string{"seed = 7", "seed = = 7"}, 2, "", "unexpected character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := strings.Replace(valid, tt.replace[0], tt.replace[1], 1)
			if doc == valid {
				t.Fatal("replacement did not apply")
			}
			_, err := Decode("sweep.toml", []byte(doc))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v (%T), want *Error", err, err)
			}
			if e.File != "sweep.toml" || e.Line != tt.line || e.Key != tt.key {
				t.Errorf("got file %q line %d key %q, want sweep.toml line %d key %q (%v)", e.File, e.Line, e.Key, tt.line, tt.key, err)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not mention %q", err, tt.msg)
			}
		})
	}
}

func TestLoadShippedExamples(t *testing.T) {
	files, _ := filepath.Glob("../../../examples/*.toml")
	if len(files) == 0 {
		t.Fatal("no example sweep files found")
	}
	for _, f := range files {
		if _, err := Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.toml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("got %v, want a not-exist error", err)
	}
}

// FuzzDecode checks that no input makes the decoder panic, and that every
// error it returns is located in the file.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(valid))
	f.Add([]byte("name = 1"))
	f.Add([]byte("[search.space]\nx = { choice = [] }"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := Decode("fuzz.toml", data)
		if err == nil {
			return
		}
		var e *Error
		if !errors.As(err, &e) || e.File != "fuzz.toml" {
			t.Fatalf("error %v (%T) is not a located *Error", err, err)
		}
	})
}
