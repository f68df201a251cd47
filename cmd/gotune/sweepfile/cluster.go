package sweepfile

import (
	"errors"
	"fmt"
	"regexp"
)

// Cluster is a sweep file's [cluster] section: where the sweep's trial
// groups run. Without it (or with launcher = "local") they run on this
// machine, or on the agents of `gotune run --listen`.
type Cluster struct {
	// Launcher is "local" (the default) or "slurm": the sweep submits its
	// node agents to the Slurm queue as jobs sized for one trial group.
	Launcher string `toml:"launcher"`
	// Partition, Account and Time are the jobs' sbatch --partition,
	// --account and --time; "" leaves them to Slurm's defaults.
	Partition string `toml:"partition"`
	Account   string `toml:"account"`
	Time      string `toml:"time"`
	// MaxJobs is how many agent jobs the sweep keeps in the queue at once;
	// 0 means search.max_concurrent, else search.num_samples.
	MaxJobs int `toml:"max_jobs"`
	// SbatchArgs are further sbatch options, one per element, for example
	// ["--qos=short", "--constraint=a100"].
	SbatchArgs []string `toml:"sbatch_args"`
	// Host is the address of this node that the jobs' nodes reach it at;
	// "" means its host name.
	Host string `toml:"host"`
	// Gotune is the gotune program the jobs run; "" means the one running
	// the sweep, at the same path.
	Gotune string `toml:"gotune"`
	// Shared says the jobs' nodes see this node's files at the same paths
	// (a cluster file system), so checkpoints are not copied.
	Shared bool `toml:"shared"`
}

// Slurm reports whether the sweep's groups run as Slurm jobs.
func (c Cluster) Slurm() bool { return c.Launcher == "slurm" }

// slurmTime is a time limit in one of sbatch's forms: minutes,
// minutes:seconds, hours:minutes:seconds, days-hours,
// days-hours:minutes, days-hours:minutes:seconds.
var slurmTime = regexp.MustCompile(`^(\d+-\d+(:\d+(:\d+)?)?|\d+(:\d+(:\d+)?)?)$`)

// check validates the section; set says which keys the file has.
func (c Cluster) check(set func(key string) bool) (string, error) {
	switch c.Launcher {
	case "", "local", "slurm":
	default:
		return "cluster.launcher", fmt.Errorf("unknown launcher %q: want \"local\" or \"slurm\"", c.Launcher)
	}
	if !c.Slurm() {
		for _, k := range []string{"partition", "account", "time", "max_jobs", "sbatch_args", "host", "gotune", "shared"} {
			if set("cluster." + k) {
				return "cluster." + k, errors.New("applies only to launcher = \"slurm\"")
			}
		}
		return "", nil
	}
	if c.Time != "" && !slurmTime.MatchString(c.Time) {
		return "cluster.time", fmt.Errorf("%q is not a Slurm time limit (minutes, \"H:MM:SS\" or \"D-HH:MM:SS\")", c.Time)
	}
	if c.MaxJobs < 0 {
		return "cluster.max_jobs", fmt.Errorf("must be 0 (search.max_concurrent) or more, got %d", c.MaxJobs)
	}
	for _, k := range []struct{ key, v string }{{"partition", c.Partition}, {"account", c.Account}, {"host", c.Host}, {"gotune", c.Gotune}} {
		if set("cluster."+k.key) && k.v == "" {
			return "cluster." + k.key, errors.New("must not be empty (leave it out for the default)")
		}
	}
	for _, a := range c.SbatchArgs {
		if len(a) < 2 || a[0] != '-' {
			return "cluster.sbatch_args", fmt.Errorf("%q is not an sbatch option (one option per element, as in \"--qos=short\")", a)
		}
		for _, own := range []string{"--job-name", "-J", "--output", "-o", "--parsable", "--wrap"} {
			if a == own || len(a) > len(own) && a[:len(own)+1] == own+"=" {
				return "cluster.sbatch_args", fmt.Errorf("%s is set by gotune", own)
			}
		}
	}
	return "", nil
}
