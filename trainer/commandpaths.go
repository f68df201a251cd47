package trainer

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
)

// TrialDirPlaceholder is the name of the placeholder, "{trial_dir}", that
// stands for the trial's own folder (Spec.TrialDir) in a command's
// arguments and its workdir. It names no hyperparameter.
const TrialDirPlaceholder = "trial_dir"

// expandCommand is ExpandCommand for spec's command and workdir, with
// "{trial_dir}" standing for spec.TrialDir. A relative workdir is in
// spec.PathBase, and relative paths in the command that name no file in
// the workdir are looked up there (see resolvePaths).
func (s Spec) expandCommand() (argv []string, dir string, err error) {
	values := s.Config
	if s.TrialDir != "" {
		values = maps.Clone(s.Config)
		if values == nil {
			values = map[string]any{}
		}
		values[TrialDirPlaceholder] = s.TrialDir
	}
	expand := func(args []string, what string) ([]string, error) {
		out, err := ExpandCommand(args, values)
		if err != nil && s.TrialDir == "" && strings.Contains(err.Error(), "{"+TrialDirPlaceholder+"}") {
			return nil, fmt.Errorf("%s: {%s} needs the trial's folder (Spec.TrialDir)", what, TrialDirPlaceholder)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		return out, nil
	}
	if argv, err = expand(s.Command, "command"); err != nil {
		return nil, "", err
	}
	if s.Workdir != "" {
		w, err := expand([]string{s.Workdir}, "workdir")
		if err != nil {
			return nil, "", err
		}
		dir = w[0]
		if !filepath.IsAbs(dir) && s.PathBase != "" {
			dir = filepath.Join(s.PathBase, dir)
		}
	}
	if dir != "" || s.PathBase != "" {
		argv = resolvePaths(argv, dir, s.PathBase)
	}
	return argv, dir, nil
}

// resolvePaths makes the command argv fit to run in workdir: a relative
// path that names no file in workdir but a regular file in base (the
// sweep file's folder), or else in this process's working directory, is
// replaced by that file's absolute path. The paths considered are the
// program when it holds a slash, every other argument, and the value of
// an option written "--name=value". Anything else is left as it is.
func resolvePaths(argv []string, workdir, base string) []string {
	out := make([]string, len(argv))
	for i, arg := range argv {
		out[i] = arg
		prefix, path := "", arg
		switch {
		case i == 0 && !strings.Contains(arg, "/"):
			continue // looked up in PATH
		case i > 0 && strings.HasPrefix(arg, "-"):
			name, value, ok := strings.Cut(arg, "=")
			if !ok {
				continue
			}
			prefix, path = name+"=", value
		}
		if path == "" || filepath.IsAbs(path) || exists(filepath.Join(workdir, path)) {
			continue
		}
		for _, dir := range []string{base, "."} {
			if dir == "" {
				continue
			}
			if fi, err := os.Stat(filepath.Join(dir, path)); err == nil && fi.Mode().IsRegular() {
				if abs, err := filepath.Abs(filepath.Join(dir, path)); err == nil {
					out[i] = prefix + abs
				}
				break
			}
		}
	}
	return out
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
