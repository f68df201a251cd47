package workers

import (
	"strings"
	"testing"
)

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in   string
		want Bytes
	}{
		{"16GiB", 16 * GiB},
		{"16gib", 16 * GiB},
		{"16 GiB", 16 * GiB},
		{"16Gi", 16 * GiB},
		{"16G", 16 * GiB},
		{"1.5GiB", 3 * GiB / 2},
		{"512MiB", 512 * MiB},
		{"32GB", 32_000_000_000},
		{"1kB", 1000},
		{"1TiB", TiB},
		{"100B", 100},
		{"0B", 0},
		{" 2MiB ", 2 * MiB},
	}
	for _, tt := range tests {
		got, err := ParseBytes(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseBytes(%q): got %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestParseBytesErrors(t *testing.T) {
	tests := []struct{ in, msg string }{
		{"", "empty size"},
		{"16", "has no unit"},
		{"16XB", `unknown unit "XB"`},
		{"GiB", "does not start with a number"},
		{"-1GiB", "negative"},
		{"1.2.3GiB", "is not a number"},
		{"99999999999TiB", "too large"},
	}
	for _, tt := range tests {
		_, err := ParseBytes(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("ParseBytes(%q): got %v, want an error mentioning %q", tt.in, err, tt.msg)
		}
	}
}

func TestBytesString(t *testing.T) {
	tests := []struct {
		in         Bytes
		str, human string
	}{
		{0, "0B", "0B"},
		{16 * GiB, "16GiB", "16GiB"},
		{1536, "1536B", "1.5KiB"},
		{3 * GiB / 2, "1536MiB", "1.5GiB"},
		{16_323_456 * KiB, "16323456KiB", "15.6GiB"},
	}
	for _, tt := range tests {
		if got := tt.in.String(); got != tt.str {
			t.Errorf("Bytes(%d).String(): got %q, want %q", int64(tt.in), got, tt.str)
		}
		if got := tt.in.Human(); got != tt.human {
			t.Errorf("Bytes(%d).Human(): got %q, want %q", int64(tt.in), got, tt.human)
		}
	}
}

func TestValidateMemory(t *testing.T) {
	for _, ok := range []Bytes{0, MiB, 16 * GiB} {
		if err := ValidateMemory(ok); err != nil {
			t.Errorf("ValidateMemory(%d): %v", ok, err)
		}
	}
	if err := ValidateMemory(16); err == nil || !strings.Contains(err.Error(), "give a unit") {
		t.Errorf("ValidateMemory(16): got %v, want a hint to give a unit", err)
	}
	if err := ValidateMemory(-1); err == nil {
		t.Error("ValidateMemory(-1) passed")
	}
}

// FuzzParseBytes checks that parsing never panics, never yields a negative
// size, and that every size it reads is written back exactly.
func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"16GiB", "1.5 GB", "0B", "12", "x", "-3MiB", "1e3KiB", "9999999999999999999TiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseBytes(s)
		if err != nil {
			return
		}
		if b < 0 {
			t.Fatalf("ParseBytes(%q) = %d, negative", s, b)
		}
		back, err := ParseBytes(b.String())
		if err != nil || back != b {
			t.Fatalf("ParseBytes(%q) = %d, written %q, read back %d, %v", s, b, b.String(), back, err)
		}
	})
}
