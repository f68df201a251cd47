package trainer

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// TrialDirPlaceholder is the name of the placeholder, "{trial_dir}", that
// stands for the trial's own folder (Spec.TrialDir) in a command's
// arguments and its workdir. It names no hyperparameter.
const TrialDirPlaceholder = "trial_dir"

// SweepDirPlaceholder is the name of the placeholder, "{sweep_dir}", that
// stands for the sweep file's folder (Spec.PathBase) in a command's
// arguments and its workdir, for a file beside the sweep file that an
// argument other than the script names. It names no hyperparameter.
const SweepDirPlaceholder = "sweep_dir"

// expandCommand is ExpandCommand for spec's command and workdir, with
// "{trial_dir}" standing for spec.TrialDir. A relative workdir is in
// spec.PathBase, and relative paths in the command that name no file in
// the workdir are looked up there (see resolvePaths).
func (s Spec) expandCommand() (argv []string, dir string, err error) {
	values := s.placeholders()
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

// placeholders are the values a command's placeholders stand for: the
// trial's configuration, {trial_dir} and {sweep_dir} where spec has them.
func (s Spec) placeholders() map[string]any {
	values := maps.Clone(s.Config)
	if values == nil {
		values = map[string]any{}
	}
	if s.TrialDir != "" {
		values[TrialDirPlaceholder] = s.TrialDir
	}
	if s.PathBase != "" {
		values[SweepDirPlaceholder] = s.PathBase
	}
	return values
}

// resolvePaths makes the command argv fit to run in workdir: the file it
// runs (see findCommandFile) is replaced by its absolute path when it is
// not in workdir but beside the sweep file (in base), or else in this
// process's working directory. Every other argument is left as it is, so
// that an output path (--snapshot=snapshot.pt) is never redirected to a
// file of the same name outside the workdir, which every trial would
// share; {sweep_dir} names the sweep file's folder in other arguments.
func resolvePaths(argv []string, workdir, base string) []string {
	out := slices.Clone(argv)
	i, path := findCommandFile(argv, workdir, base, ".")
	if i < 0 || path == "" || filepath.IsAbs(argv[i]) || path == filepath.Join(workdir, argv[i]) {
		return out
	}
	if abs, err := filepath.Abs(path); err == nil {
		out[i] = abs
	}
	return out
}

// CommandFile returns the file that command runs, found as resolvePaths
// finds it for a trial whose folder holds nothing yet: beside the sweep
// file in base, or in this process's working directory. It is "" when
// the command names none.
func CommandFile(command []string, base string) string {
	_, path := findCommandFile(command, base, ".")
	return path
}

// findCommandFile finds the file that the command argv runs: its program
// when the name is a relative path (holds a slash), else the first
// argument that is no option and names a regular file, absolute or in
// one of dirs (the first that has it), as an interpreter's or torchrun's
// script. A program named by a bare name or an absolute path is an
// interpreter (/usr/bin/python3 train.py). It returns the argument's
// index, -1 when none names a file, and the file's path, "" when the
// program is a relative path found in none of dirs.
func findCommandFile(argv []string, dirs ...string) (int, string) {
	for i, arg := range argv {
		switch {
		case i == 0 && (!strings.Contains(arg, "/") || filepath.IsAbs(arg)):
			continue // an interpreter
		case i > 0 && strings.HasPrefix(arg, "-"), arg == "":
			continue // an option
		}
		if filepath.IsAbs(arg) {
			if isRegular(arg) {
				return i, arg
			}
			continue
		}
		for _, dir := range dirs {
			if path := filepath.Join(dir, arg); isRegular(path) {
				return i, path
			}
		}
		if i == 0 {
			return 0, ""
		}
	}
	return -1, ""
}

func isRegular(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// place is a folder gotune looks in for a relative path that the
// worker's folder lacks, with its name for a message.
type place struct{ dir, name string }

// lookupPlaces are the folders, in order, where gotune looks for a
// relative path after the worker's folder (see resolvePaths): the sweep
// file's folder, then gotune's working directory when it is another.
func (s Spec) lookupPlaces() []place {
	var places []place
	if s.PathBase != "" {
		places = append(places, place{s.PathBase, "the sweep file's folder " + s.PathBase})
	}
	if wd, err := os.Getwd(); err == nil && wd != s.PathBase {
		places = append(places, place{wd, "gotune's working directory " + wd})
	}
	return places
}

// programHint is what a launch error err for program (argv[0] after
// resolvePaths) adds to say where gotune looked: a relative path with a
// slash that names no file is left to the worker's folder, which is
// where the launch failed, after the sweep file's folder and gotune's
// working directory; "" for any other program or error.
func (s Spec) programHint(program string, err error) string {
	if !strings.Contains(program, "/") || filepath.IsAbs(program) || !errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	var names []string
	for _, p := range s.lookupPlaces() {
		names = append(names, p.name)
	}
	if len(names) == 0 {
		return ""
	}
	return fmt.Sprintf(" (%s is not in %s either)", program, strings.Join(names, " or "))
}

// missingFile finds, in a line a failed worker wrote last, the file it
// could not open: Python's "No such file or directory: 'data.txt'", or a
// tool's "data.txt: No such file or directory".
var missingFile = regexp.MustCompile(`No such file or directory: '([^']+)'|No such file or directory: "([^"]+)"|([^\s:'"]+): No such file or directory`)

// lookedForFile finds, in a failed worker's last lines, a sign that it
// looked for a file and did not find one, where no missing path is named
// (see missingFile): an assertion that a path exists, a data set "not
// found".
var lookedForFile = regexp.MustCompile(`os\.path\.(?:exists|isfile|isdir)\(|\.(?:exists|is_file|is_dir)\(\)|[Dd]oes not exist|[Nn]ot found`)

// missingFileHint is what the failure of a worker that ran in workdir
// adds when lines, the last it wrote, say that it did not find a file
// and the sweep file's folder (or gotune's working directory) holds what
// workdir lacks: a script written to run where its data lies, which gotune
// runs in each trial's own folder. A missing relative file named in lines
// that lies there is named; so is a relative path that leads there,
// quoted in the traceback (quotedPathHint) or passed as an argument of
// argv, the command as launched (argumentPathHint); without a name, the
// folder's entries are. It is "" otherwise.
func (s Spec) missingFileHint(lines []string, workdir string, argv []string) string {
	for _, line := range slices.Backward(lines) {
		m := missingFile.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		name := m[1] + m[2] + m[3]
		if filepath.IsAbs(name) || exists(filepath.Join(workdir, name)) {
			return ""
		}
		if _, p, ok := s.foundElsewhere(name, workdir); ok {
			return fmt.Sprintf("\n  %s is in %s, but the command runs in %s (trainer.workdir): open it by its absolute path, or pass {%s}/%s as an argument, %s",
				name, p.name, workdir, SweepDirPlaceholder, name, workdirFix)
		}
		return ""
	}
	if hint := s.quotedPathHint(lines, workdir); hint != "" {
		return hint
	}
	if hint := s.argumentPathHint(lines, workdir, argv); hint != "" {
		return hint
	}
	if !slices.ContainsFunc(lines, lookedForFile.MatchString) {
		return ""
	}
	for _, p := range s.lookupPlaces() {
		if p.dir == workdir {
			return ""
		}
		if names := s.entriesLacking(p.dir, workdir); len(names) > 0 {
			return fmt.Sprintf("\n  the command runs in %s (trainer.workdir), without %s from %s: a script that looks for its files by a relative path finds them only where it runs: pass {%s}/%s (say) as an argument, %s",
				workdir, strings.Join(names, ", "), p.name, SweepDirPlaceholder, names[0], workdirFix)
		}
	}
	return ""
}

// workdirFix ends a missing-file hint with the way out that needs no
// change to the script.
const workdirFix = "or set workdir = \".\" in [trainer] to run every trial in the sweep file's folder"

// quotedPath finds a quoted relative path with a slash, as a traceback
// shows one in the line that failed: datasets.MNIST('../data', …).
var quotedPath = regexp.MustCompile(`'([^'\s]*/[^'\s]*)'|"([^"\s]*/[^"\s]*)"`)

// quotedPathHint is missingFileHint's for a failure that names no
// missing file but quotes a relative path, in lines, that leads to an
// existing file or folder from the sweep file's folder (or gotune's
// working directory) and elsewhere from workdir: pytorch/examples' mnist
// opens '../data' beside its own folder, and where it finds no data
// there it downloads, failing without a network. It is "" otherwise.
func (s Spec) quotedPathHint(lines []string, workdir string) string {
	for _, line := range slices.Backward(lines) {
		if strings.HasPrefix(strings.TrimSpace(line), "File ") {
			continue // where the traceback passed, not what the script opened
		}
		for _, m := range quotedPath.FindAllStringSubmatch(line, -1) {
			name := m[1] + m[2]
			if filepath.IsAbs(name) || strings.Contains(name, "://") {
				continue
			}
			if path, p, ok := s.foundElsewhere(name, workdir); ok {
				return fmt.Sprintf("\n  %s, quoted in the traceback, is %s from %s, but the command runs in %s (trainer.workdir), where it is %s: open it by its absolute path, or pass {%s}/%s as an argument, %s",
					name, path, p.name, workdir, filepath.Join(workdir, name), SweepDirPlaceholder, name, workdirFix)
			}
		}
	}
	return ""
}

// foundElsewhere finds the relative path name from the places gotune
// looks in (see lookupPlaces) other than workdir: where it leads from the
// first that has it, and that place; ok is false when none has it.
func (s Spec) foundElsewhere(name, workdir string) (path string, p place, ok bool) {
	for _, p := range s.lookupPlaces() {
		if path := filepath.Join(p.dir, name); p.dir != workdir && exists(path) {
			return path, p, true
		}
	}
	return "", place{}, false
}

// downloadFailed finds, in a failed worker's last lines, a data set that
// it tried to download, as torchvision does when it finds none.
var downloadFailed = regexp.MustCompile(`[Dd]ownload`)

// argumentPathHint is missingFileHint's for a failure that names no
// missing file but says that the worker looked for one (see
// lookedForFile) or tried to download one, while an argument of argv
// after the script (or an option's value after "=") is a relative path that leads
// to an existing file or folder from the sweep file's folder (or gotune's
// working directory), and so elsewhere from workdir: pytorch/examples'
// dcgan given --dataroot=../data, which makes that folder where it runs
// before it tries to download. It is "" otherwise.
func (s Spec) argumentPathHint(lines []string, workdir string, argv []string) string {
	if !slices.ContainsFunc(lines, func(l string) bool { return lookedForFile.MatchString(l) || downloadFailed.MatchString(l) }) {
		return ""
	}
	script, _ := findCommandFile(argv, workdir, s.PathBase, ".")
	for _, arg := range argv[max(script, 0)+1:] {
		value := arg
		if strings.HasPrefix(arg, "-") {
			_, value, _ = strings.Cut(arg, "=")
		}
		if value == "" || filepath.IsAbs(value) {
			continue
		}
		if path, p, ok := s.foundElsewhere(value, workdir); ok {
			return fmt.Sprintf("\n  the argument %s names %s from %s, but the command runs in %s (trainer.workdir), where it names %s: an argument other than the script reaches the command as written: pass {%s}/%s, %s",
				arg, path, p.name, workdir, filepath.Join(workdir, value), SweepDirPlaceholder, value, workdirFix)
		}
	}
	return ""
}

// entriesLacking lists the entries of folder dir that workdir lacks and
// a script may read, folders first (with a trailing slash), at most
// three and "…": not hidden ones, Python modules (imported from the
// script's own folder wherever it runs), sweep files, SQLite files, nor
// the folder the trials' folders are in.
func (s Spec) entriesLacking(dir, workdir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var dirs, files []string
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(dir, name)
		holdsTrials := s.TrialDir != "" && (s.TrialDir == path || strings.HasPrefix(s.TrialDir, path+string(filepath.Separator)))
		switch {
		case strings.HasPrefix(name, "."), name == "__pycache__", holdsTrials, exists(filepath.Join(workdir, name)):
		case e.IsDir():
			dirs = append(dirs, name+"/")
		case strings.HasSuffix(name, ".py"), strings.HasSuffix(name, ".toml"), strings.Contains(name, ".db"), strings.Contains(name, ".sqlite"):
		default:
			files = append(files, name)
		}
	}
	names := append(dirs, files...)
	if len(names) > 3 {
		names = append(names[:3], "…")
	}
	return names
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
