package workers

import (
	"reflect"
	"testing"
)

func TestInSlurm(t *testing.T) {
	gpus := []GPU{
		{Index: 0, MIG: -1, UUID: "GPU-a"}, {Index: 1, MIG: -1, UUID: "GPU-b"},
		{Index: 2, MIG: -1, UUID: "GPU-c"}, {Index: 3, MIG: -1, UUID: "GPU-d"},
	}
	machine := Node{Name: "n1", CPUs: 64, Memory: 256 * GiB, GPUs: gpus}
	for _, c := range []struct {
		name    string
		env     map[string]string
		inSlurm bool
		cpus    float64
		memory  Bytes
		gpus    []GPU
	}{
		{"not a Slurm job", map[string]string{"SLURM_CPUS_PER_TASK": "4", "CUDA_VISIBLE_DEVICES": "1"}, false, 64, 256 * GiB, gpus},
		{"cpus per task", map[string]string{"SLURM_JOB_ID": "7", "SLURM_CPUS_PER_TASK": "8", "SLURM_CPUS_ON_NODE": "16"}, true, 8, 256 * GiB, nil},
		{"cpus on node", map[string]string{"SLURM_JOB_ID": "7", "SLURM_CPUS_ON_NODE": "16"}, true, 16, 256 * GiB, nil},
		{"memory per node", map[string]string{"SLURM_JOB_ID": "7", "SLURM_CPUS_ON_NODE": "2", "SLURM_MEM_PER_NODE": "4096"}, true, 2, 4 * GiB, nil},
		{"memory per cpu", map[string]string{"SLURM_JOB_ID": "7", "SLURM_CPUS_PER_TASK": "4", "SLURM_MEM_PER_CPU": "1024"}, true, 4, 4 * GiB, nil},
		{"gpus by index", map[string]string{"SLURM_JOB_ID": "7", "SLURM_GPUS_ON_NODE": "2", "CUDA_VISIBLE_DEVICES": "1,3"}, true, 64, 256 * GiB, []GPU{gpus[1], gpus[3]}},
		{"gpus by uuid", map[string]string{"SLURM_JOB_ID": "7", "CUDA_VISIBLE_DEVICES": "GPU-c"}, true, 64, 256 * GiB, []GPU{gpus[2]}},
		{"renumbered", map[string]string{"SLURM_JOB_ID": "7", "SLURM_GPUS_ON_NODE": "2", "CUDA_VISIBLE_DEVICES": "0,7"}, true, 64, 256 * GiB, gpus[:2]},
		{"count only", map[string]string{"SLURM_JOB_ID": "7", "SLURM_GPUS_ON_NODE": "3"}, true, 64, 256 * GiB, gpus[:3]},
		{"bad numbers keep the machine's", map[string]string{"SLURM_JOB_ID": "7", "SLURM_CPUS_PER_TASK": "x", "SLURM_MEM_PER_NODE": "-1"}, true, 64, 256 * GiB, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, in := InSlurm(machine, func(k string) string { return c.env[k] })
			if in != c.inSlurm || n.CPUs != c.cpus || n.Memory != c.memory || !reflect.DeepEqual(n.GPUs, c.gpus) {
				t.Errorf("InSlurm = %v cpus %v memory %v gpus %v, want %v %v %v %v", in, n.CPUs, n.Memory, n.GPUs, c.inSlurm, c.cpus, c.memory, c.gpus)
			}
			if c.inSlurm && len(c.gpus) == 0 && n.GPUNote == "" {
				t.Error("a task given no GPU on a node with GPUs has no GPUNote saying why")
			}
		})
	}
}
