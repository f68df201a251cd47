package cluster

import (
	"errors"
	"syscall"
	"testing"

	"github.com/gotune/gotune/cluster/agentpb"
)

// TestPeerErrorKeepsAFullDisk checks that an agent's failure read back from
// its string is a full disk when it says so, and nothing else otherwise.
func TestPeerErrorKeepsAFullDisk(t *testing.T) {
	tests := []struct {
		msg  string
		want error
	}{
		{"copy /x from the head: write /y/epoch: no space left on device", syscall.ENOSPC},
		{"mkdir /y: disk quota exceeded", syscall.EDQUOT},
		{"exec: \"nope\": executable file not found in $PATH", nil},
	}
	for _, tt := range tests {
		err := exitFromPB(&agentpb.Exited{Error: tt.msg})
		for _, errno := range []error{syscall.ENOSPC, syscall.EDQUOT} {
			if got := errors.Is(err, errno); got != (errno == tt.want) {
				t.Errorf("%q: errors.Is(%v) = %v", tt.msg, errno, got)
			}
		}
		if err.Error() != tt.msg {
			t.Errorf("%q reads %q", tt.msg, err.Error())
		}
	}
}
