package workers

import (
	"strconv"
	"strings"
)

// InSlurm narrows a discovered node to what a Slurm allocation gave the
// task it runs in, read from the environment Slurm sets (getenv is
// os.Getenv but for tests). Outside a Slurm job (no SLURM_JOB_ID) it
// returns n unchanged, and false.
//
//   - CPUs: SLURM_CPUS_PER_TASK, else SLURM_CPUS_ON_NODE.
//   - Memory: SLURM_MEM_PER_NODE (MiB), else SLURM_MEM_PER_CPU times the
//     CPUs; neither set (the job asked for no memory) keeps the node's.
//   - GPUs: those CUDA_VISIBLE_DEVICES names, as Slurm set it for the
//     task's GPUs (by index, or by UUID); where the names match no device
//     NVML found (Slurm renumbers the devices a cgroup confines the task
//     to), the first SLURM_GPUS_ON_NODE of them. A task given no GPU, as
//     Slurm says by setting neither, gets none, so that the GPUs of other
//     jobs on a shared node are never taken.
func InSlurm(n Node, getenv func(string) string) (Node, bool) {
	if getenv("SLURM_JOB_ID") == "" {
		return n, false
	}
	if c, ok := positive(getenv("SLURM_CPUS_PER_TASK")); ok {
		n.CPUs = float64(c)
	} else if c, ok := positive(getenv("SLURM_CPUS_ON_NODE")); ok {
		n.CPUs = float64(c)
	}
	if m, ok := positive(getenv("SLURM_MEM_PER_NODE")); ok {
		n.Memory = Bytes(m) * MiB
	} else if m, ok := positive(getenv("SLURM_MEM_PER_CPU")); ok {
		n.Memory = Bytes(float64(m)*n.CPUs) * MiB
	}
	visible := getenv("CUDA_VISIBLE_DEVICES")
	count, counted := positive(getenv("SLURM_GPUS_ON_NODE"))
	if visible == "" && !counted {
		if len(n.GPUs) > 0 {
			n.GPUNote = "no GPUs: the Slurm job gave this task none (ask with --gpus-per-task)"
		}
		n.GPUs = nil
		return n, true
	}
	var ids []string
	for _, id := range strings.Split(visible, ",") {
		if id = strings.TrimSpace(id); id != "" {
			ids = append(ids, id)
		}
	}
	var given []GPU
	for _, id := range ids {
		for _, g := range n.GPUs {
			if id == g.UUID || (g.MIG < 0 && id == strconv.Itoa(g.Index)) {
				given = append(given, g)
				break
			}
		}
	}
	if len(given) < len(ids) || (len(ids) == 0 && counted) {
		given = n.GPUs[:min(len(n.GPUs), max(count, len(ids)))]
	}
	if len(given) == 0 && len(n.GPUs) > 0 {
		n.GPUNote = "no GPUs: the Slurm job gave this task none (ask with --gpus-per-task)"
	}
	n.GPUs = given
	return n, true
}

// positive parses s as a whole number above 0.
func positive(s string) (int, bool) {
	v, err := strconv.Atoi(strings.TrimSpace(s))
	return v, err == nil && v > 0
}
