package trainer

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/gotune/gotune/workers"
)

// Environment variables of the command-worker contract, plus gotune's own.
const (
	EnvExperiment     = "GOTUNE_EXPERIMENT"
	EnvTrialID        = "GOTUNE_TRIAL_ID"
	EnvWorldSize      = "GOTUNE_WORLD_SIZE"
	EnvWorldRank      = "GOTUNE_WORLD_RANK"
	EnvLocalRank      = "GOTUNE_LOCAL_RANK"
	EnvLocalWorldSize = "GOTUNE_LOCAL_WORLD_SIZE"
	EnvNodeRank       = "GOTUNE_NODE_RANK"
	EnvConfig         = "GOTUNE_CONFIG"
	EnvCheckpointDir  = "GOTUNE_CHECKPOINT_DIR"
	// EnvResumeDir is set only when the worker starts from a checkpoint.
	EnvResumeDir = "GOTUNE_RESUME_DIR"
	// EnvSeed is the trial's seed, the same on every rank.
	EnvSeed = "GOTUNE_SEED"
	// EnvRendezvous and EnvGroup locate the group's collectives for
	// workers that join them over TCP; set only when the TCP transport is
	// wired in (see processComm).
	EnvRendezvous = "GOTUNE_RENDEZVOUS"
	EnvGroup      = "GOTUNE_GROUP"
	// EnvHost is the address of the worker's node that its collectives
	// listen on and the other nodes reach; 127.0.0.1 when unset.
	EnvHost = "GOTUNE_HOST"
	// EnvTrialDir is the trial's own folder: its checkpoints, logs and
	// reports.csv, and whatever the worker writes there (see Spec.TrialDir).
	EnvTrialDir = "GOTUNE_TRIAL_DIR"
	// envWorkerFunc names the registered function a process worker runs.
	envWorkerFunc = "GOTUNE_WORKER_FUNC"
)

// contractVars are the variables besides GOTUNE_* and TORCHELASTIC_* that
// workerEnv sets for every worker, whatever the caller says.
var contractVars = map[string]bool{
	"RANK": true, "WORLD_SIZE": true, "LOCAL_RANK": true, "LOCAL_WORLD_SIZE": true,
	"GROUP_RANK": true, "GROUP_WORLD_SIZE": true, "ROLE_NAME": true, "ROLE_RANK": true,
	"ROLE_WORLD_SIZE": true, "MASTER_ADDR": true, "MASTER_PORT": true, "CUDA_VISIBLE_DEVICES": true,
}

// envSpec is what goes into one worker's environment.
type envSpec struct {
	experiment    string
	trial         int
	seed          int64
	config        map[string]any
	place         rankInfo
	checkpointDir string
	// tag marks the worker's processes (workers.TagVar): the absolute
	// path of its checkpoint folder, unique to the worker and inside its
	// trial's folder, so that a later run finds what a killed one left.
	tag        string
	resumeDir  string
	masterAddr string
	masterPort int
	rendezvous string
	group      string
	host       string
	trialDir   string
	// What torch.distributed.elastic's agent adds (see elasticVars):
	// restartCount counts the group's restarts after failures (a resize
	// is none, as torch's re-rendezvous is none), maxRestarts is
	// FailureConfig.MaxFailures, errorFile is where torch's @record writes
	// a failure ("" for none).
	runID        string
	restartCount int
	maxRestarts  int
	errorFile    string
	// ompThreads is OMP_NUM_THREADS unless the caller's environment or
	// extra sets it.
	ompThreads int
	// extra are the caller's NAME=value variables, set last: they replace
	// the caller's environment but not the contract's variables.
	extra []string
}

// workerEnv returns base (the launcher's environment) without any variable
// the contract sets (nor any GOTUNE_* or TORCHELASTIC_* one), followed by
// the contract's variables for one worker and then s.extra; a variable
// appears once.
func workerEnv(base []string, s envSpec) []string {
	config, err := json.Marshal(s.config)
	if err != nil {
		config = []byte("{}") // hyperparameters are numbers, strings and booleans
	}
	p := s.place
	set := [][2]string{
		{EnvExperiment, s.experiment},
		{EnvTrialID, strconv.Itoa(s.trial)},
		{EnvWorldSize, strconv.Itoa(p.size)},
		{EnvWorldRank, strconv.Itoa(p.rank)},
		{EnvLocalRank, strconv.Itoa(p.localRank)},
		{EnvLocalWorldSize, strconv.Itoa(p.localSize)},
		{EnvNodeRank, strconv.Itoa(p.nodeRank)},
		{EnvConfig, string(config)},
		{EnvCheckpointDir, s.checkpointDir},
		{EnvSeed, strconv.FormatInt(s.seed, 10)},
		// What torchrun sets, so that a PyTorch DDP script runs unchanged.
		{"RANK", strconv.Itoa(p.rank)},
		{"WORLD_SIZE", strconv.Itoa(p.size)},
		{"LOCAL_RANK", strconv.Itoa(p.localRank)},
		{"LOCAL_WORLD_SIZE", strconv.Itoa(p.localSize)},
		{"GROUP_RANK", strconv.Itoa(p.nodeRank)},
		{"MASTER_ADDR", s.masterAddr},
		{"MASTER_PORT", strconv.Itoa(s.masterPort)},
		{"CUDA_VISIBLE_DEVICES", strings.Join(p.gpus, ",")},
	}
	set = append(set, elasticVars(s)...)
	if s.trialDir != "" {
		set = append(set, [2]string{EnvTrialDir, s.trialDir})
	}
	if s.resumeDir != "" {
		set = append(set, [2]string{EnvResumeDir, s.resumeDir})
	}
	if s.rendezvous != "" {
		set = append(set, [2]string{EnvRendezvous, s.rendezvous}, [2]string{EnvGroup, s.group})
	}
	if s.host != "" {
		set = append(set, [2]string{EnvHost, s.host})
	}
	if s.tag != "" {
		set = append(set, [2]string{workers.TagVar, s.tag})
	}
	drop := map[string]bool{}
	for _, kv := range set {
		drop[kv[0]] = true
	}
	extra := map[string]bool{}
	for _, kv := range s.extra {
		k, _, _ := strings.Cut(kv, "=")
		extra[k] = !drop[k]
	}
	env := make([]string, 0, len(base)+len(set)+len(s.extra)+2)
	has := map[string]bool{}
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if drop[k] || extra[k] || strings.HasPrefix(k, "GOTUNE_") || strings.HasPrefix(k, "TORCHELASTIC_") {
			continue
		}
		has[k] = true
		env = append(env, kv)
	}
	for _, kv := range defaultVars(s) {
		if !has[kv[0]] && !extra[kv[0]] {
			env = append(env, kv[0]+"="+kv[1])
		}
	}
	for _, kv := range set {
		env = append(env, kv[0]+"="+kv[1])
	}
	for _, kv := range s.extra {
		if k, _, _ := strings.Cut(kv, "="); extra[k] {
			env = append(env, kv)
		}
	}
	return env
}

// elasticVars are the variables torch.distributed.elastic's agent (behind
// torchrun) sets for a worker besides those workerEnv sets itself, so that
// torch.distributed.is_torchelastic_launched() is true and libraries that
// look for torchrun (Lightning, Accelerate) take their torchrun path. The
// group has one role, "default", spanning every worker; rank 0 hosts the
// store at MASTER_ADDR:MASTER_PORT itself (no agent store).
func elasticVars(s envSpec) [][2]string {
	p := s.place
	vars := [][2]string{
		{"GROUP_WORLD_SIZE", strconv.Itoa(p.nodes)},
		{"ROLE_NAME", "default"},
		{"ROLE_RANK", strconv.Itoa(p.rank)},
		{"ROLE_WORLD_SIZE", strconv.Itoa(p.size)},
		{"TORCHELASTIC_RUN_ID", s.runID},
		{"TORCHELASTIC_RESTART_COUNT", strconv.Itoa(s.restartCount)},
		{"TORCHELASTIC_MAX_RESTARTS", strconv.Itoa(s.maxRestarts)},
		{"TORCHELASTIC_USE_AGENT_STORE", "False"},
	}
	if s.errorFile != "" {
		vars = append(vars, [2]string{"TORCHELASTIC_ERROR_FILE", s.errorFile})
	}
	return vars
}

// defaultVars are set unless the caller's environment or extra variables
// set them already.
func defaultVars(s envSpec) [][2]string {
	vars := [][2]string{
		// Python block-buffers a pipe: report lines would arrive late.
		{"PYTHONUNBUFFERED", "1"},
		// What torch's elastic agent sets for NCCL (under both names
		// torch has used), so a hung collective fails instead of hanging.
		{"NCCL_ASYNC_ERROR_HANDLING", "1"},
		{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
	}
	if s.ompThreads > 0 {
		// torchrun sets 1 for groups of several workers; gotune sets as
		// many OpenMP threads as the worker has CPUs.
		vars = append(vars, [2]string{"OMP_NUM_THREADS", strconv.Itoa(s.ompThreads)})
	}
	return vars
}
