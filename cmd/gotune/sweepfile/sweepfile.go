// Package sweepfile decodes a TOML sweep file into a tuner.Config. Decoding is
// strict: an unknown key, a value of the wrong type or a setting that fails
// validation is an *Error naming the file, the line and the key, so that a
// typo is caught before anything runs.
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
	Objective tuner.Objective       `toml:"objective"`
	Search    fileSearch            `toml:"search"`
	Scheduler tuner.SchedulerConfig `toml:"scheduler"`
	Trainer   trainer.Config        `toml:"trainer"`
	Resources *workers.Declared     `toml:"resources"`
	MLflow    MLflow                `toml:"mlflow"`
	Cluster   Cluster               `toml:"cluster"`
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

// LoadSweep reads and decodes the sweep file at path. The command's
// relative paths are looked up in the file's folder when it runs elsewhere
// (see trainer.Config.PathBase).
func LoadSweep(path string) (Sweep, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Sweep{}, err
	}
	s, err := DecodeSweep(path, data)
	if err != nil {
		return s, err
	}
	s.Config.Trainer.PathBase, err = filepath.Abs(filepath.Dir(path))
	return s, err
}

// Decode decodes a sweep file's contents into the tuner's configuration;
// name is used in errors.
func Decode(name string, data []byte) (tuner.Config, error) {
	s, err := DecodeSweep(name, data)
	return s.Config, err
}

// DecodeSweep decodes a sweep file's contents; name is used in errors.
func DecodeSweep(name string, data []byte) (Sweep, error) {
	cfg, f, err := decode(name, data)
	if err != nil {
		return Sweep{}, err
	}
	return Sweep{Config: cfg, MLflow: f.MLflow, Cluster: f.Cluster}, nil
}

// decode decodes and checks a sweep file's contents into the tuner's
// configuration; name is used in errors.
func decode(name string, data []byte) (tuner.Config, *file, error) {
	var f file
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return tuner.Config{}, nil, decodeError(name, err)
	}
	lines, err := keyLines(data)
	if err != nil {
		return tuner.Config{}, nil, decodeError(name, err)
	}
	at := func(key string, err error) error {
		return &Error{File: name, Line: lines.find(key), Key: key, Err: err}
	}

	cfg := tuner.Config{
		Name:      f.Name,
		Storage:   f.Storage,
		Seed:      f.Seed,
		Objective: f.Objective,
		Search:    f.Search.SearchConfig,
		Scheduler: f.Scheduler,
		Trainer:   f.Trainer,
	}
	space := &searchspace.Space{}
	names := make([]string, 0, len(f.Search.Space))
	for n := range f.Search.Space {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		key := "search.space." + n
		d, err := searchspace.Parse(f.Search.Space[n])
		if err != nil {
			return tuner.Config{}, nil, at(key, err)
		}
		if err := space.Add(n, d); err != nil {
			return tuner.Config{}, nil, at(key, err)
		}
	}
	cfg.Search.Space = space
	if r := f.Resources; r != nil {
		// A [resources] section declares at least one node, even when it
		// leaves nodes out.
		if _, set := lines["resources.nodes"]; set && r.Nodes < 1 {
			return tuner.Config{}, nil, at("resources.nodes", fmt.Errorf("must be at least 1, got %d", r.Nodes))
		}
		cfg.Resources = *r
		cfg.Resources.Nodes = max(r.Nodes, 1)
	}
	if u := f.MLflow.TrackingURI; u != "" {
		if err := mlflow.CheckURI(u); err != nil {
			return tuner.Config{}, nil, at("mlflow.tracking_uri", err)
		}
	}
	if _, set := lines["mlflow.experiment"]; set && f.MLflow.Experiment == "" {
		return tuner.Config{}, nil, at("mlflow.experiment", errors.New("must not be empty (leave it out to use the sweep's name)"))
	}
	if key, err := f.Cluster.check(func(k string) bool { _, ok := lines[k]; return ok }); err != nil {
		return tuner.Config{}, nil, at(key, err)
	}
	if err := cfg.Validate(); err != nil {
		var ce *tuner.ConfigError
		if errors.As(err, &ce) {
			return tuner.Config{}, nil, at(ce.Key, ce.Err)
		}
		return tuner.Config{}, nil, &Error{File: name, Err: err}
	}
	return cfg, &f, nil
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
	return fmt.Sprintf("wrong type: want %s, got a %s", want, m[1])
}
