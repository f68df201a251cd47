package allreduce

import "unsafe"

// float is the element types the collectives carry.
type float interface{ float32 | float64 }

// addTo sets dst[i] += src[i] for every i of dst; src must be as long.
func addTo[T float](dst, src []T) {
	src = src[:len(dst)]
	i := addVector(dst, src)
	for ; i+8 <= len(dst); i += 8 {
		d := dst[i : i+8 : i+8]
		s := src[i : i+8 : i+8]
		d[0] += s[0]
		d[1] += s[1]
		d[2] += s[2]
		d[3] += s[3]
		d[4] += s[4]
		d[5] += s[5]
		d[6] += s[6]
		d[7] += s[7]
	}
	for ; i < len(dst); i++ {
		dst[i] += src[i]
	}
}

// addDivTo sets dst[i] = (dst[i] + src[i]) / d for every i of dst; src must be
// as long. It is the last step of a mean.
func addDivTo[T float](dst, src []T, d T) {
	src = src[:len(dst)]
	i := addDivVector(dst, src, d)
	for ; i+4 <= len(dst); i += 4 {
		x := dst[i : i+4 : i+4]
		s := src[i : i+4 : i+4]
		x[0] = (x[0] + s[0]) / d
		x[1] = (x[1] + s[1]) / d
		x[2] = (x[2] + s[2]) / d
		x[3] = (x[3] + s[3]) / d
	}
	for ; i < len(dst); i++ {
		dst[i] = (dst[i] + src[i]) / d
	}
}

// bytesOf returns the memory of s as bytes, in the machine's byte order.
func bytesOf[T float](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(s[0])))
}

// floatsOf returns b's memory as elements of T; b must be aligned for T and a
// whole number of elements long.
func floatsOf[T float](b []byte) []T {
	if len(b) == 0 {
		return nil
	}
	var zero T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(zero)))
}

// sizeOf returns the bytes of one element of T.
func sizeOf[T float]() int {
	var zero T
	return int(unsafe.Sizeof(zero))
}
