package txn

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lakestream/lakestream/store"
)

// TestGCLogStreams: gcLog, deciding as it lists, deletes exactly what the
// rule says (checked against the rule applied to the whole listing): old
// versions up to the first young snapshot, old snapshots but the newest;
// in batches of at most 1,000 keys; and the report names at most 1,000
// keys while counting all.
func TestGCLogStreams(t *testing.T) {
	ctx := t.Context()
	mem := store.NewMem()
	put := func(from, to uint64) {
		for v := from; v <= to; v++ {
			if err := store.PutBytes(ctx, mem, VersionKey(v), []byte("{}\n")); err != nil {
				t.Fatal(err)
			}
			if v%100 == 0 {
				if err := store.PutBytes(ctx, mem, SnapshotKey(v), []byte("{}\n")); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	put(1, 2550) // these will be old
	time.Sleep(20 * time.Millisecond)
	mid := time.Now()
	time.Sleep(20 * time.Millisecond)
	put(2551, 2780) // young: snapshots 2600 and 2700
	now := mid.Add(LogRetention + 10*time.Millisecond)

	var want []string
	for v := uint64(1); v <= 2600; v++ { // up to the first young snapshot
		if v <= 2550 {
			want = append(want, VersionKey(v))
		}
		if v%100 == 0 && v <= 2500 {
			want = append(want, SnapshotKey(v))
		}
	}
	l := &Log{Store: mem}
	// gc deletes only while _stream.json names the stream it read.
	if err := store.PutBytes(ctx, mem, StreamKey, encode(&l.Config)); err != nil {
		t.Fatal(err)
	}
	var got []string
	batches := 0
	err := l.gcLog(ctx, now, func(keys []string) error {
		if len(keys) > maxDeleteBatch {
			t.Errorf("a batch of %d keys", len(keys))
		}
		batches++
		got = append(got, keys...)
		return nil
	}, func(int) {})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("gcLog deletes %d keys, want %d: %s", len(got), len(want), diffKeys(got, want))
	}
	if batches < 3 {
		t.Errorf("%d keys in %d batches", len(got), batches)
	}

	g := &gcRun{l: l, GCOptions: GCOptions{Now: func() time.Time { return now }}, rep: &GCReport{}}
	if err := g.sweepLog(context.WithoutCancel(ctx), nil); err != nil {
		t.Fatal(err)
	}
	if g.rep.LogDeletedCount != len(want) || len(g.rep.LogDeleted) != maxReportedKeys {
		t.Fatalf("report: %d named of %d counted; want %d of %d", len(g.rep.LogDeleted), g.rep.LogDeletedCount, maxReportedKeys, len(want))
	}
	if _, err := mem.Stat(ctx, VersionKey(2550)); err == nil {
		t.Error("version 2550 (old, before the first young snapshot) survived")
	}
	for _, k := range []string{SnapshotKey(2600), VersionKey(2551), VersionKey(2780), SnapshotKey(2700)} {
		if _, err := mem.Stat(ctx, k); err != nil {
			t.Errorf("%s (young) was deleted: %v", k, err)
		}
	}
}

func diffKeys(got, want []string) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("first difference at %d: %s vs %s", i, got[i], want[i])
		}
	}
	return fmt.Sprintf("lengths %d vs %d", len(got), len(want))
}
