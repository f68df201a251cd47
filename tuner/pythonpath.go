package tuner

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gotune/gotune/python"
	"github.com/gotune/gotune/storage"
)

// pythonHelperDir is the folder, in the checkpoint root, where gotune
// writes its gotune.py for command workers to import.
const pythonHelperDir = ".gotune-python"

// commandEnv is a command trial's extra variables: the trainer's env, and
// PYTHONPATH with gotune's own gotune.py folder after the entries the
// trainer's env or gotune's environment give, unless one of those already
// holds a gotune.py or a gotune package.
func (t *Tuner) commandEnv() ([]string, error) {
	env := t.cfg.Trainer.EnvList()
	path, set := t.cfg.Trainer.Env["PYTHONPATH"]
	if !set {
		path = os.Getenv("PYTHONPATH")
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			continue
		}
		for _, name := range []string{"gotune.py", filepath.Join("gotune", "__init__.py")} {
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
				return env, nil
			}
		}
	}
	dir, err := t.writePythonHelper()
	if err != nil {
		return nil, err
	}
	if path != "" {
		dir = path + string(os.PathListSeparator) + dir
	}
	out := []string{"PYTHONPATH=" + dir}
	for _, kv := range env {
		if !strings.HasPrefix(kv, "PYTHONPATH=") {
			out = append(out, kv)
		}
	}
	return out, nil
}

// writePythonHelper writes gotune.py into pythonHelperDir, replacing the
// file at once (a sweep running beside may be importing it), and returns
// the folder.
func (t *Tuner) writePythonHelper() (string, error) {
	dir, err := filepath.Abs(filepath.Join(t.checkpointRoot(), pythonHelperDir))
	if err != nil {
		return "", err
	}
	if data, err := os.ReadFile(filepath.Join(dir, "gotune.py")); err == nil && string(data) == string(python.Helper) {
		return dir, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("the Python helper's folder: %w", err)
	}
	if err := storage.WriteFileAtomic(filepath.Join(dir, "gotune.py"), python.Helper); err != nil {
		return "", fmt.Errorf("the Python helper: %w", err)
	}
	return dir, nil
}
