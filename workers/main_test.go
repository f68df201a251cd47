package workers

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	WardenMain() // the warden of TestSubreap's program
	os.Exit(m.Run())
}
