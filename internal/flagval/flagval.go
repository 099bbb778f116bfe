// Package flagval parses and checks command-line values the same way in
// every command and in the CSI volume attributes: byte sizes with units,
// rank lists and bounded counts. A bad value is a usage error (ErrUsage),
// whose message names the flag, what was wrong and the allowed range.
//
// The package imports nothing of Lakestream's, so a command can parse a
// size without linking the FUSE mount or the store.
package flagval

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"
)

// ErrUsage classifies errors in a command's options (errors.Is): the
// command exits 2.
var ErrUsage = errors.New("usage error")

// usageError is an error in the options; its message is the whole story.
type usageError struct{ error }

func (e usageError) Unwrap() error        { return e.error }
func (e usageError) Is(target error) bool { return target == ErrUsage }

// Usagef returns an error in the options, classified as ErrUsage.
func Usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// Usage classifies err as a usage error, keeping its message and chain.
// Usage(nil) is nil.
func Usage(err error) error {
	if err == nil || errors.Is(err, ErrUsage) {
		return err
	}
	return usageError{err}
}

// MaxSize bounds every size: far above any memory or payload, and small
// enough that arithmetic on sizes cannot overflow.
const MaxSize = 1 << 50

// ParseSize parses a byte size like "2GiB", "256MiB", "1MB" or "1048576"
// given to flag, and checks that lo <= size <= hi (lo < 1 means 1, hi <= 0
// means MaxSize). The error names the flag and the allowed range.
func ParseSize(flag, s string, lo, hi int64) (int64, error) {
	lo = max(lo, 1)
	if hi <= 0 || hi > MaxSize {
		hi = MaxSize
	}
	n, err := humanize.ParseBytes(strings.TrimSpace(s))
	if err != nil {
		return 0, Usagef("%s %q is not a size; use a value like 256MiB or 2GiB (%s to %s)",
			flag, s, FormatSize(lo), FormatSize(hi))
	}
	if n < uint64(lo) || n > uint64(hi) {
		return 0, Usagef("%s %s is out of range; use %s to %s", flag, s, FormatSize(lo), FormatSize(hi))
	}
	return int64(n), nil
}

// FormatSize writes n in the largest binary unit that divides it exactly
// ("4MiB", "1536KiB", "100"), so ParseSize(FormatSize(n)) == n.
func FormatSize(n int64) string {
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB"}
	unit := ""
	for _, u := range units {
		if n == 0 || n%1024 != 0 {
			break
		}
		n /= 1024
		unit = u
	}
	return strconv.FormatInt(n, 10) + unit
}

// CheckCount checks that lo <= n <= hi for flag.
func CheckCount(flag string, n, lo, hi int64) error {
	if n < lo || n > hi {
		return Usagef("%s %d is out of range; use %d to %d", flag, n, lo, hi)
	}
	return nil
}

// ParseCounts parses a comma-separated list of counts like "1,4,16" given
// to flag, each within lo..hi.
func ParseCounts(flag, s string, lo, hi int) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		n, err := strconv.Atoi(part)
		if err != nil || n < lo || n > hi {
			return nil, Usagef("%s %q: want a comma-separated list of counts from %d to %d, e.g. %d,%d",
				flag, s, lo, hi, lo, 4*lo)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, Usagef("%s is empty; want a comma-separated list of counts, e.g. %d,%d", flag, lo, 4*lo)
	}
	return out, nil
}

// maxRank bounds rank numbers far above any stream's rank count.
const maxRank = 1 << 24

// ParseRanks parses a rank list like "0-3,8" into sorted, distinct ranks.
func ParseRanks(s string) ([]int, error) {
	bad := func(why string) error {
		return Usagef("--ranks %q %s; use a list like 0-3,8", s, why)
	}
	if strings.TrimSpace(s) == "" {
		return nil, bad("is empty")
	}
	var ranks []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 || a > maxRank {
			// The bound also keeps the loop below from overflowing (a rank
			// of MaxInt looped forever, appending).
			return nil, bad(fmt.Sprintf("has %q, not a rank number (0 to %d)", part, maxRank))
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b > maxRank {
				return nil, bad(fmt.Sprintf("has %q, not a range low-high", part))
			}
		}
		if b-a > 1<<16 || len(ranks)+b-a > 1<<20 {
			// Bounded before allocating: "0-65536,0-65536,..." must not
			// take gigabytes.
			return nil, bad("names more ranks than the largest stream")
		}
		for r := a; r <= b; r++ {
			ranks = append(ranks, r)
		}
	}
	slices.Sort(ranks)
	return slices.Compact(ranks), nil
}

// FormatRanks is the inverse of ParseRanks.
func FormatRanks(ranks []int) string {
	var parts []string
	for i := 0; i < len(ranks); {
		j := i
		for j+1 < len(ranks) && ranks[j+1] == ranks[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(ranks[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", ranks[i], ranks[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// Int is the value of an integer flag, written in decimal only: the flag
// package's parsers, and urfave/cli's, take 010 for 8 and 0x3 for 3, and a
// stream created with --ranks 010 has 8 ranks for its life. Leading zeros
// are decimal (010 is 10), as in lakefs-mount's options. Use it with
// cli.GenericFlag{Value: &flagval.Int[int]{P: &o.Ranks}}.
type Int[T int | int64 | uint64] struct{ P *T }

// Set parses s in decimal.
func (v *Int[T]) Set(s string) error {
	n, err := ParseInt[T](s)
	if err != nil {
		return err
	}
	*v.P = n
	return nil
}

// String is the value in decimal ("" with no destination, as flag help
// asks of a zero Value).
func (v *Int[T]) String() string {
	if v == nil || v.P == nil {
		return ""
	}
	return fmt.Sprint(*v.P)
}

// ParseInt parses a decimal integer of type T: no base prefix, no
// octal, one clear error for what is not a number or does not fit.
func ParseInt[T int | int64 | uint64](s string) (T, error) {
	s = strings.TrimSpace(s)
	var n T
	var err error
	switch any(n).(type) {
	case uint64:
		var u uint64
		u, err = strconv.ParseUint(s, 10, 64)
		n = T(u)
	case int:
		var i int64
		i, err = strconv.ParseInt(s, 10, strconv.IntSize)
		n = T(i)
	default:
		var i int64
		i, err = strconv.ParseInt(s, 10, 64)
		n = T(i)
	}
	switch {
	case errors.Is(err, strconv.ErrRange):
		return 0, Usagef("%s is out of range", s)
	case err != nil:
		return 0, Usagef("%q is not a decimal whole number", s)
	}
	return n, nil
}
