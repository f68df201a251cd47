package workers

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Bytes is an amount of memory in bytes. In sweep files and flags it is
// written with a unit: "16GiB", "512MiB", "1.5GiB", "32GB" (binary units
// KiB, MiB, GiB, TiB and their short forms Ki, Mi, Gi, Ti, K, M, G, T are
// powers of 1024; kB, MB, GB, TB are powers of 1000; B is bytes; case does
// not matter). A bare TOML integer is a number of bytes.
type Bytes int64

// Common sizes.
const (
	KiB Bytes = 1 << 10
	MiB Bytes = 1 << 20
	GiB Bytes = 1 << 30
	TiB Bytes = 1 << 40
)

var byteUnits = map[string]float64{
	"b":  1,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
	"k": 1 << 10, "ki": 1 << 10, "kib": 1 << 10,
	"m": 1 << 20, "mi": 1 << 20, "mib": 1 << 20,
	"g": 1 << 30, "gi": 1 << 30, "gib": 1 << 30,
	"t": 1 << 40, "ti": 1 << 40, "tib": 1 << 40,
}

const unitHint = "use B, KiB, MiB, GiB, TiB (powers of 1024) or kB, MB, GB, TB (powers of 1000), as in \"16GiB\""

// ParseBytes reads a size such as "16GiB" or "1.5 GB". The unit is
// required; see Bytes for the units understood.
func ParseBytes(s string) (Bytes, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, errors.New("empty size: " + unitHint)
	}
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		if strings.HasPrefix(t, "-") {
			return 0, fmt.Errorf("size %q is negative", s)
		}
		return 0, fmt.Errorf("size %q does not start with a number", s)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %q is not a number", s, num)
	}
	if unit == "" {
		return 0, fmt.Errorf("size %q has no unit: %s", s, unitHint)
	}
	mult, ok := byteUnits[unit]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q: %s", s, t[i:], unitHint)
	}
	b := math.Round(v * mult)
	if b >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return Bytes(b), nil
}

// String writes b exactly, in the largest binary unit that divides it
// ("16GiB", "1536B"), so that ParseBytes(b.String()) == b.
func (b Bytes) String() string {
	if b == 0 {
		return "0B"
	}
	for _, u := range []struct {
		size Bytes
		name string
	}{{TiB, "TiB"}, {GiB, "GiB"}, {MiB, "MiB"}, {KiB, "KiB"}} {
		if b%u.size == 0 {
			return strconv.FormatInt(int64(b/u.size), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(b), 10) + "B"
}

// Human writes b rounded to three significant figures in the largest
// binary unit below it ("15.6GiB"), for display.
func (b Bytes) Human() string {
	for _, u := range []struct {
		size Bytes
		name string
	}{{TiB, "TiB"}, {GiB, "GiB"}, {MiB, "MiB"}, {KiB, "KiB"}} {
		if b >= u.size {
			return strconv.FormatFloat(float64(b)/float64(u.size), 'g', 3, 64) + u.name
		}
	}
	return strconv.FormatInt(int64(b), 10) + "B"
}

// MarshalText writes b as String does.
func (b Bytes) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// UnmarshalText reads a size as ParseBytes does.
func (b *Bytes) UnmarshalText(text []byte) error {
	v, err := ParseBytes(string(text))
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// minSize is the smallest non-zero memory amount accepted in settings: a
// smaller one is almost certainly a number of gibibytes written without
// its unit.
const minSize = MiB

// ValidateMemory checks a memory setting: zero (not set) or at least 1MiB.
// A smaller non-zero value, such as a TOML integer 16 meant as 16GiB, is an
// error that asks for a unit.
func ValidateMemory(b Bytes) error {
	switch {
	case b < 0:
		return fmt.Errorf("must not be negative, got %d", int64(b))
	case b > 0 && b < minSize:
		return fmt.Errorf("%d bytes is too little to be meant: give a unit, as in \"16GiB\"", int64(b))
	}
	return nil
}
