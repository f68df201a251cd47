//go:build !amd64

package allreduce

// addVector is addTo's vector prefix; this architecture has none.
func addVector[T float](dst, src []T) int { return 0 }

// addDivVector is addDivTo's vector prefix; this architecture has none.
func addDivVector[T float](dst, src []T, d T) int { return 0 }
