package flagval

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseRanks(t *testing.T) {
	for in, want := range map[string][]int{
		"0":         {0},
		"0-3,8":     {0, 1, 2, 3, 8},
		"8, 0-2, 1": {0, 1, 2, 8},
		"5-5":       {5},
	} {
		got, err := ParseRanks(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseRanks(%q) = %v, %v; want %v", in, got, err, want)
		}
		if back, _ := ParseRanks(FormatRanks(got)); !slices.Equal(back, got) {
			t.Errorf("FormatRanks(%v) = %q does not parse back", got, FormatRanks(got))
		}
	}
	for _, in := range []string{"", "a", "-1", "3-1", "1-", "1,,2", "0-99999999"} {
		if got, err := ParseRanks(in); !errors.Is(err, ErrUsage) {
			t.Errorf("ParseRanks(%q) = %v, %v; want a usage error", in, got, err)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"256MiB": 256 << 20, "2GiB": 2 << 30, "1048576": 1 << 20, "1 GiB": 1 << 30, "1MB": 1000000} {
		if got, err := ParseSize("--cache-size", in, 0, 0); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "lots", "-1MiB"} {
		_, err := ParseSize("--cache-size", in, 0, 0)
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "is not a size") {
			t.Errorf("ParseSize(%q): %v, want a usage error saying it is not a size", in, err)
		}
	}
}

// TestParseSizeRange: zero and values outside the range are refused with
// the allowed range in the message, not "is not a size".
func TestParseSizeRange(t *testing.T) {
	for _, c := range []struct {
		in, want string
		lo, hi   int64
	}{
		{"0", "--read-ahead 0 is out of range; use 4KiB to 1GiB", 4 << 10, 1 << 30},
		{"100", "--read-ahead 100 is out of range; use 4KiB to 1GiB", 4 << 10, 1 << 30},
		{"2GiB", "--read-ahead 2GiB is out of range; use 4KiB to 1GiB", 4 << 10, 1 << 30},
		{"0", "--cache-size 0 is out of range; use 1 to 1PiB", 0, 0},
	} {
		_, err := ParseSize(strings.Fields(c.want)[0], c.in, c.lo, c.hi)
		if !errors.Is(err, ErrUsage) || err.Error() != c.want {
			t.Errorf("ParseSize(%q) error %v; want %q", c.in, err, c.want)
		}
	}
	if n, err := ParseSize("--chunk-size", "1MiB", 4096, 1<<30); err != nil || n != 1<<20 {
		t.Errorf("ParseSize(1MiB) = %d, %v", n, err)
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 100: "100", 4096: "4KiB", 1536 << 10: "1536KiB", 2 << 30: "2GiB", 1 << 50: "1PiB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q; want %q", n, got, want)
		}
		if n > 0 {
			if back, err := ParseSize("--x", want, 0, 0); err != nil || back != n {
				t.Errorf("ParseSize(FormatSize(%d)) = %d, %v", n, back, err)
			}
		}
	}
}

func TestCounts(t *testing.T) {
	if err := CheckCount("--ranks", 65537, 1, 65536); err == nil || !errors.Is(err, ErrUsage) ||
		err.Error() != "--ranks 65537 is out of range; use 1 to 65536" {
		t.Errorf("CheckCount: %v", err)
	}
	if err := CheckCount("--ranks", 8, 1, 65536); err != nil {
		t.Errorf("CheckCount(8): %v", err)
	}
	if got, err := ParseCounts("--producers", "1, 4,16", 1, 1024); err != nil || !slices.Equal(got, []int{1, 4, 16}) {
		t.Errorf("ParseCounts = %v, %v", got, err)
	}
	for _, in := range []string{"", "0", "1,x", "2000"} {
		if _, err := ParseCounts("--producers", in, 1, 1024); !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "--producers") {
			t.Errorf("ParseCounts(%q): %v", in, err)
		}
	}
}

func TestUsage(t *testing.T) {
	base := errors.New("bad url")
	err := Usage(base)
	if !errors.Is(err, ErrUsage) || !errors.Is(err, base) || err.Error() != "bad url" {
		t.Errorf("Usage: %v", err)
	}
	if Usage(nil) != nil || Usage(err) != err {
		t.Error("Usage(nil) or Usage(usage error) changed it")
	}
}

func FuzzParseRanks(f *testing.F) {
	for _, s := range []string{"0-3,8", "0", " 1 , 2-2 ", "", "-", "3-1", "0-65536", "0-65536,0-65536", "9223372036854775807", "1--2", ",,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ranks, err := ParseRanks(s)
		if err != nil {
			if ranks != nil || !strings.Contains(err.Error(), "--ranks") {
				t.Fatalf("ParseRanks(%q): %v with %d ranks; want nil and a message naming --ranks", s, err, len(ranks))
			}
			return
		}
		if len(ranks) == 0 || len(ranks) > 1<<20 {
			t.Fatalf("ParseRanks(%q): %d ranks", s, len(ranks))
		}
		for i, r := range ranks {
			if r < 0 || (i > 0 && r <= ranks[i-1]) {
				t.Fatalf("ParseRanks(%q) = %v: not sorted, distinct, non-negative", s, ranks)
			}
		}
		again, err := ParseRanks(FormatRanks(ranks))
		if err != nil || len(again) != len(ranks) {
			t.Fatalf("ParseRanks(FormatRanks(%v)) = %v, %v", ranks, again, err)
		}
	})
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"2GiB", "256MiB", "1073741824", "0", "-1", "1e30", "1.5 GB", "", "18446744073709551616", "NaNKiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize("--cache-size", s, 1<<20, 0)
		if err != nil {
			if !strings.Contains(err.Error(), "--cache-size") {
				t.Fatalf("ParseSize(%q): %v does not name the flag", s, err)
			}
			return
		}
		if n < 1<<20 || n > MaxSize {
			t.Fatalf("ParseSize(%q) = %d", s, n)
		}
	})
}

// TestParseInt: decimal only; leading zeros are decimal, base prefixes and
// overflow are refused with one line (issue 32 item 8).
func TestParseInt(t *testing.T) {
	for s, want := range map[string]int64{"0": 0, "010": 10, "09": 9, " 42 ": 42, "-5": -5, "9223372036854775807": 1<<63 - 1} {
		if got, err := ParseInt[int64](s); err != nil || got != want {
			t.Errorf("ParseInt(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"0x3", "0o7", "0b1", "1_000", "1e3", "", "ten", "9223372036854775808"} {
		if _, err := ParseInt[int64](s); !errors.Is(err, ErrUsage) {
			t.Errorf("ParseInt(%q): %v; want a usage error", s, err)
		}
	}
	if _, err := ParseInt[uint64]("-1"); !errors.Is(err, ErrUsage) {
		t.Errorf("ParseInt[uint64](-1): %v; want a usage error", err)
	}
	var n int
	v := Int[int]{P: &n}
	if err := v.Set("010"); err != nil || n != 10 || v.String() != "10" {
		t.Errorf("Int.Set(010): %d, %v", n, err)
	}
}
