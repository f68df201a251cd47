package workers

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
)

// Declared describes the nodes to run on instead of discovering this
// machine: for tests, for capacity planning, and for machines whose
// resources should be capped. It is the sweep file's [resources] section
// and the --resources flag of `gotune run`.
//
// The zero Declared declares nothing: the sweep runs on this machine as
// Discover finds it. Any other value declares Nodes identical nodes with
// the stated resources each: CPUs and Memory left at zero are this
// machine's, and GPUs left at zero mean none, since declaring resources
// turns GPU discovery off (declared GPUs never mix with real ones). So
// Declared{Nodes: 1} is this machine without its GPUs.
type Declared struct {
	// Nodes is the number of identical nodes; 0 means 1 when anything else
	// is set. A [resources] section and the --resources flag set it to 1
	// when they leave it out.
	Nodes int `toml:"nodes" json:"nodes,omitempty"`
	// CPUs is each node's logical CPUs; 0 means this machine's count.
	CPUs float64 `toml:"cpus" json:"cpus,omitempty"`
	// Memory is each node's memory, as in "32GiB"; 0 means this machine's.
	Memory Bytes `toml:"memory" json:"memory,omitempty"`
	// GPUs is each node's whole GPUs, named by index 0..GPUs-1.
	GPUs int `toml:"gpus" json:"gpus,omitempty"`
}

// IsZero reports whether d declares nothing.
func (d Declared) IsZero() bool { return d == Declared{} }

// SettingError is an invalid resource setting, named by its key in the
// [resources] section ("cpus", "memory", "gpus" or "nodes").
type SettingError struct {
	Key string
	Err error
}

func (e *SettingError) Error() string { return e.Key + ": " + e.Err.Error() }
func (e *SettingError) Unwrap() error { return e.Err }

// Bounds on declared sizes, far above any real cluster, so that a typo
// cannot make the manager allocate millions of nodes.
const (
	maxDeclaredNodes = 100000
	maxDeclaredGPUs  = 1024
)

// Validate reports the first setting that cannot work as a *SettingError.
func (d Declared) Validate() error {
	switch {
	case d.Nodes < 0 || d.Nodes > maxDeclaredNodes:
		return &SettingError{"nodes", fmt.Errorf("must be from 1 to %d, got %d", maxDeclaredNodes, d.Nodes)}
	case !(d.CPUs >= 0 && d.CPUs <= maxCPUs):
		return &SettingError{"cpus", fmt.Errorf("must be a positive number up to %d, got %g", maxCPUs, d.CPUs)}
	case d.GPUs < 0 || d.GPUs > maxDeclaredGPUs:
		return &SettingError{"gpus", fmt.Errorf("must be from 0 to %d, got %d", maxDeclaredGPUs, d.GPUs)}
	}
	if err := ValidateMemory(d.Memory); err != nil {
		return &SettingError{"memory", err}
	}
	return nil
}

// Inventory returns the nodes d describes: this machine as Discover finds
// it when d is zero, otherwise d's declared nodes. d must be valid.
func (d Declared) Inventory() []Node {
	if d.IsZero() {
		return []Node{Discover()}
	}
	cpus, mem := d.CPUs, d.Memory
	if cpus == 0 {
		cpus = float64(runtime.NumCPU())
	}
	if mem == 0 {
		mem = totalMemory()
	}
	nodes := make([]Node, max(d.Nodes, 1))
	for i := range nodes {
		n := Node{Name: "node" + strconv.Itoa(i), CPUs: cpus, Memory: mem}
		for g := range d.GPUs {
			n.GPUs = append(n.GPUs, GPU{Index: g, MIG: -1, Name: "declared"})
		}
		if d.GPUs == 0 {
			n.GPUNote = "no GPUs: none declared"
		}
		nodes[i] = n
	}
	return nodes
}

// String writes d in the --resources syntax, as in
// "cpus=8,gpus=2,memory=32GiB"; "" for the zero Declared.
func (d Declared) String() string {
	var parts []string
	if d.Nodes != 0 {
		parts = append(parts, "nodes="+strconv.Itoa(d.Nodes))
	}
	if d.CPUs != 0 {
		parts = append(parts, "cpus="+strconv.FormatFloat(d.CPUs, 'g', -1, 64))
	}
	if d.GPUs != 0 {
		parts = append(parts, "gpus="+strconv.Itoa(d.GPUs))
	}
	if d.Memory != 0 {
		parts = append(parts, "memory="+d.Memory.String())
	}
	return strings.Join(parts, ",")
}

// ParseDeclared reads the --resources syntax: comma-separated key=value
// pairs with keys nodes (default 1), cpus, gpus and memory, as in
// "cpus=8,gpus=2,memory=32GiB". A key may appear once. The result is
// validated and never zero; errors about one key are *SettingError.
func ParseDeclared(s string) (Declared, error) {
	var d Declared
	if strings.TrimSpace(s) == "" {
		return d, errors.New(`empty: give key=value pairs, as in "cpus=8,gpus=2,memory=32GiB"`)
	}
	seen := map[string]bool{}
	for _, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(pair, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return Declared{}, fmt.Errorf("%q is not key=value (keys: nodes, cpus, gpus, memory)", strings.TrimSpace(pair))
		}
		if seen[k] {
			return Declared{}, &SettingError{k, errors.New("given twice")}
		}
		seen[k] = true
		var err error
		switch k {
		case "nodes":
			d.Nodes, err = strconv.Atoi(v)
		case "cpus":
			d.CPUs, err = strconv.ParseFloat(v, 64)
		case "gpus":
			d.GPUs, err = strconv.Atoi(v)
			if err != nil {
				err = fmt.Errorf("%q is not a whole number of GPUs", v)
			}
		case "memory":
			d.Memory, err = ParseBytes(v)
		default:
			return Declared{}, &SettingError{k, errors.New("unknown key (have nodes, cpus, gpus, memory)")}
		}
		if err != nil {
			var ne *strconv.NumError
			if errors.As(err, &ne) {
				err = fmt.Errorf("%q is not a number", v)
			}
			return Declared{}, &SettingError{k, err}
		}
	}
	if !seen["nodes"] {
		d.Nodes = 1
	} else if d.Nodes < 1 {
		return Declared{}, &SettingError{"nodes", fmt.Errorf("must be from 1 to %d, got %d", maxDeclaredNodes, d.Nodes)}
	}
	if err := d.Validate(); err != nil {
		return Declared{}, err
	}
	return d, nil
}
