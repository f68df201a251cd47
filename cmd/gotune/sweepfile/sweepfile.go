// Package sweepfile decodes a TOML sweep file into a tuner.Config. Decoding is
// strict: an unknown key, a value of the wrong type or a setting that fails
// validation is an *Error naming the file, the line and the key, so that a
// typo is caught before anything runs.
//
// It imports tuner and the packages whose sections it decodes (searchspace,
// trainer, workers, mlflow); only cmd/gotune and benchmarks import it.
package sweepfile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	toml "github.com/pelletier/go-toml/v2"

	"github.com/gotune/gotune/mlflow"
	"github.com/gotune/gotune/searchspace"
	"github.com/gotune/gotune/trainer"
	"github.com/gotune/gotune/tuner"
	"github.com/gotune/gotune/workers"
)

// Error is a problem with a sweep file, located by file, line (0 when the
// key is absent from the file) and dotted key.
type Error struct {
	File string
	Line int
	Key  string
	Err  error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// file mirrors tuner.Config with the search space kept raw, since a space
// is validated parameter by parameter after decoding.
type file struct {
	Name      string                `toml:"name"`
	Storage   string                `toml:"storage"`
	Seed      int64                 `toml:"seed"`
	Objective fileObjective         `toml:"objective"`
	Search    fileSearch            `toml:"search"`
	Scheduler tuner.SchedulerConfig `toml:"scheduler"`
	Trainer   fileTrainer           `toml:"trainer"`
	Resources *workers.Declared     `toml:"resources"`
	MLflow    MLflow                `toml:"mlflow"`
	Cluster   Cluster               `toml:"cluster"`
}

// fileTrainer is the [trainer] section: the trainer's configuration and
// the settings of gotune run's own per-trial files, which the trainer
// knows nothing of.
type fileTrainer struct {
	trainer.Config
	ReportFiles *bool `toml:"report_files"`
}

// MLflow is a sweep file's [mlflow] section: the tracking server to log
// the sweep to. MLflow's environment variables override it.
type MLflow struct {
	// TrackingURI is the server's http(s) address; "" logs nowhere.
	TrackingURI string `toml:"tracking_uri"`
	// Experiment names the MLflow experiment; "" means the sweep's name.
	Experiment string `toml:"experiment"`
}

// Sweep is everything a sweep file sets.
type Sweep struct {
	// Config is the tuner's configuration.
	Config tuner.Config
	// MLflow is the [mlflow] section, zero when absent.
	MLflow MLflow
	// Cluster is the [cluster] section, zero when absent.
	Cluster Cluster
	// ReportFiles is [trainer] report_files: whether gotune run mirrors
	// every trial's reports into a TensorBoard event file and reports.csv
	// in the trial's folder (see package trialfiles). nil, its value when
	// the file leaves it out, and true write them; false keeps the reports
	// in the database only, so that a trial that writes nothing else
	// leaves no folder.
	ReportFiles *bool
	// WorkdirSet is whether [trainer] sets workdir; gotune run's default
	// for a command is then the trial's own folder.
	WorkdirSet bool

	name  string    // the file's name, for errors
	lines lineIndex // the line of each key in the file
}

// Locate turns a *tuner.ConfigError that a check after decoding found
// (tuner.New's: a command's program that does not exist) into an *Error
// that names the file, the key's line and the key; other errors come back
// naming the file.
func (s Sweep) Locate(err error) error {
	if err == nil {
		return nil
	}
	var ce *tuner.ConfigError
	if errors.As(err, &ce) {
		return &Error{File: s.name, Line: s.lines.find(ce.Key), Key: ce.Key, Err: ce.Err}
	}
	return &Error{File: s.name, Err: err}
}

// fileObjective is the [objective] section, whose metric and mode are a
// string each, or arrays of them for several objectives.
type fileObjective struct {
	Metric      any      `toml:"metric"`
	Mode        any      `toml:"mode"`
	Constraints []string `toml:"constraints"`
}

// objective turns the section into a tuner.Objective; errors name the key.
func (f fileObjective) objective() (tuner.Objective, string, error) {
	o := tuner.Objective{Constraints: f.Constraints}
	for _, field := range []struct {
		key      string
		raw      any
		one      *string
		several  *[]string
		wantWhat string
	}{
		{"objective.metric", f.Metric, &o.Metric, &o.Metrics, "a metric name"},
		{"objective.mode", f.Mode, &o.Mode, &o.Modes, `"min" or "max"`},
	} {
		switch v := field.raw.(type) {
		case nil:
		case string:
			*field.one = v
		case []any:
			for _, x := range v {
				str, ok := x.(string)
				if !ok {
					return o, field.key, fmt.Errorf("wrong type: want a string (%s) or an array of strings, got an array holding %s", field.wantWhat, tomlKind(x))
				}
				*field.several = append(*field.several, str)
			}
			if len(*field.several) == 0 {
				return o, field.key, errors.New("an empty array: name at least two objectives, or give one as a string")
			}
		default:
			return o, field.key, fmt.Errorf("wrong type: want a string (%s) or an array of strings, got %s", field.wantWhat, tomlKind(v))
		}
	}
	switch {
	case o.Metrics != nil && o.Mode != "":
		return o, "objective.mode", errors.New("several metrics take an array of modes, one per metric")
	case o.Metrics == nil && o.Modes != nil:
		return o, "objective.mode", errors.New("an array of modes goes with an array of metrics")
	}
	return o, "", nil
}

// tomlKind names the TOML kind of a decoded value.
func tomlKind(v any) string {
	switch v.(type) {
	case int64, float64:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	case string:
		return "a string"
	}
	return "a date or time"
}

type fileSearch struct {
	tuner.SearchConfig
	Space map[string]any `toml:"space"`
}

// Load reads and decodes the sweep file at path into the tuner's
// configuration, as LoadSweep does.
func Load(path string) (tuner.Config, error) {
	s, err := LoadSweep(path)
	return s.Config, err
}

// LoadSweep reads and decodes the sweep file at path. Every relative path
// in it is relative to the file's folder: storage here, dataset, split,
// workdir and the command's paths through trainer.Config.PathBase.
func LoadSweep(path string) (Sweep, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Sweep{}, err
	}
	s, err := DecodeSweep(path, data)
	if err != nil {
		return s, err
	}
	if s.Config.Trainer.PathBase, err = filepath.Abs(filepath.Dir(path)); err != nil {
		return s, err
	}
	if st := s.Config.Storage; st != "" && !filepath.IsAbs(st) {
		s.Config.Storage = filepath.Join(s.Config.Trainer.PathBase, st)
	}
	return s, nil
}

// Decode decodes a sweep file's contents into the tuner's configuration;
// name is used in errors.
func Decode(name string, data []byte) (tuner.Config, error) {
	s, err := DecodeSweep(name, data)
	return s.Config, err
}

// DecodeSweep decodes and checks a sweep file's contents; name is used in
// errors.
func DecodeSweep(name string, data []byte) (Sweep, error) {
	var f file
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return Sweep{}, decodeError(name, err)
	}
	lines, err := keyLines(data)
	if err != nil {
		return Sweep{}, decodeError(name, err)
	}
	at := func(key string, err error) error {
		return &Error{File: name, Line: lines.find(key), Key: key, Err: err}
	}

	objective, key, err := f.Objective.objective()
	if err != nil {
		return Sweep{}, at(key, err)
	}
	cfg := tuner.Config{
		Name:      f.Name,
		Storage:   f.Storage,
		Seed:      f.Seed,
		Objective: objective,
		Search:    f.Search.SearchConfig,
		Scheduler: f.Scheduler,
		Trainer:   f.Trainer.Config,
	}
	space := &searchspace.Space{}
	names := make([]string, 0, len(f.Search.Space))
	for n := range f.Search.Space {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		key := "search.space." + n
		d, when, err := searchspace.ParseConditional(f.Search.Space[n])
		var ce *searchspace.ConditionError
		if errors.As(err, &ce) {
			return Sweep{}, at(key+".when", ce.Err)
		}
		if err != nil {
			return Sweep{}, at(key, err)
		}
		if err := space.AddParam(searchspace.Param{Name: n, Domain: d, When: when}); err != nil {
			return Sweep{}, at(key, err)
		}
	}
	cfg.Search.Space = space
	if r := f.Resources; r != nil {
		// A [resources] section declares at least one node, even when it
		// leaves nodes out.
		if _, set := lines["resources.nodes"]; set && r.Nodes < 1 {
			return Sweep{}, at("resources.nodes", fmt.Errorf("must be at least 1, got %d", r.Nodes))
		}
		cfg.Resources = *r
		cfg.Resources.Nodes = max(r.Nodes, 1)
	}
	if u := f.MLflow.TrackingURI; u != "" {
		if err := mlflow.CheckURI(u); err != nil {
			return Sweep{}, at("mlflow.tracking_uri", err)
		}
	}
	if _, set := lines["trainer.scaling.num_workers"]; set && f.Trainer.Scaling.NumWorkers == 0 {
		return Sweep{}, at("trainer.scaling.num_workers", errors.New("must be at least 1, got 0 (leave it out for 1)"))
	}
	if _, set := lines["mlflow.experiment"]; set && f.MLflow.Experiment == "" {
		return Sweep{}, at("mlflow.experiment", errors.New("must not be empty (leave it out to use the sweep's name)"))
	}
	if key, err := f.Cluster.check(func(k string) bool { _, ok := lines[k]; return ok }); err != nil {
		return Sweep{}, at(key, err)
	}
	if err := cfg.Validate(); err != nil {
		var ce *tuner.ConfigError
		if errors.As(err, &ce) {
			return Sweep{}, at(ce.Key, ce.Err)
		}
		return Sweep{}, &Error{File: name, Err: err}
	}
	_, workdirSet := lines["trainer.workdir"]
	return Sweep{Config: cfg, MLflow: f.MLflow, Cluster: f.Cluster, ReportFiles: f.Trainer.ReportFiles, WorkdirSet: workdirSet, name: name, lines: lines}, nil
}

// decodeError turns go-toml's errors into an *Error with a line and a key.
func decodeError(name string, err error) error {
	var strict *toml.StrictMissingError
	if errors.As(err, &strict) && len(strict.Errors) > 0 {
		// Report the first unknown key; the user fixes them one by one.
		e := strict.Errors[0]
		line, _ := e.Position()
		return &Error{File: name, Line: line, Key: strings.Join(e.Key(), "."), Err: errors.New("unknown key")}
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		line, _ := de.Position()
		return &Error{File: name, Line: line, Key: strings.Join(de.Key(), "."), Err: errors.New(friendlyType(de.Error()))}
	}
	return &Error{File: name, Err: err}
}

var typeMismatch = regexp.MustCompile(`cannot decode TOML (\w+) into .* of type (\S+)`)

// friendlyType rewrites go-toml's type mismatch, which names Go types, in
// sweep-file terms.
func friendlyType(msg string) string {
	m := typeMismatch.FindStringSubmatch(msg)
	if m == nil {
		return strings.TrimPrefix(msg, "toml: ")
	}
	want := strings.TrimPrefix(m[2], "*")
	switch {
	case strings.HasPrefix(want, "int") || strings.HasPrefix(want, "uint"):
		want = "an integer"
	case strings.HasPrefix(want, "float"):
		want = "a number"
	case want == "string":
		want = "a string"
	case want == "bool":
		want = "a boolean"
	case strings.HasPrefix(want, "[]"):
		want = "an array"
	default:
		want = "a table"
	}
	got := "a " + m[1]
	if strings.ContainsRune("aeiou", rune(m[1][0])) {
		got = "an " + m[1]
	}
	return fmt.Sprintf("wrong type: want %s, got %s", want, got)
}
