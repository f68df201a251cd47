package cluster

import (
	"strings"
	"testing"
)

func TestEnvOverlay(t *testing.T) {
	// The head may itself run where torchrun's variables are set: the
	// worker's values travel even when they are the same.
	head := []string{"PATH=/head/bin", "HOME=/root", "CUDA_VISIBLE_DEVICES=", "GOTUNE_X=1", "KEEP=same", "TORCHELASTIC_RUN_ID=r", "ROLE_RANK=0"}
	env := []string{"PATH=/head/bin", "HOME=/root", "CUDA_VISIBLE_DEVICES=", "GOTUNE_X=1", "KEEP=same", "TORCHELASTIC_RUN_ID=r", "ROLE_RANK=0", "RANK=3", "NEW=v"}
	got := strings.Join(envOverlay(env, head), " ")
	if want := "CUDA_VISIBLE_DEVICES= GOTUNE_X=1 TORCHELASTIC_RUN_ID=r ROLE_RANK=0 RANK=3 NEW=v"; got != want {
		t.Errorf("overlay %q, want %q", got, want)
	}
	agent := []string{"PATH=/agent/bin", "CUDA_VISIBLE_DEVICES=0,1", "GOTUNE_STALE=x", "NEW=old"}
	got = strings.Join(overlayEnv(agent, envOverlay(env, head)), " ")
	if want := "PATH=/agent/bin CUDA_VISIBLE_DEVICES= GOTUNE_X=1 TORCHELASTIC_RUN_ID=r ROLE_RANK=0 RANK=3 NEW=v"; got != want {
		t.Errorf("agent's environment %q, want %q", got, want)
	}
}
