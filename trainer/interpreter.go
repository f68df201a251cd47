package trainer

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// noModule finds, in a failed Python worker's last lines, the module it
// could not import.
var noModule = regexp.MustCompile(`ModuleNotFoundError: No module named '([\w.]+)'`)

// interpreterDirs are the folders searched for another interpreter of the
// same name after gotune's PATH: the system's own, which a pyenv, conda
// or virtual environment first in PATH hides.
var interpreterDirs = []string{"/usr/bin", "/usr/local/bin"}

// importProbeTimeout bounds one interpreter's try at importing a module.
const importProbeTimeout = 20 * time.Second

// imports caches whether an interpreter (by interpreterID) imports a
// module, "path\x00module" to bool: every trial of a sweep fails alike.
var imports sync.Map

// interpreterHint is what the failure of a worker adds when lines say
// that its Python found no module X and its program, as launched, is a
// Python interpreter: which interpreter ran (the program as found in
// gotune's PATH, since pyenv, conda and virtual environments each put
// their own first), and another of the same name on this node that
// imports X, when one does. It is "" otherwise.
func interpreterHint(lines []string, program string) string {
	var module string
	for _, line := range slices.Backward(lines) {
		if m := noModule.FindStringSubmatch(line); m != nil {
			module, _, _ = strings.Cut(m[1], ".")
			break
		}
	}
	if module == "" || !strings.HasPrefix(filepath.Base(program), "python") {
		return ""
	}
	ran, err := exec.LookPath(program)
	if err != nil {
		return ""
	}
	ran, _ = filepath.Abs(ran)
	where := ran
	if !strings.Contains(program, "/") {
		where = fmt.Sprintf("%s here (the first in gotune's PATH)", ran)
	}
	seen := map[string]bool{interpreterID(ran): true}
	for _, dir := range append(filepath.SplitList(os.Getenv("PATH")), interpreterDirs...) {
		other := filepath.Join(dir, filepath.Base(program))
		if !filepath.IsAbs(other) {
			continue
		}
		id := interpreterID(other)
		if seen[id] || !isExecutable(other) {
			continue
		}
		seen[id] = true
		if canImport(other, module) {
			return fmt.Sprintf("\n  %s is %s, which cannot import %s; %s can: name it in trainer.command ([%q, …]), or run gotune where %s is that one",
				program, where, module, other, other, filepath.Base(program))
		}
	}
	return fmt.Sprintf("\n  %s is %s, which cannot import %s, and no other %s on this node can: install %s for it, or name an interpreter that has it in trainer.command",
		program, where, module, filepath.Base(program), module)
}

// interpreterID tells interpreters apart: path with the links of its
// folder followed (/bin/python3 is /usr/bin/python3 where /bin links to
// /usr/bin), but not its own. A virtual environment's python is a link to
// the system's, and yet another interpreter: it finds the environment's
// packages by the folder it is run from.
func interpreterID(path string) string {
	dir := filepath.Dir(path)
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		dir = r
	}
	return filepath.Join(dir, filepath.Base(path))
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// canImport reports whether the Python interpreter at path imports module.
func canImport(path, module string) bool {
	key := interpreterID(path) + "\x00" + module
	if ok, found := imports.Load(key); found {
		return ok.(bool)
	}
	ctx, cancel := context.WithTimeout(context.Background(), importProbeTimeout)
	defer cancel()
	ok := exec.CommandContext(ctx, path, "-c", "import "+module).Run() == nil
	imports.Store(key, ok)
	return ok
}
