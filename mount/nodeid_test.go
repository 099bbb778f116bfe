package mount

import (
	"encoding/json"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lakestream/lakestream/internal/flagval"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// TestDefaultNodeIDPerMount: two mounts on one host get different ids by
// default, and a remount at the same place keeps its id.
func TestDefaultNodeIDPerMount(t *testing.T) {
	a, err := defaultNodeID("/mnt/a")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := defaultNodeID("/mnt/b")
	a2, _ := defaultNodeID("/mnt/a")
	if a == b || a != a2 || validateNodeID(a) != nil {
		t.Fatalf("ids %q %q %q: want distinct per mount point, stable, valid", a, b, a2)
	}
}

// TestNodeIDInUseRefused: a fresh heartbeat under the id from another live
// process refuses the mount, naming it; a stale one, or one left by a dead
// process of this host, does not. Fresh and stale go by the store's
// stamp (Last-Modified), not by the time the other mount wrote: "ahead"
// was written by a mount whose clock was an hour ahead, "behind" by one an
// hour behind.
func TestNodeIDInUseRefused(t *testing.T) {
	var storeBack atomic.Int64 // how far the store's clock is set back while a heartbeat is written
	s := store.NewMemClock(func() time.Time { return time.Now().Add(-time.Duration(storeBack.Load())) })
	now := time.Now()
	host, _ := os.Hostname()
	put := func(hb txn.Heartbeat, age time.Duration) {
		t.Helper()
		b, _ := json.Marshal(hb)
		storeBack.Store(int64(age))
		defer storeBack.Store(0)
		if err := store.PutBytes(t.Context(), s, txn.HeartbeatKey(hb.NodeID), b); err != nil {
			t.Fatal(err)
		}
	}
	put(txn.Heartbeat{NodeID: "other-host", Host: "elsewhere", PID: 42, Time: now.Add(-5 * time.Second)}, 5*time.Second)
	put(txn.Heartbeat{NodeID: "behind", Host: "elsewhere", PID: 42, Time: now.Add(-time.Hour)}, 0)
	put(txn.Heartbeat{NodeID: "stale", Host: "elsewhere", PID: 42, Time: now}, time.Hour)
	put(txn.Heartbeat{NodeID: "ahead", Host: "elsewhere", PID: 42, Time: now.Add(time.Hour)}, time.Hour)
	put(txn.Heartbeat{NodeID: "dead", Host: host, PID: 1 << 30, Time: now}, 0)
	put(txn.Heartbeat{NodeID: "live-here", Host: host, PID: os.Getppid(), Time: now}, 0)
	for id, refused := range map[string]bool{"other-host": true, "live-here": true, "behind": true, "stale": false, "ahead": false, "dead": false, "absent": false} {
		err := checkNodeIDFree(t.Context(), s, id, now)
		if got := errors.Is(err, ErrNodeIDInUse) && errors.Is(err, flagval.ErrUsage); got != refused {
			t.Errorf("%s: %v, refused want %v", id, err, refused)
		}
	}
}
