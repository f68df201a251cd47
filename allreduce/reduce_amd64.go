package allreduce

import "unsafe"

// hasAVX2 says whether the CPU and the operating system support AVX2, which
// the vector loops of the reductions use.
var hasAVX2 = func() bool {
	if max, _, _, _ := cpuid(0, 0); max < 7 {
		return false
	}
	_, _, ecx, _ := cpuid(1, 0)
	const osxsave, avx = 1 << 27, 1 << 28
	if ecx&osxsave == 0 || ecx&avx == 0 || xgetbv()&6 != 6 { // XMM and YMM state saved
		return false
	}
	_, ebx, _, _ := cpuid(7, 0)
	return ebx&(1<<5) != 0
}()

func cpuid(leaf, subleaf uint32) (eax, ebx, ecx, edx uint32)
func xgetbv() (eax uint32)

//go:noescape
func addF32(dst, src *float32, n int)

//go:noescape
func addF64(dst, src *float64, n int)

//go:noescape
func addDivF32(dst, src *float32, n int, d float32)

//go:noescape
func addDivF64(dst, src *float64, n int, d float64)

// addVector does dst[i] += src[i] for a prefix of dst with vector
// instructions, and returns the prefix's length. len(src) >= len(dst).
func addVector[T float](dst, src []T) int {
	if !hasAVX2 || len(dst) == 0 {
		return 0
	}
	if sizeOf[T]() == 4 {
		n := len(dst) &^ 31
		if n > 0 {
			addF32((*float32)(unsafe.Pointer(&dst[0])), (*float32)(unsafe.Pointer(&src[0])), n)
		}
		return n
	}
	n := len(dst) &^ 15
	if n > 0 {
		addF64((*float64)(unsafe.Pointer(&dst[0])), (*float64)(unsafe.Pointer(&src[0])), n)
	}
	return n
}

// addDivVector does dst[i] = (dst[i] + src[i]) / d for a prefix of dst with
// vector instructions, and returns the prefix's length.
func addDivVector[T float](dst, src []T, d T) int {
	if !hasAVX2 || len(dst) == 0 {
		return 0
	}
	if sizeOf[T]() == 4 {
		n := len(dst) &^ 15
		if n > 0 {
			addDivF32((*float32)(unsafe.Pointer(&dst[0])), (*float32)(unsafe.Pointer(&src[0])), n, *(*float32)(unsafe.Pointer(&d)))
		}
		return n
	}
	n := len(dst) &^ 7
	if n > 0 {
		addDivF64((*float64)(unsafe.Pointer(&dst[0])), (*float64)(unsafe.Pointer(&src[0])), n, *(*float64)(unsafe.Pointer(&d)))
	}
	return n
}
