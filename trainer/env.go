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
	// envWorkerFunc names the registered function a process worker runs.
	envWorkerFunc = "GOTUNE_WORKER_FUNC"
)

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
}

// workerEnv returns base (the launcher's environment) without any variable
// the contract sets, followed by the contract's variables for one worker.
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
	env := make([]string, 0, len(base)+len(set)+1)
	unbuffered := false
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if drop[k] || strings.HasPrefix(k, "GOTUNE_") {
			continue
		}
		unbuffered = unbuffered || k == "PYTHONUNBUFFERED"
		env = append(env, kv)
	}
	if !unbuffered {
		// Python block-buffers a pipe: report lines would arrive late.
		env = append(env, "PYTHONUNBUFFERED=1")
	}
	for _, kv := range set {
		env = append(env, kv[0]+"="+kv[1])
	}
	return env
}
