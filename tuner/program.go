package tuner

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gotune/gotune/trainer"
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
	if strings.Contains(c.Trainer.Workdir, "{") {
		return nil
	}
	dirs := c.lookupDirs()
	for _, dir := range dirs {
		if workers.Executable(filepath.Join(dir, prog)) == nil {
			return nil
		}
	}
	return fieldErr("trainer.command", "program %s is not in %s, or is not executable", prog, strings.Join(dirs, ", "))
}

// checkScript finds the script an interpreter's command runs (its first
// argument that is no option, holds no space (a shell's -c code) and ends
// in .py or .sh) before any trial
// starts, where the trials' workers will look for it (see
// trainer.CommandFile): in a workdir shared by the trials, the sweep
// file's folder or this process's working folder. A misspelt script
// would otherwise fail every trial alike. A script named with a
// placeholder, or a workdir with one other than {trial_dir} (which starts
// empty), is left to each trial.
func (c Config) checkScript() error {
	prog, wd, base := c.Trainer.Command[0], c.Trainer.Workdir, c.Trainer.PathBase
	if strings.Contains(prog, "/") || strings.Contains(strings.ReplaceAll(wd, "{"+trainer.TrialDirPlaceholder+"}", ""), "{") {
		return nil // a script of its own (checkProgram), or a workdir per trial
	}
	script := ""
	for _, arg := range c.Trainer.Command[1:] {
		if !strings.HasPrefix(arg, "-") && !strings.ContainsAny(arg, " \t\n") && (strings.HasSuffix(arg, ".py") || strings.HasSuffix(arg, ".sh")) {
			script = arg
			break
		}
	}
	if script == "" || filepath.IsAbs(script) || strings.Contains(script, "{") {
		return nil
	}
	dirs := c.lookupDirs()
	for _, dir := range dirs {
		if fi, err := os.Stat(filepath.Join(dir, script)); err == nil && fi.Mode().IsRegular() {
			return nil
		}
	}
	var others string
	if base != "" {
		if names, _ := filepath.Glob(filepath.Join(base, "*"+filepath.Ext(script))); len(names) > 0 && len(names) <= 5 {
			for i := range names {
				names[i] = filepath.Base(names[i])
			}
			others = fmt.Sprintf(" (the sweep file's folder has %s)", strings.Join(names, ", "))
		}
	}
	return fieldErr("trainer.command", "script %s is in none of %s%s: name it by its path from the sweep file's folder", script, strings.Join(dirs, ", "), others)
}

// lookupDirs are the folders, in order, where a trial's worker finds the
// command's program or script by a relative path (see
// trainer.CommandFile): the workdir when the trials share it (it has no
// placeholder; a relative one is in the sweep file's folder), the sweep
// file's folder (PathBase), and this process's working folder, each once.
func (c Config) lookupDirs() []string {
	wd, base := c.Trainer.Workdir, c.Trainer.PathBase
	var dirs []string
	if wd != "" && !strings.Contains(wd, "{") {
		if !filepath.IsAbs(wd) && base != "" {
			wd = filepath.Join(base, wd)
		}
		dirs = append(dirs, wd)
	}
	if base != "" && !slices.Contains(dirs, base) {
		dirs = append(dirs, base)
	}
	if cwd, err := filepath.Abs("."); err == nil && !slices.Contains(dirs, cwd) {
		dirs = append(dirs, cwd)
	}
	return dirs
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
