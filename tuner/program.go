package tuner

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gotune/gotune/workers"
)

// checkProgram finds the command's program before any trial starts, as
// its workers will: a bare name in PATH (trainer.env's PATH, else this
// process's), a path when it is absolute, else in the workdir, the sweep
// file's folder (PathBase) or this process's working folder. A program
// with a placeholder, or one that a workdir with a placeholder may hold,
// is left to each trial.
func (c Config) checkProgram() error {
	prog := c.Trainer.Command[0]
	if strings.Contains(prog, "{") {
		return nil
	}
	if !strings.Contains(prog, "/") {
		path, set := c.Trainer.Env["PATH"]
		if !set {
			path = os.Getenv("PATH")
		}
		if _, err := workers.LookPathIn(prog, path, ""); err == nil {
			return nil
		}
		return fieldErr("trainer.command", "program %q is not in PATH (%s): install it, or name it by its path", prog, path)
	}
	if filepath.IsAbs(prog) {
		if workers.Executable(prog) == nil {
			return nil
		}
		return fieldErr("trainer.command", "program %s does not exist or is not executable", prog)
	}
	wd := c.Trainer.Workdir
	if strings.Contains(wd, "{") {
		return nil
	}
	var dirs []string
	switch {
	case wd != "" && !filepath.IsAbs(wd) && c.Trainer.PathBase != "":
		dirs = append(dirs, filepath.Join(c.Trainer.PathBase, wd))
	case wd != "":
		dirs = append(dirs, wd)
	}
	if c.Trainer.PathBase != "" && !slices.Contains(dirs, c.Trainer.PathBase) {
		dirs = append(dirs, c.Trainer.PathBase)
	}
	dirs = append(dirs, ".")
	for _, dir := range dirs {
		if workers.Executable(filepath.Join(dir, prog)) == nil {
			return nil
		}
	}
	return fieldErr("trainer.command", "program %s is not in %s, or is not executable", prog, strings.Join(dirs, ", "))
}

// NodePrograms are the programs that every node running the command's
// workers must have, for a cluster's head to require of each agent when it
// joins (cluster.HeadConfig.Programs): the command's program when it is a
// bare name looked up in PATH or an absolute path. A program named by a
// placeholder, looked up in trainer.env's PATH or by a path relative to a
// folder the head may copy to the node is left to each trial.
func (c Config) NodePrograms() []string {
	if len(c.Trainer.Command) == 0 {
		return nil
	}
	prog := c.Trainer.Command[0]
	_, pathSet := c.Trainer.Env["PATH"]
	switch {
	case strings.Contains(prog, "{"):
		return nil
	case filepath.IsAbs(prog):
		return []string{prog}
	case !strings.Contains(prog, "/") && !pathSet:
		return []string{prog}
	}
	return nil
}
