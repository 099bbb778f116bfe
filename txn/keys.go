package txn

import (
	"strconv"
	"strings"
)

// The parsers of the keys format.go builds: each accepts exactly what its
// builder writes, so a foreign object under the same prefix never parses.

// ParseVersionKey returns the version of a _log/<v>.json key.
func ParseVersionKey(key string) (uint64, bool) {
	return parseLogKey(key, ".json")
}

// ParseSnapshotKey returns the version of a _log/<v>.snap.json key.
func ParseSnapshotKey(key string) (uint64, bool) {
	return parseLogKey(key, ".snap.json")
}

// parseLogKey parses _log/<20 digits><suffix>.
func parseLogKey(key, suffix string) (uint64, bool) {
	name, ok := strings.CutPrefix(key, LogPrefix)
	if !ok {
		return 0, false
	}
	num, ok := strings.CutSuffix(name, suffix)
	if !ok || len(num) != 20 {
		return 0, false
	}
	v, err := strconv.ParseUint(num, 10, 64)
	return v, err == nil
}
