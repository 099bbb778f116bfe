package mount

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"
)

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

// ParseSize parses a byte size like "2GiB", "256MiB" or "1073741824".
func ParseSize(flag, s string) (int64, error) {
	n, err := humanize.ParseBytes(s)
	if err != nil || n == 0 || n > 1<<50 {
		return 0, Usagef("%s %q is not a size; use a value like 256MiB or 2GiB", flag, s)
	}
	return int64(n), nil
}
