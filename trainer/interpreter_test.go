package trainer

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInterpreterThatLacksAModule: a Python worker that cannot import a
// module has its failure name the interpreter that ran, found in gotune's
// PATH, and another of the same name that imports the module, or say that
// none does; a program that is no Python interpreter gets no such hint.
func TestInterpreterThatLacksAModule(t *testing.T) {
	root := t.TempDir()
	first, other := filepath.Join(root, "env", "bin"), filepath.Join(root, "system", "bin")
	// The first python3 in PATH lacks every module; the other imports
	// gotune_test_mod.
	fails := "#!/bin/sh\n[ \"$1\" = -c ] && exit 1\necho 'Traceback (most recent call last):' >&2\necho '  File \"train.py\", line 1, in <module>' >&2\necho \"ModuleNotFoundError: No module named '$MODULE'\" >&2\nexit 1\n"
	imports := "#!/bin/sh\n[ \"$1\" = -c ] && [ \"$2\" = 'import gotune_test_mod' ] && exit 0\nexit 1\n"
	for dir, script := range map[string]string{first: fails, other: imports} {
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "python3"), []byte(script), 0o755)
	}
	os.WriteFile(filepath.Join(first, "tool"), []byte(fails), 0o755)
	t.Setenv("PATH", first+string(filepath.ListSeparator)+other+string(filepath.ListSeparator)+os.Getenv("PATH"))
	for _, tc := range []struct {
		name, program, module, hint string // hint "" for none
	}{
		{"another interpreter imports it", "python3", "gotune_test_mod.sub",
			"python3 is " + filepath.Join(first, "python3") + " here (the first in gotune's PATH), which cannot import gotune_test_mod; " + filepath.Join(other, "python3") + " can: name it in trainer.command ([\"" + filepath.Join(other, "python3") + "\", …])"},
		{"none imports it", "python3", "gotune_test_nowhere",
			"python3 is " + filepath.Join(first, "python3") + " here (the first in gotune's PATH), which cannot import gotune_test_nowhere, and no other python3 on this node can: install gotune_test_nowhere for it"},
		{"an interpreter by its path", filepath.Join(first, "python3"), "gotune_test_mod",
			filepath.Join(first, "python3") + " is " + filepath.Join(first, "python3") + ", which cannot import gotune_test_mod; " + filepath.Join(other, "python3") + " can"},
		{"no Python interpreter", "tool", "gotune_test_mod", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := commandSpec(t, 1)
			spec.Command = []string{tc.program, "train.py"}
			spec.Env = []string{"MODULE=" + tc.module}
			_, err := Run(context.Background(), spec, &collect{})
			if err == nil || !strings.Contains(err.Error(), "No module named '"+tc.module+"'") {
				t.Fatalf("Run: %v, want the worker's ModuleNotFoundError", err)
			}
			msg := err.Error()
			if tc.hint != "" && !strings.Contains(msg, tc.hint) {
				t.Errorf("Run: %v\nwant the hint %q", err, tc.hint)
			}
			if tc.hint == "" && strings.Contains(msg, "cannot import") {
				t.Errorf("Run: %v\nwant no hint", err)
			}
		})
	}
}

// TestInterpreterOfAVirtualEnvironment: a virtual environment's python3 is
// a link to the system's, and yet another interpreter, with packages of
// its own: when it lacks a module the system's has, the hint names the
// system's.
func TestInterpreterOfAVirtualEnvironment(t *testing.T) {
	root := t.TempDir()
	venv, system := filepath.Join(root, "venv", "bin"), filepath.Join(root, "usr", "bin")
	os.MkdirAll(venv, 0o755)
	os.MkdirAll(system, 0o755)
	// Run by its link in the environment, it lacks the module; run as
	// the system's, it imports it.
	script := "#!/bin/sh\ncase \"$0\" in */venv/*)\n  [ \"$1\" = -c ] && exit 1\n  echo 'Traceback (most recent call last):' >&2\n  echo \"ModuleNotFoundError: No module named 'gotune_test_venv_mod'\" >&2\n  exit 1;;\nesac\n[ \"$1\" = -c ] && [ \"$2\" = 'import gotune_test_venv_mod' ] && exit 0\nexit 1\n"
	os.WriteFile(filepath.Join(system, "python3"), []byte(script), 0o755)
	if err := os.Symlink(filepath.Join(system, "python3"), filepath.Join(venv, "python3")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", venv+string(filepath.ListSeparator)+system+string(filepath.ListSeparator)+os.Getenv("PATH"))
	spec := commandSpec(t, 1)
	spec.Command = []string{"python3", "train.py"}
	_, err := Run(context.Background(), spec, &collect{})
	want := "python3 is " + filepath.Join(venv, "python3") + " here (the first in gotune's PATH), which cannot import gotune_test_venv_mod; " + filepath.Join(system, "python3") + " can"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Run: %v\nwant the hint %q", err, want)
	}
}
