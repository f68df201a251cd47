package trainer

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestCheckpointRoundTrip(t *testing.T) {
	sizes := []int{3, 4, 2}
	params := initParams(sizes, newRand(1))
	opt := newOptimizer(optimParams{name: "adam", lr: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8}, len(params))
	grads := initParams(sizes, newRand(2))
	for range 3 {
		opt.step(params, grads)
	}
	dir := t.TempDir()
	if err := saveCheckpoint(dir, "mlp", "adam", 7, sizes, params, opt); err != nil {
		t.Fatal(err)
	}
	got := make([]float64, len(params))
	gotOpt := newOptimizer(optimParams{name: "adam", lr: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8}, len(params))
	epoch, err := loadCheckpoint(dir, "mlp", "adam", sizes, got, gotOpt)
	if err != nil || epoch != 7 {
		t.Fatalf("loadCheckpoint: epoch %d, %v", epoch, err)
	}
	if !reflect.DeepEqual(got, params) || !reflect.DeepEqual(gotOpt, opt) {
		t.Error("the loaded parameters or optimizer state differ from the saved ones")
	}
}

// FuzzCheckpoint feeds arbitrary files to the checkpoint reader: it must
// return an error or fill the parameters, never panic.
func FuzzCheckpoint(f *testing.F) {
	sizes := []int{3, 4, 2}
	params := initParams(sizes, newRand(1))
	for _, name := range []string{"sgd", "adam"} {
		dir := f.TempDir()
		opt := newOptimizer(optimParams{name: name, lr: 0.1}, len(params))
		if err := saveCheckpoint(dir, "mlp", name, 2, sizes, params, opt); err != nil {
			f.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(dir, CheckpointFile))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(checkpointMagic + `{"model":"mlp","sizes":[3,4,2],"length":26,"vectors":4611686018427387904}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		got := make([]float64, len(params))
		opt := newOptimizer(optimParams{name: "adam", lr: 0.1}, len(params))
		epoch, err := parseCheckpoint("f", data, "mlp", "adam", sizes, got, opt)
		if err == nil && epoch < 0 {
			t.Fatalf("epoch %d accepted", epoch)
		}
	})
}
