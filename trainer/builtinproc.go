package trainer

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
)

// Isolation settings of Config.Isolation.
const (
	IsolationGoroutine = "goroutine"
	IsolationProcess   = "process"
)

// BuiltinProcess is the registered name under which the built-in models
// run as process workers: a Spec with Process set to it and BuiltinEnv(cfg)
// in its Env trains cfg's model, each worker loading the data set itself.
const BuiltinProcess = "gotune.builtin"

// envModel carries a built-in model's Config to its process workers.
const envModel = "GOTUNE_MODEL"

func init() { Register(BuiltinProcess, runBuiltinProcess) }

// BuiltinEnv is the NAME=value variable that tells BuiltinProcess workers
// which model to train on which data.
func BuiltinEnv(cfg Config) (string, error) {
	data, err := json.Marshal(cfg)
	if err != nil {
		return "", fmt.Errorf("encode the model's configuration: %w", err)
	}
	return envModel + "=" + string(data), nil
}

// runBuiltinProcess trains the built-in model its environment names.
func runBuiltinProcess(ctx context.Context, w *Worker) error {
	var cfg Config
	if err := json.Unmarshal([]byte(os.Getenv(envModel)), &cfg); err != nil {
		return Permanent(fmt.Errorf("%s: %w", envModel, err))
	}
	train, err := Builtin(cfg)
	if err != nil {
		return Permanent(err)
	}
	return train(ctx, w)
}
