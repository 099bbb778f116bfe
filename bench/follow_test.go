package bench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestFollowNATS: the NATS pull consumers of `read --follow` get every
// part of every step: a row per reader count with readers x steps
// samples. (The mount system needs root and /dev/fuse; make bench-quick
// runs it.)
func TestFollowNATS(t *testing.T) {
	var out bytes.Buffer
	err := Follow(t.Context(), ReadOptions{StoreURL: "file://" + t.TempDir(), Steps: 5, Ranks: 2, Size: 4096, Readers: []int{1, 2},
		JSON: true, Logger: quiet}, 20*time.Millisecond, []string{FollowNATS}, &out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d rows, want 2:\n%s", len(lines), out.String())
	}
	for i, l := range lines {
		var r FollowRow
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		if want := 5 * (i + 1); r.System != FollowNATS || r.Readers != i+1 || r.Samples != want || r.P99Ms < r.P50Ms {
			t.Errorf("row %d: %+v, want %d samples", i, r, want)
		}
	}
}
