package tuner

import "github.com/gotune/gotune/workers"

// Manager is the resource manager that places the tuner's trial groups:
// the one given with WithManager, or the one New built from the config's
// resources. Its Usage says what the running trials hold.
func (t *Tuner) Manager() *workers.Manager { return t.manager }
