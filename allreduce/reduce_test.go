package allreduce

import (
	"fmt"
	"testing"
)

// TestReductionKernels checks the vector and scalar reduction loops bit for
// bit against one element at a time, at every length round the vector
// widths, with the vector loops on and off.
func TestReductionKernels(t *testing.T) {
	for _, vector := range []bool{true, false} {
		if vector && !hasAVX2 {
			continue
		}
		t.Run(fmt.Sprint("vector=", vector), func(t *testing.T) {
			saved := hasAVX2
			hasAVX2 = vector
			defer func() { hasAVX2 = saved }()
			checkKernels[float32](t)
			checkKernels[float64](t)
		})
	}
}

func checkKernels[T float](t *testing.T) {
	for n := range 100 {
		in := inputs[T](6, 2, n+3)
		// Offsets make unaligned slices.
		dst, src := in[0][1:n+1], in[1][2:n+2]
		wantAdd := make([]T, n)
		wantDiv := make([]T, n)
		for i := range n {
			wantAdd[i] = dst[i] + src[i]
			wantDiv[i] = (dst[i] + src[i]) / 3
		}
		got := append([]T{}, dst...)
		addTo(got, src)
		if i, ok := sameBits(got, wantAdd); !ok {
			t.Fatalf("addTo[%T], %d elements: [%d] = %v, want %v", got[0], n, i, got[i], wantAdd[i])
		}
		got = append(got[:0], dst...)
		addDivTo(got, src, 3)
		if i, ok := sameBits(got, wantDiv); !ok {
			t.Fatalf("addDivTo[%T], %d elements: [%d] = %v, want %v", got[0], n, i, got[i], wantDiv[i])
		}
	}
}
