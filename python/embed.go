// Package python holds gotune's Python helper, gotune.py (standard library
// only), embedded so that gotune can put it on command workers' PYTHONPATH
// and `import gotune` works in every trial without installing anything.
// It imports nothing.
package python

import _ "embed"

// Helper is the text of gotune.py.
//
//go:embed gotune.py
var Helper []byte
