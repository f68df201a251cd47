package sweepfile

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeCluster(t *testing.T) {
	s, err := DecodeSweep("sweep.toml", []byte(valid+`
[cluster]
launcher = "slurm"
partition = "gpu"
account = "ml"
time = "1-02:00:00"
max_jobs = 3
sbatch_args = ["--qos=short"]
shared = true
`))
	if err != nil {
		t.Fatal(err)
	}
	want := Cluster{Launcher: "slurm", Partition: "gpu", Account: "ml", Time: "1-02:00:00", MaxJobs: 3, SbatchArgs: []string{"--qos=short"}, Shared: true}
	if !reflect.DeepEqual(s.Cluster, want) || !s.Cluster.Slurm() {
		t.Errorf("decoded %+v", s.Cluster)
	}
	if s, err := DecodeSweep("sweep.toml", []byte(valid)); err != nil || s.Cluster.Slurm() {
		t.Errorf("without [cluster]: %+v, %v", s.Cluster, err)
	}
}

// TestDecodeClusterErrors checks that each mistake in [cluster] names the
// file, the line and the key; its first key is on line 25.
func TestDecodeClusterErrors(t *testing.T) {
	for _, tt := range []struct {
		name, section string
		line          int
		key, msg      string
	}{
		{"unknown key", "launcher = \"slurm\"\nqueue = \"gpu\"", 26, "cluster.queue", "unknown key"},
		{"unknown launcher", "launcher = \"pbs\"", 25, "cluster.launcher", `unknown launcher "pbs"`},
		{"wrong type", "launcher = \"slurm\"\nmax_jobs = \"4\"", 26, "cluster.max_jobs", "want an integer"},
		{"slurm key without slurm", "partition = \"gpu\"", 25, "cluster.partition", `only to launcher = "slurm"`},
		{"bad time", "launcher = \"slurm\"\ntime = \"2h\"", 26, "cluster.time", "not a Slurm time limit"},
		{"negative max_jobs", "launcher = \"slurm\"\nmax_jobs = -1", 26, "cluster.max_jobs", "must be 0"},
		{"empty account", "launcher = \"slurm\"\naccount = \"\"", 26, "cluster.account", "must not be empty"},
		{"not an option", "launcher = \"slurm\"\nsbatch_args = [\"--qos short\", \"x\"]", 26, "cluster.sbatch_args", `"x" is not an sbatch option`},
		{"gotune's own option", "launcher = \"slurm\"\nsbatch_args = [\"--output=o.txt\"]", 26, "cluster.sbatch_args", "--output is set by gotune"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeSweep("sweep.toml", []byte(valid+"\n[cluster]\n"+tt.section+"\n"))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v (%T), want *Error", err, err)
			}
			if e.File != "sweep.toml" || e.Line != tt.line || e.Key != tt.key || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("got %v (line %d, key %q); want line %d, key %q, mentioning %q", err, e.Line, e.Key, tt.line, tt.key, tt.msg)
			}
		})
	}
}
