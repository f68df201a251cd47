package tuner

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gotune/gotune/trainer"
)

// A command whose program does not exist is refused when the tuner is
// built, before any trial starts; one the trials name by a placeholder,
// or that a per-trial workdir may hold, is left to them.
func TestNewFindsTheCommandsProgram(t *testing.T) {
	base := t.TempDir()
	os.WriteFile(filepath.Join(base, "train.sh"), []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(base, "data.txt"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(base, "train.py"), []byte("print(1)\n"), 0o644)
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		command []string
		workdir string
		env     map[string]string
		want    string // "" when accepted
	}{
		{"in PATH", []string{"sh", "-c", "true"}, "", nil, ""},
		{"not in PATH", []string{"gotune-no-such-program", "--lr=1"}, "", nil, `program "gotune-no-such-program" is not in PATH`},
		{"not in trainer.env's PATH", []string{"sh"}, "", map[string]string{"PATH": base}, `program "sh" is not in PATH (` + base + `)`},
		{"beside the sweep file", []string{"./train.sh"}, "", nil, ""},
		{"missing beside the sweep file", []string{"./missing.sh"}, "", nil, "program ./missing.sh is not in " + base},
		{"not executable", []string{"./data.txt"}, "", nil, "not executable"},
		{"absolute", []string{filepath.Join(base, "train.sh")}, "", nil, ""},
		{"absolute, missing", []string{filepath.Join(base, "nope")}, "", nil, "does not exist"},
		{"per-trial workdir", []string{"./made-by-setup.sh"}, "runs/{trial_dir}", nil, ""},
		{"placeholder", []string{"{steps}"}, "", nil, ""},
		{"a script beside the sweep file", []string{"python3", "train.py", "--lr=1"}, "", nil, ""},
		{"a misspelt script", []string{"python3", "trian.py", "--lr=1"}, "", nil, "script trian.py is in none of " + base + ", " + wd + " (the sweep file's folder has train.py)"},
		{"a shell's misspelt script", []string{"sh", "-e", "trian.sh"}, "", nil, "script trian.sh is in none of"},
		{"a script in the workdir", []string{"python3", "train.py"}, ".", nil, ""},
		{"a script in another workdir", []string{"python3", "train.py"}, "/", nil, ""},
		{"a script by a placeholder", []string{"python3", "{trial_dir}/made.py"}, "", nil, ""},
		{"a shell's code", []string{"sh", "-c", "cd sub && python3 train.py"}, "", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, 1)
			cfg.Trainer = trainer.Config{Command: tc.command, Workdir: tc.workdir, PathBase: base, Env: tc.env}
			_, err := New(cfg)
			var ce *ConfigError
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("New: %v, want it accepted", err)
			case tc.want != "" && (!errors.As(err, &ce) || ce.Key != "trainer.command" || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("New: %v, want a trainer.command error that says %q", err, tc.want)
			}
		})
	}
}

// A cluster's head requires of each joining agent the programs that the
// agent's own PATH or file system must hold; the rest is left to trials.
func TestNodePrograms(t *testing.T) {
	for _, tc := range []struct {
		command []string
		env     map[string]string
		want    []string
	}{
		{[]string{"python3", "train.py"}, nil, []string{"python3"}},
		{[]string{"/opt/venv/bin/python", "train.py"}, nil, []string{"/opt/venv/bin/python"}},
		{[]string{"./train.sh"}, nil, nil},
		{[]string{"{program}"}, nil, nil},
		{[]string{"python3"}, map[string]string{"PATH": "/opt/bin"}, nil},
		{nil, nil, nil},
	} {
		cfg := Config{Trainer: trainer.Config{Command: tc.command, Env: tc.env}}
		if got := cfg.NodePrograms(); !slices.Equal(got, tc.want) {
			t.Errorf("%q with env %v: %q, want %q", tc.command, tc.env, got, tc.want)
		}
	}
}
