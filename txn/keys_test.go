package txn_test

import (
	"testing"

	"github.com/lakestream/lakestream/txn"
)

// TestKeyParsersInvertBuilders: each parser reads back what its builder
// wrote and nothing else under the same prefix.
func TestKeyParsersInvertBuilders(t *testing.T) {
	for _, v := range []uint64{0, 1, 10, 1<<64 - 1} {
		if got, ok := txn.ParseVersionKey(txn.VersionKey(v)); !ok || got != v {
			t.Errorf("ParseVersionKey(VersionKey(%d)) = %d, %v", v, got, ok)
		}
		if got, ok := txn.ParseSnapshotKey(txn.SnapshotKey(v)); !ok || got != v {
			t.Errorf("ParseSnapshotKey(SnapshotKey(%d)) = %d, %v", v, got, ok)
		}
		if _, ok := txn.ParseVersionKey(txn.SnapshotKey(v)); ok {
			t.Errorf("ParseVersionKey accepts snapshot key %s", txn.SnapshotKey(v))
		}
		if _, ok := txn.ParseSnapshotKey(txn.VersionKey(v)); ok {
			t.Errorf("ParseSnapshotKey accepts version key %s", txn.VersionKey(v))
		}
	}
	for _, k := range []string{txn.HintKey, "_log/12.json", "_log/12.snap.json", "x/00000000000000000001.json", "_log/0000000000000000000x.snap.json"} {
		if v, ok := txn.ParseVersionKey(k); ok {
			t.Errorf("ParseVersionKey(%q) = %d", k, v)
		}
		if v, ok := txn.ParseSnapshotKey(k); ok {
			t.Errorf("ParseSnapshotKey(%q) = %d", k, v)
		}
	}

	p, e, s, ok := txn.ParseDataKey(txn.ObjectKey("prod-1", 3, 42))
	if !ok || p != "prod-1" || e != 3 || s != 42 {
		t.Errorf("ParseDataKey(ObjectKey(prod-1, 3, 42)) = %q, %d, %d, %v", p, e, s, ok)
	}
	if p, e, s, ok := txn.ParseDataKey("data/p/2/12/shared.pack"); !ok || p != "p" || e != 2 || s != 12 {
		t.Errorf("ParseDataKey(another file of an upload) = %q, %d, %d, %v", p, e, s, ok)
	}
	for _, k := range []string{"data/junk.bin", "data/p/1/tgb.pack", "data/p/1/2/3/tgb.pack", "data/p/x/2/tgb.pack",
		"data/p/1/-2/tgb.pack", "data//1/2/tgb.pack", "data/p/1/2/", "other/p/1/2/tgb.pack"} {
		if p, e, s, ok := txn.ParseDataKey(k); ok {
			t.Errorf("ParseDataKey(%q) = %q, %d, %d", k, p, e, s)
		}
	}
}
